//! Row 4b's memory per idle key (issue 28): one Limiter on etcd in this process checks `keys`
//! fresh keys (row 4b's quota, so each is admitted, written and idle 10 ms later), and the
//! process's RSS growth and the counting allocator's live heap are read per key right after
//! the last answer and again once every key has long been idle, beside
//! `RateLimit::cached_keys()` at both times (the cache's bound: idle cells are swept as new
//! keys come in, not by a clock).

use crate::alloc;
use crate::stores::{Servers, Store};
use anyhow::{ensure, Context as _};
use clusterlimit::Quota;
use futures::StreamExt as _;
use std::time::{Duration, Instant};

/// Checks in flight at once: the loop is closed, at the store's speed.
const IN_FLIGHT: usize = 256;
/// Where the limit `idle` of the space `idle` keeps its key states in etcd.
const STORED_PREFIX: &str = "idle/rk/idle/";

/// The readings at one instant.
#[derive(Debug, Clone, Copy, Default)]
pub struct Reading {
    pub rss_bytes_per_key: f64,
    pub heap_bytes_per_key: f64,
    pub cached_keys: usize,
    /// The run's key states still in etcd (the writer deletes each once it is worth nothing).
    pub stored: i64,
}

/// What the measurement saw.
#[derive(Debug, Clone, Default)]
pub struct IdleRow {
    pub keys: usize,
    pub took: Duration,
    pub right_after: Reading,
    pub idle_for: Duration,
    pub after_idle: Reading,
}

/// This process's resident set, bytes (`VmRSS` of /proc/self/status).
fn rss_bytes() -> anyhow::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status").context("read /proc/self/status")?;
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .context("no VmRSS in /proc/self/status")?;
    Ok(kb * 1024)
}

pub async fn run(servers: &Servers, keys: usize, idle_for: Duration) -> anyhow::Result<IdleRow> {
    let url = servers.url(Store::Etcd, "idle");
    let limiter = crate::stores::limiter(&url, "rate-idle").await?;
    let rl = limiter
        .rate_limit("idle", Quota::per_second(100).burst(10))
        .await
        .with_context(|| format!("open the idle-keys limit on {url}"))?;
    let (rss0, heap0) = (rss_bytes()?, alloc::settled_live_bytes().await);
    let tracking = alloc::track();
    let started = Instant::now();
    let admitted = futures::stream::iter(0..keys)
        .map(|i| {
            let rl = rl.clone();
            async move {
                let key = format!("idle-{i}");
                let d = tokio::time::timeout(Duration::from_secs(10), rl.check(&key))
                    .await
                    .context("a check took over 10 s")?
                    .context("check")?;
                anyhow::Ok(d.allowed)
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect::<Vec<_>>()
        .await;
    let took = started.elapsed();
    let admitted = admitted.into_iter().collect::<anyhow::Result<Vec<_>>>()?;
    ensure!(
        admitted.iter().all(|&a| a),
        "a first check of a fresh key was denied"
    );
    let base = (rss0, heap0, keys);
    let endpoints = servers.etcd.endpoints();
    let right_after = read(&rl, base, &endpoints).await?;
    tokio::time::sleep(idle_for).await;
    let after_idle = read(&rl, base, &endpoints).await?;
    drop(tracking);
    limiter
        .close()
        .await
        .context("close the idle-keys Limiter")?;
    Ok(IdleRow {
        keys,
        took,
        right_after,
        idle_for,
        after_idle,
    })
}

/// The readings now, per key, over `(rss, heap)` before the `keys` checks; the store's count
/// last (its client's allocations come after this reading's).
async fn read(
    rl: &clusterlimit::RateLimit,
    (rss0, heap0, keys): (u64, isize, usize),
    endpoints: &[String],
) -> anyhow::Result<Reading> {
    let heap = alloc::settled_live_bytes().await - heap0;
    let rss = rss_bytes()?.saturating_sub(rss0);
    let cached_keys = rl.cached_keys();
    let per_key = |bytes: f64| bytes / keys.max(1) as f64;
    Ok(Reading {
        rss_bytes_per_key: per_key(rss as f64),
        heap_bytes_per_key: per_key(heap as f64),
        cached_keys,
        stored: crate::support::count_keys(endpoints, STORED_PREFIX).await,
    })
}

impl IdleRow {
    /// Its few lines under row 4b's table.
    pub fn markdown(&self) -> String {
        let line = |when: &str, r: &Reading| {
            format!(
                "| {when} | {:.0} B | {:.0} B | {} | {} |\n",
                r.rss_bytes_per_key, r.heap_bytes_per_key, r.cached_keys, r.stored
            )
        };
        format!(
            "\nMemory per idle key: one Limiter on etcd in the bench's process checked {} fresh \
             keys ({:.2} s, {IN_FLIGHT} in flight; each admitted, written and idle 10 ms later). \
             RSS growth (`VmRSS`) and live heap (the counting allocator) over the keys, and the \
             Limiter's cached key states (`cached_keys()`: idle ones are swept as new keys come \
             in, not by a clock), and the key states still in etcd:\n\n\
             | when | RSS / key | heap / key | cached keys | in etcd |\n|---|---|---|---|---|\n{}{}",
            self.keys,
            self.took.as_secs_f64(),
            line("right after the last answer", &self.right_after),
            line(
                &format!("{:.0} s later, every key idle", self.idle_for.as_secs_f64()),
                &self.after_idle
            ),
        )
    }
}
