//! Idle rate-limit keys vanish: the sweeper deletes each key this backend wrote once the state
//! it wrote has expired, **with a version check**.
//!
//! ZooKeeper's TTL nodes need a server flag most installs lack (`extendedTypesEnabled`), and a
//! node's TTL cannot grow when a later write (or a quota change) makes the state live longer,
//! so keys are plain persistent nodes and the writer removes them. For every key it wrote, the
//! backend remembers (path, version written, `expires_at`), one record per key (the latest
//! write), and deletes `path` at that version once `expires_at + margin` has passed on its
//! clock. The margin (at least [`MIN_MARGIN`](crate::backend::expiry::MIN_MARGIN), else a
//! tenth of the state's lifetime at the write) protects a writer whose clock is behind ours: it still sees the state as unexpired a
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
//! Bounds: at most [`MAX_RECORDS`](crate::backend::due_queue::MAX_RECORDS) keys remembered
//! (later ones are not swept by us: logged once); at most [`CONCURRENCY`] deletes in flight,
//! each bounded by the request timeout. A
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
//!
//! The records, the schedule and the loops are the crate's one sweeper
//! ([`crate::backend::sweeper`]); this file is ZooKeeper's side of it: what a write and a
//! call hand over, and the [`SweepStore`] calls (the deletes here, the scan in `scan.rs`).

use super::sweep_state::{Target, ZkSweep};
use crate::backend::expiry::{due, unix_nanos_now};
use crate::backend::lock;
use crate::backend::sweeper::{self, Remembered, SweepStore};
use crate::stats::RequestKind;
use futures::StreamExt;
use std::time::Duration;
use tokio::time::Interval;
use tokio_util::sync::CancellationToken;
use zookeeper_client as zk;

/// Most deletes in flight at once.
pub(super) const CONCURRENCY: usize = 32;

/// The sweeper of one ZooKeeper backend; its tasks start with the first key recorded.
pub(super) type Sweeper = sweeper::Sweeper<ZkSweep>;

impl Sweeper {
    /// The client of the session in use (and the token that ends with it).
    pub(super) fn use_client(&self, client: &zk::Client, session_end: &CancellationToken) {
        if !session_end.is_cancelled() {
            lock(&self.store().state).client = Some((client.clone(), session_end.clone()));
        }
    }

    /// Lets go of the session's client at once (the backend is closing): the client sends the
    /// session's close only when its last clone goes.
    pub(super) fn forget_client(&self) {
        lock(&self.store().state).client = None;
    }

    /// We wrote `path` at `version` (zxid `mzxid`, 0 if unknown); its state expires at
    /// `expires_at` (Unix ns).
    pub(super) fn wrote(&self, path: String, version: i32, mzxid: i64, expires_at: u64) {
        if self.stopped() {
            return;
        }
        let due = due(unix_nanos_now(), expires_at);
        let target = Target {
            version,
            mzxid,
            verify: false,
        };
        if let Some((limit, _)) = path.rsplit_once('/') {
            let mut st = lock(&self.store().state);
            if !st.limits.contains(limit) {
                st.limits.insert(limit.to_string());
            }
        }
        self.remember([(path.as_str(), target, due)]);
    }
}

#[async_trait::async_trait]
impl SweepStore for ZkSweep {
    type Target = Target;
    type Conn = zk::Client;

    const ROUND: usize = 1024;
    /// Each key alone, as soon as due: ZooKeeper has no batched conditional delete worth it.
    const GATHER: Duration = Duration::ZERO;
    const SCAN_REQUESTS_PER_SEC: u32 = super::scan::READS_PER_SEC;

    fn connection(&self) -> Option<zk::Client> {
        self.client()
    }

    fn session_end(&self) -> Option<CancellationToken> {
        let mut st = lock(&self.state);
        let _ = st.live_client();
        st.client.as_ref().map(|(_, t)| t.clone())
    }

    /// A delete whose outcome is unknown may have applied, and a node re-created since may be
    /// back at our version: the retry deletes only a node that still carries our write's zxid
    /// (read first); without the zxid the key is left to whoever writes it next.
    fn retry(target: Target) -> Option<Target> {
        (target.mzxid != 0).then_some(Target {
            verify: true,
            ..target
        })
    }

    /// Deletes `due` at most [`CONCURRENCY`] at a time; failures are put back.
    async fn delete(
        &self,
        client: zk::Client,
        due: Vec<(String, Target)>,
        remembered: &Remembered<Target>,
    ) {
        let deletes = futures::stream::iter(due).map(|(path, target)| {
            let client = &client;
            async move {
                let r =
                    tokio::time::timeout(self.request_timeout, delete(self, client, &path, target))
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
                    if let Some(swept) = lock(&self.state).swept.as_mut() {
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
                    if let Some(target) = Self::retry(target) {
                        remembered.again(&path, target);
                    }
                }
            }
        }
        if ended {
            // The session is gone: forget its client (the next call hands over a new one).
            lock(&self.state).client = None;
        }
    }

    async fn scan(&self, remembered: &Remembered<Target>, pace: &mut Interval) {
        super::scan::scan(self, remembered, pace).await;
    }
}

/// One delete at `target`'s version; a `verify` target is read first and deleted only if the
/// node still carries our write's zxid (else it is someone else's state: `BadVersion`).
async fn delete(
    sweep: &ZkSweep,
    client: &zk::Client,
    path: &str,
    target: Target,
) -> Result<(), zk::Error> {
    if target.verify {
        sweep.stats.count(RequestKind::Range);
        match client.check_stat(path).await? {
            None => return Err(zk::Error::NoNode),
            Some(s) if s.mzxid != target.mzxid || s.version != target.version => {
                return Err(zk::Error::BadVersion)
            }
            Some(_) => {}
        }
    }
    sweep.stats.count(RequestKind::Delete);
    client.delete(path, Some(target.version)).await
}
