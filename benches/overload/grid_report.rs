//! The grid's table: one row per grid row, every figure with issue 37's target marked, the
//! rows whose offered load is past the store's measured ceiling marked as such, and a failed
//! row printed as failed (never left out).

use crate::ceiling::Ceiling;
use crate::grid::{GridPlan, GridResult, GridRow};
use crate::grid_record::GridFigures;
use crate::load::Unloaded;
use crate::report::verdicts;
use crate::stats::ms;
use std::fmt::Write as _;
use std::time::Duration;

// Issue 37's targets for every grid row.
const STEADY_GOODPUT: f64 = 0.9;
const P99_TIMES_UNLOADED: f64 = 2.0;
const SETTLE_WITHIN: f64 = 10.0;
const STEPS_SHARE: f64 = 0.95;

pub fn markdown(
    grid: &GridPlan,
    unloaded: &[(Duration, Unloaded)],
    ceiling: &Ceiling,
    results: &[GridResult],
) -> String {
    let mut md = about(grid, unloaded, ceiling);
    md.push_str(
        "\n| row | offered/s (÷ ceiling) | steady goodput | steady p99 ms (× unloaded) | stored capacity: steady of W (in [0.5×, 2×]?); whole row | settle after ×0.5 / ×2 | in-flight violations | steps / windows | not sent/s | errors | peak MB | CPU cores | targets |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in results {
        let base = unloaded.iter().find(|(s, _)| *s == r.row.service);
        md.push_str(&table_row(grid, r, base.map(|(_, u)| u), ceiling));
    }
    md.push_str(&errors(results));
    md
}

fn about(grid: &GridPlan, unloaded: &[(Duration, Unloaded)], ceiling: &Ceiling) -> String {
    let t = &grid.times;
    let mut md = format!(
        "- each row: a fresh dependency (as above: a FIFO queue of 128, lognormal service times \
         σ 0.5) of W workers and the row's mean service time; R = {r} replicas, each with its \
         own `Limiter` on the 1-node etcd, offering {x}× the true capacity (W ÷ mean service \
         time) as open-loop Poisson arrivals; ours created at the row's first capacity (× W), \
         `min(1).max(256).window(500 ms)`, max 512 where the first capacity is above 256, the \
         algorithm's defaults otherwise; admission, objective and deadlines as above, from the \
         row's own unloaded latency\n\
         - timeline: {warm} s warm-up, the dependency's workers halve at {h} s and come back at \
         {b} s, the row ends at {e} s. Steady = [{warm} s, {h} s): goodput (successes within \
         the objective ÷ what the dependency could serve), p99 of the admitted calls answered \
         or timed out, and the stored capacity's range (read every 100 ms)\n\
         - settle after a step: seconds until, for {hold} s running, the mean stored capacity \
         of each second is within [0.5×, 2×] of the new true capacity and goodput ≥ 90% of it \
         (target ≤ {within:.0} s; `never` = not within the phase)\n\
         - in-flight violations: admissions with more calls in flight (all replicas) than the \
         stored capacity in force allowed, plus those not between two capacity reads \
         (target 0)\n\
         - steps / windows: the distinct 500 ms windows whose controller step was read back with \
         `Semaphore::adaptive_status()` (`last.window`, polled every 100 ms from a monitoring \
         Limiter, apart from its capacity reads; a step is announced only once its capacity write landed, or when it held) ÷ \
         the windows wholly inside the row less the last (target ≥ 95%)\n\
         - not sent: arrivals the harness did not send (past their deadline before it could, or \
         over its bound of outstanding calls per replica, or over its memory guard of {guard} \
         MB): the store-saturated rows' symptom, never a healthy one's\n\
         - ceiling: the store's raw enqueue + remove pairs/s measured just before the grid \
         ({pairs:.0}/s; measured as the saturation rows' ceiling is); a row offering more calls/s than that (each call is one \
         acquire and one release, i.e. one pair) is **store-saturated**: it measures the \
         semaphore past the store's write rate, not the controller alone\n\
         - peak MB: this process's resident set (VmRSS, sampled every 20 ms) during the row, \
         over its value at the row's start; CPU cores: this process + etcd, on average\n\
         - unloaded latency (1 caller, sequential calls, ≤ 10 s each):",
        r = grid.replicas,
        x = grid.overload,
        warm = t.warm_up.as_secs(),
        h = t.halves.as_secs(),
        b = t.back.as_secs(),
        e = t.end.as_secs(),
        hold = grid.settle_hold.as_secs(),
        within = SETTLE_WITHIN,
        guard = crate::grid::MEMORY_GUARD / 1_000_000,
        pairs = ceiling.pairs_per_s,
    );
    for (service, u) in unloaded {
        let s = &u.samples;
        let _ = write!(
            md,
            " {} ms: {} calls, p50 {} ms, p99 {} ms;",
            service.as_millis(),
            s.len(),
            ms(s.p50()),
            ms(s.p99())
        );
    }
    md.pop();
    md.push('\n');
    md
}

fn table_row(
    grid: &GridPlan,
    r: &GridResult,
    unloaded: Option<&Unloaded>,
    ceiling: &Ceiling,
) -> String {
    let row = &r.row;
    let offered = row.offered_per_s(grid.overload);
    let saturated = offered > ceiling.pairs_per_s;
    let load = format!(
        "{offered:.0} ({:.2}×){}",
        offered / ceiling.pairs_per_s,
        if saturated {
            " **store-saturated**"
        } else {
            ""
        }
    );
    let cost = format!(
        "{:.0} | {}",
        r.memory.growth_mb(),
        r.cores.map_or_else(
            || "?".to_string(),
            |(bench, etcd)| format!("{bench:.2} + {etcd:.2}")
        )
    );
    let (f, unloaded) = match (&r.figures, unloaded) {
        (Ok(f), Some(u)) => (f, u),
        (Err(e), _) => {
            return format!(
                "| {} | {load} | **row failed** after {:.0} s: {} | | | | | | | | | {cost} | **not met** (failed) |\n",
                row.name(),
                r.took.as_secs_f64(),
                e.replace('|', "/").replace('\n', " ")
            )
        }
        (Ok(_), None) => return format!("| {} | {load} | no unloaded latency |\n", row.name()),
    };
    format!(
        "| {} | {load} | {:.0}% | {} | {} | {} | {} | {} | {:.0} | {} | {cost} | {} |\n",
        row.name(),
        f.steady_goodput * 100.0,
        p99(f, unloaded),
        capacity(f, row),
        settles(f),
        violations(f),
        steps(f),
        f.not_sent_per_s,
        f.errors.0 + f.abandoned,
        targets(f, unloaded),
    )
}

fn p99(f: &GridFigures, u: &Unloaded) -> String {
    let p = f.steady_latency.p99();
    let base = u.samples.p99();
    format!(
        "{} ({})",
        ms(p),
        crate::stats::times(crate::stats::ratio(p, base))
    )
}

fn capacity(f: &GridFigures, row: &GridRow) -> String {
    match f.steady_capacity {
        Some((lo, hi)) => format!(
            "{lo}–{hi} of {} ({}); whole row {}",
            row.workers,
            if f.steady_capacity_ok(row.workers) {
                "yes"
            } else {
                "**no**"
            },
            f.in_flight
                .stored
                .map_or("?".to_string(), |(lo, hi)| format!("{lo}–{hi}"))
        ),
        None => "no read".to_string(),
    }
}

fn settles(f: &GridFigures) -> String {
    f.settles
        .iter()
        .map(|s| s.map_or("never".to_string(), |t| format!("{t:.0} s")))
        .collect::<Vec<_>>()
        .join(" / ")
}

fn violations(f: &GridFigures) -> String {
    let i = &f.in_flight;
    if i.over == 0 && i.unchecked == 0 {
        "0".to_string()
    } else {
        format!(
            "**{} over** (worst {:.2}×), {} not between two reads",
            i.over, i.worst_ratio, i.unchecked
        )
    }
}

fn steps(f: &GridFigures) -> String {
    let (stepped, windows) = f.steps;
    let share = if windows == 0 {
        0.0
    } else {
        stepped as f64 / windows as f64
    };
    format!("{stepped} / {windows} ({:.0}%)", share * 100.0)
}

fn steps_met(f: &GridFigures) -> bool {
    let (stepped, windows) = f.steps;
    windows > 0 && stepped as f64 >= STEPS_SHARE * windows as f64
}

/// Every target judged; the cell names the misses (all of them), or says all were met.
fn targets(f: &GridFigures, u: &Unloaded) -> String {
    let p99_target = u.samples.p99().mul_f64(P99_TIMES_UNLOADED);
    let settled = |s: Option<f64>| s.is_some_and(|t| t <= SETTLE_WITHIN);
    let checks = [
        ("goodput", f.steady_goodput >= STEADY_GOODPUT),
        ("p99", f.steady_latency.p99() <= p99_target),
        ("settle ×0.5", settled(f.settles[0])),
        ("settle ×2", settled(f.settles[1])),
        ("in flight", f.violations() == 0),
        ("steps", steps_met(f)),
    ];
    verdicts(&checks)
}

/// The first errors of each row that had some.
fn errors(results: &[GridResult]) -> String {
    let mut md = String::new();
    for r in results {
        let Ok(f) = &r.figures else { continue };
        if f.errors.0 == 0 && f.abandoned == 0 {
            continue;
        }
        let _ = writeln!(
            md,
            "- {}: {} errors (store or transport), {} calls abandoned at the end; first: {}",
            r.row.name(),
            f.errors.0,
            f.abandoned,
            f.errors.1.join(" / ").replace('\n', " ")
        );
    }
    if md.is_empty() {
        md
    } else {
        format!("\nGrid errors:\n\n{md}")
    }
}
