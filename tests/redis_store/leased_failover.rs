//! A Sentinel failover under a leased hot key (issue 43): the promise of
//! `sentinel_failover_losses_with_and_without_wait` (docs/stores.md, "What a failover loses")
//! holds with `hot_key_leases` on. Without WAIT the writes of the replication lag are lost,
//! leases' among them, and the key over-admits by at most what was admitted on them; with
//! `wait_replicas=1` nothing is lost and no interval of the history exceeds the quota.

use super::partitioned_sentinel;
use clusterlimit::testing::rate_history::{gcra_excess, unix_ns, Admitted, Excess};
use clusterlimit::{Limiter, Quota, RateLimit, RequestStats};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const LIMITERS: usize = 2;
const CALLERS: usize = 8;
/// How long a lease's units may be spent (docs/rate-limits.md, "Hot keys: leased units").
const LEASE_HOLD: Duration = Duration::from_millis(300);
/// Admitted before the replica is cut off, and how long the primary goes on alone.
const BEFORE: usize = 2_000;
const LAG: Duration = Duration::from_millis(500);
/// Running after checks resumed: long enough to spend what the key has left.
const AFTER: Duration = Duration::from_millis(2_500);

/// 200/s with a burst of 6,000: 30 s of tolerance, so what a failover loses is not refilled
/// during it (as the daily quota of the plain test), and fast enough to lease (≥ 100/s).
fn quota() -> Quota {
    Quota::per_second(200).burst(6_000)
}

/// What one leased failover run saw.
struct LeasedRun {
    events: Vec<Admitted>,
    stats: RequestStats,
    /// Unix ns: the replica cut off, the primary killed, and the first admission of a check
    /// that started a lease's time after the kill.
    cut: u64,
    killed: u64,
    resumed: Option<u64>,
    errors: u64,
}

impl LeasedRun {
    fn worst(&self) -> Excess {
        gcra_excess(&self.events, &quota())
    }

    /// Admissions that started from a lease's time before the cut until a lease's time after
    /// the kill: everything a write the failover lost can have admitted (the lease units of a
    /// write are spent within a lease's time of it).
    fn in_lag(&self) -> usize {
        let hold = LEASE_HOLD.as_nanos() as u64;
        let lag = self.cut.saturating_sub(hold)..self.killed + hold;
        self.events
            .iter()
            .filter(|e| lag.contains(&e.start))
            .count()
    }

    fn describe(&self, how: &str) -> String {
        let w = self.worst();
        format!(
            "leased failover {how}: {} admitted ({} from {} leases), worst interval {:+.1} over \
             the quota ({} admitted in {:.0} ms); {} admitted around the lag; first admission {} \
             after the kill; {} errors",
            self.events.len(),
            self.stats.rate_lease_admitted,
            self.stats.rate_leases,
            w.over,
            w.admitted,
            (w.to - w.from) as f64 / 1e6,
            self.in_lag(),
            self.resumed.map_or("never".into(), |r| {
                format!("{:.0} ms", (r - self.killed) as f64 / 1e6)
            }),
            self.errors
        )
    }
}

/// Callers that check the key until `stop`, recording every admission; a denied one pauses its
/// `retry_after` (≤ 50 ms), an admitted one 5 ms (about 3,000 checks/s in all).
async fn caller(
    rl: RateLimit,
    log: Arc<Mutex<Vec<Admitted>>>,
    errors: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) {
    let until = Instant::now() + Duration::from_secs(60);
    while Instant::now() < until && !stop.load(Ordering::Relaxed) {
        let start = unix_ns();
        let pause = match rl.check("k").await {
            Ok(d) if d.allowed => {
                let end = unix_ns();
                log.lock().unwrap().push(Admitted {
                    start,
                    end,
                    cost: 1,
                });
                Duration::from_millis(5)
            }
            Ok(d) => d
                .retry_after
                .unwrap_or_default()
                .clamp(Duration::from_millis(1), Duration::from_millis(50)),
            Err(_) => {
                errors.fetch_add(1, Ordering::Relaxed);
                Duration::from_millis(20)
            }
        };
        tokio::time::sleep(pause).await;
    }
}

/// The first admission of a check that started at or after `from`, waiting at most `limit`.
fn first_admitted_from(log: &Mutex<Vec<Admitted>>, from: u64, limit: Duration) -> Option<u64> {
    let t = Instant::now();
    while t.elapsed() < limit {
        let first = log
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e.start >= from)
            .map(|e| e.end)
            .min();
        if first.is_some() {
            return first;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

/// 2 Limiters × 8 callers, leases on, on a hot key; after 2,000 admissions the first replica is
/// cut off, half a second later the primary is SIGKILLed; the callers go on through the
/// failover and 2.5 s past it.
fn leased_failover_run(wait_replicas: bool) -> LeasedRun {
    let (mut s, partition, url) = partitioned_sentinel(wait_replicas);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let errors = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut limiters = Vec::new();
    let mut tasks = Vec::new();
    for _ in 0..LIMITERS {
        let l = rt
            .block_on(
                Limiter::builder(&url)
                    .request_timeout(Duration::from_secs(2))
                    .hot_key_leases(true)
                    .connect(),
            )
            .unwrap();
        let rl = rt.block_on(l.rate_limit("hot", quota())).unwrap();
        for _ in 0..CALLERS {
            tasks.push(rt.spawn(caller(
                rl.clone(),
                log.clone(),
                errors.clone(),
                stop.clone(),
            )));
        }
        limiters.push(l);
    }
    let bound = Instant::now() + Duration::from_secs(20);
    while log.lock().unwrap().len() < BEFORE && Instant::now() < bound {
        std::thread::sleep(Duration::from_millis(5));
    }
    // The replica that the sentinel may promote stops hearing from the primary, which goes
    // on admitting (from leases too) for half a second before it dies.
    partition.blackhole();
    let cut = unix_ns();
    std::thread::sleep(LAG);
    s.primary.kill();
    let killed = unix_ns();
    let errors_at_kill = errors.load(Ordering::Relaxed);
    let hold = LEASE_HOLD.as_nanos() as u64;
    let resumed = first_admitted_from(&log, killed + hold, Duration::from_secs(30));
    if resumed.is_some() {
        std::thread::sleep(AFTER);
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        rt.block_on(t).unwrap();
    }
    let stats = limiters.iter().map(Limiter::stats).sum();
    for l in &limiters {
        rt.block_on(l.close()).ok();
    }
    let events = std::mem::take(&mut *log.lock().unwrap());
    LeasedRun {
        events,
        stats,
        cut,
        killed,
        resumed,
        errors: errors.load(Ordering::Relaxed) - errors_at_kill,
    }
}

/// Without WAIT the failover loses the lag's writes (lease writes among them): the history
/// goes over the quota (else the run shows nothing), by no more than was admitted from a
/// lease's time before the cut to a lease's time after the kill. With `wait_replicas=1` no
/// interval is over. In both, the key was served from leases and checks resumed.
#[test]
fn sentinel_failover_leased_hot_key_with_and_without_wait() {
    let plain = leased_failover_run(false);
    println!("{}", plain.describe("without WAIT"));
    let waited = leased_failover_run(true);
    println!("{}", waited.describe("with wait_replicas=1"));
    for (run, how) in [(&plain, "without WAIT"), (&waited, "with wait_replicas=1")] {
        assert!(
            run.resumed.is_some(),
            "{how}: checks resumed after the failover"
        );
        assert!(
            run.stats.rate_leases > 0
                && run.stats.rate_lease_admitted as f64 >= 0.5 * run.events.len() as f64,
            "{how}: the key was served from leases: {:?}",
            run.stats
        );
    }
    let over = plain.worst().over;
    assert!(
        over > 0.0,
        "a replica half a second behind lost nothing: the test no longer shows the risk"
    );
    assert!(
        over <= plain.in_lag() as f64,
        "without WAIT the key over-admitted {over:.0}, more than the {} admitted around the \
         lost writes: {:?}",
        plain.in_lag(),
        plain.worst()
    );
    let worst = waited.worst();
    assert!(
        worst.over <= 0.0,
        "with WAIT no interval may exceed the quota: {worst:?}"
    );
}
