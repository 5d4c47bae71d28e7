//! Row 4: many distinct keys, each checked once, at an even rate (open loop: check `i` is sent
//! at `i / rate` whatever the earlier ones are doing, at most `MAX_IN_FLIGHT` at once), on one
//! Limiter. Then the store's key states are counted until the sweepers have removed them, and
//! the client's heap per cached key state is read from the counting allocator.

use crate::alloc;
use crate::stats::Samples;
use crate::stores::{Servers, Store};
use anyhow::{ensure, Context as _};
use clusterlimit::Quota;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Checks in flight at most; a store slower than the rate makes the loop fall behind (the
/// achieved rate says so) instead of piling up tasks.
const MAX_IN_FLIGHT: usize = 256;
/// How long the store's leftovers are watched after the reset time.
const WATCH_FOR: Duration = Duration::from_secs(30);
const LIMIT: &str = "many";
const SPACE: &str = "many";

/// One store's many-keys run.
#[derive(Debug, Clone)]
pub struct ManyRow {
    pub store: Store,
    pub keys: usize,
    pub rate: u64,
    pub decisions_per_s: f64,
    pub latency: Samples,
    /// Key states in the store right after the last answer, and `left_after` later (the reset
    /// time, 1 period, plus the sweeper's interval).
    pub stored_at_end: usize,
    pub left: usize,
    pub left_after: Duration,
    /// When the store held none any more (after the last answer), if within the watch.
    pub gone_after: Option<Duration>,
    pub cached_keys: usize,
    pub bytes_per_cached_key: f64,
}

/// The quota: 100/s with a burst of 10, so one check's state is back to full (worth nothing,
/// removable) 10 ms later.
fn quota() -> Quota {
    Quota::per_second(100).burst(10)
}

/// Key states of the limit held by `store` now, read straight from the store.
async fn stored(servers: &Servers, store: Store) -> usize {
    match store {
        Store::Memory => clusterlimit::backend::memory::rate_key_count(SPACE),
        Store::Etcd => {
            let prefix = format!("{SPACE}/rk/{LIMIT}/");
            usize::try_from(crate::support::count_keys(&servers.etcd.endpoints(), &prefix).await)
                .unwrap_or(0)
        }
        Store::Zk => {
            let path = format!("/{SPACE}/r/{LIMIT}");
            crate::support::count_children(&servers.zk.connect_string(), &path).await
        }
    }
}

/// The run's key states still stored. memory:// sweeps on a later call only (it has no clock
/// of its own), so there a check of a key of its own comes first, and the one or two such
/// keys of the last second are not counted.
async fn leftovers(
    servers: &Servers,
    store: Store,
    rl: &clusterlimit::RateLimit,
    polls: &mut usize,
) -> anyhow::Result<usize> {
    *polls += 1;
    if store != Store::Memory {
        return Ok(stored(servers, store).await);
    }
    rl.check(&format!("trigger-{polls}"))
        .await
        .context("trigger check")?;
    Ok(stored(servers, store).await.saturating_sub(2))
}

pub async fn run(
    servers: &Servers,
    store: Store,
    keys: usize,
    rate: u64,
) -> anyhow::Result<ManyRow> {
    let url = servers.url(store, SPACE);
    let limiter = crate::stores::limiter(&url, "rate-many").await?;
    let rl = limiter
        .rate_limit(LIMIT, quota())
        .await
        .with_context(|| format!("open the many-keys limit on {url}"))?;
    let base = alloc::settled_live_bytes().await;
    let tracking = alloc::track();
    let gate = Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT));
    let mut tasks = tokio::task::JoinSet::new();
    let started = Instant::now();
    for i in 0..keys {
        let at = started + Duration::from_secs_f64(i as f64 / rate as f64);
        tokio::time::sleep_until(at.into()).await;
        let permit = gate
            .clone()
            .acquire_owned()
            .await
            .context("the in-flight gate")?;
        let rl = rl.clone();
        tasks.spawn(async move {
            let t = Instant::now();
            let d = tokio::time::timeout(Duration::from_secs(10), rl.check(&format!("key-{i}")))
                .await
                .context("a check took over 10 s")?
                .context("check")?;
            drop(permit);
            anyhow::ensure!(d.allowed, "a first check of a fresh key was denied: {d:?}");
            anyhow::Ok(t.elapsed())
        });
    }
    let mut latencies = Vec::with_capacity(keys);
    while let Some(done) = tasks.join_next().await {
        latencies.push(done.context("a check task panicked")??);
    }
    let took = started.elapsed();
    let ended = Instant::now();
    let stored_at_end = stored(servers, store).await;
    let cached_keys = rl.cached_keys();
    let live = alloc::settled_live_bytes().await - base;
    drop(tracking);
    // The reset time (10 ms) is long past at the first poll; `left` is read one period and the
    // sweepers' interval later, `gone_after` at the first poll that finds none.
    let left_after = Duration::from_secs(3);
    let (mut polls, mut left, mut gone_after) = (0, None, None);
    while (left.is_none() || gone_after.is_none()) && ended.elapsed() < WATCH_FOR && polls < 200 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let n = leftovers(servers, store, &rl, &mut polls).await?;
        if gone_after.is_none() && n == 0 {
            gone_after = Some(ended.elapsed());
        }
        if left.is_none() && ended.elapsed() >= left_after {
            left = Some(n);
        }
    }
    let left = left.unwrap_or(stored_at_end);
    ensure!(
        latencies.len() == keys,
        "{} of {keys} checks answered",
        latencies.len()
    );
    limiter
        .close()
        .await
        .context("close the many-keys Limiter")?;
    Ok(ManyRow {
        store,
        keys,
        rate,
        decisions_per_s: keys as f64 / took.as_secs_f64(),
        latency: Samples::new(latencies),
        stored_at_end,
        left,
        left_after,
        gone_after,
        cached_keys,
        bytes_per_cached_key: if cached_keys > 0 {
            live as f64 / cached_keys as f64
        } else {
            0.0
        },
    })
}
