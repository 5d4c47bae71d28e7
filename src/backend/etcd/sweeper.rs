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
//! batch is simply tried again [`RETRY`](crate::backend::sweeper::remembered::RETRY) later.
//!
//! The records, the schedule and the loops are the crate's one sweeper
//! ([`crate::backend::sweeper`]); this file is etcd's side of it: what a write hands over, and
//! the [`SweepStore`] calls (`sweep_state.rs` deletes, `scan.rs` scans).
//!
//! Memory: a record is about 160 bytes and lives until its key is due; keys due beyond
//! [`HORIZON`] (long quota windows) are not remembered at all. Those, keys written by a
//! process that died (or closed) before their expiry, and keys past
//! [`MAX_RECORDS`](crate::backend::due_queue::MAX_RECORDS) are found by the slow scan of
//! `scan.rs`, from the `\n@<expires_at>` suffix every stored state carries. The sweeper stops
//! with the backend (`close` does not wait for future expiries).

use super::sweep_state::{EtcdSweep, PER_TXN};
use crate::backend::expiry::{due, nanos, unix_nanos_now};
use crate::backend::sweeper::{self, Remembered, SweepStore, SCAN_INTERVAL};
use std::time::Duration;
use tokio::time::Interval;

/// Most keys taken per round (between two looks at the clock and the stop token).
const ROUND: usize = 16 * PER_TXN;
/// A round starts this long after its earliest key is due, so keys written over that time
/// share its Txns (at most one round per GATHER: a bounded number of requests per second).
const GATHER: Duration = Duration::from_millis(250);
/// Keys due later than this are not remembered: the slow scan, which passes at least this
/// often, deletes them (so a long quota window costs no memory per key here).
const HORIZON: Duration = SCAN_INTERVAL;

/// The sweeper of one etcd backend; its tasks (the sweep, the scan) start with the first write.
pub(super) type Sweeper = sweeper::Sweeper<EtcdSweep>;

impl Sweeper {
    /// We wrote each `(key, expires_at)` at `revision` (one Txn: one revision).
    pub(super) fn wrote<'a>(
        &self,
        revision: i64,
        written: impl IntoIterator<Item = (&'a str, u64)>,
    ) {
        if self.stopped() {
            return;
        }
        let now = unix_nanos_now();
        let horizon = now.saturating_add(nanos(HORIZON));
        self.remember(
            written
                .into_iter()
                .map(|(key, expires_at)| (key, revision, due(now, expires_at)))
                .filter(|&(_, _, due)| due <= horizon),
        );
    }
}

#[async_trait::async_trait]
impl SweepStore for EtcdSweep {
    /// The revision we wrote the key at.
    type Target = i64;
    /// Each batch picks its member.
    type Conn = ();

    const ROUND: usize = ROUND;
    const GATHER: Duration = GATHER;
    const SCAN_REQUESTS_PER_SEC: u32 = super::scan::PAGES_PER_SEC;

    fn connection(&self) -> Option<()> {
        Some(())
    }

    async fn delete(&self, (): (), due: Vec<(String, i64)>, remembered: &Remembered<i64>) {
        let (_, failed) = self.delete_at(due).await;
        for (key, rev) in failed {
            remembered.again(&key, rev);
        }
    }

    async fn scan(&self, remembered: &Remembered<i64>, pace: &mut Interval) {
        super::scan::scan(self, remembered, pace).await;
    }
}
