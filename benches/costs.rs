//! Issue 42's benchmark, costs known only afterwards: `cargo bench --bench costs` (release
//! build, full sizes; writes its section into BENCHMARKS.md), `-- --quick` (small sizes, prints
//! only). `cargo test --all-targets` runs the quick mode as a test.
//!
//! One run starts a real 1-node etcd, a 1-node ZooKeeper and one Redis (the test support's
//! child processes) and measures: row 1, reserve + settle beside a plain check of the same
//! cost (store requests per pair from the Limiters' counters, p50 / p99 latency), settled at
//! the estimate, below it and above it, on each store; row 2, the LLM scenario (replicas ×
//! callers spending tenants' token budgets with lognormal costs), settled at the real cost vs
//! the "reserve max_tokens" policy a plain check forces, on etcd and Redis. Targets are printed
//! as met / not met; the run fails only on an error (a request that fails, a server that does
//! not start).

#[path = "../tests/binary/mod.rs"]
mod binary;
#[allow(dead_code)] // the machine lines it does not print
#[path = "common/mod.rs"]
mod common;
#[path = "../tests/support/mod.rs"]
mod support;

#[path = "costs/llm.rs"]
mod llm;
#[path = "costs/lognormal.rs"]
mod lognormal;
#[path = "costs/pairs.rs"]
mod pairs;
#[path = "costs/plan.rs"]
mod plan;
#[path = "costs/report.rs"]
mod report;
#[allow(dead_code)]
#[path = "limiter/stats.rs"]
mod stats;

use common::machine::{load_average, run_lines};
use plan::Plan;
use std::process::ExitCode;
use std::time::Instant;
use support::redis::RedisServer;
use support::{EtcdCluster, ZkCluster};

fn main() -> ExitCode {
    common::main(plan::parse, run)
}

fn run(plan: &Plan) -> anyhow::Result<()> {
    let runtime = common::runtime()?;
    let (started, load_before) = (Instant::now(), load_average());
    eprintln!("costs bench: starting a 1-node etcd, a 1-node ZooKeeper and one Redis");
    let etcd = EtcdCluster::single();
    let zk = ZkCluster::single();
    let redis = RedisServer::start();
    let stores = [
        ("etcd", etcd.url("costs-bench")),
        ("ZooKeeper", zk.url("/costs-bench")),
        ("Redis", redis.url("costs-bench")),
    ];
    let mut pairs = Vec::new();
    for (label, url) in &stores {
        eprintln!("costs bench: row 1 on {label}");
        let rows = runtime.block_on(pairs::measure(url, plan.pair_rounds, plan.pair_batch))?;
        pairs.push((label.to_string(), rows));
    }
    let mut llm = Vec::new();
    for (label, url) in stores.iter().filter(|(l, _)| *l != "ZooKeeper") {
        for policy in llm::Policy::ALL {
            eprintln!("costs bench: row 2 on {label}, {}", policy.label());
            let run = runtime.block_on(llm::run(url, &plan.scenario, policy))?;
            llm.push((label.to_string(), run));
        }
    }
    drop((etcd, zk, redis));
    let about = run_lines(
        started.elapsed(),
        "the whole run",
        ", shared with other builds",
        &load_before,
    );
    let md = report::markdown(plan, &about, &pairs, &llm);
    println!("{md}");
    if let Some(out) = plan.out.as_ref().filter(|_| !plan.quick) {
        common::markdown::replace_block(out, report::BEGIN, report::END, &md)?;
        eprintln!("costs bench: wrote {}", out.display());
    }
    Ok(())
}
