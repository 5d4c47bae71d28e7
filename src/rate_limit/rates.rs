//! [`Rates`]: what one Limiter keeps for its rate limits, in one place owned by this module:
//! the limits it knows and their keys' last seen states (`registry.rs`), the combiner of
//! different keys' writes (`combine.rs`), the queue of `check_all` calls (`joint.rs`), and
//! the counts `Limiter::stats` reports. Other modules call its methods.

use super::cell::KeyCell;
use super::combine::{Combiner, Sender};
use super::joint::JointQueue;
use super::lease_book::Unspent;
use super::registry::{LimitShared, RateCounts, RateRegistry};
use crate::backend::{KeyOutcome, KeyWrite};
use crate::error::Result;
use crate::rate::Quota;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// A Limiter's rate-limit internals.
#[derive(Debug, Default)]
pub(crate) struct Rates {
    /// What this Limiter knows of its rate limits (quotas, last seen key states).
    registry: RateRegistry,
    /// Decisions by where they were made (see `RequestStats`).
    counts: RateCounts,
    /// Writes of different keys ready together share one store request.
    writes: Arc<Combiner>,
    /// `check_all` calls waiting for the next joint write.
    joint: JointQueue,
}

impl Rates {
    /// The shared state of limit `name` (see [`RateRegistry::limit`]).
    pub(crate) fn limit(&self, name: &str, quota: Quota, version: u64) -> Arc<LimitShared> {
        self.registry.limit(name, quota, version)
    }

    /// The key cells whose leases are not settled (held, asked or owed back), with their
    /// limit and key.
    pub(crate) fn leased_cells(&self) -> Vec<(Arc<LimitShared>, String, Arc<KeyCell>)> {
        let mut cells = self.registry.all_cells();
        cells.retain(|(_, _, c)| !c.leases_settled());
        cells
    }

    /// Sends one key's `write`, combined with other keys' writes ready now.
    pub(crate) async fn write(&self, sender: &Sender, write: KeyWrite) -> Result<KeyOutcome> {
        self.writes.write(sender, write).await
    }

    /// The queue of `check_all` calls.
    pub(crate) fn joint(&self) -> &JointQueue {
        &self.joint
    }

    /// Counts a decision made from what the Limiter knew, without a store request.
    pub(crate) fn count_local_answer(&self) {
        self.counts.local_answers.fetch_add(1, Relaxed);
    }

    /// Counts a batch of checks sent to the store.
    pub(crate) fn count_batch(&self) {
        self.counts.batches.fetch_add(1, Relaxed);
    }

    /// Counts a check admitted from a lease, without a store request.
    pub(crate) fn count_lease_admitted(&self) {
        self.counts.lease_admitted.fetch_add(1, Relaxed);
    }

    /// Counts a check admitted on a local meter in the approximate mode, without a request.
    pub(crate) fn count_approx_admitted(&self) {
        self.counts.approx_admitted.fetch_add(1, Relaxed);
    }

    /// Counts a report of the approximate mode the store answered.
    pub(crate) fn count_approx_report(&self) {
        self.counts.approx_reports.fetch_add(1, Relaxed);
    }

    /// (admitted locally, reports) of the approximate mode so far.
    pub(crate) fn approx_counts(&self) -> (u64, u64) {
        (
            self.counts.approx_admitted.load(Relaxed),
            self.counts.approx_reports.load(Relaxed),
        )
    }

    /// The key cells whose approximate mode is not settled (a reporter runs, or usage is
    /// left to report), with their limit and key.
    pub(crate) fn approximate_cells(&self) -> Vec<(Arc<LimitShared>, String, Arc<KeyCell>)> {
        let mut cells = self.registry.all_cells();
        cells.retain(|(_, _, c)| !c.approx(|b| b.is_idle()));
        cells
    }

    /// Counts a lease taken, of `units`.
    pub(crate) fn count_lease(&self, units: u64) {
        self.counts.leases.fetch_add(1, Relaxed);
        self.counts.leased_units.fetch_add(units, Relaxed);
    }

    /// Counts leased units the key took back.
    pub(crate) fn count_lease_returned(&self, units: u64) {
        self.counts.lease_returned_units.fetch_add(units, Relaxed);
    }

    /// Counts leased units neither spent nor taken back: the key under-admitted by them.
    pub(crate) fn count_lease_lost(&self, units: u64) {
        self.counts.lease_lost_units.fetch_add(units, Relaxed);
    }

    /// Counts what leases set aside lost (what they will give back is counted once it is).
    pub(crate) fn count_unspent(&self, unspent: Unspent) {
        if unspent.lost > 0 {
            self.count_lease_lost(unspent.lost);
        }
    }

    /// The lease counts so far.
    pub(crate) fn lease_counts(&self) -> LeaseCounts {
        let c = &self.counts;
        LeaseCounts {
            admitted: c.lease_admitted.load(Relaxed),
            leases: c.leases.load(Relaxed),
            leased_units: c.leased_units.load(Relaxed),
            returned_units: c.lease_returned_units.load(Relaxed),
            lost_units: c.lease_lost_units.load(Relaxed),
        }
    }

    /// (batches, local answers) so far.
    pub(crate) fn counted(&self) -> (u64, u64) {
        (
            self.counts.batches.load(Relaxed),
            self.counts.local_answers.load(Relaxed),
        )
    }
}

/// What a Limiter's leases did so far (`Limiter::stats`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LeaseCounts {
    pub(crate) admitted: u64,
    pub(crate) leases: u64,
    pub(crate) leased_units: u64,
    pub(crate) returned_units: u64,
    pub(crate) lost_units: u64,
}
