//! What the leased rate scenarios (issue 43) add to a row: proof that the hot key was served
//! from leases (else the row would only repeat the plain one), what the leases cost (units
//! lost), and the admitted dip around each fault: leases bridge the first ~300 ms of an
//! outage, then nothing is admitted until the store takes writes again.

use crate::rate::Fault;
use crate::report::{ms, LeaseFigures, Row};
use clusterlimit::testing::rate_history::Admitted;
use clusterlimit::RequestStats;
use std::time::Duration;

/// How long a lease's units may be spent (`docs/rate-limits.md`, "Hot keys: leased units").
/// A check admitted later than this after a kill was decided by a write the store took after
/// the kill.
pub const LEASE_HOLD: Duration = Duration::from_millis(300);

/// At least this share of a leased row's admissions must come from leases: the contract case
/// (`rate_leases_exact_under_contention`) asks as much of a quiet run; here the fault windows
/// (no lease can be taken while the store is down) and the per-check path of the first
/// checks, before a key is seen hot, count against it.
const LEASED_SHARE_FLOOR: f64 = 0.5;

/// The bins the dip is measured in: 50 ms from the kill (a third of a lease's demand), or the
/// quota's aligned windows for a window quota (whose units go early in each window). Returns
/// the width and the first bin's start.
fn bins(windowed: Option<Duration>, kill: u64) -> (u64, u64) {
    match windowed {
        Some(period) => {
            let p = period.as_nanos() as u64;
            (p, kill - kill % p)
        }
        None => (50_000_000, kill),
    }
}

/// Fails the row unless the Limiters took leases and admitted at least
/// [`LEASED_SHARE_FLOOR`] of the `admitted` checks from them; puts their counts in the row.
pub fn judge(stats: &RequestStats, admitted: usize, row: &mut Row) {
    let figures = LeaseFigures {
        from_leases: stats.rate_lease_admitted,
        leases: stats.rate_leases,
        leased_units: stats.rate_leased_units,
        returned_units: stats.rate_lease_returned_units,
        lost_units: stats.rate_lease_lost_units,
    };
    judge_figures(figures, admitted, row);
}

/// [`judge`] on counts already added up (a child process's printed ones included).
pub fn judge_figures(figures: LeaseFigures, admitted: usize, row: &mut Row) {
    let share = figures.from_leases as f64 / (admitted.max(1) as f64);
    row.check(figures.leases > 0, || {
        "no lease was taken: the key never looked hot to its Limiters, so the row tests \
         nothing leases do"
            .into()
    });
    row.check(share >= LEASED_SHARE_FLOOR, || {
        format!(
            "only {} of {admitted} admissions ({:.0}%) came from leases, below {:.0}%",
            figures.from_leases,
            share * 100.0,
            LEASED_SHARE_FLOOR * 100.0
        )
    });
    let rest = figures
        .leased_units
        .saturating_sub(figures.from_leases + figures.returned_units + figures.lost_units);
    row.note(format!(
        "leases: {} taken of {} units in all, {} admissions from them ({:.0}% of {admitted}), \
         {} units given back, {} lost, {rest} neither (held or owed back when the run stopped)",
        figures.leases,
        figures.leased_units,
        figures.from_leases,
        share * 100.0,
        figures.returned_units,
        figures.lost_units
    ));
    if let Some(rate) = row.rate.as_mut() {
        rate.leases = Some(figures);
    }
}

/// Notes the admitted dip of each fault: the bins (see [`bins`]; `windowed` is a window
/// quota's period) from the fault's start until two bins after its end that admitted under
/// half the quota's pace, and the admitted rate in the fault windows beside the rest of the
/// run `span`.
pub fn dips(
    events: &[Admitted],
    faults: &[Fault],
    (rate, windowed): (u64, Option<Duration>),
    span: (u64, u64),
    row: &mut Row,
) {
    let mut starts: Vec<u64> = events.iter().map(|e| e.start).collect();
    starts.sort_unstable();
    let in_range =
        |a: u64, b: u64| starts.partition_point(|&s| s < b) - starts.partition_point(|&s| s < a);
    let mut during = (0usize, 0u64);
    for (n, f) in faults.iter().enumerate() {
        during.0 += in_range(f.start, f.end);
        during.1 += f.end - f.start;
        let (bin_ns, origin) = bins(windowed, f.start);
        let pace = rate as f64 * bin_ns as f64 / 1e9;
        // Whole bins from the kill until two bins past the fault's end, within the run.
        let count = ((f.end - origin) / bin_ns + 2).min(span.1.saturating_sub(origin) / bin_ns);
        let low: Vec<u64> = (0..count)
            .map(|b| origin + b * bin_ns)
            .filter(|&b| (in_range(b, b + bin_ns) as f64) < pace / 2.0)
            .collect();
        let at = |ns: u64| {
            let sign = if ns < f.start { "-" } else { "+" };
            format!("{sign}{}", ms(Duration::from_nanos(ns.abs_diff(f.start))))
        };
        let dip = match (low.first(), low.last()) {
            (Some(&first), Some(&last)) => format!(
                "{} of {count} bins of {} under half the quota, from {} to {} after the kill",
                low.len(),
                ms(Duration::from_nanos(bin_ns)),
                at(first),
                at(last + bin_ns)
            ),
            _ => format!(
                "no bin of {} under half the quota",
                ms(Duration::from_nanos(bin_ns))
            ),
        };
        row.note(format!(
            "kill {}: {}/s admitted in its fault window of {}; dip: {dip}",
            n + 1,
            per_sec(in_range(f.start, f.end), f.end - f.start),
            ms(Duration::from_nanos(f.end - f.start))
        ));
    }
    let stretches = crate::rate::outside(faults, span);
    let outside = stretches
        .iter()
        .map(|&(a, b)| in_range(a, b))
        .sum::<usize>();
    let outside_ns = stretches.iter().map(|(a, b)| b - a).sum::<u64>();
    row.note(format!(
        "admitted/s in the fault windows {} vs outside them {} (quota {rate}/s)",
        per_sec(during.0, during.1),
        per_sec(outside, outside_ns)
    ));
}

fn per_sec(count: usize, ns: u64) -> String {
    if ns == 0 {
        return "–".into();
    }
    format!("{:.0}", count as f64 * 1e9 / ns as f64)
}
