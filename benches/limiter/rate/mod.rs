//! The rate-limit rows of the limiter bench (issue 17): floors and uncontended checks (rows
//! 1–2), the hot key (3), many keys (4) and the peers (5: redis-cell on Redis,
//! rate-limiter-flexible and `limits` on etcd), each peer run by the same harness through
//! worker processes (`protocol`). Issue 39 runs clusterlimit on Redis too: on the Redis
//! redis-cell runs in (rows 3 and 4b) and on a Redis Cluster of 3 primaries (row 4b). See BENCHMARKS.md, "Rate limits: how the figures are made".

mod fresh;
mod hot;
mod idle;
mod interval;
mod many;
mod plan;
pub mod protocol;
pub mod raw;
mod report;
#[allow(dead_code)] // the RLS bench's server module: this bench uses its `Rls` only
#[path = "../../rls/server.rs"]
mod rls_server;
pub mod shards;
mod sidecar_worker;
mod sidecars;
mod spawn;
mod uncontended;
pub mod worker;

use crate::peers::PeerServers;
use crate::plan::Plan;
use crate::stores::{close_all, RedisStores, Servers, Store};
use anyhow::Context as _;
use hot::Hot;
use plan::RatePlan;
use protocol::{Contender, Mode, WorkerSetup};
use report::{PeerUncontended, RateResults};
use std::time::{Duration, Instant};
use uncontended::{Measured, Path, ROOMY};

/// Every rate-limit row, in one run: the markdown of the part's block in BENCHMARKS.md.
pub async fn measure(plan: &Plan, servers: &Servers) -> anyhow::Result<String> {
    interval::self_check()?;
    hot::self_check()?;
    let rp = RatePlan::new(plan.quick);
    let started = Instant::now();
    let load_before = crate::common::machine::load_average();
    step("peers' servers (Redis with redis-cell)");
    let peers = PeerServers::start().context("start the peers' servers")?;
    step("a Redis Cluster of 3 primaries (clusterlimit's rows on Redis)");
    let redis = RedisStores::start();
    let mut r = RateResults {
        plan: rp.clone(),
        ..RateResults::default()
    };
    if plan.redis_only {
        step("row 3: hot key on Redis, beside etcd and redis-cell");
        for &limit in &rp.quotas {
            for (c, who, target, pids) in hot_contenders(&rp, limit, servers, &peers) {
                // ZooKeeper and the slow etcd peers are not what these rows compare.
                let wanted = c == Contender::RedisCell
                    || (c == Contender::Clusterlimit && who != Store::Zk.label());
                if !wanted {
                    continue;
                }
                let h = hot_setup(&rp, c, limit, who, target, pids);
                r.hot.push(hot::run(h).await?);
            }
        }
        step("row 4b: fresh keys on Redis");
        fresh_each(&rp, &fresh::Who::REDIS, servers, &peers, &redis, &mut r).await?;
        r.about = report::about(plan, servers, &peers, started.elapsed(), &load_before);
        return Ok(r.redis_markdown());
    }
    if plan.fresh_keys_only {
        fresh_rows(&rp, servers, &peers, &redis, &mut r).await?;
        r.about = report::about(plan, servers, &peers, started.elapsed(), &load_before);
        return Ok(r.fresh_markdown());
    }
    step("rows 1-2: floors and uncontended checks, interleaved");
    uncontended_rows(&rp, servers, &mut r).await?;
    step("rows 2/5: uncontended worker processes (ours, redis-cell, etcd peers)");
    r.peer_uncontended = peer_uncontended(&rp, servers, &peers).await?;
    step("row 3: hot key");
    for &limit in &rp.quotas {
        for (c, who, target, pids) in hot_contenders(&rp, limit, servers, &peers) {
            let h = hot_setup(&rp, c, limit, who, target, pids);
            r.hot.push(hot::run(h).await?);
        }
    }
    step("row 3b: hot key, callers that wait retry_after");
    for &limit in &rp.patient_quotas {
        for store in [Store::Etcd, Store::Zk] {
            let (c, target, pids) = (
                Contender::Clusterlimit,
                servers.url(store, "hot"),
                servers.pids(store),
            );
            let h = Hot {
                wait_retry_after: true,
                ..hot_setup(&rp, c, limit, store.label(), target, pids)
            };
            r.hot_patient.push(hot::run(h).await?);
        }
    }
    step("row 4: many keys");
    for store in Store::ALL {
        r.many
            .push(many::run(servers, store, rp.keys, rp.keys_rate).await?);
    }
    fresh_rows(&rp, servers, &peers, &redis, &mut r).await?;
    r.about = report::about(plan, servers, &peers, started.elapsed(), &load_before);
    Ok(r.markdown())
}

/// Row 4b: every contender at each (processes, callers).
async fn fresh_rows(
    rp: &RatePlan,
    servers: &Servers,
    peers: &PeerServers,
    redis: &RedisStores,
    r: &mut RateResults,
) -> anyhow::Result<()> {
    step("row 4b: fresh keys, closed loop, beside the stores' floors and redis-cell");
    fresh_each(rp, &fresh::Who::ALL, servers, peers, redis, r).await?;
    step("row 4b: memory per idle key (one Limiter on etcd)");
    let idle = idle::run(servers, rp.idle_keys, rp.idle_for).await?;
    eprintln!("  {idle:?}");
    r.idle = Some(idle);
    Ok(())
}

/// Row 4b's closed loops: each of `whos` at each (processes, callers).
async fn fresh_each(
    rp: &RatePlan,
    whos: &[fresh::Who],
    servers: &Servers,
    peers: &PeerServers,
    redis: &RedisStores,
    r: &mut RateResults,
) -> anyhow::Result<()> {
    for &processes in &rp.fresh_processes {
        for &callers in &rp.fresh_callers {
            for &who in whos {
                let row = fresh::run(who, servers, peers, redis, processes, callers, rp.fresh_for)
                    .await
                    .with_context(|| format!("row 4b: {}", who.label()))?;
                let sidecar = row
                    .sidecar_cpu_us_per_decision
                    .map_or_else(String::new, |v| format!(" + {v:.0} sidecar"));
                eprintln!(
                    "  {processes} × {callers}: {}: {:.0} decisions/s, p50 {:?} p99 {:?}, CPU µs/decision {:.0} client{sidecar} + {:.0} store, {} errors",
                    who.label(),
                    row.decisions_per_s(),
                    row.latency.p50(),
                    row.latency.p99(),
                    row.client_cpu_us_per_decision,
                    row.server_cpu_us_per_decision,
                    row.errors
                );
                r.fresh.push(row);
            }
        }
    }
    Ok(())
}

/// Row 3's label of clusterlimit on Redis.
pub const REDIS: &str = "Redis";

fn step(what: &str) {
    eprintln!("limiter bench (rates): {what}");
}

/// Rows 1–2: the floors, the library on each store and the sidecar (HTTP, RLS) on etcd.
async fn uncontended_rows(
    rp: &RatePlan,
    servers: &Servers,
    r: &mut RateResults,
) -> anyhow::Result<()> {
    let endpoints = servers.etcd.endpoints();
    let (etcd, zk) = (servers.pids(Store::Etcd), servers.pids(Store::Zk));
    let on = |path: Path, store: &[u32]| Measured {
        path,
        store: store.to_vec(),
    };
    let mut paths = vec![
        on(Path::etcd_floor(&endpoints).await?, &etcd),
        on(Path::zk_floor(&servers.zk.connect_string()).await?, &zk),
    ];
    let mut limiters = Vec::new();
    for store in Store::ALL {
        let (l, p) = uncontended::library(&servers.url(store, "rate-uncontended")).await?;
        limiters.push(l);
        paths.push(on(p, &servers.pids(store)));
    }
    let sidecar_store = servers.url(Store::Etcd, "rate-sidecar");
    paths.push(on(Path::http(&sidecar_store, "uncontended").await?, &etcd));
    let dir = tempfile::tempdir().context("a directory for the RLS rules")?;
    paths.push(on(Path::rls(&sidecar_store, dir.path()).await?, &etcd));
    r.uncontended = uncontended::interleaved(&mut paths, rp.warmup, rp.rounds, rp.batch).await?;
    drop(paths);
    close_all(&limiters).await
}

fn peer_label(c: Contender) -> &'static str {
    match c {
        Contender::Clusterlimit => "clusterlimit",
        Contender::RedisCell => "redis-cell",
        Contender::RlfEtcd => "rate-limiter-flexible (etcd)",
        Contender::LimitsEtcd => "limits (etcd)",
        Contender::EtcdPut => "etcd plain put",
        Contender::EtcdPutIfAbsent => "etcd put-if-absent Txn",
        Contender::ZkCreate => "ZooKeeper create",
        Contender::RedisSet => "Redis SET",
        Contender::SidecarHttp => "clusterlimit sidecar, HTTP",
        Contender::SidecarRls => "clusterlimit sidecar, RLS gRPC",
    }
}

/// Where the worker of a peer or of a store's floor connects.
fn peer_target(c: Contender, servers: &Servers, peers: &PeerServers) -> String {
    let first = servers
        .etcd
        .endpoints()
        .first()
        .cloned()
        .unwrap_or_default();
    match c {
        Contender::Clusterlimit => servers.url(Store::Etcd, "peer-uncontended"),
        Contender::RedisCell | Contender::RedisSet => peers.redis_url(),
        Contender::RlfEtcd => format!("http://{first}"),
        Contender::LimitsEtcd => format!("etcd://{first}"),
        Contender::EtcdPut | Contender::EtcdPutIfAbsent => format!("http://{first}"),
        Contender::ZkCreate => servers.zk.connect_string(),
        // Their workers connect to sidecars of their own (`fresh::run` starts them).
        Contender::SidecarHttp | Contender::SidecarRls => servers.url(Store::Etcd, "sidecar"),
    }
}

/// GCRA for clusterlimit and redis-cell; the etcd peers have fixed windows.
fn algorithm(c: Contender) -> &'static str {
    match c {
        Contender::Clusterlimit
        | Contender::RedisCell
        | Contender::SidecarHttp
        | Contender::SidecarRls => "gcra",
        Contender::RlfEtcd | Contender::LimitsEtcd => "fixed-window",
        Contender::EtcdPut
        | Contender::EtcdPutIfAbsent
        | Contender::ZkCreate
        | Contender::RedisSet => "write",
    }
}

/// Who runs the hot key at `limit`: ours on etcd and ZooKeeper, redis-cell, and at the peers'
/// quota the etcd peers (who, target, the server processes charged with its CPU).
fn hot_contenders(
    rp: &RatePlan,
    limit: u64,
    servers: &Servers,
    peers: &PeerServers,
) -> Vec<(Contender, &'static str, String, Vec<u32>)> {
    let ours = |store: Store| {
        let url = servers.url(store, "hot");
        (
            Contender::Clusterlimit,
            store.label(),
            url,
            servers.pids(store),
        )
    };
    let mut all = vec![ours(Store::Etcd), ours(Store::Zk)];
    // Issue 39: ours on the Redis redis-cell runs in, right before redis-cell.
    all.push((
        Contender::Clusterlimit,
        REDIS,
        format!("{}/hot", peers.redis_url()),
        peers.pids(),
    ));
    all.push((
        Contender::RedisCell,
        "redis-cell",
        peers.redis_url(),
        peers.pids(),
    ));
    if limit == rp.peer_quota {
        for c in [Contender::RlfEtcd, Contender::LimitsEtcd] {
            let target = peer_target(c, servers, peers);
            all.push((c, peer_label(c), target, servers.pids(Store::Etcd)));
        }
    }
    all
}

fn hot_setup(
    rp: &RatePlan,
    c: Contender,
    limit: u64,
    who: &str,
    target: String,
    server_pids: Vec<u32>,
) -> Hot<'static> {
    Hot {
        who: who.to_string(),
        contender: c,
        target,
        algorithm: algorithm(c),
        limit,
        burst: RatePlan::burst(limit),
        processes: rp.processes,
        callers: rp.callers,
        run_for: rp.hot_for,
        server_pids,
        wait_retry_after: false,
    }
}

/// One worker process each, one caller, `peer_count` checks of a roomy key: ours on etcd
/// first (the same process shape as the peers), then each peer.
async fn peer_uncontended(
    rp: &RatePlan,
    servers: &Servers,
    peers: &PeerServers,
) -> anyhow::Result<Vec<PeerUncontended>> {
    let mut out = Vec::new();
    let all = [
        Contender::Clusterlimit,
        Contender::RedisCell,
        Contender::RlfEtcd,
        Contender::LimitsEtcd,
    ];
    for (n, c) in all.into_iter().enumerate() {
        let setup = WorkerSetup {
            contender: c,
            mode: Mode::Uncontended,
            target: peer_target(c, servers, peers),
            limit_name: format!("uncontended{n}"),
            key: "k".to_string(),
            limit: ROOMY,
            period_ms: 1000,
            burst: ROOMY,
            algorithm: algorithm(c).to_string(),
            callers: 1,
            duration_ms: 0,
            count: rp.peer_count,
            start_at_unix_us: worker::unix_us() + 2_000_000,
            wait_retry_after: false,
        };
        let bound = Duration::from_secs(60) + Duration::from_millis(100 * rp.peer_count);
        let reports = spawn::run_all(std::slice::from_ref(&setup), bound).await?;
        let report = reports
            .into_iter()
            .next()
            .context("no uncontended report")?;
        anyhow::ensure!(
            report.admitted == report.decisions && report.decisions == rp.peer_count,
            "{}: {} of {} roomy checks admitted ({} decisions)",
            peer_label(c),
            report.admitted,
            rp.peer_count,
            report.decisions
        );
        out.push(PeerUncontended::new(peer_label(c), c, &report));
    }
    Ok(out)
}
