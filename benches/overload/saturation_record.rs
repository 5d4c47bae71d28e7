//! What a saturation row's calls mean. Rates are over the overload phase, by scheduled time
//! (a call belongs to the phase it arrived in). The unloaded acquire latency is the p99 of the
//! answered acquires (grants and rejects) of the low load before the overload; recovery is
//! the time from the overload's end to the start of the first 200 ms bucket of the low load
//! after it from which every bucket's p99 (a failed, hung or unsent call counts as infinite)
//! is within 2× that, to the row's end.

use crate::saturation::{Call, End, SatData, SatPlan, SatRow};
use crate::stats::Samples;
use std::time::Duration;

const BUCKET: f64 = 0.2;
/// Recovered once a bucket's p99 is within this multiple of the unloaded p99.
const RECOVERED_WITHIN: f64 = 2.0;

#[derive(Debug, Clone)]
pub struct SatFigures {
    pub offered_per_s: f64,
    /// Not sent because the bench was behind its schedule, and because a Limiter was at its
    /// bound of outstanding calls or the process over its memory guard.
    pub behind_per_s: f64,
    pub bounded_per_s: f64,
    pub grants_per_s: f64,
    pub rejects_per_s: f64,
    /// Time to answer a reject (overload phase).
    pub reject_latency: Samples,
    /// Acquires that errored (not a timeout) or hung, overload phase.
    pub failed: usize,
    pub hung: usize,
    pub unloaded_p99: Duration,
    /// Seconds from the overload's end until recovered; `None`: not within the low load.
    pub recovery: Option<f64>,
}

pub fn figures(plan: &SatPlan, data: &SatData) -> SatFigures {
    let a = plan.before.as_secs_f64();
    let b = a + plan.overload.as_secs_f64();
    let during: Vec<&Call> = data
        .calls
        .iter()
        .filter(|c| c.scheduled >= a && c.scheduled < b)
        .collect();
    let span = plan.overload.as_secs_f64();
    let count = |e: End| during.iter().filter(|c| c.end == e).count();
    let before: Vec<&Call> = data.calls.iter().filter(|c| c.scheduled < a).collect();
    let unloaded_p99 = answered(&before).p99();
    SatFigures {
        offered_per_s: during.len() as f64 / span,
        behind_per_s: count(End::Behind) as f64 / span,
        bounded_per_s: count(End::Bounded) as f64 / span,
        grants_per_s: count(End::Granted) as f64 / span,
        rejects_per_s: count(End::Rejected) as f64 / span,
        reject_latency: Samples::new(
            during
                .iter()
                .filter(|c| c.end == End::Rejected)
                .map(|c| c.latency)
                .collect(),
        ),
        failed: count(End::Failed),
        hung: count(End::Hung),
        unloaded_p99,
        recovery: recovery(plan, &data.calls, b, unloaded_p99),
    }
}

/// The latencies of the grants and rejects.
fn answered(calls: &[&Call]) -> Samples {
    Samples::new(
        calls
            .iter()
            .filter(|c| matches!(c.end, End::Granted | End::Rejected))
            .map(|c| c.latency)
            .collect(),
    )
}

/// A bucket's p99, infinite if any call in it was not answered at all.
fn bucket_p99(calls: &[&Call]) -> f64 {
    if calls
        .iter()
        .any(|c| matches!(c.end, End::Failed | End::Hung | End::Behind | End::Bounded))
    {
        return f64::INFINITY;
    }
    answered(calls).p99().as_secs_f64()
}

fn recovery(plan: &SatPlan, calls: &[Call], from: f64, unloaded_p99: Duration) -> Option<f64> {
    let limit = unloaded_p99.as_secs_f64() * RECOVERED_WITHIN;
    let n = (plan.after.as_secs_f64() / BUCKET).round() as usize;
    let ok: Vec<Option<bool>> = (0..n)
        .map(|k| {
            let (a, b) = (from + k as f64 * BUCKET, from + (k + 1) as f64 * BUCKET);
            let inside: Vec<&Call> = calls
                .iter()
                .filter(|c| c.scheduled >= a && c.scheduled < b)
                .collect();
            // An empty bucket says nothing either way.
            (!inside.is_empty()).then(|| bucket_p99(&inside) <= limit)
        })
        .collect();
    // The first bucket after the last bad one, if any bucket after it had calls.
    let last_bad = ok.iter().rposition(|b| *b == Some(false));
    let first = last_bad.map_or(0, |i| i + 1);
    ok[first..]
        .contains(&Some(true))
        .then_some(first as f64 * BUCKET)
}

impl SatFigures {
    /// Grants per second over the store's ceiling.
    pub fn grant_ratio(&self, ceiling: f64) -> f64 {
        self.grants_per_s / ceiling
    }
}

/// The row's name in the report.
pub fn row_name(row: &SatRow) -> String {
    format!(
        "{:.0}× ceiling, timeout {} ms",
        row.times_ceiling,
        row.timeout.as_millis()
    )
}
