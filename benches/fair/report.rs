//! The fairness bench's section of BENCHMARKS.md: one table per row, a line per store, each
//! target marked met or not.

use crate::noisy::Noisy;
use crate::plan::Plan;
use crate::shares::{Reserve, Shares};
use crate::stats::{ms, p50_p99, verdict};
use std::fmt::Write as _;

pub const BEGIN: &str = "<!-- fair bench: begin -->";
pub const END: &str = "<!-- fair bench: end -->";

/// Everything measured on one store.
pub struct StoreRows {
    pub store: String,
    pub noisy: Noisy,
    pub weights: Shares,
    pub reserve: Reserve,
}

pub fn markdown(plan: &Plan, about: &str, rows: &[StoreRows]) -> String {
    let mode = crate::common::machine::mode(plan.quick);
    let mut md = format!("## Fair semaphores (issue 41), {mode}\n\n{about}\n");
    noisy_table(&mut md, plan, rows);
    weights_table(&mut md, rows);
    reserve_table(&mut md, rows);
    md
}

fn noisy_table(md: &mut String, plan: &Plan, rows: &[StoreRows]) {
    let _ = writeln!(
        md,
        "### Row 1: noisy tenant\n\nCapacity {}, flow A keeps {} acquires queued over 4 Limiters \
         (each released at once), flow B sends one request at a time from a fifth; waits in ms \
         (p50 / p99). A handoff is the mean time a permit takes to pass to the next holder under \
         A's load (capacity ÷ A's grants per second). Target: B's p99 on the fair semaphore ≤ \
         B alone + 2 handoffs.\n\n\
         | store | B alone | B, fair | B, FIFO | A's grants/s (fair) | handoff | target |\n\
         |---|---|---|---|---|---|---|",
        crate::noisy::CAPACITY,
        plan.noisy_a
    );
    for r in rows {
        let n = &r.noisy;
        let bound = n.alone.p99() + n.handoff * 2;
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {:.0} | {} | {} (bound {} ms) |",
            r.store,
            p50_p99(&n.alone),
            p50_p99(&n.fair),
            p50_p99(&n.fifo),
            n.a_per_sec,
            ms(n.handoff),
            verdict(n.fair.p99() <= bound),
            ms(bound)
        );
    }
}

fn weights_table(md: &mut String, rows: &[StoreRows]) {
    let _ = writeln!(
        md,
        "\n### Row 2: weights 1:2:5\n\nCapacity {}, three flows of weights 1, 2 and 5 (16 looping \
         acquires each, {} ms holds), each its own Limiter: permits held, time-averaged, and each \
         flow's part of all permits held. Target: each part within ±5% of 1/8, 2/8, 5/8.\n\n\
         | store | w1 | w2 | w5 | parts | target |\n|---|---|---|---|---|---|",
        crate::shares::CAPACITY,
        crate::shares::HOLD.as_millis()
    );
    for r in rows {
        let f = &r.weights.flows;
        let total: f64 = f.iter().map(|(_, v)| v).sum::<f64>().max(1e-9);
        let want = [1.0 / 8.0, 2.0 / 8.0, 5.0 / 8.0];
        let parts: Vec<f64> = f.iter().map(|(_, v)| v / total).collect();
        let met = parts.len() == 3
            && parts
                .iter()
                .zip(want)
                .all(|(got, w)| (got - w).abs() <= 0.05 * w);
        let cells: Vec<String> = f.iter().map(|(_, v)| format!("{v:.2}")).collect();
        let parts: Vec<String> = parts.iter().map(|p| format!("{:.1}%", p * 100.0)).collect();
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} |",
            r.store,
            cells.join(" | "),
            parts.join(" / "),
            verdict(met)
        );
    }
}

fn reserve_table(md: &mut String, rows: &[StoreRows]) {
    let _ = writeln!(
        md,
        "\n### Row 3: a reserved share, lent and returned\n\nCapacity 8, classes \
         `critical=25%,batch`; batch saturating (16 looping acquires, 20 ms holds). Targets: \
         batch holds ≥ 90% of 8 while critical is idle (a permit is free between a release and \
         the next grant); critical's first request waits at most one hold (20 ms) beyond its \
         own requests (B alone in row 1); with both saturating, critical holds its 2 on average.\n\n\
         | store | batch while critical idle | critical's first wait (ms) | batch grants meanwhile | \
         batch / critical, both saturating | samples with critical < 2 | targets |\n\
         |---|---|---|---|---|---|---|"
    );
    for r in rows {
        let v = &r.reserve;
        let both: Vec<String> = v
            .both
            .flows
            .iter()
            .map(|(_, x)| format!("{x:.2}"))
            .collect();
        let critical = v.both.flows.get(1).map_or(0.0, |f| f.1);
        let first_ok = v.first_wait <= r.noisy.alone.p99() + crate::shares::HOLD;
        let met = [v.lent >= 0.9 * 8.0, first_ok, critical >= 2.0];
        let marks: Vec<&str> = met.iter().map(|&m| verdict(m)).collect();
        let _ = writeln!(
            md,
            "| {} | {:.2} | {} | {} | {} | {:.1}% | {} |",
            r.store,
            v.lent,
            ms(v.first_wait),
            v.batch_grants_meanwhile,
            both.join(" / "),
            v.critical_below_min * 100.0,
            marks.join(", ")
        );
    }
}
