//! The saturation rows' table: the ceiling first, then one row per offered rate × timeout
//! with issue 37's targets marked, and each row's errors by message under it.

use crate::ceiling::Ceiling;
use crate::report::verdicts;
use crate::saturation::{SatData, SatPlan, SatRow, HUNG_AFTER, OUTSTANDING};
use crate::saturation_record::{row_name, SatFigures};
use crate::stats::ms;
use std::fmt::Write as _;
use std::time::Duration;

// Issue 37's targets for the store-saturation rows.
const GRANT_SHARE: f64 = 0.8;
const REJECT_SLACK: Duration = Duration::from_millis(100);
const MEMORY_MB: f64 = 100.0;
const RECOVERY_S: f64 = 2.0;

/// One row's outcome: its data and figures, or why it failed; how long it took.
pub struct SatResult {
    pub row: SatRow,
    pub outcome: Result<(SatData, SatFigures), String>,
    pub took: Duration,
}

pub fn markdown(plan: &SatPlan, ceiling: &Ceiling, results: &[SatResult]) -> String {
    let mut md = about(plan, ceiling);
    md.push_str(
        "\n| row | offered/s (× ceiling) | grants/s (÷ ceiling) | rejects/s | reject answered, ms p50 / p99 / max | errored / hung | not sent/s: behind / bound | peak MB | unloaded p99 ms | recovery | targets |\n\
         |---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in results {
        md.push_str(&table_row(ceiling, r));
    }
    md.push_str(&messages(results));
    md
}

fn about(plan: &SatPlan, ceiling: &Ceiling) -> String {
    format!(
        "- ceiling, measured first on the same etcd: {pairs:.0} enqueue + remove pairs/s (a put \
         of a key bound to a lease, then its delete, with etcd-client directly from {conns} \
         connections × 32 loops back to back, {secs:.1} s after 0.5 s of warm-up, the best of \
         {rounds} such rounds; pair p50 {p50} ms, p99 {p99} ms; {failed} pairs failed)\n\
         - each row: a fixed semaphore of capacity {cap} on a fresh prefix, used from {n} \
         Limiters (each its own `Limiter`, its own session) in this process; every acquire is \
         `acquire_timeout(row's timeout)`, a grant is held {hold} ms and released. Open-loop \
         Poisson arrivals split evenly over the Limiters: {low:.0}% of the ceiling for {b} s \
         (the unloaded acquire latency: p99 of grants and rejects), the row's multiple of the \
         ceiling for {o} s, {low:.0}% again for {a} s\n\
         - grants/s, rejects/s (`Timeout` or `NoPermits`) and their answer time (from the call \
         to `acquire_timeout` to its answer): calls arriving during the overload; target grants \
         ≥ {gs:.0}% of the ceiling, rejects answered within the timeout + {slack} ms (judged on \
         their p99, and no call hung: hung = no answer {hung} s past its timeout, then cut off)\n\
         - errored: acquires that failed otherwise (by message below the table); not sent: \
         arrivals the bench did not send, *behind* = the bench was already {behind} ms past the \
         call's timeout when it came to it (this process, the library's work included, could not \
         keep to the schedule), *bound* = its Limiter already had {bound} calls outstanding or \
         the process was over its memory guard of {guard} MB (the bench's own bounds, so it \
         survives a library that stops answering)\n\
         - peak MB: this process's resident set (VmRSS every 20 ms) during the row over its \
         value at the row's start, the bench's own share included (a record of 32 bytes per \
         arrival, its outstanding calls' tasks); target ≤ {mem:.0} MB for the {n} Limiters\n\
         - recovery: from the overload's end until every 200 ms bucket's p99 (by arrival; a \
         failed, hung or unsent call counts as infinite) stays within 2× the unloaded p99 to the \
         row's end; target ≤ {rec:.0} s; `never` = not within the {a} s\n",
        pairs = ceiling.pairs_per_s,
        conns = crate::ceiling::CONNECTIONS,
        secs = ceiling.measured_for.as_secs_f64(),
        rounds = plan.ceiling_rounds,
        p50 = ms(ceiling.pair.p50()),
        p99 = ms(ceiling.pair.p99()),
        failed = ceiling.failed,
        cap = plan.capacity,
        n = plan.limiters,
        hold = plan.hold.as_millis(),
        low = plan.low * 100.0,
        b = plan.before.as_secs_f64(),
        o = plan.overload.as_secs_f64(),
        a = plan.after.as_secs_f64(),
        gs = GRANT_SHARE * 100.0,
        slack = REJECT_SLACK.as_millis(),
        behind = crate::saturation::BEHIND_SLACK.as_millis(),
        hung = HUNG_AFTER.as_secs(),
        bound = OUTSTANDING,
        guard = crate::grid::MEMORY_GUARD / 1_000_000,
        mem = MEMORY_MB,
        rec = RECOVERY_S,
    )
}

fn table_row(ceiling: &Ceiling, r: &SatResult) -> String {
    let name = row_name(&r.row);
    let (data, f) = match &r.outcome {
        Ok((d, f)) => (d, f),
        Err(e) => {
            return format!(
                "| {name} | **row failed** after {:.0} s: {} | | | | | | | | | **not met** (failed) |\n",
                r.took.as_secs_f64(),
                e.replace('|', "/").replace('\n', " ")
            )
        }
    };
    let rej = &f.reject_latency;
    let rejects = if rej.len() == 0 {
        "none".to_string()
    } else {
        format!(
            "{} / {} / {}",
            ms(rej.p50()),
            ms(rej.p99()),
            ms(rej.quantile(1.0))
        )
    };
    format!(
        "| {name} | {:.0} ({:.2}×) | {:.0} ({:.2}×) | {:.0} | {rejects} | {} / {} | {:.0} / {:.0} | {:.0}{} | {} | {} | {} |\n",
        f.offered_per_s,
        f.offered_per_s / ceiling.pairs_per_s,
        f.grants_per_s,
        f.grant_ratio(ceiling.pairs_per_s),
        f.rejects_per_s,
        f.failed,
        f.hung,
        f.behind_per_s,
        f.bounded_per_s,
        data.memory.growth_mb(),
        if data.memory.guard_tripped { " (guard hit)" } else { "" },
        ms(f.unloaded_p99),
        f.recovery
            .map_or("never".to_string(), |t| format!("{t:.1} s")),
        targets(r.row, ceiling, data, f),
    )
}

fn targets(row: SatRow, ceiling: &Ceiling, data: &SatData, f: &SatFigures) -> String {
    let checks = [
        ("grants", f.grant_ratio(ceiling.pairs_per_s) >= GRANT_SHARE),
        (
            "reject time",
            f.hung == 0 && f.reject_latency.p99() <= row.timeout + REJECT_SLACK,
        ),
        ("memory", data.memory.growth_mb() <= MEMORY_MB),
        ("recovery", f.recovery.is_some_and(|t| t <= RECOVERY_S)),
    ];
    verdicts(&checks)
}

/// Each row's errors by message, and the calls abandoned at its end.
fn messages(results: &[SatResult]) -> String {
    let mut md = String::new();
    for r in results {
        let Ok((data, _)) = &r.outcome else { continue };
        if data.messages.is_empty() && data.abandoned == 0 {
            continue;
        }
        let by: Vec<String> = data
            .messages
            .iter()
            .map(|(m, n)| format!("{n} × `{}`", m.replace('`', "'").replace('\n', " ")))
            .collect();
        let _ = writeln!(
            md,
            "- {}: {} calls abandoned at the end; errors: {}",
            row_name(&r.row),
            data.abandoned,
            if by.is_empty() {
                "none".to_string()
            } else {
                by.join(", ")
            }
        );
    }
    if md.is_empty() {
        md
    } else {
        format!("\nSaturation errors:\n\n{md}")
    }
}
