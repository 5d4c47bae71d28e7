//! Exactness under contention (issue 15), through the API on memory, etcd and ZooKeeper (one
//! node each): 8 Limiters × 32 concurrent callers hammer one key. GCRA
//! `per_second(500).burst(50)` for 10 s: no interval of the history admits more than
//! `500 × its length + 50`, ever, and the run admits at least 97% of `500 × run + 50`.
//! Fixed and sliding windows `per_second(500)` for 5 s: no aligned window over 500.
//! Each run prints its figures (decisions/s, admitted/s, requests per admitted decision,
//! batches, local answers, latency p50/p99, worst excess). Runs are serial (the 2 cores).
//!
//! Many keys at once (the write combiner, `src/rate_limit/combine.rs`), on etcd: 512 concurrent
//! checks of distinct keys through one Limiter, round after round, are all admitted with the
//! right `remaining`, take fewer store requests than checks (the ratio is printed), and leave
//! the states another Limiter reads back; the same while a hot key hammered from two Limiters
//! shares those requests, which never admits more than its quota in any interval.

use crate::rate_hammer;

use clusterlimit::testing::rate_history::{assert_gcra_exact, unix_ns, window_excess, Admitted};
use clusterlimit::{Algorithm, Limiter, Quota, RateLimit};
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
        // window's end can pass during a store stall (seen at 425 on etcd under a load of 13,
        // and at 339 with other suites' servers beside it under a load of 9).
        assert!(
            most as f64 >= 0.5 * 500.0,
            "{}: the fullest window admitted only {most}",
            out.store
        );
    }
}

/// Distinct keys checked at once through the write combiner.
const KEYS: usize = 512;
/// Checks of each key admitted before it is spent (its burst; no refill within the test).
const ROUNDS: u64 = 3;

/// `KEYS` concurrent checks of `k0..`, one per key, on `rl`: each decision, in key order.
async fn one_round(rl: &RateLimit) -> Vec<clusterlimit::Decision> {
    let tasks: Vec<_> = (0..KEYS)
        .map(|i| {
            let rl = rl.clone();
            tokio::spawn(async move { rl.check(&format!("k{i}")).await })
        })
        .collect();
    let mut out = Vec::with_capacity(KEYS);
    for (i, t) in tasks.into_iter().enumerate() {
        let d = tokio::time::timeout(Duration::from_secs(60), t)
            .await
            .unwrap_or_else(|_| panic!("k{i}: no answer within 60 s"))
            .expect("check task")
            .unwrap_or_else(|e| panic!("k{i}: {e}"));
        out.push(d);
    }
    out
}

/// Rounds of `KEYS` concurrent checks on `limit` (a fresh limit of `a`): rounds 1..=ROUNDS
/// admit every key with `remaining` counting down, the next denies every key; then a fresh
/// Limiter reads each key back as spent. Returns (checks, requests of `a`) of the admitting
/// rounds.
async fn distinct_keys(server: &Server, a: &Limiter, limit: &str) -> (u64, u64) {
    let quota = Quota::per_day(24).burst(ROUNDS);
    let rl = a.rate_limit(limit, quota).await.expect("rate_limit");
    let (mut checks, mut requests) = (0, 0);
    for round in 1..=ROUNDS {
        let before = a.stats();
        let t = std::time::Instant::now();
        let ds = one_round(&rl).await;
        let cost = a.stats().since(&before);
        for (i, d) in ds.iter().enumerate() {
            assert!(
                d.allowed && d.remaining == ROUNDS - round,
                "{limit} round {round}, k{i}: {d:?}"
            );
        }
        checks += KEYS as u64;
        requests += cost.total();
        println!(
            "[{limit}] round {round}: {KEYS} checks of distinct keys in {:?}, {} requests of \
             this Limiter ({:.3} per check; {} txn, {} range), {} batches",
            t.elapsed(),
            cost.total(),
            cost.total() as f64 / KEYS as f64,
            cost.txn,
            cost.range,
            cost.rate_batches
        );
    }
    let ds = one_round(&rl).await;
    for (i, d) in ds.iter().enumerate() {
        assert!(!d.allowed, "{limit} k{i} is spent: {d:?}");
    }
    // What the store holds, read by a Limiter that knows nothing of these keys.
    let fresh = server.limiter(None).await;
    let reader = fresh.open_rate_limit(limit).await.expect("open");
    for chunk in (0..KEYS).collect::<Vec<_>>().chunks(64) {
        let peeks = chunk.iter().map(|i| {
            let reader = reader.clone();
            async move { (*i, reader.check_n(&format!("k{i}"), 0).await) }
        });
        for (i, peek) in futures::future::join_all(peeks).await {
            let peek = peek.unwrap_or_else(|e| panic!("peek k{i}: {e}"));
            assert!(
                !peek.allowed && peek.remaining == 0 && peek.retry_after.is_some(),
                "{limit} k{i} as stored: {peek:?}"
            );
        }
    }
    fresh.close().await.expect("close");
    (checks, requests)
}

/// 8 callers on each of `limiters` check `hot` until `stop` (at most 30 s, 100,000 calls
/// each): every admission, and every error.
fn hot_callers(
    limiters: &[Limiter],
    stop: &Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<(Vec<Admitted>, Vec<String>)>> {
    let mut tasks = Vec::new();
    for l in limiters {
        for _ in 0..8 {
            let l = l.clone();
            let stop = stop.clone();
            tasks.push(tokio::spawn(async move {
                let rl = l.open_rate_limit("hot").await.expect("open hot");
                let (mut admitted, mut errors) = (Vec::new(), Vec::new());
                let end = std::time::Instant::now() + Duration::from_secs(30);
                let mut calls = 0u32;
                while !stop.load(Ordering::Relaxed)
                    && std::time::Instant::now() < end
                    && calls < 100_000
                {
                    calls += 1;
                    let start = unix_ns();
                    match rl.check("hot").await {
                        Ok(d) if d.allowed => admitted.push(Admitted {
                            start,
                            end: unix_ns(),
                            cost: 1,
                        }),
                        Ok(d) => {
                            let pause = d.retry_after.unwrap_or(Duration::from_millis(1));
                            tokio::time::sleep(pause.min(Duration::from_millis(5))).await;
                        }
                        Err(e) => errors.push(e.to_string()),
                    }
                }
                (admitted, errors)
            }));
        }
    }
    tasks
}

#[test]
fn etcd_many_keys_share_requests_and_a_hot_key_among_them_stays_exact() {
    serial(async {
        let server = Server::etcd();
        let a = server.limiter(None).await;
        let b = server.limiter(None).await;

        // Distinct keys alone: what the combiner saves.
        let (checks, requests) = distinct_keys(&server, &a, "many").await;
        println!(
            "[etcd] {checks} admitted checks of distinct keys took {requests} requests: \
             {:.1} checks per request",
            checks as f64 / requests.max(1) as f64
        );
        assert!(
            requests < checks,
            "{checks} checks of distinct keys took {requests} requests"
        );

        // The same with a hot key hammered meanwhile from this Limiter and another.
        let hot = Quota::per_second(200).burst(20);
        a.rate_limit("hot", hot).await.expect("rate_limit hot");
        let stop = Arc::new(AtomicBool::new(false));
        let callers = hot_callers(&[a.clone(), b.clone()], &stop);
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (mut checks, mut requests) = (0, 0);
        for n in 0..4 {
            let (c, r) = distinct_keys(&server, &a, &format!("many-mixed-{n}")).await;
            checks += c;
            requests += r;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        stop.store(true, Ordering::Relaxed);
        let (mut events, mut errors) = (Vec::new(), Vec::new());
        for c in callers {
            let (admitted, failed) = tokio::time::timeout(Duration::from_secs(60), c)
                .await
                .expect("hot callers stop")
                .expect("hot caller task");
            events.extend(admitted);
            errors.extend(failed);
        }
        println!(
            "[etcd] with the hot key: {checks} checks of distinct keys, {requests} requests of \
             their Limiter (the hot key's included); the hot key admitted {}",
            events.len()
        );
        assert!(errors.is_empty(), "hot key errors: {errors:?}");
        let worst = assert_gcra_exact(&events, &hot, 0.0);
        println!(
            "[etcd] hot key worst excess {:.3} (≤ 0: never over) in {:.3} ms with {} admitted",
            worst.over,
            (worst.to - worst.from) as f64 / 1e6,
            worst.admitted
        );
        assert!(
            events.len() as u64 >= hot.burst,
            "the hot key admitted only {} (not even its burst)",
            events.len()
        );
        a.close().await.expect("close a");
        b.close().await.expect("close b");
    });
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
