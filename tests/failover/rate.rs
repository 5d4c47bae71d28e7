//! Rate-limit scenarios (issue 15): a hot key hammered by 8 Limiters × 16 callers while the
//! leader is SIGKILLed and restarted a few times. The admitted history must never exceed the
//! quota in any interval (GCRA) or any aligned window (fixed window): a write whose reply was
//! lost must be neither counted twice nor lost in a way that over-admits. No call may hang,
//! decisions must resume soon after each kill, and outside the fault windows the key must be
//! admitted at close to the quota. The leased cases (issue 43) run the same with
//! `hot_key_leases` on and a quota of 5,000/s, which the Limiters admit mostly from leases
//! (`rate_leases.rs` has their figures).

use crate::cluster::{Cluster, Kind};
use crate::rate_leases::{self, LEASE_HOLD};
use crate::rate_load::{call_bound, RateLoad, RateLog};
use crate::report::{ms, RateFigures, Row};
use crate::scenarios::{
    end_zookeeper_election_loop, others, survivors, Size, PROBE_LIMIT, RESUME_SLACK,
};
use crate::store_probe;
use clusterlimit::testing::rate_history::{assert_gcra_exact, unix_ns, window_excess, Admitted};
use clusterlimit::{Algorithm, Quota};
use std::time::{Duration, Instant};
use tokio::time::sleep;

/// Limiters and concurrent callers per Limiter on the hot key (the figures).
pub const LIMITERS: usize = 8;
pub const CALLERS: usize = 16;
/// The plain scenarios use 500/s; GCRA with a burst of 50.
const RATE: u64 = 500;
const BURST: u64 = 50;
/// The leased ones 5,000/s (GCRA: a burst of 2,500, of which the 300 ms a lease may be held
/// leaves 1,000 to lease): each of the 8 Limiters sees its share of the key, ~600/s, and far
/// more demand, hot enough to lease (≥ 200 checks/s); the debug build keeps up with it.
pub const LEASED_RATE: u64 = 5_000;
const LEASED_BURST: u64 = 2_500;
/// Longest wait for the first admission after a kill before the row fails.
const RESUME_LIMIT: Duration = Duration::from_secs(20);

/// Which algorithm a rate scenario runs, and whether its Limiters lease the hot key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RateCase {
    Gcra,
    FixedWindow,
    LeasedGcra,
    LeasedWindow,
}

impl RateCase {
    pub fn quota(self) -> Quota {
        match self {
            RateCase::Gcra => Quota::per_second(RATE).burst(BURST),
            RateCase::FixedWindow => Quota::per_second(RATE).algorithm(Algorithm::FixedWindow),
            RateCase::LeasedGcra => Quota::per_second(LEASED_RATE).burst(LEASED_BURST),
            RateCase::LeasedWindow => {
                Quota::per_second(LEASED_RATE).algorithm(Algorithm::FixedWindow)
            }
        }
    }

    /// The Limiters take leases of the hot key (`hot_key_leases`).
    pub fn leased(self) -> bool {
        matches!(self, RateCase::LeasedGcra | RateCase::LeasedWindow)
    }

    fn windowed(self) -> bool {
        matches!(self, RateCase::FixedWindow | RateCase::LeasedWindow)
    }

    /// Units a second.
    fn rate(self) -> u64 {
        if self.leased() {
            LEASED_RATE
        } else {
            RATE
        }
    }

    /// A check that started this long after a kill and was admitted was decided by a write
    /// the store took after the kill: at once without leases; with them, once every lease
    /// taken before the kill has ended (a lease's units are spent within [`LEASE_HOLD`]).
    fn resume_after(self) -> Duration {
        if self.leased() {
            LEASE_HOLD
        } else {
            Duration::ZERO
        }
    }

    /// Contended running before the first kill and after each restart. A fixed window needs
    /// whole aligned windows between faults to measure the admitted rate: 2.2 s holds at
    /// least one 1-s window after the fault's end.
    fn phase(self, size: Size) -> Duration {
        if self.windowed() {
            size.phase.max(Duration::from_millis(2200))
        } else {
            size.phase
        }
    }
}

/// One kill: when it came and when its fault window ended (Unix ns).
pub struct Fault {
    pub start: u64,
    pub end: u64,
}

/// Runs a rate scenario on a fresh cluster and returns its row.
pub async fn run(kind: Kind, case: RateCase, name: &'static str, size: Size, seed: u64) -> Row {
    let started = Instant::now();
    let mut row = Row::new(kind, name);
    let quota = case.quota();
    let mut cluster = tokio::task::block_in_place(|| Cluster::start(kind));
    let mut load = RateLoad::start(&cluster, quota, (LIMITERS, CALLERS), case.leased(), seed).await;
    let from = unix_ns();
    sleep(case.phase(size)).await;
    let mut faults = Vec::new();
    for i in 0..size.rate_kills {
        let fault = kill_leader(&mut cluster, &load.log, case, i + 1, &mut row).await;
        faults.push(fault);
        sleep(case.phase(size)).await;
    }
    let to = unix_ns();
    load.stop().await;
    let what = "leader kill → member back and decisions resumed";
    conclude(case, &load.log, (&faults, what), (from, to), &mut row);
    if case.leased() {
        let events = load.log.admitted();
        rate_leases::judge(&load.stats(), events.len(), &mut row);
        let windowed = case.windowed().then_some(quota.period);
        rate_leases::dips(
            &events,
            &faults,
            (case.rate(), windowed),
            (from, to),
            &mut row,
        );
    }
    row.took = started.elapsed();
    row
}

/// SIGKILLs the leader, measures the store's own failover and the first admission after the
/// kill, restarts the member; returns the fault window: from the kill until the member is
/// back and decisions have resumed.
async fn kill_leader(
    cluster: &mut Cluster,
    log: &RateLog,
    case: RateCase,
    n: usize,
    row: &mut Row,
) -> Fault {
    let leader = cluster.leader().await;
    let rejected_before = cluster.rejected_newleader_acks();
    let t = Instant::now();
    let start = unix_ns();
    cluster.kill(leader);
    let store = store_probe::spawn(cluster.kind(), survivors(cluster, leader), t, PROBE_LIMIT);
    // A check that *started* after the kill (and every lease of before it ended) and was
    // admitted: its write reached the store after the kill (a denial proves nothing: it can
    // come from the cached state).
    let after = case.resume_after();
    let resumed = first_admitted_within(log, start + after.as_nanos() as u64, RESUME_LIMIT).await;
    let store = store.await.ok().flatten();
    let what = format!("kill {n}");
    if store.is_none() && end_zookeeper_election_loop(cluster, leader, rejected_before, &what, row)
    {
        // The library is judged from the moment the store serves again.
        let back = unix_ns();
        let resumed = first_admitted_within(log, back, RESUME_LIMIT).await;
        match resumed {
            Some(end) => row.note(format!(
                "{what}: first admission {} after the ensemble served again",
                ms(Duration::from_nanos(end.saturating_sub(back)))
            )),
            None => row.fail(format!(
                "{what}: no check admitted within {} of the ensemble serving again",
                ms(RESUME_LIMIT)
            )),
        }
        return Fault {
            start,
            end: unix_ns().max(resumed.unwrap_or(0)),
        };
    }
    let gap = resumed.map(|end| Duration::from_nanos(end.saturating_sub(start)));
    match gap {
        Some(g) => row.recovery.push(g),
        None => row.fail(format!(
            "kill {n}: no check admitted within {} of the leader kill",
            ms(RESUME_LIMIT)
        )),
    }
    match store {
        Some(s) => row.store_failover.push(s),
        None => row.fail(format!(
            "kill {n}: no raw write succeeded within {}; the survivors' logs:{}",
            ms(PROBE_LIMIT),
            cluster.election_log(&others(cluster, leader))
        )),
    }
    if let (Some(gap), Some(store)) = (gap, store) {
        // With leases the first admission counted comes a lease's time after the kill at the
        // earliest, however fast the store is back.
        let bound = store.max(after) + resume_slack(cluster.kind());
        row.check(gap <= bound, || {
            format!(
                "kill {n}: first admission {} after the leader kill, the store's own failover {} \
                 (allowed: the later of it and {} + {})",
                ms(gap),
                ms(store),
                ms(after),
                ms(resume_slack(cluster.kind()))
            )
        });
    }
    cluster.restart_if_down(leader);
    Fault {
        start,
        end: unix_ns().max(resumed.unwrap_or(0)),
    }
}

/// When the first check that started at or after `from` (unix ns) and was admitted ended,
/// waiting at most `limit`.
async fn first_admitted_within(log: &RateLog, from: u64, limit: Duration) -> Option<u64> {
    let t = Instant::now();
    while t.elapsed() < limit {
        if let Some(end) = log.first_admitted_from(from) {
            return Some(end);
        }
        sleep(Duration::from_millis(10)).await;
    }
    None
}

/// How much later than the store's own failover decisions may resume after a leader kill:
/// on etcd the semaphore's target (issue 12, item 3). On ZooKeeper every client of the killed
/// leader's followers reconnects, and zookeeper-client 0.11 backs off its reconnect rounds
/// (100 ms × servers + jitter, doubling from the second round), which the library does not
/// control yet (the semaphore's leader-kill row reports the same miss): three rounds, 2 s.
fn resume_slack(kind: Kind) -> Duration {
    match kind {
        Kind::Etcd => RESUME_SLACK,
        Kind::Zk => Duration::from_secs(2),
    }
}

/// The checks at the end of a run, and the row's figures; `what` says what a fault window is.
pub fn conclude(
    case: RateCase,
    log: &RateLog,
    (faults, what): (&[Fault], &str),
    (from, to): (u64, u64),
    row: &mut Row,
) {
    let quota = &case.quota();
    let events = log.admitted();
    let errors = log.errors();
    let exactness = if case.windowed() {
        window_check(&events, quota, row)
    } else {
        gcra_check(&events, quota, row)
    };
    for e in errors.iter().filter(|e| e.hung).take(5) {
        row.fail(format!(
            "{}: started at unix ms {}",
            e.error,
            e.start / 1_000_000
        ));
    }
    let longest = log.longest_call();
    row.check(longest <= call_bound(), || {
        format!("a check took {} (bound {})", ms(longest), ms(call_bound()))
    });
    let mut kinds: std::collections::BTreeMap<&str, usize> = Default::default();
    for e in &errors {
        *kinds.entry(e.error.as_str()).or_default() += 1;
    }
    // An error of a check that started in a fault window is the fault's; the others are
    // listed with their times.
    let outside: Vec<String> = errors
        .iter()
        .filter(|e| !faults.iter().any(|f| (f.start..=f.end).contains(&e.start)))
        .map(|e| {
            format!(
                "{} ({} from unix ms {})",
                e.error,
                ms(Duration::from_nanos(e.at.saturating_sub(e.start))),
                e.start / 1_000_000
            )
        })
        .collect();
    if !kinds.is_empty() {
        row.note(format!(
            "errors by kind: {kinds:?}; {} started outside the fault windows: {}",
            outside.len(),
            outside
                .iter()
                .take(8)
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let ratio = if case.windowed() {
        window_ratio(&events, quota, faults, (from, to))
    } else {
        gcra_ratio(&events, case.rate(), faults, (from, to))
    };
    match &ratio {
        Some((r, what)) => {
            let r = *r;
            row.note(format!("outside the fault windows: {what}"));
            row.check(r >= RATIO_FLOOR, || {
                format!("admitted only {r:.3} of the quota outside the fault windows ({what})")
            });
        }
        None => row.fail("no time outside the fault windows to measure the admitted rate"),
    }
    let windows: Vec<String> = faults
        .iter()
        .map(|f| {
            format!(
                "{} from unix ms {}",
                ms(Duration::from_nanos(f.end - f.start)),
                f.start / 1_000_000
            )
        })
        .collect();
    row.note(format!("fault windows ({what}): {}", windows.join(", ")));
    row.rate = Some(RateFigures {
        exactness,
        admitted: events.len(),
        denied: log.denied(),
        errors: errors.len(),
        ratio: ratio.map(|(r, _)| r),
        longest_call: longest,
        leases: None,
    });
}

/// Outside the fault windows, the hot key must be admitted at no less than this share of its
/// quota: it proves the limiter is back at work after each kill, neither stuck nor starving
/// its callers. The contract suite asks 97% over a quiet run; here the stretches between
/// faults are ~1–2 s right after a member rejoined and clients reconnected, in a debug build,
/// on 2 cores shared with other builds: measured 0.68–1.06 at load average ~12, the low ones
/// with no denial at all (the store's write latency, not the limiter, set the pace), so the
/// floor is half the quota.
pub const RATIO_FLOOR: f64 = 0.5;

/// No interval of the history over `burst + length / T` (`assert_gcra_exact`, caught so the
/// row fails and the run still prints its table).
pub fn gcra_check(events: &[Admitted], quota: &Quota, row: &mut Row) -> String {
    let result = std::panic::catch_unwind(|| assert_gcra_exact(events, quota, 0.0));
    match result {
        Ok(worst) => format!(
            "worst interval {:+.1} vs bound ({} admitted in {})",
            worst.over,
            worst.admitted,
            ms(Duration::from_nanos(worst.to - worst.from))
        ),
        Err(panic) => {
            let what = panic
                .downcast_ref::<String>()
                .cloned()
                .unwrap_or_else(|| "assert_gcra_exact failed".into());
            row.violations += 1;
            row.fail(what);
            "OVER-ADMITTED".into()
        }
    }
}

/// No aligned window with more than the limit admitted.
fn window_check(events: &[Admitted], quota: &Quota, row: &mut Row) -> String {
    let (most, window) = window_excess(events, quota);
    if most > quota.limit {
        row.violations += 1;
        row.fail(format!(
            "window {window} (unix s {}) admitted {most}, above its limit {}",
            window * quota.period.as_secs(),
            quota.limit
        ));
    }
    format!("fullest window {most} / {}", quota.limit)
}

/// The stretches of [from, to] outside every fault window.
pub fn outside(faults: &[Fault], (from, to): (u64, u64)) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut at = from;
    for f in faults {
        if f.start > at {
            out.push((at, f.start.min(to)));
        }
        at = at.max(f.end);
    }
    if to > at {
        out.push((at, to));
    }
    out
}

/// GCRA: admitted checks that started in the stretches outside the faults ÷ rate × their
/// length.
fn gcra_ratio(
    events: &[Admitted],
    rate: u64,
    faults: &[Fault],
    span: (u64, u64),
) -> Option<(f64, String)> {
    let stretches = outside(faults, span);
    let len: u64 = stretches.iter().map(|(a, b)| b - a).sum();
    if len == 0 {
        return None;
    }
    let admitted = events
        .iter()
        .filter(|e| stretches.iter().any(|&(a, b)| (a..b).contains(&e.start)))
        .count();
    let allowed = rate as f64 * len as f64 / 1e9;
    Some((
        admitted as f64 / allowed,
        format!(
            "{admitted} admitted in {} ({allowed:.0} at {rate}/s)",
            ms(Duration::from_nanos(len))
        ),
    ))
}

/// Fixed window: admitted in the whole aligned windows outside the faults ÷ limit × windows.
fn window_ratio(
    events: &[Admitted],
    quota: &Quota,
    faults: &[Fault],
    span: (u64, u64),
) -> Option<(f64, String)> {
    let period = quota.period.as_nanos() as u64;
    let stretches = outside(faults, span);
    let whole: Vec<u64> = stretches
        .iter()
        .flat_map(|&(a, b)| (a.div_ceil(period)..b / period).collect::<Vec<_>>())
        .collect();
    if whole.is_empty() {
        return None;
    }
    let admitted = events
        .iter()
        .filter(|e| whole.contains(&(e.start / period)))
        .count();
    let allowed = quota.limit * whole.len() as u64;
    Some((
        admitted as f64 / allowed as f64,
        format!(
            "{admitted} admitted in {} whole windows ({allowed} allowed)",
            whole.len()
        ),
    ))
}
