//! The benchmark of issue 6: `cargo bench --bench limiter` (release build, full sizes; writes
//! the tables into BENCHMARKS.md), `-- --quick` (small sizes, prints only), `-- --cluster`
//! (3-node etcd and ZooKeeper). `cargo test --all-targets` runs the quick mode as a test.
//!
//! One process run starts its own servers (the test support's real etcd and ZooKeeper child
//! processes, on free loopback ports, killed on drop) and measures, in order: floors and
//! uncontended latency (rows 1–2), contended throughput (3), handoff (4), scale (6), the kazoo
//! peer (7), rows 1–4 on one Redis beside etcd (8, issue 39); row 5 comes from the counters of
//! rows 3 and 6. Goals are printed next to their figures as met / not met; real errors (a
//! server that does not start, more holders than the capacity) end the run with a non-zero
//! exit, except in row 8, whose failure is written into the block.

#[path = "../tests/binary/mod.rs"]
mod binary;
#[path = "common/mod.rs"]
mod common;
#[path = "../tests/support/mod.rs"]
mod support;

#[path = "limiter/alloc.rs"]
mod alloc;
#[path = "limiter/contended.rs"]
mod contended;
#[path = "limiter/cpu.rs"]
mod cpu;
#[path = "limiter/handoff.rs"]
mod handoff;
#[path = "limiter/history.rs"]
mod history;
#[path = "limiter/kazoo.rs"]
mod kazoo;
#[path = "limiter/latency.rs"]
mod latency;
#[path = "limiter/notify.rs"]
mod notify;
#[path = "limiter/peers/mod.rs"]
mod peers;
#[path = "limiter/plan.rs"]
mod plan;
#[path = "limiter/rate/mod.rs"]
mod rate;
#[path = "limiter/redis_permits.rs"]
mod redis_permits;
#[path = "limiter/report.rs"]
mod report;
#[path = "limiter/scale.rs"]
mod scale;
#[path = "limiter/sidecar.rs"]
mod sidecar;
#[path = "limiter/stats.rs"]
mod stats;
#[path = "limiter/stores.rs"]
mod stores;

use anyhow::Context as _;
use common::machine::{command, etcd_version, load_average, mode, run_lines};
use latency::{Measured, Op};
use notify::{Notify, Spy};
use plan::Plan;
use report::{Contention, Peer, Results};
use sidecar::SidecarClient;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use stores::{client, Servers, Store};

#[global_allocator]
static ALLOC: alloc::Counting = alloc::Counting;

/// Row 3's setup, and row 7's contended case.
const CLIENTS: usize = 8;
const CAPACITY: u32 = 2;
const HOLDS: [Duration; 2] = [Duration::ZERO, Duration::from_millis(5)];

fn main() -> ExitCode {
    if let Some(code) = rate::protocol::worker_main() {
        return code;
    }
    // `RUST_LOG=clusterlimit=warn` shows why a run failed (e.g. why a session was lost).
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .try_init();
    common::main(plan::parse, run)
}

fn run(plan: &Plan) -> anyhow::Result<()> {
    let runtime = common::runtime()?;
    if plan.shards_only {
        let table = runtime.block_on(rate::shards::measure(plan))?;
        println!("{table}");
        return Ok(());
    }
    if plan.parts.semaphores && !plan.redis_permits_only {
        runtime.block_on(kazoo::check_available())?;
    }
    let started = Instant::now();
    let load_before = load_average();
    eprintln!(
        "limiter bench: starting {0}-node etcd and {0}-node ZooKeeper",
        plan.nodes()
    );
    let servers = Servers::start(plan.nodes());
    // Row 8's one Redis (issue 39).
    let redis = plan.parts.semaphores.then(stores::PermitRedis::start);
    if let (true, Some(redis)) = (plan.redis_permits_only, &redis) {
        let mut r = runtime.block_on(redis_permits::measure(plan, &servers, redis))?;
        r.about = redis_permits::about(plan, started.elapsed(), &load_before);
        println!("{}", report::redis_permits_markdown(&r));
        return Ok(());
    }
    if let Some(redis) = &redis {
        let mut results = runtime.block_on(measure(plan, &servers, redis))?;
        results.about = about(plan, &servers, started.elapsed(), &load_before);
        let md = results.markdown();
        write(plan, &format!("{}-node", plan.nodes()), &md)?;
    }
    if plan.parts.rates {
        let md = runtime.block_on(rate::measure(plan, &servers))?;
        write(plan, &format!("{}-node rate", plan.nodes()), &md)?;
    }
    Ok(())
}

/// Prints one part's tables and, unless the plan prints only, replaces its block in the file.
fn write(plan: &Plan, key: &str, md: &str) -> anyhow::Result<()> {
    println!("{md}");
    if let Some(out) = &plan.out {
        report::update_file(out, key, md)?;
        eprintln!("limiter bench: wrote {} ({key})", out.display());
    }
    Ok(())
}

/// Every row, in one run.
async fn measure(
    plan: &Plan,
    servers: &Servers,
    redis: &stores::PermitRedis,
) -> anyhow::Result<Results> {
    let mut r = Results::default();
    step("rows 1-2: floors and uncontended latency");
    latency_rows(plan, servers, &mut r).await?;
    step("row 3: contended throughput");
    r.contention = contention(plan, servers).await?;
    step("row 7: kazoo, contended");
    for hold in HOLDS {
        let setup = contended_setup(plan, hold);
        let hosts = servers.zk.connect_string();
        r.peer
            .kazoo_contended
            .push(kazoo::contended(&hosts, setup).await?);
    }
    step("row 4: handoff");
    for store in Store::ALL {
        r.handoff.push(handoffs(plan, servers, store).await?);
    }
    step("row 6: scale");
    r.waiters = plan.waiters;
    r.semaphores = plan.semaphores;
    for store in Store::ALL {
        let url = servers.url(store, SCALE_SPACE);
        let (n, turns) = (plan.waiters, plan.waiter_handoffs);
        let one = scale::many_waiters(&url, scale::Layout::OneLimiter, n, turns).await?;
        r.waiters_one.push(one);
        let own = scale::many_waiters(&url, scale::Layout::OwnLimiter, n, turns).await?;
        r.waiters_own.push(own);
        let s = scale::many_semaphores(&url, plan.semaphores, plan.steady_for).await?;
        r.many_semaphores.push(s);
        let etcd = match store {
            Store::Etcd => Some(history::EtcdHistory {
                admin: stores::etcd_admin(&servers.etcd.endpoints()).await?,
                prefix: SCALE_SPACE.to_string(),
            }),
            _ => None,
        };
        let (past, samples) = (plan.history_past, plan.history_samples);
        r.history
            .push(history::run(&url, past, samples, store, etcd).await?);
        r.queued
            .push(history::queued(&url, plan.queued, samples).await?);
    }
    step("row 7: kazoo, uncontended");
    r.peer = peer_uncontended(plan, servers, std::mem::take(&mut r.peer)).await?;
    step("row 8: permits on Redis, beside etcd");
    // A failure here is reported in the block (row 8 is new; rows 1–7 stay written).
    r.redis = Some(
        redis_permits::measure(plan, servers, redis)
            .await
            .map_err(|e| format!("{e:#}")),
    );
    Ok(r)
}

/// The etcd prefix (and ZooKeeper chroot, memory store) of row 6.
const SCALE_SPACE: &str = "scale";

fn step(what: &str) {
    eprintln!("limiter bench: {what}");
}

/// Rows 1–2: every path measured in the same interleaved rounds.
async fn latency_rows(plan: &Plan, servers: &Servers, r: &mut Results) -> anyhow::Result<()> {
    let name = "uncontended";
    let (etcd, zk) = (servers.pids(Store::Etcd), servers.pids(Store::Zk));
    let endpoints = servers.etcd.endpoints();
    let on = |op: Op, servers: &[u32]| Measured {
        op,
        sidecar: None,
        servers: servers.to_vec(),
    };
    let mut ops = vec![
        on(Op::etcd_raw(&endpoints, "floor/key").await?, &etcd),
        on(
            Op::etcd_txn(&endpoints, "txn-floor/s/uncontended").await?,
            &etcd,
        ),
        on(
            Op::zk_raw(&servers.zk.connect_string(), "/floor").await?,
            &zk,
        ),
    ];
    let mut limiters = Vec::new();
    for store in Store::ALL {
        let (l, s) = client(
            &servers.url(store, "latency"),
            "uncontended",
            name,
            CAPACITY,
        )
        .await?;
        limiters.push(l);
        ops.push(on(Op::Library(s), &servers.pids(store)));
    }
    // The sidecar on memory:// has its own in-process store (its own process).
    for (store, url) in [
        (Store::Memory, "memory://bench".to_string()),
        (Store::Etcd, servers.url(Store::Etcd, "sidecar")),
    ] {
        let sc = SidecarClient::start(&url, name, CAPACITY).await?;
        ops.push(Measured {
            sidecar: Some(sc.pid()),
            ..on(Op::Sidecar(sc), &servers.pids(store))
        });
    }
    let compactor = stores::etcd_admin(&endpoints).await?;
    let (rounds, batch) = (plan.latency_rounds, plan.latency_batch);
    let mut s = latency::interleaved(&mut ops, rounds, batch, Some(compactor))
        .await?
        .into_iter();
    let mut next = || s.next().context("a latency result is missing");
    r.etcd_floor = next()?;
    r.etcd_txn_floor = next()?;
    r.zk_floor = next()?;
    r.library = vec![next()?, next()?, next()?];
    r.sidecar_memory = next()?;
    r.sidecar_etcd = next()?;
    stores::close_all(&limiters).await
}

fn contended_setup(plan: &Plan, hold: Duration) -> contended::Setup {
    contended::Setup {
        clients: CLIENTS,
        capacity: CAPACITY,
        hold,
        run_for: plan.contended_for,
    }
}

/// Row 3 on every store, every hold.
async fn contention(plan: &Plan, servers: &Servers) -> anyhow::Result<Contention> {
    let mut runs = Vec::new();
    for store in Store::ALL {
        let mut per_hold = Vec::new();
        for hold in HOLDS {
            let url = servers.url(store, "contended");
            let name = format!("hold-{}ms", hold.as_millis());
            per_hold.push(contended::run(&url, &name, contended_setup(plan, hold)).await?);
        }
        runs.push(per_hold);
    }
    Ok(Contention {
        clients: CLIENTS,
        capacity: CAPACITY,
        run_for: plan.contended_for,
        holds: HOLDS.to_vec(),
        runs,
    })
}

/// Row 4 on `store`: turns measured against a raw delete and a raw notification, then (etcd,
/// ZooKeeper) half as many turns watched by a spy, which split a handoff in two.
async fn handoffs(
    plan: &Plan,
    servers: &Servers,
    store: Store,
) -> anyhow::Result<handoff::Outcome> {
    let url = servers.url(store, "handoff");
    let endpoints = servers.etcd.endpoints();
    let zk = servers.zk.connect_string();
    let sem = handoff::SEMAPHORE;
    let (refs, spy) = match store {
        Store::Memory => return handoff::run(&url, None, plan.handoffs).await,
        Store::Etcd => (
            handoff::Raw::References {
                write: Box::new(Op::etcd_raw(&endpoints, "handoff/one-write").await?),
                notify: Box::new(Notify::etcd(&endpoints, "handoff/notify").await?),
            },
            Spy::etcd(&endpoints, &format!("handoff/s/{sem}/q/")).await?,
        ),
        Store::Zk => (
            handoff::Raw::References {
                write: Box::new(Op::zk_raw(&zk, "/handoff-one-write").await?),
                notify: Box::new(Notify::zk(&zk, "/handoff-notify").await?),
            },
            Spy::zk(&zk, &format!("/handoff/s/{sem}")).await?,
        ),
    };
    let mut out = handoff::run(&url, Some(refs), plan.handoffs).await?;
    let spied = handoff::run(&url, Some(handoff::Raw::Spy(spy)), plan.handoffs / 2).await?;
    out.spy_sees = spied.spy_sees;
    out.grant_after_spy = spied.grant_after_spy;
    Ok(out)
}

/// Row 7, uncontended: clusterlimit before and after kazoo (merged), so both see the same
/// conditions; the server's packet counter gives each one's requests per pair.
async fn peer_uncontended(plan: &Plan, servers: &Servers, mut peer: Peer) -> anyhow::Result<Peer> {
    let n = plan.peer_iterations;
    let (l, sem) = client(
        &servers.url(Store::Zk, "peer"),
        "peer",
        "uncontended",
        CAPACITY,
    )
    .await?;
    let mut ours = Op::Library(sem);
    let (before, packets_before) = zk_pairs(&mut ours, servers, n).await?;
    let packets = servers.zk_packets_received()?;
    let hosts = servers.zk.connect_string();
    peer.kazoo = kazoo::uncontended(&hosts, CAPACITY, n).await?;
    // kazoo_peer.py runs 20 unmeasured pairs first.
    peer.kazoo_packets = (servers.zk_packets_received()? - packets) as f64 / (n + 20) as f64;
    let (after, packets_after) = zk_pairs(&mut ours, servers, n).await?;
    peer.ours = before.merged(&after);
    peer.ours_packets = (packets_before + packets_after) / 2.0;
    l.close().await?;
    Ok(peer)
}

/// `n` acquire+release pairs of `op` on ZooKeeper, and the server's packets per pair.
async fn zk_pairs(
    op: &mut Op,
    servers: &Servers,
    n: usize,
) -> anyhow::Result<(stats::Samples, f64)> {
    let packets = servers.zk_packets_received()?;
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        v.push(op.once().await?.total());
    }
    let per_pair = (servers.zk_packets_received()? - packets) as f64 / n as f64;
    Ok((stats::Samples::new(v), per_pair))
}

/// What ran where: the header of the tables.
fn about(plan: &Plan, servers: &Servers, took: Duration, load_before: &str) -> String {
    format!(
        "## Results: {n}-node etcd and {n}-node ZooKeeper, {mode}\n\n\
         {run}\
         - etcd {etcd} (`--unsafe-no-fsync`), ZooKeeper {zk} (`forceSync=no`), kazoo {kazoo} on Python {python}\n\
         - latencies in ms; p50 / p99 by nearest rank; rows 1–2 interleaved in {rounds} rounds of {batch} per path\n",
        n = plan.nodes(),
        mode = mode(plan.quick),
        run = run_lines(took, "the whole run", "", load_before),
        etcd = etcd_version(&support::etcd_binary()),
        zk = servers.zk_version(),
        kazoo = command(
            "/usr/bin/python3",
            &["-c", "import kazoo.version as v; print(v.__version__)"]
        ),
        python = command("/usr/bin/python3", &["-c", "import platform; print(platform.python_version())"]),
        rounds = plan.latency_rounds,
        batch = plan.latency_batch,
    )
}
