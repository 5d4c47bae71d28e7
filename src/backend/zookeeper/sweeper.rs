//! Idle rate-limit keys vanish: the sweeper deletes each key this backend wrote once the state
//! it wrote has expired, **with a version check**.
//!
//! ZooKeeper's TTL nodes need a server flag most installs lack (`extendedTypesEnabled`), and a
//! node's TTL cannot grow when a later write (or a quota change) makes the state live longer,
//! so keys are plain persistent nodes and the writer removes them. For every key it wrote, the
//! backend remembers (path, version written, `expires_at`), one record per key (the latest
//! write), and deletes `path` at that version once `expires_at + margin` has passed on its
//! clock. The margin (at least [`MIN_MARGIN`], else a tenth of the state's lifetime at the
//! write) protects a writer whose clock is behind ours: it still sees the state as unexpired a
//! little longer. A version mismatch means someone wrote the key after us; their state may be
//! live, and their own sweeper (with their `expires_at`) removes it: we forget ours.
//!
//! Why a delete by version is safe although a re-created node restarts at version 0 (so a
//! version can come back for one key): a node is deleted only after the state at that version
//! has expired for every writer whose clock is within the margin, and the generic layer drops
//! a cached state once past its `expires_at`. So nobody holds an unexpired cached version of a
//! deleted node, and a stale version that happens to equal a re-created node's version is never
//! used for a write, as long as only expired states are deleted. **Not covered**, as both
//! break that premise: (1) `delete_key` (a reset) deletes at once; a process that cached the
//! reset key's state (e.g. serving a provable denial) keeps its version, and if the re-created
//! node reaches that same version before the cache expires, that process's write (computed
//! from the pre-reset state) applies, and our record of the old node may delete the new one at
//! that version. (2) A later writer whose state expires before ours (a quota change to a
//! shorter period): its sweep deletes the node before our due time, and if the re-created node
//! reaches our version by then, our delete removes a live state. Both need a re-created node
//! to reach exactly the old version within the old state's lifetime.
//!
//! Bounds: at most [`MAX_RECORDS`](crate::backend::due_queue::MAX_RECORDS) keys remembered (later ones are not swept by us: logged
//! once); at most [`CONCURRENCY`] deletes in flight, each bounded by the request timeout. A
//! delete whose outcome is unknown (lost reply, timeout, session ended under it) may have
//! applied, and the key may have been re-created since at our version: it is retried a second
//! later only if the node still carries our write's zxid (one read first; a key whose create
//! reply had no valid stat, ZOOKEEPER-4026, is then left to the scan). The sweeper stops with
//! the backend (`close` does not wait for future expiries). Keys written by a process that
//! died (or closed) before their expiry are found by the slow scan of `scan.rs` (every limit
//! this backend has written, soon after its first write and then every few minutes, paced).
//! The sweeper uses the backend's session: every rate-limit call hands it the client, and it
//! drops the client when that session ends (a clone would keep an ended session open on the
//! server), so after a session loss it resumes with the next call.

use super::sweep_state::{Shared, State, Target};
use crate::backend::expiry::{due, nanos, unix_nanos_now, MIN_MARGIN};
use crate::backend::lock;
use crate::backend::start_once::StartOnce;
use crate::stats::{RequestCounters, RequestKind};
use futures::StreamExt;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use zookeeper_client as zk;

/// Most deletes in flight at once.
pub(super) const CONCURRENCY: usize = 32;
/// Longest sleep of the task (it also looks whether its session ended).
const IDLE: Duration = Duration::from_secs(1);
/// Pause before a delete that failed is tried again.
const RETRY: Duration = Duration::from_secs(1);

const _: () = assert!(MIN_MARGIN.as_nanos() >= IDLE.as_nanos());

/// The sweeper of one backend; its task starts with the first key recorded.
pub(super) struct Sweeper {
    shared: Arc<Shared>,
    started: StartOnce,
}

impl std::fmt::Debug for Sweeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sweeper")
            .field("records", &lock(&self.shared.state).queue.len())
            .finish()
    }
}

impl Sweeper {
    /// `stop`: cancelled when the backend stops.
    pub(super) fn new(
        stop: CancellationToken,
        stats: Arc<RequestCounters>,
        request_timeout: Duration,
    ) -> Sweeper {
        Sweeper {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                stop,
                stats,
                request_timeout,
            }),
            started: StartOnce::default(),
        }
    }

    /// The client of the session in use (and the token that ends with it).
    pub(super) fn use_client(&self, client: &zk::Client, session_end: &CancellationToken) {
        if !session_end.is_cancelled() {
            lock(&self.shared.state).client = Some((client.clone(), session_end.clone()));
        }
    }

    /// We wrote `path` at `version` (zxid `mzxid`, 0 if unknown); its state expires at
    /// `expires_at` (Unix ns).
    pub(super) fn wrote(&self, path: String, version: i32, mzxid: i64, expires_at: u64) {
        if self.shared.stop.is_cancelled() {
            return;
        }
        let due = due(unix_nanos_now(), expires_at);
        // No wake-up needed: the task looks at least every IDLE, and nothing is due sooner
        // than MIN_MARGIN (≥ IDLE) after it is recorded.
        let target = Target {
            version,
            mzxid,
            verify: false,
        };
        let mut st = lock(&self.shared.state);
        if let Some((limit, _)) = path.rsplit_once('/') {
            if !st.limits.contains(limit) {
                st.limits.insert(limit.to_string());
            }
        }
        st.insert(path, target, due);
        drop(st);
        self.start();
    }

    fn start(&self) {
        self.started.start(|h| {
            h.spawn(run(self.shared.clone()));
            h.spawn(super::scan::run(self.shared.clone()));
        });
    }
}

async fn run(shared: Arc<Shared>) {
    loop {
        let (next, session_end) = {
            let mut st = lock(&shared.state);
            let _ = st.live_client();
            let next = st.queue.next_due();
            (next, st.client.as_ref().map(|(_, t)| t.clone()))
        };
        let now = unix_nanos_now();
        let pause = next.map_or(IDLE, |d| {
            Duration::from_nanos(d.saturating_sub(now)).min(IDLE)
        });
        let session_ended = async {
            match &session_end {
                Some(t) => t.cancelled().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            _ = shared.stop.cancelled() => return,
            _ = session_ended => continue, // drops the client at the top
            _ = tokio::time::sleep(pause) => {}
        }
        let (client, session_end, due) = {
            let mut st = lock(&shared.state);
            match (st.live_client(), st.client.as_ref().map(|(_, t)| t.clone())) {
                (Some(c), Some(t)) => {
                    let due = st.take_due(unix_nanos_now());
                    (c, t, due)
                }
                // No session: the records wait for the next call's client.
                _ => continue,
            }
        };
        if due.is_empty() {
            continue;
        }
        let sweep = sweep_round(&shared, client, due.clone());
        tokio::select! {
            biased;
            _ = shared.stop.cancelled() => return,
            // The session ended under the round: drop its client now (a clone would keep the
            // ended session open on the server) and keep the round's keys for the next one.
            _ = session_end.cancelled() => {
                let mut st = lock(&shared.state);
                let again = unix_nanos_now().saturating_add(nanos(RETRY));
                for (path, target) in due {
                    st.retry(path, target, again);
                }
            }
            () = sweep => {}
        }
    }
}

/// Deletes `due` at most [`CONCURRENCY`] at a time; failures are put back.
async fn sweep_round(shared: &Shared, client: zk::Client, due: Vec<(String, Target)>) {
    let deletes = futures::stream::iter(due).map(|(path, target)| {
        let client = &client;
        async move {
            let r = tokio::time::timeout(
                shared.request_timeout,
                delete(shared, client, &path, target),
            )
            .await
            .unwrap_or(Err(zk::Error::Timeout));
            (path, target, r)
        }
    });
    let mut deletes = deletes.buffer_unordered(CONCURRENCY);
    let mut ended = false;
    while let Some((path, target, r)) = deletes.next().await {
        match r {
            // Gone, or written again since (by someone whose own sweeper removes it).
            Ok(()) | Err(zk::Error::NoNode) | Err(zk::Error::BadVersion) => {
                if let Some(swept) = lock(&shared.state).swept.as_mut() {
                    swept.insert(path);
                }
            }
            // Someone made children under a key node (not us): leave it.
            Err(zk::Error::NotEmpty) => {
                tracing::debug!(%path, "rate-limit key node has children; not swept");
            }
            Err(zk::Error::NoAuth) => {
                tracing::warn!(%path, "not allowed to delete an expired rate-limit key; it stays");
            }
            Err(e) => {
                ended |= super::view::is_terminal(&e);
                tracing::debug!(%path, error = %e, "deleting an expired rate-limit key failed; retrying later");
                let again = unix_nanos_now().saturating_add(nanos(RETRY));
                lock(&shared.state).retry(path, target, again);
            }
        }
    }
    if ended {
        // The session is gone: forget its client (the next call hands over a new one).
        lock(&shared.state).client = None;
    }
}

/// One delete at `target`'s version; a `verify` target is read first and deleted only if the
/// node still carries our write's zxid (else it is someone else's state: `BadVersion`).
async fn delete(
    shared: &Shared,
    client: &zk::Client,
    path: &str,
    target: Target,
) -> Result<(), zk::Error> {
    if target.verify {
        shared.stats.count(RequestKind::Range);
        match client.check_stat(path).await? {
            None => return Err(zk::Error::NoNode),
            Some(s) if s.mzxid != target.mzxid || s.version != target.version => {
                return Err(zk::Error::BadVersion)
            }
            Some(_) => {}
        }
    }
    shared.stats.count(RequestKind::Delete);
    client.delete(path, Some(target.version)).await
}
