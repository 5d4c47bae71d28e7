//! One clusterlimit hot-key / uncontended worker process (see `protocol`): its own runtime,
//! one Limiter, `callers` tasks checking one key.

use super::protocol::{Mode, WorkerReport, WorkerSetup};
use anyhow::{bail, Context as _};
use clusterlimit::{Algorithm, Limiter, Quota, RateLimit};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Latencies kept by a hot worker, all callers together (the protocol's bound).
const RESERVOIR: usize = 20_000;
/// One check's bound: a healthy one takes milliseconds; an error is counted, not fatal.
const CHECK_BOUND: Duration = Duration::from_secs(10);

/// Unix µs now: the clock every worker of every language shares.
pub fn unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// The quota a setup describes.
pub fn quota(setup: &WorkerSetup) -> anyhow::Result<Quota> {
    let algorithm = match setup.algorithm.as_str() {
        "gcra" => Algorithm::Gcra,
        "fixed-window" => Algorithm::FixedWindow,
        "sliding-window" => Algorithm::SlidingWindow,
        other => bail!("unknown algorithm {other:?}"),
    };
    let q = Quota::new(setup.limit, Duration::from_millis(setup.period_ms)).algorithm(algorithm);
    Ok(match algorithm {
        Algorithm::Gcra => q.burst(setup.burst),
        _ => q,
    })
}

/// Runs the worker `setup` describes with clusterlimit's library.
pub fn run(setup: &WorkerSetup) -> anyhow::Result<WorkerReport> {
    // One worker thread: 8 of these processes share 2 cores with the store.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .context("build the worker's runtime")?;
    rt.block_on(async {
        let limiter = Limiter::builder(&setup.target)
            .owner(format!("rate-worker-{}", std::process::id()))
            .connect()
            .await
            .with_context(|| format!("connect to {}", setup.target))?;
        let rl = limiter
            .rate_limit(&setup.limit_name, quota(setup)?)
            .await
            .with_context(|| format!("open rate limit {}", setup.limit_name))?;
        let report = match setup.mode {
            Mode::Hot | Mode::Fresh => hot(setup, &limiter, &rl).await,
            Mode::Uncontended => uncontended(setup, &limiter, &rl).await,
        };
        let _ = limiter.close().await;
        report
    })
}

/// What one caller saw.
#[derive(Default)]
struct Caller {
    decisions: u64,
    errors: u64,
    seen: u64,
    latencies_us: Vec<u64>,
    admitted_at_us: Vec<[u64; 2]>,
}

impl Caller {
    /// Keeps a uniform sample of at most `cap` of this caller's latencies (reservoir).
    fn sample(&mut self, cap: usize, latency: u64) {
        self.seen += 1;
        if self.latencies_us.len() < cap {
            self.latencies_us.push(latency);
        } else {
            let j = fastrand::u64(0..self.seen);
            if let Some(slot) = usize::try_from(j)
                .ok()
                .and_then(|j| self.latencies_us.get_mut(j))
            {
                *slot = latency;
            }
        }
    }
}

async fn sleep_until_unix_us(at: u64) {
    let now = unix_us();
    if at > now {
        tokio::time::sleep(Duration::from_micros(at - now)).await;
    }
}

async fn hot(setup: &WorkerSetup, l: &Limiter, rl: &RateLimit) -> anyhow::Result<WorkerReport> {
    sleep_until_unix_us(setup.start_at_unix_us).await;
    let end_at = setup.start_at_unix_us + setup.duration_ms * 1000;
    let cap = RESERVOIR / setup.callers.max(1) as usize;
    let (before, cpu0, t0) = (l.stats(), self_cpu_ns(), Instant::now());
    let key: Arc<str> = Arc::from(setup.key.as_str());
    let mut tasks = tokio::task::JoinSet::new();
    let wait_retry_after = setup.wait_retry_after;
    // Fresh mode: each check is of a new key, `KEY-PID-CALLER-N`.
    let fresh = setup.mode == Mode::Fresh;
    let pid = std::process::id();
    for caller in 0..setup.callers {
        let (rl, key) = (rl.clone(), key.clone());
        tasks.spawn(async move {
            let mut c = Caller::default();
            let mut n = 0u64;
            while unix_us() < end_at {
                let this: std::borrow::Cow<'_, str> = if fresh {
                    n += 1;
                    format!("{key}-{pid}-{caller}-{n}").into()
                } else {
                    key.as_ref().into()
                };
                let sent = unix_us();
                match tokio::time::timeout(CHECK_BOUND, rl.check(&this)).await {
                    Ok(Ok(d)) => {
                        let answered = unix_us();
                        c.decisions += 1;
                        c.sample(cap, answered - sent);
                        if d.allowed {
                            c.admitted_at_us.push([sent, answered]);
                        } else if let Some(wait) = d.retry_after.filter(|_| wait_retry_after) {
                            // Not past the end of the run.
                            let left = end_at.saturating_sub(unix_us());
                            tokio::time::sleep(wait.min(Duration::from_micros(left))).await;
                        }
                    }
                    _ => {
                        c.errors += 1;
                        // No spin on a failing store.
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
            c
        });
    }
    let mut r = WorkerReport::default();
    while let Some(done) = tasks.join_next().await {
        let c = done.context("a caller panicked")?;
        r.decisions += c.decisions;
        r.errors += c.errors;
        r.latencies_us.extend(c.latencies_us);
        r.admitted_at_us.extend(c.admitted_at_us);
    }
    finish(r, setup, l, before, cpu0, t0)
}

async fn uncontended(
    setup: &WorkerSetup,
    l: &Limiter,
    rl: &RateLimit,
) -> anyhow::Result<WorkerReport> {
    sleep_until_unix_us(setup.start_at_unix_us).await;
    let (before, cpu0, t0) = (l.stats(), self_cpu_ns(), Instant::now());
    let mut r = WorkerReport::default();
    for _ in 0..setup.count {
        let sent = unix_us();
        let d = tokio::time::timeout(CHECK_BOUND, rl.check(&setup.key))
            .await
            .context("a check took over 10 s")?
            .context("check")?;
        let answered = unix_us();
        r.decisions += 1;
        r.latencies_us.push(answered - sent);
        if d.allowed {
            r.admitted_at_us.push([sent, answered]);
        }
    }
    finish(r, setup, l, before, cpu0, t0)
}

fn finish(
    mut r: WorkerReport,
    setup: &WorkerSetup,
    l: &Limiter,
    before: clusterlimit::RequestStats,
    cpu0: u64,
    t0: Instant,
) -> anyhow::Result<WorkerReport> {
    let used = l.stats().since(&before);
    // For people reading a run's log: how the store requests split (the report has the total).
    eprintln!(
        "rate worker {}: {} decisions, {} admitted; store requests: {} txn, {} range, {} put, {} \
         batches; {} answered locally",
        std::process::id(),
        r.decisions,
        r.admitted_at_us.len(),
        used.txn,
        used.range,
        used.put,
        used.rate_batches,
        used.rate_local_answers
    );
    r.algorithm = setup.algorithm.clone();
    r.admitted = r.admitted_at_us.len() as u64;
    r.elapsed_s = t0.elapsed().as_secs_f64();
    r.cpu_s = self_cpu_ns().saturating_sub(cpu0) as f64 / 1e9;
    r.store_requests = Some(used.total());
    r.local_denials = Some(used.rate_local_answers);
    Ok(r)
}

fn self_cpu_ns() -> u64 {
    crate::cpu::cpu_ns(&[std::process::id()]).unwrap_or(0)
}
