//! Row 4b on a sharded store (issue 28 item 3, `--only-shards`): fresh keys in a closed loop,
//! as in `fresh.rs`, on one single-node etcd and then on two (`etcd://A/p;etcd://B/p`, each
//! key on one of them), with the same worker processes and callers. Prints decisions/s of
//! each and their ratio; the goal is 2 clusters ≥ 1.7 × one. Both etcds and the workers share
//! the machine, so on few cores the second cluster competes with the first for CPU.

use super::fresh::{cpu_during, merge, FreshRow, Who, LEAD_IN};
use super::plan::RatePlan;
use super::protocol::{Contender, Mode, WorkerSetup};
use super::spawn;
use super::worker::unix_us;
use crate::plan::Plan;
use crate::support::EtcdCluster;
use std::fmt::Write as _;
use std::time::Duration;

/// The goal of the issue: two clusters carry this many times one cluster's decisions/s.
const GOAL: f64 = 1.7;

/// The table: per callers, 1 cluster's and 2 clusters' decisions/s and their ratio.
pub async fn measure(plan: &Plan) -> anyhow::Result<String> {
    let rp = RatePlan::new(plan.quick);
    eprintln!("limiter bench: starting two 1-node etcd clusters");
    let clusters = [EtcdCluster::single(), EtcdCluster::single()];
    let processes = rp.fresh_processes.iter().copied().max().unwrap_or(1);
    let mut md = String::new();
    let _ = writeln!(
        md,
        "Fresh keys (row 4b), 1 vs 2 etcd clusters, {processes} process(es), {:?} each, {} cores\n",
        rp.fresh_for,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    md.push_str(
        "| callers/process | 1 cluster, decisions/s | 2 clusters, decisions/s | 2 ÷ 1 \
         | requests/decision (1 / 2) | client CPU µs/decision (1 / 2) \
         | etcd CPU µs/decision (1 / 2, both etcds) | errors (1 / 2) |\n",
    );
    md.push_str("|---|---|---|---|---|---|---|---|\n");
    for (n, &callers) in rp.fresh_callers.iter().enumerate() {
        let space = format!("shards{n}");
        let one = clusters[0].url(&format!("{space}a"));
        let two = format!(
            "{};{}",
            clusters[0].url(&format!("{space}b")),
            clusters[1].url(&format!("{space}b"))
        );
        let r1 = run(&one, &clusters[..1], processes, callers, rp.fresh_for).await?;
        let r2 = run(&two, &clusters, processes, callers, rp.fresh_for).await?;
        let ratio = r2.decisions_per_s() / r1.decisions_per_s().max(1e-9);
        let _ = writeln!(
            md,
            "| {callers} | {:.0} | {:.0} | {ratio:.2}× ({}) | {:.2} / {:.2} | {:.0} / {:.0} | {:.0} / {:.0} | {} / {} |",
            r1.decisions_per_s(),
            r2.decisions_per_s(),
            if ratio >= GOAL { "met" } else { "not met" },
            r1.requests_per_decision.unwrap_or(0.0),
            r2.requests_per_decision.unwrap_or(0.0),
            r1.client_cpu_us_per_decision,
            r2.client_cpu_us_per_decision,
            r1.server_cpu_us_per_decision,
            r2.server_cpu_us_per_decision,
            r1.errors,
            r2.errors
        );
    }
    Ok(md)
}

/// One closed-loop run of fresh keys against `target`.
async fn run(
    target: &str,
    clusters: &[EtcdCluster],
    processes: usize,
    callers: u32,
    run_for: Duration,
) -> anyhow::Result<FreshRow> {
    let start_at = unix_us() + LEAD_IN.as_micros() as u64;
    let setup = WorkerSetup {
        contender: Contender::Clusterlimit,
        mode: Mode::Fresh,
        target: target.to_string(),
        limit_name: "fresh".to_string(),
        key: "k".to_string(),
        limit: 100,
        period_ms: 1000,
        burst: 10,
        algorithm: "gcra".to_string(),
        callers,
        duration_ms: run_for.as_millis() as u64,
        count: 0,
        start_at_unix_us: start_at,
        wait_retry_after: false,
    };
    let pids: Vec<u32> = clusters.iter().filter_map(|c| c.pid(0)).collect();
    let server_cpu = cpu_during(pids, start_at, run_for);
    let bound = LEAD_IN + run_for + Duration::from_secs(60);
    let reports = spawn::run_all(&vec![setup; processes], bound).await?;
    let server_ns = server_cpu.await.unwrap_or(0);
    let row = merge(
        Who::OursEtcd,
        processes,
        callers,
        run_for,
        &reports,
        server_ns,
    );
    anyhow::ensure!(
        row.decisions > 0 && row.admitted == row.decisions,
        "{target}: {} of {} fresh-key checks admitted ({} errors)",
        row.admitted,
        row.decisions,
        row.errors
    );
    Ok(row)
}
