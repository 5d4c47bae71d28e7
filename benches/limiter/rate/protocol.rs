//! What the rate-limit rows (issue 17) and their worker processes say to each other.
//!
//! The hot-key row runs every contender (clusterlimit on a store, redis-cell, the etcd peers)
//! as the same shape: N worker processes × C concurrent callers, closed loop, one key. The
//! harness starts each worker with one argument, a [`WorkerSetup`] as JSON; the worker prints
//! one [`WorkerReport`] as a JSON line on stdout and exits 0 (anything on stderr is for people).
//!
//! * clusterlimit and redis-cell workers are this bench binary again:
//!   `limiter --rate-worker '<setup json>'` (see [`worker_main`]).
//! * The Node and Python peers are scripts under `benches/peers/`, started by
//!   `crate::peers::command`.
//!
//! Times are Unix microseconds, so workers of every language on this machine share one clock.

use serde::{Deserialize, Serialize};

/// The first argument that turns the bench binary into a worker.
pub const WORKER_FLAG: &str = "--rate-worker";

/// Who is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Contender {
    /// clusterlimit's library, one `Limiter` per process; `target` is its store URL.
    Clusterlimit,
    /// redis-cell's `CL.THROTTLE` on Redis; `target` is `redis://127.0.0.1:PORT`.
    RedisCell,
    /// npm `rate-limiter-flexible`'s `RateLimiterEtcd` (with `etcd3`); `target` is
    /// `http://127.0.0.1:PORT` of etcd.
    RlfEtcd,
    /// Python `limits` 4.8.0's etcd storage; `target` is `etcd://127.0.0.1:PORT`.
    LimitsEtcd,
    /// The etcd floor of a fresh key: a plain `put` (no condition, no lease) through
    /// etcd-client; `target` is `http://127.0.0.1:PORT`.
    EtcdPut,
    /// The etcd floor of a fresh key's compare-and-swap: a `Txn` that puts the key if absent
    /// (`create_revision == 0`); `target` as [`EtcdPut`](Self::EtcdPut).
    EtcdPutIfAbsent,
    /// The ZooKeeper floor of a fresh key: `create` of a persistent node under `/floor`;
    /// `target` is the connect string `127.0.0.1:PORT`.
    ZkCreate,
    /// clusterlimit's sidecar over HTTP: `POST /v1/ratelimits/{limit_name}/check`, one per
    /// decision on kept-alive connections; `target` is the sidecar's `http://127.0.0.1:PORT`.
    SidecarHttp,
    /// clusterlimit's sidecar over the RLS: one `ShouldRateLimit` of one descriptor
    /// (`limit_name` is the domain, `key` the descriptor key) per decision; `target` is the
    /// gRPC address `127.0.0.1:PORT`.
    SidecarRls,
    /// The Redis floor of a fresh key (issue 39): `SET key value PX ttl` through the same
    /// redis-rs client and multiplexed connection as redis-cell's worker; `target` is
    /// `redis://127.0.0.1:PORT`.
    RedisSet,
}

/// What a worker does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// `callers` concurrent callers check `key` back to back until `duration_ms` has passed
    /// since `start_at_unix_us`.
    Hot,
    /// One caller, `count` checks of `key` one after another (a quota they never exhaust):
    /// every latency is reported.
    Uncontended,
    /// As `Hot`, but every check is of a key never checked before (`key`-PID-N): many keys,
    /// each once, at the contender's own speed (issue 28).
    Fresh,
}

/// One worker's orders (the single argument of the worker process, as JSON).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkerSetup {
    pub contender: Contender,
    pub mode: Mode,
    /// Store URL / server address (see [`Contender`]).
    pub target: String,
    /// Name of the limit (clusterlimit's limit name; a key prefix for the others).
    pub limit_name: String,
    pub key: String,
    /// Quota: `limit` per `period_ms`.
    pub limit: u64,
    pub period_ms: u64,
    /// GCRA burst (redis-cell's `max_burst` is `burst - 1`); windows ignore it.
    pub burst: u64,
    /// `gcra`, `fixed-window` or `sliding-window` (what the contender offers; a peer that has
    /// only one runs that one and says so in its report's `algorithm`).
    pub algorithm: String,
    pub callers: u32,
    pub duration_ms: u64,
    /// Uncontended mode: checks to make.
    pub count: u64,
    /// Every worker of one run starts its loop at this instant (sleeping until then), so
    /// set-up (connect, open) is not measured.
    pub start_at_unix_us: u64,
    /// Hot mode, clusterlimit: a caller denied with a `retry_after` sleeps that long before
    /// its next check, as a well-behaved client does (absent: callers check back to back).
    #[serde(default)]
    pub wait_retry_after: bool,
}

/// One worker's results (its one JSON line on stdout).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WorkerReport {
    /// The algorithm actually run.
    pub algorithm: String,
    /// Decisions returned (admitted + denied), errors excluded.
    pub decisions: u64,
    pub admitted: u64,
    /// Calls that returned an error (no decision).
    pub errors: u64,
    /// From the first check sent to the last answer received, seconds.
    pub elapsed_s: f64,
    /// CPU this worker process used in the loop (user + system), seconds.
    pub cpu_s: f64,
    /// Decision latencies in µs: every one in uncontended mode, in hot mode a sample of at most
    /// 20,000 (a uniform reservoir).
    pub latencies_us: Vec<u64>,
    /// Every admitted decision as [sent, answered], Unix µs: the interval check uses them.
    pub admitted_at_us: Vec<[u64; 2]>,
    /// clusterlimit only: store requests this process made during the loop (the Limiter's
    /// counters), and denials answered without a request.
    pub store_requests: Option<u64>,
    pub local_denials: Option<u64>,
}

/// When the bench binary was started as a worker (`limiter --rate-worker '<json>'`): runs it,
/// prints its report and returns the exit code; `None` for a normal bench run.
pub fn worker_main() -> Option<std::process::ExitCode> {
    let mut args = std::env::args().skip(1);
    if args.next().as_deref() != Some(WORKER_FLAG) {
        return None;
    }
    let mut run = || -> anyhow::Result<WorkerReport> {
        let json = args
            .next()
            .ok_or_else(|| anyhow::anyhow!("{WORKER_FLAG} needs the setup as JSON"))?;
        let setup: WorkerSetup = serde_json::from_str(&json)
            .map_err(|e| anyhow::anyhow!("bad worker setup {json}: {e}"))?;
        match setup.contender {
            Contender::Clusterlimit => crate::rate::worker::run(&setup),
            Contender::RedisCell => crate::peers::redis_cell::run_worker(&setup),
            Contender::EtcdPut
            | Contender::EtcdPutIfAbsent
            | Contender::ZkCreate
            | Contender::RedisSet => crate::rate::raw::run_worker(&setup),
            Contender::SidecarHttp | Contender::SidecarRls => {
                crate::rate::sidecar_worker::run_worker(&setup)
            }
            other => anyhow::bail!("{other:?} is not run by this binary (see peers::command)"),
        }
    };
    Some(match run().and_then(|r| Ok(serde_json::to_string(&r)?)) {
        Ok(line) => {
            println!("{line}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rate worker failed: {e:#}");
            std::process::ExitCode::FAILURE
        }
    })
}

/// The process of one worker for `setup`: this bench binary for clusterlimit and redis-cell, a
/// script for the Node and Python peers. Its stdout is to be piped and read as one
/// [`WorkerReport`] line.
pub fn worker_command(setup: &WorkerSetup) -> anyhow::Result<std::process::Command> {
    match setup.contender {
        Contender::Clusterlimit
        | Contender::RedisCell
        | Contender::EtcdPut
        | Contender::EtcdPutIfAbsent
        | Contender::ZkCreate
        | Contender::RedisSet
        | Contender::SidecarHttp
        | Contender::SidecarRls => {
            let exe = std::env::current_exe()
                .map_err(|e| anyhow::anyhow!("find this bench's executable: {e}"))?;
            let mut cmd = std::process::Command::new(exe);
            cmd.arg(WORKER_FLAG).arg(serde_json::to_string(setup)?);
            Ok(cmd)
        }
        Contender::RlfEtcd | Contender::LimitsEtcd => crate::peers::script_command(setup),
    }
}
