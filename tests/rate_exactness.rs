//! Exactness under contention (issue 15), through the API on memory, etcd and ZooKeeper (one
//! node each): 8 Limiters × 32 concurrent callers hammer one key. GCRA
//! `per_second(500).burst(50)` for 10 s: no interval of the history admits more than
//! `500 × its length + 50`, ever, and the run admits at least 97% of `500 × run + 50`.
//! Fixed and sliding windows `per_second(500)` for 5 s: no aligned window over 500.
//! Each run prints its figures (decisions/s, admitted/s, requests per admitted decision,
//! batches, local answers, latency p50/p99, worst excess). Runs are serial (the 2 cores).

mod rate_hammer;
mod support;

use clusterlimit::testing::rate_history::{assert_gcra_exact, window_excess};
use clusterlimit::{Algorithm, Quota};
use rate_hammer::{hammer, serial, Hammer, Server};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const GCRA_RUN: Duration = Duration::from_secs(10);
const WINDOW_RUN: Duration = Duration::from_secs(5);
/// The bar: the run admits at least this share of what the quota allows.
const MIN_SHARE: f64 = 0.97;

/// The bucket's tolerance: tokens not taken within `burst / rate` of their time are gone, so a
/// stall of the test process longer than this (a loaded 2-core machine starving it of CPU)
/// costs admissions that no limiter could have made.
const TOLERANCE: Duration = Duration::from_millis(100);

/// Measures how late an OS thread wakes from 5 ms sleeps: the longest scheduling stall of this
/// process while it runs.
struct StallProbe {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Duration>,
}

impl StallProbe {
    fn start() -> StallProbe {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut worst = Duration::ZERO;
            while !flag.load(Ordering::Relaxed) {
                let asked = Duration::from_millis(5);
                let started = std::time::Instant::now();
                std::thread::sleep(asked);
                worst = worst.max(started.elapsed().saturating_sub(asked));
            }
            worst
        });
        StallProbe { stop, thread }
    }

    fn worst(self) -> Duration {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or(Duration::MAX)
    }
}

async fn gcra(server: Server) {
    let quota = Quota::per_second(500).burst(50);
    // A second run only when the first fell short of the share while this process was starved
    // for longer than the bucket's tolerance; exactness is asserted on every run.
    for attempt in 1..=2 {
        let probe = StallProbe::start();
        let out = hammer(&server, &Hammer::new("hot-gcra", quota, GCRA_RUN)).await;
        let stall = probe.worst();
        out.print("gcra");
        let worst = assert_gcra_exact(&out.events, &quota, 0.0);
        println!(
            "[gcra {}] worst excess {:.3} (≤ 0: never over), in {:.3} ms with {} admitted",
            out.store,
            worst.over,
            (worst.to - worst.from) as f64 / 1e6,
            worst.admitted
        );
        let allowed = 500.0 * out.run_secs() + 50.0;
        let admitted = out.admitted_in_run();
        println!(
            "[gcra {}] admitted {admitted} of {allowed:.0} the quota allows in the run ({:.2}%); \
             longest scheduling stall of the process {stall:?}",
            out.store,
            100.0 * admitted as f64 / allowed
        );
        assert!(
            out.errors.is_empty(),
            "{}: {} checks failed, first: {:?}",
            out.store,
            out.errors.len(),
            out.errors.first()
        );
        if admitted as f64 >= MIN_SHARE * allowed {
            return;
        }
        assert!(
            attempt == 1 && stall > TOLERANCE,
            "{}: admitted {admitted}, below {MIN_SHARE} × {allowed:.0} (longest stall {stall:?})",
            out.store
        );
        println!(
            "[gcra {}] short of {MIN_SHARE} while the process stalled {stall:?} (> {TOLERANCE:?}): \
             one more run",
            out.store
        );
        // Another store's servers may still be winding down: let the machine settle.
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn windows(server: Server) {
    for (limit, algorithm) in [
        ("hot-fixed", Algorithm::FixedWindow),
        ("hot-sliding", Algorithm::SlidingWindow),
    ] {
        let quota = Quota::per_second(500).algorithm(algorithm);
        let out = hammer(&server, &Hammer::new(limit, quota, WINDOW_RUN)).await;
        out.print(limit);
        let (most, window) = window_excess(&out.events, &quota);
        println!(
            "[{limit} {}] most admitted in one aligned window: {most} (window {window}, limit 500)",
            out.store
        );
        assert!(
            out.errors.is_empty(),
            "{}: {} checks failed, first: {:?}",
            out.store,
            out.errors.len(),
            out.errors.first()
        );
        assert!(most <= 500, "{}: {most} in window {window}", out.store);
        // Not vacuous: the hammer did come near the limit in some window. Not 100%: a sliding
        // window's end can pass during a store stall (seen at 425 on etcd under a load of 13).
        assert!(
            most as f64 >= 0.8 * 500.0,
            "{}: the fullest window admitted only {most}",
            out.store
        );
    }
}

#[test]
fn memory_gcra() {
    serial(async { gcra(Server::memory().await).await });
}

#[test]
fn etcd_gcra() {
    serial(async { gcra(Server::etcd()).await });
}

#[test]
fn zk_gcra() {
    serial(async { gcra(Server::zk()).await });
}

#[test]
fn memory_windows() {
    serial(async { windows(Server::memory().await).await });
}

#[test]
fn etcd_windows() {
    serial(async { windows(Server::etcd()).await });
}

#[test]
fn zk_windows() {
    serial(async { windows(Server::zk()).await });
}
