//! Counters of requests sent to the store, by kind, so tests and benchmarks can assert costs.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Kinds of store requests that are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RequestKind {
    /// A plain write.
    Put,
    /// A transaction (etcd Txn, ZooKeeper multi); on memory:// an atomic enqueue or update.
    Txn,
    /// A read.
    Range,
    /// A delete (release, cancel).
    Delete,
    /// A watch created (each creation or re-creation counts once).
    Watch,
    /// Session management: lease grant, keepalive, revoke (or the ZooKeeper equivalents).
    Lease,
}

/// Live counters; cheap to bump from any task.
#[derive(Debug, Default)]
pub struct RequestCounters {
    put: AtomicU64,
    txn: AtomicU64,
    range: AtomicU64,
    delete: AtomicU64,
    watch: AtomicU64,
    lease: AtomicU64,
    view_decisions: AtomicU64,
}

impl RequestCounters {
    /// Counts one request of `kind`.
    pub fn count(&self, kind: RequestKind) {
        let c = match kind {
            RequestKind::Put => &self.put,
            RequestKind::Txn => &self.txn,
            RequestKind::Range => &self.range,
            RequestKind::Delete => &self.delete,
            RequestKind::Watch => &self.watch,
            RequestKind::Lease => &self.lease,
        };
        c.fetch_add(1, Relaxed);
    }

    /// Counts one enqueue decided from a watch-fed view instead of a read (etcd).
    pub fn decided_from_view(&self) {
        self.view_decisions.fetch_add(1, Relaxed);
    }

    /// A copy of the counters now.
    pub fn snapshot(&self) -> RequestStats {
        RequestStats {
            put: self.put.load(Relaxed),
            txn: self.txn.load(Relaxed),
            range: self.range.load(Relaxed),
            delete: self.delete.load(Relaxed),
            watch: self.watch.load(Relaxed),
            lease: self.lease.load(Relaxed),
            view_decisions: self.view_decisions.load(Relaxed),
            ..RequestStats::default()
        }
    }
}

/// Requests a [`Limiter`](crate::Limiter) has sent to its store, by kind.
///
/// ```
/// # async fn f() -> clusterlimit::Result<()> {
/// let limiter = clusterlimit::Limiter::connect("memory://stats-doc").await?;
/// let sem = limiter.semaphore("jobs", 2).await?;
/// let before = limiter.stats();
/// let permit = sem.acquire().await?;
/// assert_eq!(limiter.stats().since(&before).total(), 1); // one request per uncontended acquire
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct RequestStats {
    /// Plain writes.
    pub put: u64,
    /// Transactions.
    pub txn: u64,
    /// Reads.
    pub range: u64,
    /// Deletes.
    pub delete: u64,
    /// Watches created.
    pub watch: u64,
    /// Session requests (grant, keepalive, revoke).
    pub lease: u64,
    /// Queue entries being removed in the background now (dropped permits, cancelled or
    /// failed acquires whose removal is not confirmed yet). A gauge, not a count of requests:
    /// sums add it up, [`since`](RequestStats::since) keeps the later value.
    pub pending_removals: u64,
    /// Sessions ended because the removal of one of their entries could not be confirmed
    /// within two session TTLs (the one way left to free the entry for certain; the session's
    /// other permits report lost).
    pub removal_session_ends: u64,
    /// Rate-limit decisions that went to the store: each is one batch of concurrent checks of
    /// a key (one write when nobody else wrote the key meanwhile, one more per conflict).
    pub rate_batches: u64,
    /// Rate-limit checks answered without a store request (a denial or peek the last state
    /// confirmed by the store proves).
    pub rate_local_answers: u64,
    /// etcd: acquires whose grant was decided from the Limiter's watch-fed view of the
    /// semaphore, with no read (not a request: their one request is counted as a `txn`).
    pub view_decisions: u64,
    /// Acquires refused before reaching the store because their deadline would pass before it
    /// could answer: the store, not the capacity, was the limit (src/admission.rs). Costs no
    /// request.
    pub acquires_refused_store_busy: u64,
    /// Rate-limit checks admitted from a lease of their key, without a store request (see
    /// [`LimiterBuilder::hot_key_leases`](crate::LimiterBuilder::hot_key_leases)).
    pub rate_lease_admitted: u64,
    /// Leases taken (each in one of the key's writes, counted in `rate_batches`).
    pub rate_leases: u64,
    /// Units those leases took.
    pub rate_leased_units: u64,
    /// Leased units given back unspent (the key took them back).
    pub rate_lease_returned_units: u64,
    /// Leased units neither spent nor given back: the key admitted that much less than its
    /// quota (a lease of a quota since changed, or one whose key was written after it).
    pub rate_lease_lost_units: u64,
    /// Rate-limit checks admitted on a local meter, without a store request (the approximate
    /// mode: [`LimiterBuilder::approximate_hot_keys`](crate::LimiterBuilder::approximate_hot_keys)).
    pub rate_approximate_admitted: u64,
    /// Reports of the approximate mode the store answered (each in one of the key's writes,
    /// counted in `rate_batches`).
    pub rate_approximate_reports: u64,
}

impl std::ops::Add for RequestStats {
    type Output = RequestStats;
    fn add(self, o: RequestStats) -> RequestStats {
        RequestStats {
            put: self.put + o.put,
            txn: self.txn + o.txn,
            range: self.range + o.range,
            delete: self.delete + o.delete,
            watch: self.watch + o.watch,
            lease: self.lease + o.lease,
            pending_removals: self.pending_removals + o.pending_removals,
            removal_session_ends: self.removal_session_ends + o.removal_session_ends,
            rate_batches: self.rate_batches + o.rate_batches,
            rate_local_answers: self.rate_local_answers + o.rate_local_answers,
            view_decisions: self.view_decisions + o.view_decisions,
            acquires_refused_store_busy: self.acquires_refused_store_busy
                + o.acquires_refused_store_busy,
            rate_lease_admitted: self.rate_lease_admitted + o.rate_lease_admitted,
            rate_leases: self.rate_leases + o.rate_leases,
            rate_leased_units: self.rate_leased_units + o.rate_leased_units,
            rate_lease_returned_units: self.rate_lease_returned_units + o.rate_lease_returned_units,
            rate_lease_lost_units: self.rate_lease_lost_units + o.rate_lease_lost_units,
            rate_approximate_admitted: self.rate_approximate_admitted + o.rate_approximate_admitted,
            rate_approximate_reports: self.rate_approximate_reports + o.rate_approximate_reports,
        }
    }
}

/// Totals over several Limiters, e.g. every client of a test or a benchmark:
///
/// ```
/// # async fn f(limiters: &[clusterlimit::Limiter]) {
/// let all: clusterlimit::RequestStats = limiters.iter().map(|l| l.stats()).sum();
/// # }
/// ```
impl std::iter::Sum for RequestStats {
    fn sum<I: Iterator<Item = RequestStats>>(iter: I) -> RequestStats {
        iter.fold(RequestStats::default(), |a, b| a + b)
    }
}

impl RequestStats {
    /// All requests except session keepalives, which run on their own clock.
    pub fn total(&self) -> u64 {
        self.put + self.txn + self.range + self.delete + self.watch
    }

    /// Requests counted since `earlier`.
    pub fn since(&self, earlier: &RequestStats) -> RequestStats {
        RequestStats {
            put: self.put.saturating_sub(earlier.put),
            txn: self.txn.saturating_sub(earlier.txn),
            range: self.range.saturating_sub(earlier.range),
            delete: self.delete.saturating_sub(earlier.delete),
            watch: self.watch.saturating_sub(earlier.watch),
            lease: self.lease.saturating_sub(earlier.lease),
            pending_removals: self.pending_removals,
            removal_session_ends: self
                .removal_session_ends
                .saturating_sub(earlier.removal_session_ends),
            rate_batches: self.rate_batches.saturating_sub(earlier.rate_batches),
            rate_local_answers: self
                .rate_local_answers
                .saturating_sub(earlier.rate_local_answers),
            view_decisions: self.view_decisions.saturating_sub(earlier.view_decisions),
            acquires_refused_store_busy: self
                .acquires_refused_store_busy
                .saturating_sub(earlier.acquires_refused_store_busy),
            rate_lease_admitted: self
                .rate_lease_admitted
                .saturating_sub(earlier.rate_lease_admitted),
            rate_leases: self.rate_leases.saturating_sub(earlier.rate_leases),
            rate_leased_units: self
                .rate_leased_units
                .saturating_sub(earlier.rate_leased_units),
            rate_lease_returned_units: self
                .rate_lease_returned_units
                .saturating_sub(earlier.rate_lease_returned_units),
            rate_lease_lost_units: self
                .rate_lease_lost_units
                .saturating_sub(earlier.rate_lease_lost_units),
            rate_approximate_admitted: self
                .rate_approximate_admitted
                .saturating_sub(earlier.rate_approximate_admitted),
            rate_approximate_reports: self
                .rate_approximate_reports
                .saturating_sub(earlier.rate_approximate_reports),
        }
    }
}
