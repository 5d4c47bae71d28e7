//! The closed loop of a Rust peer worker (see `rate::protocol`): one caller making `count`
//! checks, or `callers` concurrent callers on one key until the run's end, and the report.
//! The check itself (one request to the peer's server) is the caller's.

use crate::rate::protocol::{Mode, WorkerReport, WorkerSetup};
use anyhow::Context as _;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Most latencies a hot-mode report carries (the protocol's bound).
const RESERVOIR: usize = 20_000;

/// Now as Unix microseconds: the clock every worker of a run shares, whatever its language.
pub fn unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// What the callers of one worker collected.
#[derive(Default)]
struct Tally {
    decisions: u64,
    admitted: u64,
    errors: u64,
    /// Latencies offered to the reservoir so far.
    seen: u64,
    /// Capacity of `latencies_us`: every latency when `usize::MAX`.
    keep: usize,
    latencies_us: Vec<u64>,
    admitted_at_us: Vec<[u64; 2]>,
    first_sent: Option<u64>,
    last_answered: u64,
    first_error: Option<String>,
}

impl Tally {
    fn record(
        &mut self,
        sent: u64,
        answered: u64,
        latency: Duration,
        outcome: anyhow::Result<bool>,
    ) {
        self.first_sent = Some(self.first_sent.map_or(sent, |f| f.min(sent)));
        self.last_answered = self.last_answered.max(answered);
        let admitted = match outcome {
            Ok(admitted) => admitted,
            Err(e) => {
                self.errors += 1;
                self.first_error.get_or_insert_with(|| format!("{e:#}"));
                return;
            }
        };
        self.decisions += 1;
        if admitted {
            self.admitted += 1;
            self.admitted_at_us.push([sent, answered]);
        }
        // Algorithm R: every decision's latency has the same chance to be kept.
        self.seen += 1;
        let us = latency.as_micros() as u64;
        if self.latencies_us.len() < self.keep {
            self.latencies_us.push(us);
        } else {
            let slot = fastrand::u64(0..self.seen) as usize;
            if let Some(kept) = self.latencies_us.get_mut(slot) {
                *kept = us;
            }
        }
    }
}

/// Runs `setup`'s mode with `check` (one decision: `Ok(true)` when admitted) and reports it
/// as `algorithm`. Fails when not one check got a decision.
pub async fn run<F, Fut>(
    setup: &WorkerSetup,
    algorithm: &str,
    check: F,
) -> anyhow::Result<WorkerReport>
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = anyhow::Result<bool>> + Send,
{
    let check = Arc::new(check);
    let keep = match setup.mode {
        Mode::Hot | Mode::Fresh => RESERVOIR,
        Mode::Uncontended => usize::MAX,
    };
    let tally = Arc::new(Mutex::new(Tally {
        keep,
        ..Tally::default()
    }));
    let now = unix_us();
    if setup.start_at_unix_us > now {
        tokio::time::sleep(Duration::from_micros(setup.start_at_unix_us - now)).await;
    }
    let me = [std::process::id()];
    let cpu_before = crate::cpu::cpu_ns(&me).unwrap_or(0);
    match setup.mode {
        Mode::Uncontended => {
            for _ in 0..setup.count {
                one(check.as_ref(), &tally).await;
            }
        }
        // Fresh: the check makes up each call's key (the loop is the same).
        Mode::Hot | Mode::Fresh => {
            let end = setup.start_at_unix_us.max(now) + setup.duration_ms * 1_000;
            let mut callers = tokio::task::JoinSet::new();
            for _ in 0..setup.callers.max(1) {
                let (check, tally) = (check.clone(), tally.clone());
                callers.spawn(async move {
                    while unix_us() < end {
                        one(check.as_ref(), &tally).await;
                    }
                });
            }
            while let Some(joined) = callers.join_next().await {
                joined.context("a caller task failed")?;
            }
        }
    }
    let cpu_s = crate::cpu::cpu_ns(&me)
        .unwrap_or(0)
        .saturating_sub(cpu_before) as f64
        / 1e9;
    let t = std::mem::take(&mut *tally.lock().unwrap_or_else(PoisonError::into_inner));
    if let Some(e) = &t.first_error {
        eprintln!(
            "{algorithm} worker: {} failed checks, the first: {e}",
            t.errors
        );
        anyhow::ensure!(t.decisions > 0, "no check got a decision: {e}");
    }
    Ok(WorkerReport {
        algorithm: algorithm.to_string(),
        decisions: t.decisions,
        admitted: t.admitted,
        errors: t.errors,
        elapsed_s: t.last_answered.saturating_sub(t.first_sent.unwrap_or(0)) as f64 / 1e6,
        cpu_s,
        latencies_us: t.latencies_us,
        admitted_at_us: t.admitted_at_us,
        store_requests: None,
        local_denials: None,
    })
}

/// One check, timed and recorded.
async fn one<F, Fut>(check: &F, tally: &Mutex<Tally>)
where
    F: Fn() -> Fut,
    Fut: Future<Output = anyhow::Result<bool>>,
{
    let sent = unix_us();
    let started = Instant::now();
    let outcome = check().await;
    let latency = started.elapsed();
    let answered = unix_us();
    tally
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .record(sent, answered, latency, outcome);
}
