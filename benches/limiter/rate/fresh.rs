//! Row 4b (issue 28): many keys at the store's speed. Worker processes × callers in a closed
//! loop, each check of a key never checked before (quota 100/s burst 10: every check admitted
//! and written), on clusterlimit (etcd, ZooKeeper), beside the stores' own floors for a fresh
//! key written by the same clients with the same processes and callers (plain puts, put-if-
//! absent Txns, ZooKeeper creates: `raw.rs`) and redis-cell on Redis, all in the same run.
//! The sidecar rows put one `clusterlimit serve` per worker process between the two
//! (`sidecars.rs`, `sidecar_worker.rs`). Issue 39 adds Redis: clusterlimit on the very Redis
//! redis-cell runs in, on a Redis Cluster of 3 primaries, and Redis's own `SET … PX` of a fresh
//! key; their ratios are to redis-cell's row of the same shape.

use super::protocol::{Contender, Mode, WorkerReport, WorkerSetup};
use super::sidecars::{self, Api};
use super::spawn;
use super::worker::unix_us;
use crate::peers::PeerServers;
use crate::stats::Samples;
use crate::stores::{RedisStores, Servers, Store};
use std::time::Duration;

/// Time given to workers to start and connect before their common start.
pub(super) const LEAD_IN: Duration = Duration::from_secs(4);

/// Who runs in row 4b, in the order of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who {
    EtcdPut,
    EtcdPutIfAbsent,
    OursEtcd,
    SidecarHttp,
    SidecarRls,
    ZkCreate,
    OursZk,
    RedisCell,
    RedisSet,
    OursRedis,
    SidecarHttpRedis,
    SidecarRlsRedis,
    OursRedisCluster,
}

impl Who {
    /// The order they run in: each floor right before ours on its store, and the slow
    /// put-if-absent Txns after ours (etcd digests them for a while after); on Redis the floor,
    /// redis-cell, ours on the same Redis, then ours on the Redis Cluster.
    pub const ALL: [Who; 13] = [
        Who::EtcdPut,
        Who::OursEtcd,
        Who::SidecarHttp,
        Who::SidecarRls,
        Who::EtcdPutIfAbsent,
        Who::ZkCreate,
        Who::OursZk,
        Who::RedisSet,
        Who::RedisCell,
        Who::OursRedis,
        Who::SidecarHttpRedis,
        Who::SidecarRlsRedis,
        Who::OursRedisCluster,
    ];

    /// The rows on Redis alone (`--only-redis`), in the same order.
    pub const REDIS: [Who; 6] = [
        Who::RedisSet,
        Who::RedisCell,
        Who::OursRedis,
        Who::SidecarHttpRedis,
        Who::SidecarRlsRedis,
        Who::OursRedisCluster,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Who::EtcdPut => "etcd floor: plain `put`",
            Who::EtcdPutIfAbsent => "etcd: put-if-absent `Txn`, 1 key",
            Who::OursEtcd => "clusterlimit, etcd",
            Who::SidecarHttp => "clusterlimit sidecar, HTTP (etcd)",
            Who::SidecarRls => "clusterlimit sidecar, RLS gRPC (etcd)",
            Who::ZkCreate => "ZooKeeper floor: `create`",
            Who::OursZk => "clusterlimit, ZooKeeper",
            Who::RedisCell => "redis-cell `CL.THROTTLE`",
            Who::RedisSet => "Redis floor: `SET … PX`",
            Who::OursRedis => "clusterlimit, Redis",
            Who::SidecarHttpRedis => "clusterlimit sidecar, HTTP (Redis)",
            Who::SidecarRlsRedis => "clusterlimit sidecar, RLS gRPC (Redis)",
            Who::OursRedisCluster => "clusterlimit, Redis Cluster (3 primaries)",
        }
    }

    fn contender(self) -> Contender {
        match self {
            Who::EtcdPut => Contender::EtcdPut,
            Who::EtcdPutIfAbsent => Contender::EtcdPutIfAbsent,
            Who::OursEtcd | Who::OursZk | Who::OursRedis | Who::OursRedisCluster => {
                Contender::Clusterlimit
            }
            Who::ZkCreate => Contender::ZkCreate,
            Who::SidecarHttp | Who::SidecarHttpRedis => Contender::SidecarHttp,
            Who::SidecarRls | Who::SidecarRlsRedis => Contender::SidecarRls,
            Who::RedisCell => Contender::RedisCell,
            Who::RedisSet => Contender::RedisSet,
        }
    }

    /// The floor ours is held to (its own store's plain write of a fresh key).
    pub fn floor(self) -> Option<Who> {
        match self {
            Who::OursEtcd | Who::SidecarHttp | Who::SidecarRls => Some(Who::EtcdPut),
            Who::OursZk => Some(Who::ZkCreate),
            _ => None,
        }
    }

    /// The row a row's ratios are taken to: its store's floor (etcd, ZooKeeper), or on Redis
    /// redis-cell's row (issue 39: one script call per batch against one command per key).
    pub fn compared_with(self) -> Option<Who> {
        match self {
            Who::RedisSet
            | Who::OursRedis
            | Who::SidecarHttpRedis
            | Who::SidecarRlsRedis
            | Who::OursRedisCluster => Some(Who::RedisCell),
            other => other.floor(),
        }
    }

    /// The sidecars' API, for the sidecar rows.
    fn api(self) -> Option<Api> {
        match self {
            Who::SidecarHttp | Who::SidecarHttpRedis => Some(Api::Http),
            Who::SidecarRls | Who::SidecarRlsRedis => Some(Api::Rls),
            _ => None,
        }
    }

    /// Where the workers connect (the sidecar rows: where their sidecars do).
    fn target(self, servers: &Servers, peers: &PeerServers, redis: &RedisStores, n: u64) -> String {
        match self {
            // The Redis redis-cell runs in: the same server for both.
            Who::OursRedis | Who::SidecarHttpRedis | Who::SidecarRlsRedis => {
                format!("{}/fresh{n}", peers.redis_url())
            }
            Who::OursRedisCluster => redis.cluster_url(&format!("fresh{n}")),
            Who::OursEtcd | Who::SidecarHttp | Who::SidecarRls => {
                servers.url(Store::Etcd, &format!("fresh{n}"))
            }
            Who::OursZk => servers.url(Store::Zk, &format!("fresh{n}")),
            // The floors and redis-cell: where the peers' workers connect.
            other => super::peer_target(other.contender(), servers, peers),
        }
    }

    fn server_pids(self, servers: &Servers, peers: &PeerServers, redis: &RedisStores) -> Vec<u32> {
        match self {
            Who::EtcdPut
            | Who::EtcdPutIfAbsent
            | Who::OursEtcd
            | Who::SidecarHttp
            | Who::SidecarRls => servers.pids(Store::Etcd),
            Who::ZkCreate | Who::OursZk => servers.pids(Store::Zk),
            Who::RedisCell
            | Who::RedisSet
            | Who::OursRedis
            | Who::SidecarHttpRedis
            | Who::SidecarRlsRedis => peers.pids(),
            Who::OursRedisCluster => redis.cluster_pids(),
        }
    }
}

/// One run: who, with how many processes × callers.
#[derive(Debug, Clone)]
pub struct FreshRow {
    pub who: Who,
    pub processes: usize,
    pub callers: u32,
    pub decisions: u64,
    pub admitted: u64,
    pub errors: u64,
    pub run_for: Duration,
    pub latency: Samples,
    /// Ours only: store requests per decision.
    pub requests_per_decision: Option<f64>,
    /// The store server's CPU per decision, µs.
    pub server_cpu_us_per_decision: f64,
    /// The worker processes' CPU per decision, µs.
    pub client_cpu_us_per_decision: f64,
    /// The sidecar rows: the sidecar processes' CPU per decision, µs.
    pub sidecar_cpu_us_per_decision: Option<f64>,
}

impl FreshRow {
    pub fn decisions_per_s(&self) -> f64 {
        self.decisions as f64 / self.run_for.as_secs_f64()
    }
}

/// Runs `who` with `processes` × `callers` for `run_for`.
pub async fn run(
    who: Who,
    servers: &Servers,
    peers: &PeerServers,
    redis: &RedisStores,
    processes: usize,
    callers: u32,
    run_for: Duration,
) -> anyhow::Result<FreshRow> {
    static RUN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let setup = WorkerSetup {
        contender: who.contender(),
        mode: Mode::Fresh,
        target: who.target(servers, peers, redis, n),
        limit_name: format!("fresh{n}"),
        key: if who.api() == Some(Api::Rls) {
            sidecars::RLS_KEY.to_string()
        } else {
            "k".to_string()
        },
        limit: 100,
        period_ms: 1000,
        burst: 10,
        algorithm: "gcra".to_string(),
        callers,
        duration_ms: run_for.as_millis() as u64,
        count: 0,
        start_at_unix_us: 0,
        wait_retry_after: false,
    };
    // The sidecar rows: one sidecar per worker, started before the lead-in counts down.
    let running = match who.api() {
        Some(api) => Some(sidecars::start(api, processes, &setup).await?),
        None => None,
    };
    let start_at = unix_us() + LEAD_IN.as_micros() as u64;
    let targets = match &running {
        Some(s) => s.targets(),
        None => vec![setup.target.clone(); processes],
    };
    let setups: Vec<WorkerSetup> = targets
        .into_iter()
        .map(|target| WorkerSetup {
            target,
            start_at_unix_us: start_at,
            ..setup.clone()
        })
        .collect();
    let server_cpu = cpu_during(who.server_pids(servers, peers, redis), start_at, run_for);
    let sidecar_pids = running.as_ref().map_or_else(Vec::new, |s| s.pids());
    let sidecar_cpu = cpu_during(sidecar_pids, start_at, run_for);
    let bound = LEAD_IN + run_for + Duration::from_secs(60);
    let reports = spawn::run_all(&setups, bound).await?;
    let server_ns = server_cpu.await.unwrap_or(0);
    let sidecar_ns = sidecar_cpu.await.unwrap_or(0);
    drop(running);
    let mut row = merge(who, processes, callers, run_for, &reports, server_ns);
    if who.api().is_some() {
        row.sidecar_cpu_us_per_decision = Some(per_decision(sidecar_ns, row.decisions));
    }
    // A fresh key under 100/s burst 10 is always admitted: a denial means a key was not fresh.
    anyhow::ensure!(
        row.decisions > 0 && row.admitted == row.decisions,
        "{}: {} of {} fresh-key checks admitted ({} errors)",
        who.label(),
        row.admitted,
        row.decisions,
        row.errors
    );
    Ok(row)
}

/// The CPU `pids` use from `start_at` (Unix µs) for `run_for`, ns.
pub(super) fn cpu_during(
    pids: Vec<u32>,
    start_at: u64,
    run_for: Duration,
) -> tokio::task::JoinHandle<u64> {
    tokio::spawn(async move {
        sleep_until(start_at).await;
        let before = crate::cpu::cpu_ns(&pids).unwrap_or(0);
        sleep_until(start_at + run_for.as_micros() as u64).await;
        crate::cpu::cpu_ns(&pids)
            .unwrap_or(0)
            .saturating_sub(before)
    })
}

fn per_decision(ns: u64, decisions: u64) -> f64 {
    if decisions == 0 {
        0.0
    } else {
        ns as f64 / 1e3 / decisions as f64
    }
}

async fn sleep_until(at_us: u64) {
    let now = unix_us();
    if at_us > now {
        tokio::time::sleep(Duration::from_micros(at_us - now)).await;
    }
}

pub(super) fn merge(
    who: Who,
    processes: usize,
    callers: u32,
    run_for: Duration,
    reports: &[WorkerReport],
    server_ns: u64,
) -> FreshRow {
    let sum = |f: fn(&WorkerReport) -> u64| reports.iter().map(f).sum::<u64>();
    let decisions = sum(|r| r.decisions);
    let client_cpu_s: f64 = reports.iter().map(|r| r.cpu_s).sum();
    let requests: Option<u64> = reports.iter().map(|r| r.store_requests).sum();
    let latencies = reports
        .iter()
        .flat_map(|r| r.latencies_us.iter().map(|&us| Duration::from_micros(us)))
        .collect();
    FreshRow {
        who,
        processes,
        callers,
        decisions,
        admitted: sum(|r| r.admitted),
        errors: sum(|r| r.errors),
        run_for,
        latency: Samples::new(latencies),
        requests_per_decision: requests
            .filter(|_| decisions > 0)
            .map(|r| r as f64 / decisions as f64),
        server_cpu_us_per_decision: per_decision(server_ns, decisions),
        client_cpu_us_per_decision: per_decision((client_cpu_s * 1e9) as u64, decisions),
        sidecar_cpu_us_per_decision: None,
    }
}
