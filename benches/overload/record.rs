//! What a run's records mean: goodput against the dependency's true capacity, latency,
//! rejections and drops per second, the time to settle after each change, and the in-flight
//! sum checked against the stored capacity in force.
//!
//! Calls belong to the second they were scheduled in (so every call of a second has finished
//! when it is counted). Latency percentiles are over the calls admitted that got an answer or
//! timed out (a timed-out call counts at its timeout); a 503 answers at once and a rejected
//! call never reaches the dependency, so neither says anything about its latency.

use crate::flight::Admission;
use crate::gate::Kind;
use crate::load::{CapacitySample, Record, RunData, Unloaded};
use crate::plan::{Plan, Scenario};
use crate::stats::Samples;
use std::time::Duration;

/// Width of the per-second series.
const BIN: f64 = 1.0;
/// A change has settled once goodput reaches this share of the new capacity (and p99 the
/// objective) for the plan's `settle_hold`.
const SETTLED_GOODPUT: f64 = 0.9;

/// One run, summarised.
#[derive(Debug, Clone)]
pub struct Summary {
    /// Calls offered per second (all replicas, measured part).
    pub offered_per_s: f64,
    /// Successes within the objective over what the dependency could serve (its capacity
    /// integrated over the measured part).
    pub goodput: f64,
    pub latency: Samples,
    pub rejected_per_s: f64,
    /// Refused (503) or timed out.
    pub dropped_per_s: f64,
    /// Never sent by the harness (see `Kind::NotSent`): none in a healthy run.
    pub not_sent_per_s: f64,
    pub errors: (usize, Vec<String>),
    pub abandoned: usize,
    /// After each change (capacity halved / back, replicas joined): its name, and the seconds
    /// until the run settled (`None`: not within the segment).
    pub settles: Vec<(&'static str, Option<f64>)>,
    pub in_flight: InFlight,
    pub store_requests_per_s: f64,
    /// Per second: `(goodput / capacity, p99 in ms, stored capacity or Σ limits)`.
    pub series: Vec<(f64, f64, Option<f64>)>,
}

/// The in-flight sum, and for a cluster contender the check against the stored capacity.
#[derive(Debug, Clone, Default)]
pub struct InFlight {
    pub max: usize,
    /// Cluster contenders: the stored capacity seen over the run (min, max), admissions with
    /// more calls in flight than the capacity in force allowed, and admissions not checked
    /// (no capacity read yet).
    pub stored: Option<(u32, u32)>,
    pub over: usize,
    pub unchecked: usize,
    /// The largest in-flight count over the capacity in force at an admission.
    pub worst_ratio: f64,
    /// tower-acc: the largest sum of the replicas' limits.
    pub max_limit_sum: Option<usize>,
}

/// Summarises `data` of `scenario` run with the dependency and unloaded latency of the plan.
pub fn summarise(plan: &Plan, scenario: &Scenario, unloaded: &Unloaded, data: &RunData) -> Summary {
    let objective = unloaded.objective().as_secs_f64();
    let from = scenario.measure_from.as_secs_f64();
    let end = scenario.run_for.as_secs_f64();
    let measured: Vec<&Record> = data
        .records
        .iter()
        .filter(|r| r.scheduled >= from && r.scheduled < end)
        .collect();
    let span = end - from;
    let count = |k: Kind| measured.iter().filter(|r| r.kind == k).count() as f64;
    let good = measured
        .iter()
        .filter(|r| r.kind == Kind::Success && r.latency() <= objective)
        .count() as f64;
    let capacity = capacity_between(plan, scenario, from, end);
    let series = series(plan, scenario, unloaded, data);
    Summary {
        offered_per_s: measured.len() as f64 / span,
        goodput: good / capacity,
        latency: latencies(measured.iter().copied()),
        rejected_per_s: count(Kind::Rejected) / span,
        dropped_per_s: (count(Kind::Refused) + count(Kind::TimedOut)) / span,
        not_sent_per_s: count(Kind::NotSent) / span,
        errors: data.errors.clone(),
        abandoned: data.abandoned,
        settles: settles(plan, scenario, &series),
        in_flight: in_flight(data),
        store_requests_per_s: data.store.total() as f64 / end,
        series: series
            .iter()
            .map(|b| (b.goodput, b.p99 * 1e3, b.limit))
            .collect(),
    }
}

/// The latencies that say something about the dependency: answered or timed out.
fn latencies<'a>(records: impl Iterator<Item = &'a Record>) -> Samples {
    Samples::new(
        records
            .filter(|r| matches!(r.kind, Kind::Success | Kind::TimedOut))
            .map(|r| Duration::from_secs_f64(r.latency().max(0.0)))
            .collect(),
    )
}

/// Calls the dependency can serve between `from` and `to` (seconds), given its changes.
fn capacity_between(plan: &Plan, scenario: &Scenario, from: f64, to: f64) -> f64 {
    let size = plan.dependency;
    let mut edges: Vec<f64> = vec![from, to];
    edges.extend(
        scenario
            .worker_changes
            .iter()
            .map(|(at, _)| at.as_secs_f64())
            .filter(|t| *t > from && *t < to),
    );
    edges.sort_by(f64::total_cmp);
    edges
        .windows(2)
        .map(|w| {
            let workers = scenario.workers_at(Duration::from_secs_f64(w[0]), size.workers);
            size.capacity_per_s(workers) * (w[1] - w[0])
        })
        .sum()
}

/// One second of a run.
struct Bin {
    /// Successes within the objective over the capacity of that second.
    goodput: f64,
    /// In seconds; infinite when no call was answered (nothing to show it is fine).
    p99: f64,
    /// The stored capacity (cluster) or the sum of limits (tower-acc), averaged.
    limit: Option<f64>,
    /// Goodput at 90% of this second's capacity or more, and p99 within the objective.
    settled: bool,
}

fn series(plan: &Plan, scenario: &Scenario, unloaded: &Unloaded, data: &RunData) -> Vec<Bin> {
    let objective = unloaded.objective().as_secs_f64();
    let bins = (scenario.run_for.as_secs_f64() / BIN).ceil() as usize;
    let mut good = vec![0usize; bins];
    let mut lat: Vec<Vec<&Record>> = vec![Vec::new(); bins];
    for r in &data.records {
        let i = (r.scheduled / BIN) as usize;
        if i >= bins {
            continue;
        }
        if r.kind == Kind::Success && r.latency() <= objective {
            good[i] += 1;
        }
        lat[i].push(r);
    }
    let limits: Vec<(f64, f64)> = if data.capacity.is_empty() {
        data.limits.iter().map(|(t, l)| (*t, *l as f64)).collect()
    } else {
        data.capacity
            .iter()
            .map(|c| (c.at, f64::from(c.capacity)))
            .collect()
    };
    (0..bins)
        .map(|i| {
            let (a, b) = (i as f64 * BIN, (i + 1) as f64 * BIN);
            let s = latencies(lat[i].iter().copied());
            let in_bin: Vec<f64> = limits
                .iter()
                .filter(|(t, _)| *t >= a && *t < b)
                .map(|(_, l)| *l)
                .collect();
            let goodput = good[i] as f64 / capacity_between(plan, scenario, a, b);
            let p99 = if s.len() == 0 {
                f64::INFINITY
            } else {
                s.p99().as_secs_f64()
            };
            Bin {
                goodput,
                p99,
                limit: (!in_bin.is_empty())
                    .then(|| in_bin.iter().sum::<f64>() / in_bin.len() as f64),
                settled: goodput >= SETTLED_GOODPUT && p99 <= objective,
            }
        })
        .collect()
}

/// The time to settle after each change: the first second from which goodput stays at 90% of
/// the new capacity or more and p99 within the objective for `settle_hold`, counted from the
/// change and looked for until the next change (or the end).
fn settles(plan: &Plan, scenario: &Scenario, series: &[Bin]) -> Vec<(&'static str, Option<f64>)> {
    let full = plan.dependency.workers;
    let mut changes: Vec<(&'static str, f64)> = scenario
        .worker_changes
        .iter()
        .map(|(at, w)| {
            let what = if *w < full { "halved" } else { "back" };
            (what, at.as_secs_f64())
        })
        .collect();
    if let Some(at) = scenario.join_at {
        changes.push(("joined", at.as_secs_f64()));
    }
    changes.sort_by(|a, b| a.1.total_cmp(&b.1));
    let hold = ((plan.settle_hold.as_secs_f64() / BIN).ceil() as usize).max(1);
    let end = scenario.run_for.as_secs_f64();
    changes
        .iter()
        .enumerate()
        .map(|(k, (what, at))| {
            let until = changes.get(k + 1).map_or(end, |c| c.1);
            let first = (at / BIN).ceil() as usize;
            let last = (until / BIN).floor() as usize; // bins [first, last) lie in the segment
            let ok = |i: usize| series.get(i).is_some_and(|b| b.settled);
            let found = (first..last)
                .take_while(|i| i + hold <= last)
                .find(|&i| (i..i + hold).all(ok));
            (*what, found.map(|i| i as f64 * BIN - at))
        })
        .collect()
}

/// The in-flight maximum and, for a cluster contender, each admission checked against the
/// stored capacity in force while it waited (see `allowed`).
fn in_flight(data: &RunData) -> InFlight {
    let mut out = InFlight {
        max: data
            .admissions
            .iter()
            .map(|a| a.in_flight)
            .max()
            .unwrap_or(0),
        max_limit_sum: data.limits.iter().map(|(_, l)| *l).max(),
        ..InFlight::default()
    };
    if data.capacity.is_empty() {
        return out;
    }
    let caps = data.capacity.iter().map(|c| c.capacity);
    out.stored = caps.clone().min().zip(caps.max());
    for a in &data.admissions {
        match allowed(&data.capacity, a) {
            None => out.unchecked += 1,
            Some(cap) => {
                if a.in_flight > cap as usize {
                    out.over += 1;
                }
                out.worst_ratio = out.worst_ratio.max(a.in_flight as f64 / f64::from(cap));
            }
        }
    }
    out
}

/// The largest capacity that can have been in force between an admission's request and its
/// grant. The store granted it at some instant in between, and at every grant the holders are
/// at most the capacity of that instant (shrinking never revokes, but a grant after a shrink
/// waits until the holders fit); the harness's count is at most the store's holders. The
/// samples are point reads, so the values in force in that interval are among those read from
/// the last read before it to the first read started after it (as long as the capacity changes
/// at most once between two reads: the adaptive controller steps once per window, 500 ms, the
/// monitor reads every 100 ms). `None` when the admission is not between two reads.
fn allowed(samples: &[CapacitySample], a: &Admission) -> Option<u32> {
    let first = samples.iter().rposition(|s| s.at <= a.asked)?;
    let last = samples.iter().position(|s| s.asked >= a.admitted)?;
    samples.get(first..=last)?.iter().map(|s| s.capacity).max()
}
