//! The fairness bench of issue 41: `cargo bench --bench fair` (release build, full sizes; writes
//! its section into BENCHMARKS.md), `-- --quick` (small sizes, prints only). `cargo test
//! --all-targets` runs the quick mode as a test.
//!
//! One run starts a real 1-node etcd, a 1-node ZooKeeper and one Redis (the test support's
//! child processes) and measures, on each of them and on memory://: row 1, a noisy tenant (flow
//! A keeps hundreds of acquires queued, flow B sends one at a time: B's wait on a fair
//! semaphore, on a FIFO one, and alone); row 2, flows of weights 1:2:5 saturating capacity 8
//! (time-averaged shares); row 3, a class guaranteed 25% (lent while idle, its first request,
//! its share with both classes saturating); row 4, capacity per live member, 3 → 5 → 2
//! `clusterlimit run --per-member` processes (those that go away close, or are killed); row 5, a
//! plain semaphore's uncontended acquire + release beside a fair one's without flows, as a
//! ratio. Targets are printed as met / not met; the run fails only on an error (a request that
//! fails, a server that does not start).

#[path = "fair/apart.rs"]
mod apart;
#[path = "../tests/binary/mod.rs"]
mod binary;
#[allow(dead_code)] // the machine lines it does not print
#[path = "common/mod.rs"]
mod common;
#[path = "../tests/support/mod.rs"]
mod support;

#[path = "fair/members.rs"]
mod members;
#[path = "fair/noisy.rs"]
mod noisy;
#[path = "fair/plain.rs"]
mod plain;
#[path = "fair/plan.rs"]
mod plan;
#[path = "fair/report.rs"]
mod report;
#[path = "fair/shares.rs"]
mod shares;
#[allow(dead_code)]
#[path = "limiter/stats.rs"]
mod stats;

use common::machine::{load_average, run_lines};
use plan::Plan;
use report::StoreRows;
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
    eprintln!("fair bench: starting a 1-node etcd, a 1-node ZooKeeper and one Redis");
    let etcd = EtcdCluster::single();
    let zk = ZkCluster::single();
    let redis = RedisServer::start();
    let stores = [
        ("memory", "memory://fair-bench".to_string()),
        ("etcd", etcd.url("fair-bench")),
        ("ZooKeeper", zk.url("/fair-bench")),
        ("Redis", redis.url("fair-bench")),
    ];
    let mut rows = Vec::new();
    for (i, (label, url)) in stores.iter().enumerate() {
        eprintln!("fair bench: {label}");
        rows.push(runtime.block_on(store_rows(label, url, plan, plan.leaves_for(i)))?);
    }
    drop((etcd, zk, redis));
    let about = run_lines(
        started.elapsed(),
        "the whole run",
        ", shared with other builds",
        &load_before,
    );
    let md = report::markdown(plan, &about, &rows);
    println!("{md}");
    if let Some(out) = plan.out.as_ref().filter(|_| !plan.quick) {
        common::markdown::replace_block(out, report::BEGIN, report::END, &md)?;
        eprintln!("fair bench: wrote {}", out.display());
    }
    Ok(())
}

async fn store_rows(
    label: &str,
    url: &str,
    plan: &Plan,
    leaves: &[members::Leave],
) -> anyhow::Result<StoreRows> {
    let row = Instant::now();
    let noisy = noisy::measure(url, plan).await?;
    eprintln!("fair bench: {label}: row 1 took {:.0?}", row.elapsed());
    let row = Instant::now();
    let weights = shares::weights(url, plan.share_for).await?;
    let reserve = shares::reserve(url, plan.share_for).await?;
    eprintln!("fair bench: {label}: rows 2-3 took {:.0?}", row.elapsed());
    let row = Instant::now();
    let members = members::measure(url, leaves).await?;
    eprintln!("fair bench: {label}: row 4 took {:.0?}", row.elapsed());
    let row = Instant::now();
    let plain = plain::measure(url, plan.plain_rounds, plan.plain_pairs).await?;
    eprintln!("fair bench: {label}: row 5 took {:.0?}", row.elapsed());
    Ok(StoreRows {
        store: label.to_string(),
        noisy,
        weights,
        reserve,
        members,
        plain,
    })
}
