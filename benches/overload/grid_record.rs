//! What one grid row's records mean (issue 37's targets):
//!
//! * steady part = from the warm-up's end to the first step: goodput (successes within the
//!   objective ÷ what the dependency could serve), p99 of the admitted calls answered or timed
//!   out (record.rs's definitions), the stored capacity's range;
//! * settle after each step: the first second from which, for the plan's hold, both the stored
//!   capacity (mean of that second's reads) is within [0.5×, 2×] of the new true capacity and
//!   goodput is ≥ 90% of it; looked for until the next step or the end;
//! * in-flight violations: record.rs's check of each admission against the capacity in force;
//! * controller steps: the distinct windows whose step was read back (`adaptive_status()`'s
//!   `last`, polled every 100 ms by load.rs's monitor; the library announces a step only once
//!   its capacity write landed, or when it held) ÷ the windows wholly inside the run, less the
//!   last one (its step may come after the monitor's last read).

use crate::gate::{Kind, WINDOW};
use crate::grid::GridTimes;
use crate::load::{RunData, Unloaded};
use crate::plan::{Plan, Scenario};
use crate::record::{summarise, InFlight};
use crate::stats::Samples;
use std::collections::BTreeSet;
use std::time::Duration;

const SETTLED_GOODPUT: f64 = 0.9;
/// The capacity counts as right within this factor of the true capacity, either way.
pub const CAPACITY_FACTOR: f64 = 2.0;

/// One row's figures.
#[derive(Debug, Clone)]
pub struct GridFigures {
    pub not_sent_per_s: f64,
    pub steady_goodput: f64,
    pub steady_latency: Samples,
    /// Stored capacity (min, max) in the steady part; `None` without a read.
    pub steady_capacity: Option<(u32, u32)>,
    /// Seconds to settle after the halving and after the return (`None`: not in its phase).
    pub settles: [Option<f64>; 2],
    pub in_flight: InFlight,
    /// Windows that got a step, windows counted.
    pub steps: (usize, usize),
    pub errors: (usize, Vec<String>),
    pub abandoned: usize,
}

impl GridFigures {
    pub fn steady_capacity_ok(&self, workers: usize) -> bool {
        self.steady_capacity.is_some_and(|(lo, hi)| {
            in_range(f64::from(lo), workers) && in_range(f64::from(hi), workers)
        })
    }

    pub fn violations(&self) -> usize {
        self.in_flight.over + self.in_flight.unchecked
    }
}

fn in_range(capacity: f64, workers: usize) -> bool {
    let w = workers as f64;
    capacity >= w / CAPACITY_FACTOR && capacity <= w * CAPACITY_FACTOR
}

pub fn figures(
    plan: &Plan,
    scenario: &Scenario,
    t: &GridTimes,
    unloaded: &Unloaded,
    data: &RunData,
) -> GridFigures {
    let whole = summarise(plan, scenario, unloaded, data);
    // The steady part alone: the same run cut at the first step, no changes in it.
    let steady_part = Scenario {
        run_for: t.halves,
        worker_changes: Vec::new(),
        ..scenario.clone()
    };
    let steady = summarise(plan, &steady_part, unloaded, data);
    let from = t.warm_up.as_secs_f64();
    let caps = data
        .capacity
        .iter()
        .filter(|c| c.at >= from && c.at < t.halves.as_secs_f64())
        .map(|c| c.capacity);
    GridFigures {
        not_sent_per_s: whole.not_sent_per_s,
        steady_goodput: steady.goodput,
        steady_latency: steady.latency,
        steady_capacity: caps.clone().min().zip(caps.max()),
        settles: settles(plan, scenario, t, unloaded, data),
        in_flight: whole.in_flight,
        steps: steps(data, t.end),
        errors: whole.errors,
        abandoned: whole.abandoned,
    }
}

/// Per second: goodput ÷ that second's capacity, and the mean stored capacity read in it.
fn seconds(
    plan: &Plan,
    scenario: &Scenario,
    unloaded: &Unloaded,
    data: &RunData,
) -> Vec<(f64, Option<f64>)> {
    let objective = unloaded.objective().as_secs_f64();
    let n = scenario.run_for.as_secs() as usize;
    let mut good = vec![0usize; n];
    for r in &data.records {
        let i = r.scheduled as usize;
        if i < n && r.kind == Kind::Success && r.latency() <= objective {
            good[i] += 1;
        }
    }
    let size = plan.dependency;
    (0..n)
        .map(|i| {
            let workers = scenario.workers_at(Duration::from_secs(i as u64), size.workers);
            let reads: Vec<f64> = data
                .capacity
                .iter()
                .filter(|c| c.at >= i as f64 && c.at < (i + 1) as f64)
                .map(|c| f64::from(c.capacity))
                .collect();
            let mean = (!reads.is_empty()).then(|| reads.iter().sum::<f64>() / reads.len() as f64);
            (good[i] as f64 / size.capacity_per_s(workers), mean)
        })
        .collect()
}

/// Seconds from each step until capacity and goodput hold (see the module's comment).
fn settles(
    plan: &Plan,
    scenario: &Scenario,
    t: &GridTimes,
    unloaded: &Unloaded,
    data: &RunData,
) -> [Option<f64>; 2] {
    let per_s = seconds(plan, scenario, unloaded, data);
    let hold = plan.settle_hold.as_secs().max(1) as usize;
    let full = plan.dependency.workers;
    let phase = |from: Duration, to: Duration, workers: usize| {
        let (a, b) = (from.as_secs() as usize, to.as_secs() as usize);
        let ok = |i: usize| {
            per_s.get(i).is_some_and(|(goodput, cap)| {
                *goodput >= SETTLED_GOODPUT && cap.is_some_and(|c| in_range(c, workers))
            })
        };
        (a..b)
            .take_while(|i| i + hold <= b)
            .find(|&i| (i..i + hold).all(ok))
            .map(|i| (i - a) as f64)
    };
    [
        phase(t.halves, t.back, full / 2),
        phase(t.back, t.end, full),
    ]
}

/// Windows that got a step, of the windows wholly inside the run less the last.
fn steps(data: &RunData, run_for: Duration) -> (usize, usize) {
    let w = WINDOW.as_millis() as u64;
    let start = data.start_unix_ms;
    let end = start + run_for.as_millis() as u64;
    let first = start.div_ceil(w);
    let last = (end / w).saturating_sub(1); // windows [first, last) are counted
    let stepped: BTreeSet<u64> = data
        .decisions
        .iter()
        .map(|(_, d)| d.window)
        .filter(|k| (first..last).contains(k))
        .collect();
    (stepped.len(), last.saturating_sub(first) as usize)
}
