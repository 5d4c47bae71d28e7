//! Row 6, a semaphore's history: etcd keeps every deleted key (a tombstone) until it compacts,
//! and each acquire's Txn reads the semaphore's whole key range, tombstones included. So the
//! uncontended acquire+release is measured on a fresh semaphore, again after `past` more
//! acquisitions, and (etcd) again after a compaction. ZooKeeper and memory:// keep no deleted
//! entries: their figures should not move.

use crate::stats::Samples;
use crate::stores::{client, compact};
use std::time::Instant;

#[derive(Debug, Clone, Default)]
pub struct History {
    pub past: usize,
    pub fresh: Samples,
    pub after: Samples,
    /// etcd only: after compacting every revision so far.
    pub compacted: Option<Samples>,
}

impl History {
    /// p50 growth per 1,000 past acquisitions, in µs.
    pub fn growth_per_1000(&self) -> f64 {
        let grown = self.after.p50().as_secs_f64() - self.fresh.p50().as_secs_f64();
        grown * 1e6 * 1000.0 / self.past.max(1) as f64
    }
}

pub async fn run(
    url: &str,
    past: usize,
    samples: usize,
    mut etcd: Option<etcd_client::Client>,
) -> anyhow::Result<History> {
    let (limiter, sem) = client(url, "history", "history", 2).await?;
    if let Some(c) = etcd.as_mut() {
        compact(c).await?;
    }
    let pairs = |n: usize| {
        let sem = sem.clone();
        async move {
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                let start = Instant::now();
                sem.acquire().await?.release().await?;
                v.push(start.elapsed());
            }
            anyhow::Ok(Samples::new(v))
        }
    };
    let fresh = pairs(samples).await?;
    pairs(past).await?;
    let after = pairs(samples).await?;
    let compacted = match etcd.as_mut() {
        Some(c) => {
            compact(c).await?;
            Some(pairs(samples).await?)
        }
        None => None,
    };
    limiter.close().await?;
    Ok(History {
        past,
        fresh,
        after,
        compacted,
    })
}
