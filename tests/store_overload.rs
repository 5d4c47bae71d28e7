//! Offered far more acquires than the store can write, a semaphore keeps granting at what the
//! store allows, refuses the rest quickly, keeps its memory bounded and recovers at once
//! (issue 37; src/admission.rs). Before, 16,000 acquires/s from 6 Limiters granted 0% while
//! the process grew to 2.5 GB in 10 s.
//!
//! One real etcd; six Limiters share a semaphore of 32; an open-loop generator offers
//! [`OFFERED`] × the store's ceiling in acquires per second (each `acquire_timeout(20 ms)`, held 1 ms) for
//! [`OVERLOAD`]. The store's own ceiling is measured first in the same run: raw put-with-lease +
//! delete pairs per second from as many connections.

mod support;

use clusterlimit::{Error, Limiter, RequestStats, Semaphore};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::EtcdCluster;
use tokio::time::Instant;

const LIMITERS: usize = 6;
/// Offered acquires per second, as a multiple of the store's ceiling measured in the run.
const OFFERED: f64 = 4.0;
const OVERLOAD: Duration = Duration::from_secs(4);
const TIMEOUT: Duration = Duration::from_millis(20);
/// The stated bound on what the six Limiters may add to the process under any offered rate
/// (docs/semaphores.md, "Under overload"): the acquire requests in flight and their replies.
const MEMORY_BOUND_MB: f64 = 100.0;

/// Resident memory of this process, in MB.
fn rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Raw put (with a lease) + delete pairs per second on the store, from `connections` clients
/// each keeping 32 pairs going: the ceiling no semaphore on this store can beat.
async fn store_pairs_per_s(endpoints: &[String], connections: usize, for_: Duration) -> f64 {
    let done = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + for_;
    let mut tasks = Vec::new();
    for c in 0..connections {
        let mut client = support::connect(endpoints).await;
        let lease = client.lease_grant(10, None).await.expect("lease").id();
        for w in 0..32 {
            let (mut client, done) = (client.clone(), done.clone());
            tasks.push(tokio::spawn(async move {
                let key = format!("/ceiling/{c}/{w}");
                let opts = etcd_client::PutOptions::new().with_lease(lease);
                while Instant::now() < until {
                    client
                        .put(key.clone(), "x", Some(opts.clone()))
                        .await
                        .expect("put");
                    client.delete(key.clone(), None).await.expect("delete");
                    done.fetch_add(1, Relaxed);
                }
            }));
        }
    }
    for t in tasks {
        t.await.expect("ceiling task");
    }
    done.load(Relaxed) as f64 / for_.as_secs_f64()
}

/// What the offered load got.
#[derive(Default)]
struct Tally {
    granted: AtomicU64,
    timed_out: AtomicU64,
    /// The slowest answer, in µs from the call.
    slowest_us: AtomicU64,
    errors: Mutex<BTreeMap<String, u64>>,
}

async fn one_acquire(sem: Semaphore, tally: Arc<Tally>) {
    let t = Instant::now();
    let got = sem.acquire_timeout(TIMEOUT).await;
    tally
        .slowest_us
        .fetch_max(t.elapsed().as_micros() as u64, Relaxed);
    match got {
        Ok(permit) => {
            tally.granted.fetch_add(1, Relaxed);
            tokio::time::sleep(Duration::from_millis(1)).await;
            let _ = permit.release().await;
        }
        Err(Error::Timeout) => {
            tally.timed_out.fetch_add(1, Relaxed);
        }
        Err(e) => {
            let mut errors = tally.errors.lock().unwrap();
            *errors.entry(e.to_string()).or_default() += 1;
        }
    }
}

/// Offers `per_s` acquires a second, spread over the semaphores, for `for_`, sampling the
/// process's memory; returns the highest RSS seen.
async fn offer(sems: &[Semaphore], tally: &Arc<Tally>, per_s: u64, for_: Duration) -> f64 {
    let start = Instant::now();
    let tick = Duration::from_millis(1);
    let mut peak = rss_mb();
    let mut next = start;
    let mut n = 0usize;
    let mut ticks = 0u64;
    while next < start + for_ {
        ticks += 1;
        // Whole calls per tick, the remainder carried: exactly `per_s` a second.
        let per_tick = (ticks * per_s / 1000) - (ticks - 1) * per_s / 1000;
        for _ in 0..per_tick {
            let sem = sems[n % sems.len()].clone();
            tokio::spawn(one_acquire(sem, tally.clone()));
            n += 1;
        }
        if n % 2_000 < per_tick as usize {
            peak = peak.max(rss_mb());
        }
        next += tick;
        tokio::time::sleep_until(next).await;
    }
    peak.max(rss_mb())
}

/// How long one acquire + release takes now, median of `n` in a row.
async fn acquire_latency(sem: &Semaphore, n: usize) -> Duration {
    let mut took = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        let p = sem
            .acquire_timeout(Duration::from_secs(5))
            .await
            .expect("acquire");
        took.push(t.elapsed());
        p.release().await.expect("release");
    }
    took.sort();
    took[n / 2]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_store_s_speed_it_grants_refuses_fast_and_stays_small() {
    let etcd = EtcdCluster::single();
    let url = etcd.url("/overload");
    let ceiling = store_pairs_per_s(&etcd.endpoints(), LIMITERS, Duration::from_secs(2)).await;
    let mut limiters = Vec::new();
    let mut sems = Vec::new();
    for _ in 0..LIMITERS {
        let l = Limiter::connect(&url).await.expect("connect");
        sems.push(l.semaphore("hot", 32).await.expect("semaphore"));
        limiters.push(l);
    }
    let unloaded = acquire_latency(&sems[0], 21).await;
    let before = rss_mb();
    let tally = Arc::new(Tally::default());
    let offered = (ceiling * OFFERED) as u64;
    let peak = offer(&sems, &tally, offered, OVERLOAD).await;
    // Let the last calls answer (each within its timeout and overrun).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let ended = Instant::now();
    let recovered = acquire_latency(&sems[1], 5).await;
    let recovery = ended.elapsed();

    let granted = tally.granted.load(Relaxed);
    let grants_per_s = granted as f64 / OVERLOAD.as_secs_f64();
    let stats: RequestStats = limiters.iter().map(Limiter::stats).sum();
    let grown = peak - before;
    let slowest = Duration::from_micros(tally.slowest_us.load(Relaxed));
    println!(
        "store ceiling {ceiling:.0} pairs/s; offered {offered}/s for {OVERLOAD:?}: {grants_per_s:.0} grants/s ({:.2}× the ceiling), {} timed out ({} refused before the store), slowest answer {slowest:?}; memory {before:.0} MB → peak {peak:.0} MB (+{grown:.0}); acquire {unloaded:?} unloaded, {recovered:?} after, back {recovery:?} after the end; errors {:?}; store requests {stats:?}",
        grants_per_s / ceiling,
        tally.timed_out.load(Relaxed),
        stats.acquires_refused_store_busy,
        tally.errors.lock().unwrap(),
    );
    assert!(
        tally.errors.lock().unwrap().is_empty(),
        "an overloaded store is busy, not failing"
    );
    assert!(
        grown <= MEMORY_BOUND_MB,
        "grew by {grown:.0} MB under overload (bound {MEMORY_BOUND_MB} MB)"
    );
    // Far more was offered than the store can take: the excess was refused, and before
    // anything was sent for most of it.
    assert!(
        stats.acquires_refused_store_busy > 0,
        "nothing refused early"
    );
    // Every answer came about at its timeout or before (the library returns within its
    // timeout + 40 ms; a debug build on a busy 2-core machine adds scheduling delay, so the
    // margin here is wider: the benchmark measures the reject time's p99 on a release build).
    assert!(
        slowest <= TIMEOUT + Duration::from_millis(300),
        "an acquire answered after {slowest:?} (timeout {TIMEOUT:?})"
    );
    // It kept granting (before: none at all). How close it comes to the store's ceiling is
    // the benchmark's figure (release build, BENCHMARKS.md "store saturation"); this bound
    // only has to hold on a loaded debug CI run, where the six watch-fed views of one process
    // cost more than the store.
    assert!(
        grants_per_s >= ceiling * 0.02,
        "{grants_per_s:.0} grants/s against a store ceiling of {ceiling:.0} pairs/s"
    );
    assert!(
        recovery <= Duration::from_secs(2) && recovered <= unloaded * 5 + Duration::from_millis(5),
        "after the overload: acquire {recovered:?} (unloaded {unloaded:?}), {recovery:?} to get there"
    );
    for l in limiters {
        l.close().await.expect("close");
    }
}
