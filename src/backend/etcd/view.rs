//! A local, watch-fed copy of one semaphore (capacity + queue), shared by every waiter of one
//! Limiter. This is what keeps waiting herd-free: a release is one delete in etcd and one watch
//! event per watching process; nobody re-reads the queue. Waiters are told their outcome when
//! the view, at a revision at or past their own entry, says they hold (or that their entry or
//! the semaphore is gone).
//!
//! The view is exact at its revision: it starts from a range read at revision R (the acquire
//! Txn's own read) and applies every event after R in order. On a broken stream it resumes from
//! the last applied revision + 1; if that revision was compacted it reads the state anew.

use super::keys::EntryValue;
use crate::backend::capacity::CapValue;
use crate::queue;
use crate::stats::{RequestCounters, RequestKind};
use crate::waiters::{Outcome, QueueView, Waiters};
use etcd_client::{Client, EventType, GetOptions, KeyValue, SortOrder, SortTarget, WatchOptions};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

/// Semaphore state at one revision.
#[derive(Debug, Default, Clone)]
pub(super) struct View {
    pub revision: i64,
    cap: Option<CapValue>,
    /// create revision → weight
    entries: BTreeMap<i64, u32>,
    /// key → create revision, to place delete events
    by_key: HashMap<Vec<u8>, i64>,
}

impl View {
    /// Builds a view from a range read of the semaphore's prefix at `revision`.
    pub(super) fn from_kvs(
        revision: i64,
        cap_key: &str,
        queue_prefix: &str,
        kvs: &[KeyValue],
    ) -> View {
        let mut view = View {
            revision,
            ..View::default()
        };
        for kv in kvs {
            view.put(cap_key, queue_prefix, kv);
        }
        view
    }

    fn put(&mut self, cap_key: &str, queue_prefix: &str, kv: &KeyValue) {
        if kv.key() == cap_key.as_bytes() {
            // Unreadable capacity: keep the last good one rather than guess.
            if let Some(cap) = CapValue::parse(kv.value()) {
                self.cap = Some(cap);
            }
        } else if kv.key().starts_with(queue_prefix.as_bytes()) {
            let rev = kv.create_revision();
            self.entries.insert(rev, EntryValue::weight(kv.value()));
            self.by_key.insert(kv.key().to_vec(), rev);
        }
    }

    fn delete(&mut self, cap_key: &str, key: &[u8]) {
        if key == cap_key.as_bytes() {
            self.cap = None;
        } else if let Some(rev) = self.by_key.remove(key) {
            self.entries.remove(&rev);
        }
    }
}

impl QueueView for View {
    fn capacity(&self) -> Option<(u32, u64)> {
        self.cap.map(|c| (c.capacity, c.floor))
    }
    fn entries(&self) -> impl Iterator<Item = queue::Entry> + '_ {
        self.entries.iter().map(|(&rev, &permits)| queue::Entry {
            token: rev as u64,
            permits,
        })
    }
    fn contains(&self, token: u64) -> bool {
        self.entries.contains_key(&(token as i64))
    }
    fn has_seen(&self, token: u64) -> bool {
        self.revision >= token as i64
    }
}

struct State {
    view: View,
    waiters: Waiters,
}

/// Called with the key of every queue entry the view sees deleted (to fire `lost()` on a
/// permit whose key vanished behind our back).
pub(super) type OnDelete = Arc<dyn Fn(&[u8]) + Send + Sync>;

/// The watch of one semaphore and the waiters fed by it.
pub(super) struct SemWatch {
    state: Mutex<State>,
    stop: CancellationToken,
}

impl std::fmt::Debug for SemWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SemWatch").finish_non_exhaustive()
    }
}

/// What the watch task needs.
pub(super) struct WatchConfig {
    pub client: Client,
    pub sem_prefix: String,
    pub cap_key: String,
    pub queue_prefix: String,
    pub request_timeout: Duration,
    pub stats: Arc<RequestCounters>,
    pub on_delete: OnDelete,
}

const RETRY_PAUSE: Duration = Duration::from_millis(100);
const MAX_RETRY_PAUSE: Duration = Duration::from_secs(2);

impl SemWatch {
    /// Starts watching from `view.revision + 1`.
    pub(super) fn start(view: View, config: WatchConfig, stop: CancellationToken) -> Arc<SemWatch> {
        let watch = Arc::new(SemWatch {
            state: Mutex::new(State {
                view,
                waiters: Waiters::default(),
            }),
            stop,
        });
        tokio::spawn(watch.clone().run(config));
        watch
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a waiter; the receiver gets its outcome once decided.
    pub(super) fn register(&self, token: u64, permits: u32) -> oneshot::Receiver<Outcome> {
        let st = &mut *self.lock();
        st.waiters.register(&st.view, token, permits)
    }

    /// Whether the task still runs (it stops on close/shutdown).
    pub(super) fn is_stopped(&self) -> bool {
        self.stop.is_cancelled()
    }

    async fn run(self: Arc<Self>, cfg: WatchConfig) {
        let mut pause = RETRY_PAUSE;
        while !self.stop.is_cancelled() {
            match self.watch_once(&cfg).await {
                Ok(()) => pause = RETRY_PAUSE,
                Err(e) => {
                    tracing::debug!(prefix = %cfg.sem_prefix, error = %e, "semaphore watch broke; resuming");
                }
            }
            tokio::select! {
                _ = self.stop.cancelled() => return,
                _ = tokio::time::sleep(pause) => {}
            }
            pause = (pause * 2).min(MAX_RETRY_PAUSE);
        }
    }

    /// Watches until the stream ends or breaks. `Ok` when it ended in an orderly way (cancel
    /// because of compaction, handled by re-reading).
    async fn watch_once(&self, cfg: &WatchConfig) -> Result<(), etcd_client::Error> {
        let start = self.lock().view.revision + 1;
        cfg.stats.count(RequestKind::Watch);
        let opts = WatchOptions::new().with_prefix().with_start_revision(start);
        let mut stream = tokio::time::timeout(
            cfg.request_timeout,
            cfg.client
                .watch_client()
                .watch(cfg.sem_prefix.clone(), Some(opts)),
        )
        .await
        .map_err(|_| etcd_client::Error::WatchError("watch create timed out".into()))??;
        loop {
            let msg = tokio::select! {
                _ = self.stop.cancelled() => return Ok(()),
                m = stream.message() => m?,
            };
            let Some(resp) = msg else {
                return Err(etcd_client::Error::WatchError("watch stream ended".into()));
            };
            if resp.canceled() {
                if resp.compact_revision() > 0 {
                    tracing::info!(prefix = %cfg.sem_prefix, compacted = resp.compact_revision(), "watch start compacted; re-reading the semaphore");
                    self.reread(cfg).await?;
                    return Ok(());
                }
                return Err(etcd_client::Error::WatchError(format!(
                    "watch canceled: {}",
                    resp.cancel_reason()
                )));
            }
            self.apply(cfg, resp.events());
        }
    }

    fn apply(&self, cfg: &WatchConfig, events: &[etcd_client::Event]) {
        if events.is_empty() {
            return;
        }
        let mut deleted = Vec::new();
        {
            let mut st = self.lock();
            for ev in events {
                let Some(kv) = ev.kv() else { continue };
                st.view.revision = st.view.revision.max(kv.mod_revision());
                match ev.event_type() {
                    EventType::Put => st.view.put(&cfg.cap_key, &cfg.queue_prefix, kv),
                    EventType::Delete => {
                        st.view.delete(&cfg.cap_key, kv.key());
                        deleted.push(kv.key().to_vec());
                    }
                }
            }
            let st = &mut *st;
            st.waiters.resolve(&st.view);
        }
        for key in deleted {
            (cfg.on_delete)(&key);
        }
    }

    /// Reads the whole semaphore anew (after compaction) and continues from there.
    async fn reread(&self, cfg: &WatchConfig) -> Result<(), etcd_client::Error> {
        cfg.stats.count(RequestKind::Range);
        let opts = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend);
        let resp = super::kv(&cfg.client)
            .get(cfg.sem_prefix.clone(), Some(opts))
            .await?;
        let revision = resp.header().map_or(0, |h| h.revision());
        let view = View::from_kvs(revision, &cfg.cap_key, &cfg.queue_prefix, resp.kvs());
        let gone: Vec<Vec<u8>> = {
            let st = &mut *self.lock();
            let gone = st
                .view
                .by_key
                .keys()
                .filter(|k| !view.by_key.contains_key(*k))
                .cloned()
                .collect();
            st.view = view;
            st.waiters.resolve(&st.view);
            gone
        };
        for key in gone {
            (cfg.on_delete)(&key);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::waiters::outcome;

    fn view(cap: u32, entries: &[(i64, u32)], revision: i64) -> View {
        View {
            revision,
            cap: Some(CapValue {
                capacity: cap,
                floor: 0,
            }),
            entries: entries.iter().copied().collect(),
            by_key: entries
                .iter()
                .map(|&(r, _)| (format!("k{r}").into_bytes(), r))
                .collect(),
        }
    }

    #[test]
    fn outcomes() {
        let v = view(2, &[(5, 1), (7, 1), (9, 1)], 9);
        assert_eq!(outcome(&v, 7, 1), Some(Outcome::Granted));
        assert_eq!(outcome(&v, 9, 1), None);
        assert_eq!(outcome(&v, 8, 1), Some(Outcome::Gone));
        assert_eq!(outcome(&v, 12, 1), None, "not seen yet");
        let v = view(1, &[(5, 1), (7, 2)], 9);
        assert_eq!(outcome(&v, 7, 2), Some(Outcome::TooHeavy(1)));
        let mut v = view(1, &[(5, 1)], 9);
        v.delete("cap", b"cap");
        assert_eq!(outcome(&v, 5, 1), Some(Outcome::NoSemaphore));
    }
}
