//! Row 3: one key, N worker processes × C callers each, closed loop, on one contender; the
//! reports merged into one row.

use super::interval;
use super::protocol::{Contender, Mode, WorkerReport, WorkerSetup};
use super::spawn;
use super::worker::unix_us;
use crate::cpu::cpu_ns;
use crate::stats::Samples;
use std::time::Duration;

/// Time given to workers to start and connect before their common start (a debug build's
/// process start, Node's and Python's imports).
const LEAD_IN: Duration = Duration::from_secs(4);

/// One hot-key run of one contender at one quota.
#[derive(Debug, Clone)]
pub struct HotRow {
    pub who: String,
    pub contender: Contender,
    pub algorithm: String,
    /// Quota: `limit` per second, `burst` (GCRA).
    pub limit: u64,
    pub burst: u64,
    pub decisions: u64,
    pub errors: u64,
    pub run_for: Duration,
    /// Admitted per second in the steady part (see [`steady_window`]).
    pub steady_admitted_per_s: f64,
    /// Where the steady part starts: see [`steady_window`] and [`burst_spent_at`].
    pub steady_from: Duration,
    /// False when a GCRA run never spent its burst: its steady rate includes the leftover.
    pub burst_spent: bool,
    /// Ours only: store requests per admitted decision, and the share of denials answered
    /// without a store request.
    pub requests_per_admitted: Option<f64>,
    pub local_denial_share: Option<f64>,
    pub latency: Samples,
    /// Latencies of the admitted decisions only (all of them).
    pub admitted_latency: Samples,
    /// Largest over-admission the interval check found (≤ 0: none).
    pub over: f64,
    /// Workers' CPU and the store server's, per decision.
    pub cpu_us_per_decision: f64,
    pub worker_cpu_s: f64,
    pub server_cpu_s: f64,
}

impl HotRow {
    pub fn decisions_per_s(&self) -> f64 {
        self.decisions as f64 / self.run_for.as_secs_f64()
    }
}

/// What a hot run is: who, on what, with which quota.
pub struct Hot<'a> {
    pub who: String,
    pub contender: Contender,
    pub target: String,
    pub algorithm: &'a str,
    pub limit: u64,
    pub burst: u64,
    pub processes: usize,
    pub callers: u32,
    pub run_for: Duration,
    /// Server processes whose CPU is charged to the run.
    pub server_pids: Vec<u32>,
    /// Callers sleep a denial's `retry_after` (clusterlimit only; see `WorkerSetup`).
    pub wait_retry_after: bool,
}

/// The steady part of a run: the first period (1 s, where the burst and the first window are
/// spent) left out, or the first half of a run shorter than two periods.
pub fn steady_window(run_for: Duration) -> Duration {
    Duration::from_secs(1).min(run_for / 2)
}

/// When a GCRA bucket that starts full was first spent: the answer time (after `start`, unix
/// µs) of the first admission that brought the admitted total within 50 ms of the quota's pace
/// (plus 1 % of the burst) of `burst + limit × elapsed`, the most GCRA can have admitted by
/// then; `None` if the run never got there.
pub fn burst_spent_at(
    admitted_at: &[[u64; 2]],
    start: u64,
    limit: u64,
    burst: u64,
) -> Option<Duration> {
    let mut answered: Vec<u64> = admitted_at.iter().map(|e| e[1]).collect();
    answered.sort_unstable();
    let slack = limit as f64 / 20.0 + burst as f64 / 100.0;
    answered.iter().enumerate().find_map(|(i, &at)| {
        let elapsed = Duration::from_micros(at.saturating_sub(start));
        let most = burst as f64 + limit as f64 * elapsed.as_secs_f64();
        (i as f64 + 1.0 >= most - slack).then_some(elapsed)
    })
}

/// Runs one hot row: every worker starts its loop at the same instant on a fresh key.
pub async fn run(h: Hot<'_>) -> anyhow::Result<HotRow> {
    static RUN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let start_at = unix_us() + LEAD_IN.as_micros() as u64;
    let setup = WorkerSetup {
        contender: h.contender,
        mode: Mode::Hot,
        target: h.target.clone(),
        limit_name: format!("hot{n}"),
        key: format!("hot-key-{n}-{}", std::process::id()),
        limit: h.limit,
        period_ms: 1000,
        burst: h.burst,
        algorithm: h.algorithm.to_string(),
        callers: h.callers,
        duration_ms: h.run_for.as_millis() as u64,
        count: 0,
        start_at_unix_us: start_at,
        wait_retry_after: h.wait_retry_after,
    };
    let setups = vec![setup; h.processes];
    let server_pids = h.server_pids.clone();
    // The store's CPU over the loop only: read at the common start and at its end.
    let server_cpu = tokio::spawn(async move {
        sleep_until(start_at).await;
        let before = cpu_ns(&server_pids).unwrap_or(0);
        sleep_until(start_at + duration_us(h.run_for)).await;
        cpu_ns(&server_pids).unwrap_or(0).saturating_sub(before)
    });
    let bound = LEAD_IN + h.run_for + Duration::from_secs(60);
    let reports = spawn::run_all(&setups, bound).await?;
    let server_ns = server_cpu.await.unwrap_or(0);
    Ok(merge(&h, &reports, start_at, server_ns))
}

fn duration_us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

async fn sleep_until(at_us: u64) {
    let now = unix_us();
    if at_us > now {
        tokio::time::sleep(Duration::from_micros(at_us - now)).await;
    }
}

fn merge(h: &Hot<'_>, reports: &[WorkerReport], start_at: u64, server_ns: u64) -> HotRow {
    let sum = |f: fn(&WorkerReport) -> u64| reports.iter().map(f).sum::<u64>();
    let (decisions, admitted) = (sum(|r| r.decisions), sum(|r| r.admitted));
    let admitted_at: Vec<[u64; 2]> = reports
        .iter()
        .flat_map(|r| r.admitted_at_us.iter().copied())
        .collect();
    // GCRA's bucket starts full: counting from before it was spent would add the burst's
    // leftover to the steady rate (a debug build drains it in ~0.5–0.8 s on etcd).
    let spent = (h.algorithm == "gcra")
        .then(|| burst_spent_at(&admitted_at, start_at, h.limit, h.burst))
        .flatten();
    let skip = spent.map_or(steady_window(h.run_for), |at| {
        at.max(steady_window(h.run_for))
    });
    let (from, to) = (
        start_at + duration_us(skip),
        start_at + duration_us(h.run_for),
    );
    let steady = admitted_at
        .iter()
        .filter(|e| e[1] >= from && e[1] < to)
        .count();
    let steady_s = (h.run_for - skip).as_secs_f64();
    let ours = reports.iter().all(|r| r.store_requests.is_some());
    let requests = sum(|r| r.store_requests.unwrap_or(0));
    let local = sum(|r| r.local_denials.unwrap_or(0));
    let denials = decisions - admitted.min(decisions);
    let worker_cpu_s: f64 = reports.iter().map(|r| r.cpu_s).sum();
    let server_cpu_s = server_ns as f64 / 1e9;
    let algorithm = reports
        .first()
        .map_or_else(|| h.algorithm.to_string(), |r| r.algorithm.clone());
    HotRow {
        who: h.who.clone(),
        contender: h.contender,
        over: interval::worst_excess(
            &admitted_at,
            &algorithm,
            h.contender == Contender::Clusterlimit,
            h.limit,
            1_000_000,
            h.burst,
        ),
        algorithm,
        limit: h.limit,
        burst: h.burst,
        decisions,
        errors: sum(|r| r.errors),
        run_for: h.run_for,
        steady_admitted_per_s: if steady_s > 0.0 {
            steady as f64 / steady_s
        } else {
            0.0
        },
        steady_from: skip,
        burst_spent: spent.is_some() || h.algorithm != "gcra",
        requests_per_admitted: (ours && admitted > 0).then(|| requests as f64 / admitted as f64),
        local_denial_share: (ours && denials > 0).then(|| local as f64 / denials as f64),
        latency: Samples::new(
            reports
                .iter()
                .flat_map(|r| r.latencies_us.iter().map(|&us| Duration::from_micros(us)))
                .collect(),
        ),
        admitted_latency: Samples::new(
            admitted_at
                .iter()
                .map(|e| Duration::from_micros(e[1].saturating_sub(e[0])))
                .collect(),
        ),
        cpu_us_per_decision: if decisions > 0 {
            (worker_cpu_s + server_cpu_s) * 1e6 / decisions as f64
        } else {
            0.0
        },
        worker_cpu_s,
        server_cpu_s,
    }
}

/// [`burst_spent_at`] checked on known histories (a bench has no test harness), like
/// `interval::self_check`.
pub fn self_check() -> anyhow::Result<()> {
    let admitted =
        |at_ms: &[u64]| -> Vec<[u64; 2]> { at_ms.iter().map(|&ms| [0, ms * 1000]).collect() };
    // 100/s, burst 100 (slack 5 + 1): 90 at once are not the burst, 100 at once are.
    anyhow::ensure!(
        burst_spent_at(&admitted(&[0; 90]), 0, 100, 100).is_none(),
        "burst check: 90 of 100 called spent"
    );
    anyhow::ensure!(
        burst_spent_at(&admitted(&[0; 100]), 0, 100, 100) == Some(Duration::ZERO),
        "burst check: 100 of 100 not spent"
    );
    anyhow::ensure!(
        burst_spent_at(&[], 0, 100, 100).is_none(),
        "burst check: nothing admitted called spent"
    );
    // 1,000/s, burst 1,000 (slack 50 + 10): 100 admitted per 100 ms only keep the pace and
    // never spend it; 400 per 100 ms catch up at 200 ms (1,140 of 1,200).
    let slow: Vec<u64> = (0..2000).map(|i| i / 100 * 100).collect();
    anyhow::ensure!(
        burst_spent_at(&admitted(&slow), 0, 1000, 1000).is_none(),
        "burst check: a drain at the pace called spent"
    );
    let fast: Vec<u64> = (0..4000).map(|i| i / 400 * 100).collect();
    anyhow::ensure!(
        burst_spent_at(&admitted(&fast), 0, 1000, 1000) == Some(Duration::from_millis(200)),
        "burst check: a fast drain not spent at 200 ms"
    );
    Ok(())
}
