//! Row 1, the noisy tenant: flow A keeps `noisy_a` acquires queued (looping tasks spread over 4
//! Limiters, each releasing at once), flow B sends one request at a time from a fifth Limiter.
//! B's wait on a fair semaphore, on a plain (FIFO) one under the same load, and with B alone;
//! B runs on a runtime of its own (`apart.rs`), as another process would.

use crate::plan::Plan;
use crate::stats::Samples;
use clusterlimit::fair::Classes;
use clusterlimit::{AcquireOptions, Limiter, Semaphore};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const CAPACITY: u32 = 8;
const LIMITERS: usize = 4;
/// B's requests measured on the FIFO semaphore (each waits behind A's whole queue); half as
/// many in the quick run.
const FIFO_B: usize = 10;

/// What row 1 measured on one store.
#[derive(Debug, Default)]
pub struct Noisy {
    pub alone: Samples,
    pub fair: Samples,
    pub fifo: Samples,
    /// Flow A's grants per second during the fair run, and the mean time one permit takes
    /// to pass from a holder to the next (capacity / throughput).
    pub a_per_sec: f64,
    pub handoff: Duration,
    /// Flow A's grants while each of B's fair requests waited (p50, p99): how many handoffs B
    /// waited, whatever the machine's speed.
    pub a_during_b: (u64, u64),
}

async fn open(limiter: &Limiter, name: &str, fair: bool) -> anyhow::Result<Semaphore> {
    Ok(if fair {
        limiter
            .fair_semaphore(name, CAPACITY, Classes::single())
            .await?
    } else {
        limiter.semaphore(name, CAPACITY).await?
    })
}

fn opts(fair: bool, flow: &str) -> AcquireOptions {
    if fair {
        AcquireOptions::new().flow(flow)
    } else {
        AcquireOptions::new()
    }
}

pub async fn measure(url: &str, plan: &Plan) -> anyhow::Result<Noisy> {
    let (alone, _) = b_waits(url, "noisy-alone", true, plan.noisy_b, None).await?;
    let (fair, a_per_sec, a_during_b) =
        under_load(url, "noisy-fair", true, plan, plan.noisy_b).await?;
    // Behind A's whole queue each time: a few requests tell it.
    let fifo_b = if plan.quick { FIFO_B / 2 } else { FIFO_B };
    let (fifo, _, _) = under_load(url, "noisy-fifo", false, plan, fifo_b).await?;
    let handoff = Duration::from_secs_f64(f64::from(CAPACITY) / a_per_sec.max(1e-9));
    Ok(Noisy {
        alone,
        fair,
        fifo,
        a_per_sec,
        handoff,
        a_during_b,
    })
}

/// B's waits with flow A's load running; A's grants per second meanwhile, and A's grants
/// during B's waits (p50, p99).
async fn under_load(
    url: &str,
    name: &str,
    fair: bool,
    plan: &Plan,
    b_requests: usize,
) -> anyhow::Result<(Samples, f64, (u64, u64))> {
    let stop = Arc::new(AtomicBool::new(false));
    let grants = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    let mut limiters = Vec::new();
    for l in 0..LIMITERS {
        let limiter = Limiter::builder(url)
            .owner(format!("a-{l}"))
            .connect()
            .await?;
        let sem = open(&limiter, name, fair).await?;
        for _ in 0..plan.noisy_a / LIMITERS {
            let (sem, stop, grants) = (sem.clone(), stop.clone(), grants.clone());
            tasks.push(tokio::spawn(async move {
                while !stop.load(SeqCst) {
                    match sem
                        .acquire_with(opts(fair, "tenant-a").timeout(Duration::from_secs(30)))
                        .await
                    {
                        Ok(p) => {
                            grants.fetch_add(1, SeqCst);
                            let _ = p.release().await;
                        }
                        Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                    }
                }
            }));
        }
        limiters.push(limiter);
    }
    // Let A's queue fill before B's first request.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (start, before) = (Instant::now(), grants.load(SeqCst));
    let waits = b_waits(url, name, fair, b_requests, Some(grants.clone())).await;
    let per_sec = (grants.load(SeqCst) - before) as f64 / start.elapsed().as_secs_f64();
    stop.store(true, SeqCst);
    for l in &limiters {
        let _ = l.close().await;
    }
    for t in tasks {
        t.abort();
    }
    let (waits, during) = waits?;
    Ok((waits, per_sec, during))
}

/// `n` requests of flow B, one at a time, from a Limiter on a runtime of its own: the time
/// each took to be granted, and the p50 and p99 of `others`' count's growth during each.
async fn b_waits(
    url: &str,
    name: &str,
    fair: bool,
    n: usize,
    others: Option<Arc<AtomicU64>>,
) -> anyhow::Result<(Samples, (u64, u64))> {
    let (url, name) = (url.to_string(), name.to_string());
    crate::apart::apart(move || b_loop(url, name, fair, n, others)).await
}

async fn b_loop(
    url: String,
    name: String,
    fair: bool,
    n: usize,
    others: Option<Arc<AtomicU64>>,
) -> anyhow::Result<(Samples, (u64, u64))> {
    let (url, name) = (url.as_str(), name.as_str());
    let count = || others.as_ref().map_or(0, |o| o.load(SeqCst));
    let limiter = Limiter::builder(url).owner("b").connect().await?;
    let sem = open(&limiter, name, fair).await?;
    let (mut waits, mut during) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        let (t, before) = (Instant::now(), count());
        let p = sem
            .acquire_with(opts(fair, "tenant-b").timeout(Duration::from_secs(60)))
            .await?;
        waits.push(t.elapsed());
        during.push(count() - before);
        p.release().await?;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    limiter.close().await?;
    during.sort_unstable();
    let rank = |q: f64| during[((q * n as f64).ceil() as usize).clamp(1, n.max(1)) - 1];
    let quantiles = if during.is_empty() {
        (0, 0)
    } else {
        (rank(0.5), rank(0.99))
    };
    Ok((Samples::new(waits), quantiles))
}
