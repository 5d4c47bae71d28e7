//! The costs bench's section of BENCHMARKS.md: one table per row, each target marked met or
//! not met.

use crate::llm::{LlmRun, Policy, TenantRow};
use crate::pairs::{Kind, PairRow};
use crate::plan::Plan;
use crate::stats::{p50_p99, ratio, times, verdict};
use std::fmt::Write as _;

pub const BEGIN: &str = "<!-- costs bench: begin -->";
pub const END: &str = "<!-- costs bench: end -->";

pub fn markdown(
    plan: &Plan,
    about: &str,
    pairs: &[(String, Vec<PairRow>)],
    llm: &[(String, LlmRun)],
) -> String {
    let mode = crate::common::machine::mode(plan.quick);
    let mut md = format!("## Costs known afterwards (issue 42), {mode}\n\n{about}\n");
    pairs_table(&mut md, plan, pairs);
    llm_table(&mut md, plan, llm);
    md
}

fn pairs_table(md: &mut String, plan: &Plan, stores: &[(String, Vec<PairRow>)]) {
    let _ = writeln!(
        md,
        "### Row 1: reserve + settle beside a plain check\n\nOne caller in sequence on a cached \
         key (GCRA, a quota it never exhausts), each kind from its own Limiter: {} rounds of {} \
         of each, the order rotating. Store requests per pair from the Limiters' counters \
         (keepalives apart); latency of the whole pair in ms (p50 / p99) and its p50 over the \
         check's. Target: settling costs at most one request more than the check, none when \
         `actual == estimate`.\n\n\
         | store | kind | requests | p50 / p99 ms | p50 ÷ check | target |\n|---|---|---|---|---|---|",
        plan.pair_rounds, plan.pair_batch
    );
    for (store, rows) in stores {
        let Some(check) = rows.iter().find(|r| r.kind == Kind::Check) else {
            continue;
        };
        for r in rows {
            let extra = r.requests - check.requests;
            let target = match r.kind {
                Kind::Check => "baseline".to_string(),
                Kind::Equal => verdict(extra < 0.05).to_string(),
                Kind::Lower | Kind::Higher => verdict(extra < 1.05).to_string(),
            };
            let _ = writeln!(
                md,
                "| {store} | {} | {:.2} | {} | {} | {target} |",
                r.kind.label(),
                r.requests,
                p50_p99(&r.latency),
                times(ratio(r.latency.p50(), check.latency.p50())),
            );
        }
    }
}

fn llm_table(md: &mut String, plan: &Plan, runs: &[(String, LlmRun)]) {
    let s = &plan.scenario;
    let _ = writeln!(
        md,
        "\n### Row 2: the LLM scenario\n\n{} replicas (Limiters) × {} callers, {} tenants, a \
         budget of {} tokens per tenant per {} s fixed window (1,000,000 per minute scaled to a \
         shorter window so that the run takes minutes), {} windows measured; each call asks \
         max_tokens {} and uses a lognormal cost (mean 800, p99 8,000, at most {}), lasting 20 ms \
         + 20 µs per token; denied callers wait `retry_after`. Tokens used by the calls admitted \
         in each window, as a share of the budget (max / mean / min over the windows); reserved: \
         what the admissions counted (max_tokens each). Waste: reserved but not used. Targets \
         (the settling policy): every window ≤ budget + the largest overshoot of one call \
         (used − max_tokens), and the mean ≥ 0.95 × the budget (demand is far above it).\n\n\
         | store | policy | tenant | used max / mean / min | reserved mean | waste | calls \
         beyond max_tokens: largest, sum | ≤ budget + one overshoot | ≥ 0.95 budget |\n\
         |---|---|---|---|---|---|---|---|---|",
        s.replicas,
        s.callers,
        s.tenants,
        s.budget,
        s.window.as_secs(),
        s.windows,
        s.max_tokens,
        crate::lognormal::CONTEXT
    );
    for (store, run) in runs {
        for (t, row) in run.tenants.iter().enumerate() {
            let _ = writeln!(
                md,
                "| {store} | {} | {t} | {} |",
                run.policy.label(),
                cells(s.budget, run.policy, row)
            );
        }
    }
    let _ = writeln!(
        md,
        "\n| store | policy | calls admitted | denied (answered locally) | denials' retry_after \
         p50 / p99 ms | store requests per admitted call |\n|---|---|---|---|---|---|"
    );
    for (store, run) in runs {
        let _ = writeln!(
            md,
            "| {store} | {} | {} | {} ({}) | {} | {:.2} |",
            run.policy.label(),
            run.calls,
            run.denied,
            run.local_answers,
            p50_p99(&run.retry_after),
            run.requests_per_call
        );
    }
}

/// A tenant's cells after its name.
fn cells(budget: u64, policy: Policy, row: &TenantRow) -> String {
    let share = |t: u64| format!("{:.1}%", t as f64 * 100.0 / budget as f64);
    let n = row.used.len().max(1) as u64;
    let max = row.used.iter().copied().max().unwrap_or(0);
    let min = row.used.iter().copied().min().unwrap_or(0);
    let mean = row.used.iter().sum::<u64>() / n;
    let reserved: u64 = row.reserved.iter().sum();
    let used_within: u64 = row.used.iter().sum::<u64>().min(reserved);
    let waste = reserved.saturating_sub(used_within) as f64 * 100.0 / reserved.max(1) as f64;
    let (reserved, waste, bound, full) = match policy {
        // What a settled call reserved came back: its waste is only the refunds a window
        // boundary forfeits, inside "used".
        Policy::Settle => (
            "settled".to_string(),
            "n/a".to_string(),
            verdict(max <= budget + row.overshoot).to_string(),
            verdict(mean as f64 >= 0.95 * budget as f64).to_string(),
        ),
        Policy::MaxTokens => (
            share(reserved / n),
            format!("{waste:.0}%"),
            "n/a".to_string(),
            "n/a".to_string(),
        ),
    };
    format!(
        "{} / {} / {} | {reserved} | {waste} | {}, {} | {bound} | {full}",
        share(max),
        share(mean),
        share(min),
        row.overshoot,
        row.beyond
    )
}
