//! Store-neutral helpers of the fault suites: bounded polling, and a holder with a waiter.

use clusterlimit::{Error, Limiter, Permit, Semaphore};
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// How long [`retry_call`] keeps retrying a failing store call (e.g. during an election).
const CALL_RETRY_FOR: Duration = Duration::from_secs(15);
/// Attempt cap of [`retry_call`], so loops stay bounded even under paused tokio time.
const CALL_RETRY_MAX_ATTEMPTS: usize = 100;

/// Runs a raw store call `op` until it succeeds, retrying any error (elections, a dead member,
/// a reset connection) every 100 ms for at most 15 s and 100 attempts; then panics with
/// `what` and the last error.
pub async fn retry_call<T, E, F, Fut>(what: &str, mut op: F) -> T
where
    E: std::fmt::Display,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let deadline = Instant::now() + CALL_RETRY_FOR;
    let mut attempts = 0;
    loop {
        attempts += 1;
        match op().await {
            Ok(v) => return v,
            Err(e) if attempts >= CALL_RETRY_MAX_ATTEMPTS || Instant::now() >= deadline => {
                panic!("{what} still failing after {attempts} attempts: {e}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Polls `cond` every 20 ms for at most `limit`; panics with `what` if it never holds.
pub async fn eventually<F, Fut>(what: &str, limit: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while !cond().await {
        assert!(
            Instant::now() < deadline,
            "{what}: not reached within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `a` takes the only permit of semaphore "s" and `b` queues for it. Returns a's semaphore,
/// the permit and b's wait.
pub async fn hold_and_queue(
    a: &Limiter,
    b: &Limiter,
) -> (Semaphore, Permit, JoinHandle<Result<Permit, Error>>) {
    let sa = a.semaphore("s", 1).await.unwrap();
    let sb = b.semaphore("s", 1).await.unwrap();
    let held = sa.acquire().await.unwrap();
    let waiter = tokio::spawn(async move { sb.acquire().await });
    eventually("waiter queued", Duration::from_secs(5), || async {
        sa.status().await.map(|s| s.waiting == 1).unwrap_or(false)
    })
    .await;
    (sa, held, waiter)
}

/// A wait started by [`queue_waiters`]: its outcome and its Limiter's counters from before it.
pub type CountedWait = JoinHandle<(Result<Permit, Error>, clusterlimit::RequestStats)>;

/// `n` more Limiters on `url` (owners `w0`, `w1`, …), each waiting for one permit of `held`'s
/// semaphore, which must be full. Returns once all `n` are queued, in that order.
pub async fn queue_waiters(
    url: &str,
    held: &Semaphore,
    n: usize,
) -> (Vec<Limiter>, Vec<CountedWait>) {
    let mut limiters = Vec::new();
    let mut waits = Vec::new();
    for i in 0..n {
        let l = Limiter::builder(url)
            .owner(format!("w{i}"))
            .connect()
            .await
            .unwrap();
        let s = l.open_semaphore(held.name()).await.unwrap();
        let before = l.stats();
        waits.push(tokio::spawn(async move { (s.acquire().await, before) }));
        limiters.push(l);
        // One at a time, so the queue order is the order of `waits`.
        eventually("waiter queued", Duration::from_secs(5), || async {
            held.status()
                .await
                .map(|s| s.waiting == i + 1)
                .unwrap_or(false)
        })
        .await;
    }
    (limiters, waits)
}
