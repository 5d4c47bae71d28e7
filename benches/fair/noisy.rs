//! Row 1, the noisy tenant: flow A keeps `noisy_a` acquires queued (looping tasks spread over 4
//! Limiters, each releasing at once), flow B sends one request at a time from a fifth Limiter.
//! B's wait on a fair semaphore, on a plain (FIFO) one under the same load, and with B alone.

use crate::plan::Plan;
use crate::stats::Samples;
use clusterlimit::fair::Classes;
use clusterlimit::{AcquireOptions, Limiter, Semaphore};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const CAPACITY: u32 = 8;
const LIMITERS: usize = 4;
/// B's requests measured on the FIFO semaphore (each waits behind A's whole queue).
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
    let alone = b_waits(url, "noisy-alone", true, plan.noisy_b).await?;
    let (fair, a_per_sec) = under_load(url, "noisy-fair", true, plan, plan.noisy_b).await?;
    // Behind A's whole queue each time: a few requests tell it.
    let (fifo, _) = under_load(url, "noisy-fifo", false, plan, FIFO_B).await?;
    let handoff = Duration::from_secs_f64(f64::from(CAPACITY) / a_per_sec.max(1e-9));
    Ok(Noisy {
        alone,
        fair,
        fifo,
        a_per_sec,
        handoff,
    })
}

/// B's waits with flow A's load running; and A's grants per second meanwhile.
async fn under_load(
    url: &str,
    name: &str,
    fair: bool,
    plan: &Plan,
    b_requests: usize,
) -> anyhow::Result<(Samples, f64)> {
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
    let waits = b_waits(url, name, fair, b_requests).await;
    let per_sec = (grants.load(SeqCst) - before) as f64 / start.elapsed().as_secs_f64();
    stop.store(true, SeqCst);
    for l in &limiters {
        let _ = l.close().await;
    }
    for t in tasks {
        t.abort();
    }
    Ok((waits?, per_sec))
}

/// `n` requests of flow B, one at a time: the time each took to be granted.
async fn b_waits(url: &str, name: &str, fair: bool, n: usize) -> anyhow::Result<Samples> {
    let limiter = Limiter::builder(url).owner("b").connect().await?;
    let sem = open(&limiter, name, fair).await?;
    let mut waits = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let p = sem
            .acquire_with(opts(fair, "tenant-b").timeout(Duration::from_secs(60)))
            .await?;
        waits.push(t.elapsed());
        p.release().await?;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    limiter.close().await?;
    Ok(Samples::new(waits))
}
