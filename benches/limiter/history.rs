//! Row 6, a semaphore's history and its queue. etcd keeps every deleted key (a tombstone) until
//! it compacts, and a range read of the semaphore walks them. So the uncontended
//! acquire+release is measured on a fresh semaphore, again after `past` more acquisitions, and
//! (etcd) again after a compaction; and on a semaphore of capacity n + 1 with no entry, then
//! with n entries held by another Limiter. ZooKeeper and memory:// keep no deleted entries:
//! their figures should not move.

use crate::stats::Samples;
use crate::stores::{client, compact, Store};
use clusterlimit::Semaphore;
use std::time::Instant;

/// Past acquisitions ZooKeeper's row makes one by one (it keeps no deleted entry, so this only
/// has to show the figure does not move, not reach the full count at ~1.5 ms each).
const ZK_PAST_MAX: usize = 5_000;
/// Keys per Txn when writing etcd tombstones (etcd allows 128 operations per Txn).
const TOMBSTONE_BATCH: usize = 100;
/// Txns in flight at once while writing tombstones.
const TOMBSTONE_TASKS: usize = 8;
/// Pause after writing etcd's tombstones (see [`run`]).
const SETTLE: std::time::Duration = std::time::Duration::from_secs(2);
/// Unmeasured pairs before each measurement (the first acquire of a Limiter on a semaphore
/// reads it and sets up its watch).
const WARMUP: usize = 5;

/// How the past acquisitions were made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Past {
    /// Real acquire+release pairs, one after the other.
    #[default]
    Acquisitions,
    /// etcd: entry keys put and deleted in batched Txns in the semaphore's queue range: the
    /// same tombstones released entries leave, built ~100× faster.
    Tombstones,
}

#[derive(Debug, Clone, Default)]
pub struct History {
    pub past: usize,
    pub how: Past,
    pub fresh: Samples,
    pub after: Samples,
    /// etcd only: after compacting every revision so far.
    pub compacted: Option<Samples>,
    /// etcd only: a raw put + delete of a key outside the semaphore, one after each measured
    /// pair of `fresh` and of `after`: what etcd itself costs at that moment (the machine
    /// drifts between the two blocks, and etcd's own writes get slower after a burst of
    /// 2 × past revisions, with or without our semaphore).
    pub floor_fresh: Option<Samples>,
    pub floor_after: Option<Samples>,
}

impl History {
    /// p50 growth per 1,000 past acquisitions, in µs.
    pub fn growth_per_1000(&self) -> f64 {
        let grown = self.after.p50().as_secs_f64() - self.fresh.p50().as_secs_f64();
        grown * 1e6 * 1000.0 / self.past.max(1) as f64
    }

    /// etcd: (after ÷ its floor) ÷ (fresh ÷ its floor), p50s: how much the acquire grew beyond
    /// what etcd's own put + delete grew in the same blocks.
    pub fn growth_over_floor(&self) -> Option<f64> {
        let (ff, fa) = (self.floor_fresh.as_ref()?, self.floor_after.as_ref()?);
        let p = |s: &Samples| s.p50().as_secs_f64();
        let fresh = p(&self.fresh) / p(ff);
        let after = p(&self.after) / p(fa);
        (fresh > 0.0 && fresh.is_finite() && after.is_finite()).then_some(after / fresh)
    }
}

/// The etcd side of the history row: a client for compactions and tombstones, and the key
/// prefix of the URL the row uses.
pub struct EtcdHistory {
    pub admin: etcd_client::Client,
    pub prefix: String,
}

/// `n` sequential acquire+release pairs on `sem`, each timed.
async fn pairs(sem: &Semaphore, n: usize) -> anyhow::Result<Samples> {
    Ok(pairs_and_floor(sem, n, None).await?.0)
}

/// `n` sequential acquire+release pairs on `sem`, each timed, each followed (with `floor`, etcd)
/// by a timed raw put + delete of a key outside the semaphore.
async fn pairs_and_floor(
    sem: &Semaphore,
    n: usize,
    mut floor: Option<&mut EtcdHistory>,
) -> anyhow::Result<(Samples, Option<Samples>)> {
    let mut v = Vec::with_capacity(n);
    let mut f = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        sem.acquire().await?.release().await?;
        v.push(start.elapsed());
        if let Some(e) = floor.as_deref_mut() {
            let key = format!("{}/history-floor", e.prefix);
            let start = Instant::now();
            e.admin.put(key.as_str(), "1", None).await?;
            e.admin.delete(key.as_str(), None).await?;
            f.push(start.elapsed());
        }
    }
    let floor = floor.map(|_| Samples::new(f));
    Ok((Samples::new(v), floor))
}

pub async fn run(
    url: &str,
    past: usize,
    samples: usize,
    store: Store,
    mut etcd: Option<EtcdHistory>,
) -> anyhow::Result<History> {
    let name = "history";
    let (limiter, sem) = client(url, name, name, 2).await?;
    if let Some(e) = etcd.as_mut() {
        compact(&mut e.admin).await?;
    }
    pairs(&sem, WARMUP).await?;
    let (fresh, floor_fresh) = pairs_and_floor(&sem, samples, etcd.as_mut()).await?;
    let (past, how) = match etcd.as_mut() {
        Some(e) => {
            let queue = format!("{}/s/{name}/q/past-", e.prefix);
            tombstones(&e.admin, &queue, past).await?;
            // A burst of 2 × past revisions makes the members snapshot and compact their raft
            // logs in the background: let that pass, as a history grown over time would.
            tokio::time::sleep(SETTLE).await;
            (past, Past::Tombstones)
        }
        None => {
            let past = if store == Store::Zk {
                past.min(ZK_PAST_MAX)
            } else {
                past
            };
            pairs(&sem, past).await?;
            (past, Past::Acquisitions)
        }
    };
    let (after, floor_after) = pairs_and_floor(&sem, samples, etcd.as_mut()).await?;
    let compacted = match etcd.as_mut() {
        Some(e) => {
            compact(&mut e.admin).await?;
            Some(pairs(&sem, samples).await?)
        }
        None => None,
    };
    limiter.close().await?;
    Ok(History {
        past,
        how,
        fresh,
        after,
        compacted,
        floor_fresh,
        floor_after,
    })
}

/// Puts and deletes `n` keys named `<queue>N`, in batched Txns, a few at a time.
async fn tombstones(admin: &etcd_client::Client, queue: &str, n: usize) -> anyhow::Result<()> {
    use etcd_client::{Txn, TxnOp};
    let value = r#"{"permits":1,"owner":"history","since_unix_ms":0}"#;
    let batches: Vec<(usize, usize)> = (0..n)
        .step_by(TOMBSTONE_BATCH)
        .map(|s| (s, (s + TOMBSTONE_BATCH).min(n)))
        .collect();
    let mut tasks = tokio::task::JoinSet::new();
    for chunk in batches.chunks(batches.len().div_ceil(TOMBSTONE_TASKS).max(1)) {
        let (mut c, chunk, queue) = (admin.clone(), chunk.to_vec(), queue.to_string());
        tasks.spawn(async move {
            for (from, to) in chunk {
                let keys: Vec<String> = (from..to).map(|i| format!("{queue}{i}")).collect();
                let puts = keys.iter().map(|k| TxnOp::put(k.as_str(), value, None));
                c.txn(Txn::new().and_then(puts.collect::<Vec<_>>())).await?;
                let dels = keys.iter().map(|k| TxnOp::delete(k.as_str(), None));
                c.txn(Txn::new().and_then(dels.collect::<Vec<_>>())).await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    Ok(())
}

/// Uncontended acquire+release with no other entry, then behind `n` entries held by another
/// Limiter (capacity n + 1, so the measured acquire is still granted at once).
#[derive(Debug, Clone, Default)]
pub struct Queued {
    pub n: usize,
    pub empty: Samples,
    pub behind: Samples,
}

pub async fn queued(url: &str, n: usize, samples: usize) -> anyhow::Result<Queued> {
    let name = "queued";
    let capacity = u32::try_from(n + 1)?;
    let (measured, sem) = client(url, "queued-measured", name, capacity).await?;
    let (others, other_sem) = client(url, "queued-holders", name, capacity).await?;
    // Both Limiters set up whatever they keep per semaphore (etcd: a watch, which also sees
    // the measured Limiter's writes) before either measurement: only the queue differs.
    pairs(&other_sem, WARMUP).await?;
    pairs(&sem, WARMUP).await?;
    let empty = pairs(&sem, samples).await?;
    let mut held = tokio::task::JoinSet::new();
    for _ in 0..n {
        let s = other_sem.clone();
        held.spawn(async move { s.acquire().await });
    }
    let mut permits = Vec::with_capacity(n);
    while let Some(p) = held.join_next().await {
        permits.push(p??);
    }
    let behind = pairs(&sem, samples).await?;
    for p in permits {
        p.release().await?;
    }
    others.close().await?;
    measured.close().await?;
    Ok(Queued { n, empty, behind })
}
