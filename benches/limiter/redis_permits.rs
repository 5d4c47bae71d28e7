//! Permits on Redis (issue 39): rows 1–4 on one Redis, each beside the same row on etcd measured
//! in this step too (so every Redis ÷ etcd ratio is between figures taken minutes apart at most,
//! and the floors interleaved with the Limiters as in rows 1–2). `--only-redis-permits` runs
//! this step alone.

use crate::contended::{self, Outcome};
use crate::handoff::{self, Raw};
use crate::latency::{self, Measured, Op, PairSamples};
use crate::notify::{Notify, Spy};
use crate::plan::Plan;
use crate::stores::{client, close_all, PermitRedis, Servers, Store};
use crate::{CAPACITY, CLIENTS, HOLDS};
use anyhow::Context as _;
use std::time::Duration;

/// The two stores of this step, in the order of every vector below.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Etcd,
    Redis,
}

impl Side {
    pub const BOTH: [Side; 2] = [Side::Etcd, Side::Redis];

    pub fn label(self) -> &'static str {
        match self {
            Side::Etcd => "etcd",
            Side::Redis => "Redis",
        }
    }
}

/// One store's rows.
#[derive(Debug, Clone, Default)]
pub struct Rows {
    /// Raw put + delete (etcd) or SET + DEL (Redis) with the Limiter's client library.
    pub floor: PairSamples,
    /// Uncontended acquire + release.
    pub library: PairSamples,
    /// Requests the Limiter sent per uncontended pair (keepalives apart).
    pub requests_per_pair: f64,
    /// Redis only: the server's own time per call during rows 1–2 (`INFO commandstats`), as
    /// (command, calls, µs per call), for `SET`, `DEL` (the floor) and `EVALSHA` (the Limiter).
    pub server_time: Vec<(String, u64, f64)>,
    /// One contended run per hold of [`HOLDS`].
    pub contended: Vec<Outcome>,
    pub handoff: handoff::Outcome,
}

/// Everything this step measured: `stores` in [`Side::BOTH`] order.
#[derive(Debug, Default)]
pub struct RedisPermits {
    pub about: String,
    pub stores: Vec<Rows>,
    pub rounds: usize,
    pub batch: usize,
    pub clients: usize,
    pub capacity: u32,
    pub contended_for: Duration,
    pub holds: Vec<Duration>,
}

impl RedisPermits {
    pub fn side(&self, side: Side) -> &Rows {
        &self.stores[Side::BOTH.iter().position(|s| *s == side).unwrap_or(0)]
    }
}

/// Prefix (etcd) and key prefix (Redis) of this step's semaphores: apart from rows 1–6's.
const SPACE: &str = "redis-permits";

fn step(what: &str) {
    eprintln!("limiter bench (permits on Redis): {what}");
}

pub async fn measure(
    plan: &Plan,
    servers: &Servers,
    redis: &PermitRedis,
) -> anyhow::Result<RedisPermits> {
    let mut stores = vec![Rows::default(), Rows::default()];
    step("rows 1-2: floors and uncontended acquire + release, interleaved");
    uncontended(plan, servers, redis, &mut stores).await?;
    step("row 3: contended throughput");
    for hold in HOLDS {
        for (side, rows) in Side::BOTH.iter().zip(stores.iter_mut()) {
            let setup = contended::Setup {
                clients: CLIENTS,
                capacity: CAPACITY,
                hold,
                run_for: plan.redis_contended_for,
            };
            let name = format!("hold-{}ms", hold.as_millis());
            let url = url(*side, servers, redis, &format!("{SPACE}-contended"));
            rows.contended
                .push(contended::run(&url, &name, setup).await?);
        }
    }
    step("row 4: handoff");
    for (side, rows) in Side::BOTH.iter().zip(stores.iter_mut()) {
        rows.handoff = handoffs(plan, servers, redis, *side).await?;
    }
    Ok(RedisPermits {
        about: String::new(),
        stores,
        rounds: plan.latency_rounds,
        batch: plan.latency_batch,
        clients: CLIENTS,
        capacity: CAPACITY,
        contended_for: plan.redis_contended_for,
        holds: HOLDS.to_vec(),
    })
}

fn url(side: Side, servers: &Servers, redis: &PermitRedis, space: &str) -> String {
    match side {
        Side::Etcd => servers.url(Store::Etcd, space),
        Side::Redis => redis.url(space),
    }
}

/// Rows 1–2 on both stores: the floors and the Limiters in the same interleaved rounds.
async fn uncontended(
    plan: &Plan,
    servers: &Servers,
    redis: &PermitRedis,
    stores: &mut [Rows],
) -> anyhow::Result<()> {
    let endpoints = servers.etcd.endpoints();
    let on = |op: Op, servers: Vec<u32>| Measured {
        op,
        sidecar: None,
        servers,
    };
    let mut ops = Vec::new();
    let mut limiters = Vec::new();
    for side in Side::BOTH {
        let (floor, pids) = match side {
            Side::Etcd => (
                Op::etcd_raw(&endpoints, &format!("{SPACE}-floor/key")).await?,
                servers.pids(Store::Etcd),
            ),
            Side::Redis => (
                Op::redis_raw(&redis.raw_url(), &format!("{SPACE}-floor")).await?,
                redis.pids(),
            ),
        };
        ops.push(on(floor, pids.clone()));
        let space = format!("{SPACE}-latency");
        let (l, s) = client(&url(side, servers, redis, &space), "uncontended", "one", 2).await?;
        ops.push(on(Op::Library(s), pids));
        limiters.push(l);
    }
    let before: Vec<_> = limiters.iter().map(|l| l.stats()).collect();
    let compactor = crate::stores::etcd_admin(&endpoints).await?;
    let (rounds, batch) = (plan.latency_rounds, plan.latency_batch);
    let mut admin = latency::redis_connection(&redis.raw_url()).await?;
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async::<()>(&mut admin)
        .await
        .context("reset Redis's command stats")?;
    let mut s = latency::interleaved(&mut ops, rounds, batch, Some(compactor))
        .await?
        .into_iter();
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut admin)
        .await
        .context("read Redis's command stats")?;
    // `interleaved` runs one unmeasured batch first.
    let pairs = ((rounds + 1) * batch).max(1) as f64;
    for ((rows, l), before) in stores.iter_mut().zip(&limiters).zip(&before) {
        rows.floor = s.next().context("a floor result is missing")?;
        rows.library = s.next().context("a library result is missing")?;
        let sent = l.stats().since(before);
        rows.requests_per_pair = (sent.total() - sent.watch) as f64 / pairs;
    }
    let redis_rows = &mut stores[Side::BOTH
        .iter()
        .position(|s| *s == Side::Redis)
        .unwrap_or(1)];
    redis_rows.server_time = ["set", "del", "evalsha"]
        .iter()
        .filter_map(|c| command_stat(&info, c))
        .collect();
    close_all(&limiters).await
}

/// `(COMMAND, calls, usec_per_call)` of `command` from `INFO commandstats`
/// (`cmdstat_set:calls=2100,usec=96412,usec_per_call=45.91,…`).
fn command_stat(info: &str, command: &str) -> Option<(String, u64, f64)> {
    let fields = info
        .lines()
        .find_map(|l| l.trim().strip_prefix(&format!("cmdstat_{command}:")))?;
    let field = |name: &str| {
        fields
            .split(',')
            .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
    };
    Some((
        command.to_uppercase(),
        field("calls")?.parse().ok()?,
        field("usec_per_call")?.parse().ok()?,
    ))
}

/// Row 4 on one store: turns timed against one raw delete and one raw notification, then half
/// as many turns split by a spy (a raw watcher of the semaphore, or a subscriber of its channel).
async fn handoffs(
    plan: &Plan,
    servers: &Servers,
    redis: &PermitRedis,
    side: Side,
) -> anyhow::Result<handoff::Outcome> {
    let space = format!("{SPACE}-handoff");
    let url = url(side, servers, redis, &space);
    let sem = handoff::SEMAPHORE;
    let (refs, spy) = match side {
        Side::Etcd => {
            let endpoints = servers.etcd.endpoints();
            (
                Raw::References {
                    write: Box::new(Op::etcd_raw(&endpoints, &format!("{space}/one-write")).await?),
                    notify: Box::new(Notify::etcd(&endpoints, &format!("{space}/notify")).await?),
                },
                Spy::etcd(&endpoints, &format!("{space}/s/{sem}/q/")).await?,
            )
        }
        Side::Redis => {
            let raw = redis.raw_url();
            (
                Raw::References {
                    write: Box::new(Op::redis_raw(&raw, &format!("{space}-one-write")).await?),
                    notify: Box::new(Notify::redis(&raw, &format!("{space}-notify")).await?),
                },
                // The channel the permit scripts publish on (src/backend/redis/sem_keys.rs).
                Spy::redis(&raw, &format!("{{{space}:s:{sem}}}:changed")).await?,
            )
        }
    };
    let mut out = handoff::run(&url, Some(refs), plan.handoffs).await?;
    let spied = handoff::run(&url, Some(Raw::Spy(spy)), plan.handoffs / 2).await?;
    out.spy_sees = spied.spy_sees;
    out.grant_after_spy = spied.grant_after_spy;
    Ok(out)
}

/// The header of `--only-redis-permits`'s printout: when, what ran, the machine and its load.
pub fn about(plan: &Plan, took: Duration, load_before: &str) -> String {
    use crate::common::machine::{command, etcd_version, mode, run_lines};
    format!(
        "Permits on Redis beside {n}-node etcd, {mode}\n\n\
         {run}\
         - etcd {etcd} (`--unsafe-no-fsync`), {redis} (no persistence)\n\
         - latencies in ms; p50 / p99 by nearest rank\n",
        n = plan.nodes(),
        mode = mode(plan.quick),
        run = run_lines(took, "this step", ", shared with other builds", load_before),
        etcd = etcd_version(&crate::support::etcd_binary()),
        redis = command("redis-server", &["--version"])
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
    )
}
