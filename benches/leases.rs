//! Issue 43's benchmark, leased units for hot keys: `cargo bench --features testing --bench
//! leases` (release build, full sizes; writes its section into BENCHMARKS.md), `-- --quick`
//! (small sizes, prints only). `cargo test --all-features --all-targets` runs the quick mode as
//! a test.
//!
//! One run starts a real 1-node etcd (the test support's child process) and measures, on it and
//! on memory://: row 1, one key at 1,000, 100,000 and 1,000,000/s hammered closed-loop by
//! Limiters × callers, leases on beside leases off (admitted/s against the quota and the
//! memory:// run, writes per second per Limiter, requests per admitted, latency, units leased
//! and lost, over-admission); row 2, fairness: 4 Limiters with demands 1:1:1:5 on a key of
//! 10,000/s; row 3, failover: on a 3-member etcd, its leader SIGKILLed and then a Limiter
//! process SIGKILLed during a 1,000,000/s run, leases on beside off; row 4, the approximate
//! mode (`leases/approximate.rs`) on row 1's and row 2's shapes and a join shape. The processes
//! are Limiters of this process here, on one tokio runtime, but for row 3's victim: a process
//! of its own (this binary started again, leases/victim.rs; its other Limiters stay in this
//! process). Targets are printed as
//! met / not met; the run fails only on an error (a check that fails outside row 3, where
//! failed checks are counted, or a server that does not start).

#[path = "../tests/binary/mod.rs"]
mod binary;
#[allow(dead_code)] // the machine lines it does not print
#[path = "common/mod.rs"]
mod common;
#[path = "../tests/support/mod.rs"]
mod support;

#[path = "leases/approximate.rs"]
mod approximate;
#[path = "leases/bins.rs"]
mod bins;
#[path = "leases/dip.rs"]
mod dip;
#[path = "leases/failover.rs"]
mod failover;
#[path = "leases/hammer.rs"]
mod hammer;
#[path = "leases/plan.rs"]
mod plan;
#[path = "leases/report.rs"]
mod report;
#[path = "leases/report_failover.rs"]
mod report_failover;
#[allow(dead_code)]
#[path = "limiter/stats.rs"]
mod stats;
#[path = "leases/victim.rs"]
mod victim;
#[path = "leases/victim_child.rs"]
mod victim_child;
#[path = "leases/victim_lines.rs"]
mod victim_lines;

use common::machine::{load_average, run_lines};
use hammer::{Outcome, Setup};
use plan::Plan;
use std::process::ExitCode;
use std::time::Instant;
use support::EtcdCluster;

fn main() -> ExitCode {
    // Row 3's Limiter process is this binary started again: it never returns from here.
    victim_child::run_if_child();
    common::main(plan::parse, run)
}

/// One measured run and what it was.
pub struct Row {
    pub store: &'static str,
    pub quota: u64,
    pub leases: bool,
    pub callers: Vec<usize>,
    pub out: Outcome,
}

fn run(plan: &Plan) -> anyhow::Result<()> {
    let runtime = common::runtime()?;
    let (started, load_before) = (Instant::now(), load_average());
    eprintln!("leases bench: starting a 1-node etcd");
    let etcd = EtcdCluster::single();
    let stores = [
        ("memory", "memory://leases-bench".to_string()),
        ("etcd", etcd.url("leases-bench")),
    ];
    let mut hot = Vec::new();
    let mut fair = Vec::new();
    let mut approx = Vec::new();
    for (store, url) in &stores {
        approx.extend(runtime.block_on(approximate::rows(plan, store, url))?);
        for leases in [true, false] {
            for &quota in &plan.quotas {
                let callers = vec![plan.callers; plan.limiters];
                hot.push(runtime.block_on(row(plan, store, url, quota, leases, callers))?);
            }
            let callers = plan.fair_callers.clone();
            fair.push(runtime.block_on(row(plan, store, url, plan.fair_quota, leases, callers))?);
        }
    }
    drop(etcd);
    let mut failover = Vec::new();
    for leases in [true, false] {
        failover.push(failover_row(plan, &runtime, leases)?);
    }
    let about = run_lines(
        started.elapsed(),
        "the whole run",
        ", shared with other builds",
        &load_before,
    );
    let mut md = report::markdown(plan, &about, &hot, &fair, &failover);
    approximate::table(&mut md, plan, &approx, (&hot, &fair));
    println!("{md}");
    if let Some(out) = plan.out.as_ref().filter(|_| !plan.quick) {
        common::markdown::replace_block(out, report::BEGIN, report::END, &md)?;
        eprintln!("leases bench: wrote {}", out.display());
    }
    Ok(())
}

/// Row 3 on a 3-member etcd of its own (its leader is killed), leases on or off.
fn failover_row(
    plan: &Plan,
    runtime: &tokio::runtime::Runtime,
    leases: bool,
) -> anyhow::Result<(failover::Setup, failover::Outcome)> {
    let f = &plan.failover;
    let on = if leases { "on" } else { "off" };
    eprintln!(
        "leases bench: failover, a 3-member etcd, {}/s, leases {on}, {} Limiters × {} callers",
        f.quota, f.limiters, f.callers
    );
    let mut etcd = EtcdCluster::start(3);
    let setup = failover::Setup {
        name: format!("failover-{on}"),
        quota: f.quota,
        leases,
        limiters: f.limiters,
        callers: f.callers,
        run: f.run,
    };
    let out = runtime.block_on(failover::run(&mut etcd, &setup))?;
    Ok((setup, out))
}

async fn row(
    plan: &Plan,
    store: &'static str,
    url: &str,
    quota: u64,
    leases: bool,
    callers: Vec<usize>,
) -> anyhow::Result<Row> {
    let on = if leases { "on" } else { "off" };
    let shape = callers
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join("-");
    eprintln!("leases bench: {store}, {quota}/s, leases {on}, callers {shape}");
    let setup = Setup {
        url: url.to_string(),
        name: format!("q{quota}-{on}-{shape}"),
        quota,
        leases,
        approximate: false,
        callers: callers.clone(),
        joining: 0,
        run: plan.run,
    };
    let out = hammer::run(&setup).await?;
    Ok(Row {
        store,
        quota,
        leases,
        callers,
        out,
    })
}
