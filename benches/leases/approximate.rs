//! Row 4 of the leases bench: the approximate mode (`approximate_hot_keys`, issue 43 item 3)
//! on row 1's shapes (one key at each quota, Limiters × callers as row 1), a join shape (half
//! the Limiters start at half the run) and row 2's fairness shape (demands 1:1:1:5), each
//! beside the exact leases on the same shape. Overshoot: the most admitted beyond the exact
//! bound (`bins.rs`' interval and since-drain checks, the larger), as a % of quota × run.

use crate::hammer::{self, Setup};
use crate::plan::Plan;
use crate::stats::{p50_p99, verdict};
use crate::Row;
use std::fmt::Write as _;

/// Issue 43's goal for the approximate mode (about the Databricks figure).
const OVERSHOOT_PCT: f64 = 5.0;
const WRITES_PER_SEC: f64 = 20.0;
/// The join shape's quota (per second, burst = quota).
const JOIN_QUOTA: u64 = 100_000;

/// One shape of row 4: the approximate run, and the exact leases' run of the same shape when
/// this row made it (the join shape; the others are rows 1 and 2).
pub struct Approx {
    pub shape: &'static str,
    pub approx: Row,
    pub exact: Option<Row>,
}

/// Row 4's runs on one store.
pub async fn rows(plan: &Plan, store: &'static str, url: &str) -> anyhow::Result<Vec<Approx>> {
    let mut out = Vec::new();
    for &quota in &plan.quotas {
        let callers = vec![plan.callers; plan.limiters];
        let approx = run(plan, (store, url), (quota, &callers, 0), false).await?;
        out.push(Approx {
            shape: "hot",
            approx,
            exact: None,
        });
    }
    let half = plan.limiters.max(2) / 2;
    let callers = vec![plan.callers; half * 2];
    let approx = run(plan, (store, url), (JOIN_QUOTA, &callers, half), false).await?;
    let exact = run(plan, (store, url), (JOIN_QUOTA, &callers, half), true).await?;
    out.push(Approx {
        shape: "join",
        approx,
        exact: Some(exact),
    });
    let fair = plan.fair_callers.clone();
    let approx = run(plan, (store, url), (plan.fair_quota, &fair, 0), false).await?;
    out.push(Approx {
        shape: "fair",
        approx,
        exact: None,
    });
    Ok(out)
}

/// One closed-loop run: approximate mode, or leases (`exact`).
async fn run(
    plan: &Plan,
    (store, url): (&'static str, &str),
    (quota, callers, joining): (u64, &[usize], usize),
    exact: bool,
) -> anyhow::Result<Row> {
    let mode = if exact { "leases" } else { "approximate" };
    eprintln!(
        "leases bench: row 4, {store}, {quota}/s, {mode}, {} Limiters ({joining} joining)",
        callers.len()
    );
    let setup = Setup {
        url: url.to_string(),
        name: format!("approx-q{quota}-{mode}-{}-{joining}", callers.len()),
        quota,
        leases: exact,
        approximate: !exact,
        callers: callers.to_vec(),
        joining,
        run: plan.run,
    };
    let out = hammer::run(&setup).await?;
    Ok(Row {
        store,
        quota,
        leases: exact,
        callers: callers.to_vec(),
        out,
    })
}

/// Admitted beyond the exact bound, as a % of quota × run.
fn overshoot_pct(r: &Row) -> f64 {
    let x = &r.out.exactness;
    let over = x.interval_excess.max(x.since_drain_excess).max(0.0);
    100.0 * over / (r.quota as f64 * r.out.secs).max(1e-9)
}

/// Appends row 4's table to `md`; the exact leases' runs of the hot and fair shapes are
/// rows 1 and 2 (`hot`, `fair`).
pub fn table(md: &mut String, plan: &Plan, rows: &[Approx], (hot, fair): (&[Row], &[Row])) {
    let _ = writeln!(
        md,
        "\n### Row 4: the approximate mode beside the exact leases\n\n\
         `approximate_hot_keys(true)`: checks decided on a local meter holding this Limiter's \
         share, reported every ~100 ms. Shapes: hot (row 1's, {} Limiters × {} callers), \
         join ({n} Limiters, {n} more join at half the run, {JOIN_QUOTA}/s), fair (row 2's \
         demands 1:1:1:5 at {}/s); {:.1} s each. overshoot: the most admitted beyond the exact \
         bound (the larger of row 1's interval and since-drain checks) ÷ quota × run. Targets \
         (approximate): overshoot ≤ {OVERSHOOT_PCT}%, ≤ {WRITES_PER_SEC} writes/s per \
         Limiter.\n\n\
         | shape | quota/s | store | mode | admitted/s | ÷ quota | admitted per Limiter | \
         overshoot % | writes/s per Limiter | p50 / p99 ms | targets |\n\
         |---|---|---|---|---|---|---|---|---|---|---|",
        plan.limiters,
        plan.callers,
        plan.fair_quota,
        plan.run.as_secs_f64(),
        n = plan.limiters.max(2) / 2,
    );
    for a in rows {
        line(md, a.shape, &a.approx);
        let same = |r: &&Row| r.store == a.approx.store && r.quota == a.approx.quota && r.leases;
        let exact = match a.shape {
            "hot" => hot.iter().find(same),
            "fair" => fair.iter().find(same),
            _ => a.exact.as_ref(),
        };
        if let Some(e) = exact {
            line(md, a.shape, e);
        }
    }
    md.push('\n');
}

fn line(md: &mut String, shape: &str, r: &Row) {
    let o = &r.out;
    let per_sec = o.per_sec();
    let over = overshoot_pct(r);
    let (mode, targets) = if r.leases {
        ("leases", "exact (row 1)".to_string())
    } else {
        let targets = format!(
            "overshoot {}, writes {}",
            verdict(over <= OVERSHOOT_PCT),
            verdict(o.worst_writes_per_sec() <= WRITES_PER_SEC)
        );
        ("approximate", targets)
    };
    let each: Vec<String> = o
        .admitted
        .iter()
        .map(|&n| format!("{:.0}", n as f64 / o.secs))
        .collect();
    let _ = writeln!(
        md,
        "| {shape} | {} | {} | {mode} | {per_sec:.0} | {:.3} | {} | {over:.2} | {:.1} | {} | \
         {targets} |",
        r.quota,
        r.store,
        per_sec / r.quota as f64,
        each.join(" / "),
        o.worst_writes_per_sec(),
        p50_p99(&o.latency),
    );
}
