//! The sizes of the rate-limit rows, from the bench's `--quick` flag (the shared `Plan` stays
//! as it is).

use std::time::Duration;

/// What one run of the rate rows does.
#[derive(Debug, Clone)]
pub struct RatePlan {
    /// Rows 1–2: interleaved rounds, each a batch of every path (after `warmup` unmeasured
    /// calls of each).
    pub rounds: usize,
    pub batch: usize,
    pub warmup: usize,
    /// Row 2 (peers): sequential checks per peer worker.
    pub peer_count: u64,
    /// Row 3: worker processes × callers each, closed loop, for `hot_for`.
    pub processes: usize,
    pub callers: u32,
    pub hot_for: Duration,
    /// Row 3: the quotas (per second) run on etcd, ZooKeeper and redis-cell.
    pub quotas: Vec<u64>,
    /// Row 3: the quota the etcd peers run at (they are slow: one is enough).
    pub peer_quota: u64,
    /// Row 3b: the quotas run on etcd and ZooKeeper with callers that wait `retry_after`.
    pub patient_quotas: Vec<u64>,
    /// Row 4: distinct keys, checked once each at an even `keys_rate` per second.
    pub keys: usize,
    pub keys_rate: u64,
    /// Row 4b: fresh keys, closed loop, each (processes, callers) for `fresh_for`.
    pub fresh_processes: Vec<usize>,
    pub fresh_callers: Vec<u32>,
    pub fresh_for: Duration,
    /// Row 4b's memory per idle key: fresh keys checked on one Limiter, then read again after
    /// `idle_for`.
    pub idle_keys: usize,
    pub idle_for: Duration,
}

impl RatePlan {
    pub fn new(quick: bool) -> RatePlan {
        if quick {
            RatePlan {
                rounds: 3,
                batch: 10,
                warmup: 5,
                peer_count: 30,
                processes: 2,
                callers: 4,
                // 2 s: a debug build takes up to ~0.8 s to spend the burst on etcd, and the
                // steady part starts after it (and after 1 s).
                hot_for: Duration::from_secs(2),
                quotas: vec![1_000],
                peer_quota: 1_000,
                patient_quotas: vec![1_000],
                keys: 1_000,
                keys_rate: 500,
                fresh_processes: vec![1],
                fresh_callers: vec![4],
                fresh_for: Duration::from_secs(1),
                idle_keys: 2_000,
                idle_for: Duration::from_secs(2),
            }
        } else {
            RatePlan {
                rounds: 20,
                batch: 50,
                warmup: 50,
                peer_count: 500,
                processes: 8,
                callers: 32,
                hot_for: Duration::from_secs(10),
                quotas: vec![100, 1_000, 10_000],
                peer_quota: 1_000,
                patient_quotas: vec![1_000],
                keys: 100_000,
                keys_rate: 2_000,
                fresh_processes: vec![1, 4],
                fresh_callers: vec![16, 64, 256],
                fresh_for: Duration::from_secs(3),
                idle_keys: 100_000,
                idle_for: Duration::from_secs(5),
            }
        }
    }

    /// The GCRA burst of a quota of `limit` per second: `limit`, the default of
    /// `Quota::per_second(limit)`; the same for redis-cell (its `max_burst` is this minus 1).
    pub fn burst(limit: u64) -> u64 {
        limit.max(1)
    }
}
