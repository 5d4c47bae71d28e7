//! The leases bench's section of BENCHMARKS.md: one table per row, each target marked met or
//! not met (a miss is printed with its numbers, never hidden).

use crate::failover::{Outcome, Setup};
use crate::plan::Plan;
use crate::stats::{p50_p99, verdict};
use crate::Row;
use std::fmt::Write as _;

pub const BEGIN: &str = "<!-- leases bench: begin -->";
pub const END: &str = "<!-- leases bench: end -->";

/// Targets of issue 43.
const SHARE_OF_REFERENCE: f64 = 0.9;
const WRITES_PER_SEC: f64 = 20.0;
const FAIR_SHARE: f64 = 0.9;
const FAIR_TOTAL: f64 = 0.95;

pub fn markdown(
    plan: &Plan,
    about: &str,
    hot: &[Row],
    fair: &[Row],
    failover: &[(Setup, Outcome)],
) -> String {
    let mode = crate::common::machine::mode(plan.quick);
    let mut md = format!("## Leased units for hot keys (issue 43), {mode}\n\n{about}\n");
    hot_tables(&mut md, plan, hot);
    fair_table(&mut md, plan, fair);
    crate::report_failover::table(&mut md, plan, failover);
    md
}

fn on(leases: bool) -> &'static str {
    if leases {
        "on"
    } else {
        "off"
    }
}

/// The memory:// run beside `r` (same quota, same leases setting).
fn reference<'a>(rows: &'a [Row], r: &Row) -> Option<&'a Row> {
    rows.iter()
        .find(|m| m.store == "memory" && m.quota == r.quota && m.leases == r.leases)
}

fn hot_tables(md: &mut String, plan: &Plan, rows: &[Row]) {
    let _ = writeln!(
        md,
        "### Row 1: one hot key, {} Limiters × {} callers\n\n\
         Limiters of one process (the issue's processes), one tokio runtime with 2 workers; \
         each caller checks the key back to back (closed loop; a denied one sleeps its \
         `retry_after`, at most 5 ms) for {:.1} s, on a key whose bucket (burst = quota) the \
         bench empties first. admitted/s ÷ memory: against the same callers on memory:// \
         (same leases setting). writes: put + txn a second, the most of one Limiter. \
         Latency of admitted checks (a sample of at most ~100,000). lost: leased units neither \
         spent nor given back, as a share of quota × run. Over-admission: the most admitted \
         above GCRA's bound in any interval of whole 5 ms bins (`worst_excess` + `gcra_bound`, \
         a check straddling a bin edge counted in none; counted: that check's share) / above \
         `(t − drain) / T` for the checks ended by each bin's end (no burst left after the \
         drain). Targets (leases on): admitted/s ≥ {SHARE_OF_REFERENCE} × min(quota, memory), \
         ≤ {WRITES_PER_SEC} writes/s per Limiter, no over-admission; leases off is today's \
         path, shown beside.\n",
        plan.limiters,
        plan.callers,
        plan.run.as_secs_f64()
    );
    for &quota in &plan.quotas {
        let _ = writeln!(
            md,
            "#### {quota}/s\n\n\
             | store | leases | admitted/s | ÷ quota | ÷ memory | writes/s per Limiter | \
             requests / admitted | p50 / p99 ms | leases (units) | lost ÷ quota·run | \
             over-admission (counted) | targets |\n\
             |---|---|---|---|---|---|---|---|---|---|---|---|"
        );
        for r in rows.iter().filter(|r| r.quota == quota) {
            hot_line(md, r, reference(rows, r));
        }
        md.push('\n');
    }
}

fn hot_line(md: &mut String, r: &Row, memory: Option<&Row>) {
    let o = &r.out;
    let all = o.all();
    let per_sec = o.per_sec();
    let quota = r.quota as f64;
    let vs_memory = memory.map(|m| per_sec / m.out.per_sec().max(1e-9));
    let wanted = memory.map_or(quota, |m| quota.min(m.out.per_sec()));
    let x = &o.exactness;
    let throughput = if r.store == "memory" {
        "reference"
    } else {
        verdict(per_sec >= SHARE_OF_REFERENCE * wanted)
    };
    let targets = if r.leases {
        format!(
            "throughput {throughput}, writes {}, exact {}",
            verdict(o.worst_writes_per_sec() <= WRITES_PER_SEC),
            verdict(x.exact())
        )
    } else {
        format!("baseline; exact {}", verdict(x.exact()))
    };
    let _ = writeln!(
        md,
        "| {} | {} | {per_sec:.0} | {:.3} | {} | {:.1} | {:.4} | {} | {} ({}) | {:.2e} | \
         {:.0} / {:.0} ({:.1}%) | {targets} |",
        r.store,
        on(r.leases),
        per_sec / quota,
        vs_memory.map_or_else(|| "n/a".to_string(), |v| format!("{v:.3}")),
        o.worst_writes_per_sec(),
        o.requests_per_admitted(),
        p50_p99(&o.latency),
        all.rate_leases,
        all.rate_leased_units,
        all.rate_lease_lost_units as f64 / (quota * o.secs),
        x.interval_excess,
        x.since_drain_excess,
        100.0 * x.counted,
    );
}

fn fair_table(md: &mut String, plan: &Plan, rows: &[Row]) {
    let shape = plan
        .fair_callers
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>();
    let _ = writeln!(
        md,
        "### Row 2: fairness, {} Limiters with {} callers on one key of {}/s\n\n\
         Closed loop as in row 1, for {:.1} s. Every Limiter's demand is above an equal split, \
         so the max-min fair share is quota ÷ Limiters each. Targets: each Limiter ≥ \
         {FAIR_SHARE} × its fair share, total ≥ {FAIR_TOTAL} × quota (leases on; off shown \
         beside).\n\n\
         | store | leases | admitted/s per Limiter | ÷ fair share (min) | total ÷ quota | lost ÷ quota·run | targets |\n\
         |---|---|---|---|---|---|---|",
        plan.fair_callers.len(),
        shape.join(" / "),
        plan.fair_quota,
        plan.run.as_secs_f64(),
    );
    for r in rows {
        let o = &r.out;
        let share = r.quota as f64 / r.callers.len().max(1) as f64;
        let each: Vec<f64> = o.admitted.iter().map(|&n| n as f64 / o.secs).collect();
        let least = each.iter().copied().fold(f64::INFINITY, f64::min) / share;
        let total = o.per_sec() / r.quota as f64;
        let targets = format!(
            "shares {}, total {}",
            verdict(least >= FAIR_SHARE),
            verdict(total >= FAIR_TOTAL)
        );
        let listed: Vec<String> = each.iter().map(|v| format!("{v:.0}")).collect();
        let _ = writeln!(
            md,
            "| {} | {} | {} | {least:.3} | {total:.3} | {:.2e} | {} |",
            r.store,
            on(r.leases),
            listed.join(" / "),
            o.all().rate_lease_lost_units as f64 / (r.quota as f64 * o.secs),
            if r.leases {
                targets
            } else {
                format!("baseline: {targets}")
            },
        );
    }
}
