//! One closed-loop run on one key: Limiters of this process (the processes; one tokio
//! runtime), each with its callers checking the key back to back; a denied caller sleeps its
//! `retry_after`, at most 5 ms. The key's bucket is emptied first (one `check_n(burst)`), so
//! the run measures the steady rate, not the burst.

use crate::bins::{Bins, Exactness};
use crate::stats::Samples;
use anyhow::{ensure, Context as _};
use clusterlimit::testing::rate_history::unix_ns;
use clusterlimit::{Limiter, Quota, RateLimit, RequestStats};
use std::time::{Duration, Instant};

pub const KEY: &str = "hot";
/// Bound on one call: a healthy one takes milliseconds.
const CALL_BOUND: Duration = Duration::from_secs(10);
/// A caller's calls are bounded in count as well as in time.
const MAX_CALLS: u64 = 50_000_000;
/// About this many latency samples per run: every admitted check's latency is too many at
/// 1,000,000/s, so each caller keeps every `stride`-th (the stride from the quota).
const SAMPLES: u64 = 100_000;

/// One run's shape.
#[derive(Debug, Clone)]
pub struct Setup {
    pub url: String,
    /// The rate limit's name: a new one per run, so its key starts full.
    pub name: String,
    pub quota: u64,
    pub leases: bool,
    /// The approximate mode (`approximate_hot_keys`) instead of leases (row 4).
    pub approximate: bool,
    /// Callers on each Limiter.
    pub callers: Vec<usize>,
    /// The last this many Limiters start calling at half the run (row 4's join shape).
    pub joining: usize,
    pub run: Duration,
}

/// What one run measured.
#[derive(Debug)]
pub struct Outcome {
    pub secs: f64,
    /// Admitted checks per Limiter.
    pub admitted: Vec<u64>,
    /// Store requests and lease counts per Limiter during the run.
    pub used: Vec<RequestStats>,
    /// Latency of (a sample of) the admitted checks.
    pub latency: Samples,
    pub exactness: Exactness,
}

impl Outcome {
    pub fn total(&self) -> u64 {
        self.admitted.iter().sum()
    }

    pub fn per_sec(&self) -> f64 {
        self.total() as f64 / self.secs
    }

    pub fn all(&self) -> RequestStats {
        self.used.iter().copied().sum()
    }

    /// The most writes (put + txn) a second one Limiter sent.
    pub fn worst_writes_per_sec(&self) -> f64 {
        let most = self.used.iter().map(|u| u.put + u.txn).max().unwrap_or(0);
        most as f64 / self.secs
    }

    /// Store requests per admitted check.
    pub fn requests_per_admitted(&self) -> f64 {
        self.all().total() as f64 / self.total().max(1) as f64
    }
}

struct Caller {
    admitted: u64,
    latency: Vec<Duration>,
    bins: Bins,
}

pub async fn run(setup: &Setup) -> anyhow::Result<Outcome> {
    let quota = Quota::per_second(setup.quota);
    let mut limiters = Vec::new();
    let mut limits = Vec::new();
    for i in 0..setup.callers.len() {
        let l = Limiter::builder(&setup.url)
            .owner(format!("leases-bench-{i}"))
            .hot_key_leases(setup.leases)
            .approximate_hot_keys(setup.approximate)
            .connect()
            .await
            .with_context(|| format!("connect Limiter {i} to {}", setup.url))?;
        limits.push(
            l.rate_limit(&setup.name, quota)
                .await
                .context("open the rate limit")?,
        );
        limiters.push(l);
    }
    let drained = drain(&setup.url, &setup.name, setup.quota).await?;
    let before: Vec<RequestStats> = limiters.iter().map(Limiter::stats).collect();
    let stride = (setup.quota * setup.run.as_secs().max(1) / SAMPLES).max(1);
    let (started, base) = (Instant::now(), unix_ns());
    let len_ns = u64::try_from(setup.run.as_nanos()).unwrap_or(u64::MAX);
    let mut tasks = Vec::new();
    let late = setup.callers.len().saturating_sub(setup.joining);
    for (i, (rl, &n)) in limits.iter().zip(&setup.callers).enumerate() {
        let mut mine = Vec::new();
        let from = started
            + if i >= late {
                setup.run / 2
            } else {
                Duration::ZERO
            };
        for _ in 0..n {
            let bins = Bins::new(base, len_ns);
            let when = (from, started + setup.run);
            mine.push(tokio::spawn(call(rl.clone(), when, bins, stride)));
        }
        tasks.push(mine);
    }
    let mut admitted = Vec::new();
    let (mut latency, mut bins) = (Vec::new(), Bins::new(base, len_ns));
    for mine in tasks {
        let mut n = 0;
        for t in mine {
            let c = t.await.context("a caller task ended abnormally")??;
            n += c.admitted;
            latency.extend(c.latency);
            bins.merge(&c.bins);
        }
        admitted.push(n);
    }
    let secs = started.elapsed().as_secs_f64();
    let used = limiters
        .iter()
        .zip(&before)
        .map(|(l, b)| l.stats().since(b))
        .collect();
    for l in &limiters {
        l.close().await.context("close a Limiter")?;
    }
    Ok(Outcome {
        secs,
        admitted,
        used,
        latency: Samples::new(latency),
        exactness: bins.exactness(&quota, drained),
    })
}

/// Empties the key's bucket (burst = quota) from a Limiter of its own with leases off: its
/// Unix ns before the check. (With leases on, a first check this large is its own demand: the
/// write that carries it also asks a lease, which is taken first, and the check can be
/// denied.)
pub async fn drain(url: &str, name: &str, burst: u64) -> anyhow::Result<u64> {
    let l = Limiter::builder(url)
        .owner("leases-bench-drain")
        .hot_key_leases(false)
        .connect()
        .await
        .with_context(|| format!("connect the draining Limiter to {url}"))?;
    let rl = l
        .open_rate_limit(name)
        .await
        .context("open the rate limit")?;
    let at = unix_ns();
    let d = rl
        .check_n(KEY, burst)
        .await
        .context("empty the key's bucket")?;
    ensure!(
        d.allowed,
        "the first check of a new key took less than its burst: {d:?}"
    );
    l.close().await.context("close the draining Limiter")?;
    Ok(at)
}

async fn call(
    rl: RateLimit,
    (from, stop): (Instant, Instant),
    mut bins: Bins,
    stride: u64,
) -> anyhow::Result<Caller> {
    tokio::time::sleep_until(from.into()).await;
    let (mut admitted, mut latency, mut calls) = (0u64, Vec::new(), 0u64);
    while Instant::now() < stop && calls < MAX_CALLS {
        calls += 1;
        let (began, start) = (Instant::now(), unix_ns());
        let d = tokio::time::timeout(CALL_BOUND, rl.check(KEY))
            .await
            .context("a check took over 10 s")?
            .context("check")?;
        let took = began.elapsed();
        if d.allowed {
            admitted += 1;
            bins.record(
                start,
                start + u64::try_from(took.as_nanos()).unwrap_or(u64::MAX),
            );
            if admitted % stride == 0 {
                latency.push(took);
            }
            // A check answered from a lease may never wait: let the other callers run, as
            // a caller doing its admitted work would.
            tokio::task::yield_now().await;
        } else {
            let pause = d.retry_after.unwrap_or(Duration::from_millis(1));
            tokio::time::sleep(pause.min(Duration::from_millis(5))).await;
        }
    }
    Ok(Caller {
        admitted,
        latency,
        bins,
    })
}
