//! A local, watch-fed copy of one semaphore (capacity + queue), shared by every waiter of one
//! Limiter. This is what keeps waiting herd-free: a release is one delete in etcd and one watch
//! event per watching process; nobody re-reads the queue. Waiters are told their outcome when
//! the view, at a revision at or past their own entry, says they hold (or that their entry or
//! the semaphore is gone).
//!
//! The view is exact at its revision: it starts from a range read at revision R (the acquire
//! Txn's own read) and applies every event after R in order. On a broken stream it resumes from
//! the last applied revision + 1; if that revision was compacted it reads the state anew.
//!
//! An enqueue of a Limiter that has this view decides its grant here ([`SemWatch::when_seen`]):
//! once the view has applied the revision of the enqueue's own put, it is exactly what a range
//! read at that revision (or later) would return, so the put needs no read of its own. A view
//! that does not get there in time (a lagging or broken watch) decides nothing: the enqueue
//! reads instead (docs/design.md, "Why a grant decided from the view is safe").
//!
//! A watch on a member that hangs would just go quiet, so a quiet watch with waiters (or an
//! enqueue waiting for the view to catch up) asks
//! etcd for a progress report (`WatchProgressRequest`, answered at once by etcd ≥ 3.4); with no answer
//! in time, the member is marked failed and the watch resumes on the next one.

use super::endpoints::Endpoints;
use super::view_state::{GrantPlan, Seen, View, ViewKeys};
use crate::backend::outage::Outage;
use crate::backend::waiters::{QueueView, WaitOutcome, Waiters};
use crate::stats::{RequestCounters, RequestKind};
use etcd_client::{EventType, GetOptions, KeyValue, SortOrder, SortTarget, WatchOptions};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

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
    /// The view's revision, for enqueues waiting for it to reach their put's.
    seen: tokio::sync::watch::Sender<i64>,
    /// Whether a watch stream is up (created and not yet broken).
    live: AtomicBool,
    /// Enqueues waiting in [`SemWatch::when_seen`]: like waiters, they make a quiet watch
    /// check that its member still answers.
    awaiting: AtomicUsize,
    /// See [`WatchConfig::on_grantable`].
    on_grantable: OnGrantable,
}

/// Counts one enqueue in [`SemWatch::awaiting`] while it lives.
struct Awaiting<'a>(&'a AtomicUsize);

impl<'a> Awaiting<'a> {
    fn new(n: &'a AtomicUsize) -> Self {
        n.fetch_add(1, Ordering::SeqCst);
        Awaiting(n)
    }
}

impl Drop for Awaiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl std::fmt::Debug for SemWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SemWatch").finish_non_exhaustive()
    }
}

/// What the watch task needs.
pub(super) struct WatchConfig {
    pub endpoints: Arc<Endpoints>,
    pub sem_prefix: String,
    pub keys: ViewKeys,
    pub request_timeout: Duration,
    pub stats: Arc<RequestCounters>,
    pub on_delete: OnDelete,
    /// Called with every queue entry the view sees written (to find strays: `strays.rs`).
    pub on_put: OnPut,
    /// Called (outside the view's lock) when the fair rule grants one of this Limiter's
    /// waiters: it writes the grant (`fair_grants.rs`).
    pub on_grantable: OnGrantable,
}

/// See [`WatchConfig::on_grantable`].
pub(super) type OnGrantable = Arc<dyn Fn(GrantPlan) + Send + Sync>;

/// See [`WatchConfig::on_put`].
pub(super) type OnPut = Arc<dyn Fn(&KeyValue) + Send + Sync>;

/// Pause before resuming a watch that broke (on the next member); doubled while resuming
/// keeps failing, reset once a watch is created.
const RETRY_PAUSE: Duration = Duration::from_millis(25);
const MAX_RETRY_PAUSE: Duration = Duration::from_secs(1);

/// How long a watch may be quiet before it asks for progress, and then how long the answer
/// may take: a hung member is left within twice this.
fn quiet_bound(request_timeout: Duration) -> Duration {
    (request_timeout / 4).clamp(Duration::from_millis(250), Duration::from_secs(1))
}

impl SemWatch {
    /// Starts watching from `view.revision + 1`.
    pub(super) fn start(view: View, config: WatchConfig, stop: CancellationToken) -> Arc<SemWatch> {
        let (seen, _) = tokio::sync::watch::channel(view.revision);
        let watch = Arc::new(SemWatch {
            state: Mutex::new(State {
                view,
                waiters: Waiters::default(),
            }),
            stop,
            seen,
            live: AtomicBool::new(false),
            awaiting: AtomicUsize::new(0),
            on_grantable: config.on_grantable.clone(),
        });
        tokio::spawn(watch.clone().run(config));
        watch
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        crate::backend::lock(&self.state)
    }

    /// Registers a waiter; the receiver gets its outcome once decided. On a fair semaphore,
    /// if the rule grants it (or another waiter of ours) now, the grant is written.
    pub(super) fn register(&self, token: u64, permits: u32) -> oneshot::Receiver<WaitOutcome> {
        let (rx, grantable) = {
            let st = &mut *self.lock();
            let rx = st.waiters.register(&st.view, token, permits);
            (rx, st.view.plan_for(&st.waiters))
        };
        if let Some(plan) = grantable {
            (self.on_grantable)(plan);
        }
        rx
    }

    /// The grant a release of the entry at `key` makes on a fair semaphore, from the view
    /// (`None`: a plain semaphore, or nothing to grant).
    pub(super) fn release_plan(&self, key: &[u8]) -> Option<GrantPlan> {
        self.lock().view.plan(Some(key))
    }

    /// The classes of a fair semaphore as the view has them (`None`: plain, or unknown).
    pub(super) fn classes(&self) -> Option<crate::fair::Classes> {
        self.lock().view.fair.as_ref().map(|f| f.classes.clone())
    }

    /// The grant to write when the fair rule, on the view, picks entry `token` now.
    pub(super) fn plan_with(&self, token: u64) -> Option<GrantPlan> {
        self.lock()
            .view
            .plan(None)
            .filter(|p| p.grants.contains(&token))
    }

    /// Whether the task still runs (it stops on close/shutdown).
    pub(super) fn is_stopped(&self) -> bool {
        self.stop.is_cancelled()
    }

    /// Whether the view is being fed right now (a stream is up), so an enqueue may expect it
    /// to catch up with its put within a round trip or so.
    pub(super) fn is_live(&self) -> bool {
        !self.is_stopped() && self.live.load(Ordering::SeqCst)
    }

    /// What the view says about our entry of `permits` just written alone by a put at revision
    /// `token`, without waiting for the put's event: when the view has applied revision
    /// `token − 1` (or `token` itself), nothing else changed in etcd between the view and the
    /// put (revisions count every write of the cluster, and a put changes one key), so the view
    /// plus this entry, last in the queue, is the semaphore at `token`. `None` when the view is
    /// further behind: the caller waits for it ([`SemWatch::when_seen`]).
    pub(super) fn decide_own_put(&self, token: u64, permits: u32) -> Option<Seen> {
        self.lock().view.decide_own_put(token, permits)
    }

    /// What the view says about entry `token` once it has applied the entry's revision, or
    /// `None` if it does not get there within `bound` (the caller then reads).
    pub(super) async fn when_seen(&self, token: u64, bound: Duration) -> Option<Seen> {
        let _awaiting = Awaiting::new(&self.awaiting);
        let mut seen = self.seen.subscribe();
        let caught_up = seen.wait_for(|&r| r >= token as i64);
        if !matches!(tokio::time::timeout(bound, caught_up).await, Ok(Ok(_))) {
            return None;
        }
        let st = self.lock();
        // The view only moves forward: still at or past `token`.
        Some(Seen::decide(
            st.view.cap,
            st.view.entries(),
            st.view.marks(),
            token,
        ))
    }

    async fn run(self: Arc<Self>, cfg: WatchConfig) {
        let mut pause = RETRY_PAUSE;
        let mut outage = Outage::default();
        while !self.stop.is_cancelled() {
            match self.watch_once(&cfg, &mut pause).await {
                Ok(()) => outage.ok("etcd semaphore watch"),
                Err(e) => outage.failed(
                    "etcd semaphore watch",
                    &cfg.endpoints.all_urls(),
                    &super::describe::failure(&e),
                ),
            }
            tokio::select! {
                _ = self.stop.cancelled() => return,
                _ = tokio::time::sleep(pause) => {}
            }
            pause = (pause * 2).min(MAX_RETRY_PAUSE);
        }
    }

    /// Watches until the stream ends or breaks, on the member in use; a failure marks that
    /// member failed. `Ok` when it ended in an orderly way (cancel because of compaction,
    /// handled by re-reading). `pause` is reset once the watch is created.
    async fn watch_once(
        &self,
        cfg: &WatchConfig,
        pause: &mut Duration,
    ) -> Result<(), etcd_client::Error> {
        let (member, client) = cfg.endpoints.pick();
        let result = self.watch_on(cfg, client, pause).await;
        self.live.store(false, Ordering::SeqCst);
        if result.is_err() {
            cfg.endpoints.failed(member);
        }
        result
    }

    async fn watch_on(
        &self,
        cfg: &WatchConfig,
        client: etcd_client::Client,
        pause: &mut Duration,
    ) -> Result<(), etcd_client::Error> {
        let start = self.lock().view.revision + 1;
        cfg.stats.count(RequestKind::Watch);
        let opts = WatchOptions::new().with_prefix().with_start_revision(start);
        // A slow link is not a hung member: allow a few of the usual round trips.
        let quiet = quiet_bound(cfg.request_timeout)
            .max(cfg.endpoints.latency() * 4)
            .min(cfg.request_timeout);
        let mut stream = tokio::time::timeout(
            cfg.request_timeout,
            client
                .watch_client()
                .watch(cfg.sem_prefix.clone(), Some(opts)),
        )
        .await
        .map_err(|_| etcd_client::Error::WatchError("watch create timed out".into()))??;
        // Whether a progress request is out: a second quiet period means the member hangs.
        let mut asked = false;
        loop {
            let msg = tokio::select! {
                _ = self.stop.cancelled() => return Ok(()),
                m = tokio::time::timeout(quiet, stream.message()) => m,
            };
            let msg = match msg {
                Ok(m) => m?,
                Err(_) if asked => {
                    return Err(etcd_client::Error::WatchError(format!(
                        "no watch progress within {quiet:?}; trying another member"
                    )))
                }
                // Quiet and nobody waiting: a stale watch costs nothing yet, so no probe
                // (an idle Limiter sends nothing); a waiter that registers gets one within
                // `quiet`.
                Err(_)
                    if self.lock().waiters.is_empty()
                        && self.awaiting.load(Ordering::SeqCst) == 0 =>
                {
                    continue
                }
                Err(_) => {
                    // Not counted in RequestStats: a liveness probe like an HTTP/2 ping,
                    // not a request of any operation.
                    tokio::time::timeout(quiet, stream.request_progress())
                        .await
                        .map_err(|_| {
                            etcd_client::Error::WatchError("watch progress request stuck".into())
                        })??;
                    asked = true;
                    continue;
                }
            };
            asked = false;
            let Some(resp) = msg else {
                return Err(etcd_client::Error::WatchError("watch stream ended".into()));
            };
            if resp.created() {
                *pause = RETRY_PAUSE;
                self.live.store(true, Ordering::SeqCst);
            }
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
        let mut written = Vec::new();
        let grantable = {
            let mut st = self.lock();
            for ev in events {
                let Some(kv) = ev.kv() else { continue };
                st.view.revision = st.view.revision.max(kv.mod_revision());
                match ev.event_type() {
                    EventType::Put => {
                        st.view.put(&cfg.keys, kv);
                        written.push(kv);
                    }
                    EventType::Delete => {
                        st.view.delete(&cfg.keys, kv.key());
                        deleted.push(kv.key().to_vec());
                    }
                }
            }
            let st = &mut *st;
            st.waiters.resolve(&st.view);
            self.seen.send_replace(st.view.revision);
            st.view.plan_for(&st.waiters)
        };
        if let Some(plan) = grantable {
            (cfg.on_grantable)(plan);
        }
        for kv in written {
            (cfg.on_put)(kv);
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
        let (_, client) = cfg.endpoints.pick();
        let resp = tokio::time::timeout(
            cfg.request_timeout,
            super::client::kv(&client).get(cfg.sem_prefix.clone(), Some(opts)),
        )
        .await
        .map_err(|_| etcd_client::Error::WatchError("re-read timed out".into()))??;
        let revision = resp.header().map_or(0, |h| h.revision());
        let view = View::from_kvs(revision, &cfg.keys, resp.kvs());
        for kv in resp.kvs() {
            (cfg.on_put)(kv);
        }
        let (gone, grantable) = {
            let st = &mut *self.lock();
            let gone: Vec<Vec<u8>> = st
                .view
                .by_key
                .keys()
                .filter(|k| !view.by_key.contains_key(*k))
                .cloned()
                .collect();
            st.view = view;
            st.waiters.resolve(&st.view);
            self.seen.send_replace(st.view.revision);
            (gone, st.view.plan_for(&st.waiters))
        };
        if let Some(plan) = grantable {
            (cfg.on_grantable)(plan);
        }
        for key in gone {
            (cfg.on_delete)(&key);
        }
        Ok(())
    }
}
