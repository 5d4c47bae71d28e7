//! Idle rate-limit keys vanish: the sweeper deletes each key this backend wrote once the state
//! it wrote has expired, **with a revision check**, many keys per request.
//!
//! Keys carry no lease: attaching one costs etcd about as much CPU as the write itself (measured:
//! a Limiter writing fresh keys ran at 0.46× etcd's plain-put floor with per-bucket leases,
//! 0.67× without, 64 callers), and a lease's expiry deletes keys one by one anyway. Instead,
//! for every key it wrote the backend remembers (key, revision written, due time), one record
//! per key (the latest write; `DueQueue`), and once due (`expires_at` plus the margin of
//! `crate::backend::expiry`, and [`GATHER`] more so a round finds many keys due) deletes up to
//! [`PER_TXN`] (127) keys in one Txn of nested Txns,
//! each `mod_revision == ours → delete`, at most
//! [`CONCURRENCY`](super::sweep_state::CONCURRENCY) Txns in flight. So expiry
//! costs a bounded number of requests per second (one per 127 keys), never sits on a check's
//! path, and a key written since by anyone (a newer revision) is left to its writer. etcd
//! never reuses a revision, so a repeated delete (a lost reply) is harmless, and a failed
//! batch is simply tried again [`RETRY`] later.
//!
//! Memory: a record is about 160 bytes and lives until its key is due; keys due beyond
//! [`HORIZON`] (long quota windows) are not remembered at all. Those, keys written by a
//! process that died (or closed) before their expiry, and keys past
//! [`MAX_RECORDS`](crate::backend::due_queue::MAX_RECORDS) are found by the slow scan of
//! `scan.rs`, from the `\n@<expires_at>` suffix every stored state carries. The sweeper stops
//! with the backend (`close` does not wait for future expiries).

use super::endpoints::Endpoints;
use super::sweep_state::{Shared, PER_TXN};
use crate::backend::due_queue::DueQueue;
use crate::backend::expiry::{due, nanos, unix_nanos_now};
use crate::backend::lock;
use crate::backend::start_once::StartOnce;
use crate::stats::RequestCounters;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Most keys taken per round (between two looks at the clock and the stop token).
const ROUND: usize = 16 * PER_TXN;
/// Longest sleep of the task.
const IDLE: Duration = Duration::from_secs(1);
/// A round starts this long after its earliest key is due, so keys written over that time
/// share its Txns (at most one round per GATHER: a bounded number of requests per second).
pub(super) const GATHER: Duration = Duration::from_millis(250);
/// Keys due later than this are not remembered: the slow scan, which passes at least this
/// often, deletes them (so a long quota window costs no memory per key here).
pub(super) const HORIZON: Duration = super::scan::SCAN_INTERVAL;
/// Pause before keys whose delete failed are tried again.
pub(super) const RETRY: Duration = Duration::from_secs(1);

/// The sweeper of one backend; its tasks (the sweep, the scan) start with the first write.
pub(super) struct Sweeper {
    shared: Arc<Shared>,
    started: StartOnce,
}

impl std::fmt::Debug for Sweeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sweeper")
            .field("records", &lock(&self.shared.queue).len())
            .finish()
    }
}

impl Sweeper {
    /// `stop`: cancelled when the backend stops.
    pub(super) fn new(
        endpoints: Arc<Endpoints>,
        stop: CancellationToken,
        stats: Arc<RequestCounters>,
        request_timeout: Duration,
        prefix: String,
    ) -> Sweeper {
        Sweeper {
            shared: Arc::new(Shared {
                queue: Mutex::new(DueQueue::default()),
                endpoints,
                stop,
                stats,
                request_timeout,
                prefix,
            }),
            started: StartOnce::default(),
        }
    }

    /// We wrote each `(key, expires_at)` at `revision` (one Txn: one revision).
    pub(super) fn wrote<'a>(
        &self,
        revision: i64,
        written: impl IntoIterator<Item = (&'a str, u64)>,
    ) {
        if self.shared.stop.is_cancelled() {
            return;
        }
        let now = unix_nanos_now();
        let horizon = now.saturating_add(nanos(HORIZON));
        {
            let mut queue = lock(&self.shared.queue);
            for (key, expires_at) in written {
                let due = due(now, expires_at);
                if due <= horizon {
                    queue.insert(key, revision, due);
                }
            }
        }
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
        let next = lock(&shared.queue).next_due();
        let now = unix_nanos_now();
        let pause = next.map_or(IDLE, |d| {
            let start = d.saturating_add(nanos(GATHER));
            Duration::from_nanos(start.saturating_sub(now)).min(IDLE)
        });
        tokio::select! {
            biased;
            _ = shared.stop.cancelled() => return,
            _ = tokio::time::sleep(pause) => {}
        }
        let due = lock(&shared.queue).take_due(unix_nanos_now(), ROUND);
        if due.is_empty() {
            continue;
        }
        let (_, failed) = tokio::select! {
            biased;
            _ = shared.stop.cancelled() => return,
            done = shared.delete_at(due) => done,
        };
        if !failed.is_empty() {
            let again = unix_nanos_now().saturating_add(nanos(RETRY));
            let mut queue = lock(&shared.queue);
            for (key, rev) in failed {
                // Written again meanwhile: that record supersedes this one.
                if !queue.contains(&key) {
                    queue.insert(&key, rev, again);
                }
            }
        }
    }
}
