//! The rate-limit peers of issue 17: redis-cell on Redis, rate-limiter-flexible and `limits`
//! on etcd.
//!
//! `scripts/test --install-deps` installs them under the build dir (Debian's `redis-server`,
//! the redis-cell module built from crates.io, a Node dir and a Python venv, all pinned); the
//! `CLUSTERLIMIT_*` variables below point elsewhere. A missing peer is an error with an install
//! hint, never a skipped row.

pub mod drive;
pub mod redis_cell;

use crate::rate::protocol::{Contender, WorkerSetup};
use crate::support::process::{free_ports, start_with_retries, Attempt, ServerProcess};
use anyhow::{bail, ensure, Context as _};
use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const INSTALL_HINT: &str = "run scripts/test --install-deps (with the same CARGO_TARGET_DIR)";
const REDIS_SERVER: &str = "redis-server";
const NODE: &str = "node";
const RLF_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/peers/rlf_etcd.js");
const LIMITS_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/peers/limits_etcd.py");
/// How long Redis may take to answer PING after its start.
const READY_WITHIN: Duration = Duration::from_secs(10);

/// One installed piece: an override variable, else its place under the build dir.
struct Install {
    var: &'static str,
    under_target: &'static str,
}

/// The redis-cell module (`scripts/test` writes `installed`, naming the version, beside it).
const MODULE: Install = Install {
    var: "CLUSTERLIMIT_REDIS_CELL_MODULE",
    under_target: "redis-cell/libredis_cell.so",
};
/// The dir whose `node_modules` has rate-limiter-flexible and etcd3.
const NODE_DIR: Install = Install {
    var: "CLUSTERLIMIT_BENCH_NODE_DIR",
    under_target: "bench-node",
};
/// The venv's python with limits, etcd3 and protobuf < 3.21.
const LIMITS_PYTHON: Install = Install {
    var: "CLUSTERLIMIT_LIMITS_PYTHON",
    under_target: "limits-venv/bin/python",
};

impl Install {
    /// The variable's path, else the build dir's (this binary is `<target>/<profile>/deps/…`).
    fn path(&self) -> PathBuf {
        if let Some(p) = std::env::var_os(self.var).filter(|p| !p.is_empty()) {
            return PathBuf::from(p);
        }
        let target = std::env::current_exe()
            .ok()
            .and_then(|exe| exe.ancestors().nth(3).map(Path::to_path_buf))
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
        target.join(self.under_target)
    }

    /// The path, or an error with the install hint when nothing is there.
    fn existing(&self, what: &str) -> anyhow::Result<PathBuf> {
        let path = self.path();
        ensure!(
            path.exists(),
            "{what} not found at {} (set {} or {INSTALL_HINT})",
            path.display(),
            self.var
        );
        Ok(path)
    }
}

/// Fails with an install hint unless every peer is there: Redis, the module, Node with its
/// packages, the venv. Cheap; the harness calls it before any server starts.
pub fn check_installed() -> anyhow::Result<()> {
    output(Command::new(REDIS_SERVER).arg("--version"))
        .with_context(|| format!("Debian's redis-server is needed ({INSTALL_HINT})"))?;
    MODULE.existing("the redis-cell module")?;
    output(Command::new(NODE).arg("--version"))
        .with_context(|| format!("node is needed ({INSTALL_HINT})"))?;
    let node_dir = NODE_DIR.existing("the Node peer's dir")?;
    for package in ["rate-limiter-flexible", "etcd3"] {
        let at = node_dir.join("node_modules").join(package);
        ensure!(at.exists(), "{} not found ({INSTALL_HINT})", at.display());
    }
    let python = LIMITS_PYTHON.existing("the limits venv")?;
    output(Command::new(python).args(["-c", "import limits.storage.etcd, etcd3"]))
        .with_context(|| format!("the limits venv cannot import its packages ({INSTALL_HINT})"))?;
    Ok(())
}

/// The servers only the peers need: Redis with the redis-cell module (a child process on a free
/// loopback port, killed on drop).
pub struct PeerServers {
    redis: ServerProcess,
    port: u16,
    module: PathBuf,
}

impl std::fmt::Debug for PeerServers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerServers")
            .field("redis_url", &self.redis_url())
            .field("module", &self.module)
            .finish()
    }
}

impl PeerServers {
    /// Starts them; an error with an install hint when something is missing.
    pub fn start() -> anyhow::Result<PeerServers> {
        check_installed()?;
        let module = MODULE.path();
        Ok(start_with_retries("redis-server with redis-cell", |what| {
            let port = free_ports(1)[0];
            let mut redis = ServerProcess::new("redis", "clusterlimit-redis-", "redis.log");
            let mut cmd = Command::new(REDIS_SERVER);
            cmd.args(["--bind", "127.0.0.1", "--port", &port.to_string()])
                .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
                .arg("--dir")
                .arg(redis.dir())
                .arg("--loadmodule")
                .arg(&module);
            if let Err(e) = redis.spawn(&mut cmd, "redis-server") {
                return Attempt::Failed {
                    message: format!("{what}: cannot run {REDIS_SERVER}: {e} ({INSTALL_HINT})"),
                };
            }
            match wait_ready(&mut redis, port) {
                Ok(()) => Attempt::Started(PeerServers {
                    redis,
                    port,
                    module: module.clone(),
                }),
                Err(Ready::Exited(status)) => Attempt::EarlyExit {
                    summary: format!("port {port}: {status}"),
                    message: format!("{what}: it exited ({status}):\n{}", redis.log_tail(20)),
                },
                Err(Ready::TimedOut) => Attempt::Failed {
                    message: format!(
                        "{what}: no PONG on port {port} within {READY_WITHIN:?}:\n{}",
                        redis.log_tail(20)
                    ),
                },
            }
        }))
    }

    /// `redis://127.0.0.1:PORT` of the Redis with redis-cell loaded.
    pub fn redis_url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Process ids of the peers' servers (for CPU accounting).
    pub fn pids(&self) -> Vec<u32> {
        self.redis.pid().into_iter().collect()
    }

    /// One line naming each peer's version (Redis, redis-cell, Node, rate-limiter-flexible,
    /// etcd3, Python, limits), for the report's header; `?` for what cannot be read.
    pub fn versions(&self) -> String {
        let redis = output(Command::new(REDIS_SERVER).arg("--version"))
            .ok()
            .and_then(|v| {
                let v = v.split_whitespace().find_map(|w| w.strip_prefix("v="))?;
                Some(format!("Redis {v}"))
            })
            .unwrap_or_else(|| "Redis ?".to_string());
        let cell = self
            .module
            .parent()
            .and_then(|dir| std::fs::read_to_string(dir.join("installed")).ok())
            .map_or_else(|| "redis-cell ?".to_string(), |v| v.trim().to_string());
        let script = |contender| {
            let mut cmd = script_program(contender)?;
            cmd.arg("--versions");
            output(&mut cmd)
        };
        let node = script(Contender::RlfEtcd)
            .unwrap_or_else(|_| "Node ?, rate-limiter-flexible ?, etcd3 ?".to_string());
        let python = script(Contender::LimitsEtcd)
            .unwrap_or_else(|_| "Python ?, limits ?, etcd3 ?".to_string());
        format!("{redis}, {cell}; {node}; {python}")
    }
}

/// The process of one worker of a script peer (Node's rate-limiter-flexible, Python's
/// `limits`): the setup as its one argument, its report on stdout.
pub fn script_command(setup: &WorkerSetup) -> anyhow::Result<Command> {
    let mut cmd = script_program(setup.contender)?;
    cmd.arg(serde_json::to_string(setup)?);
    Ok(cmd)
}

/// The interpreter with the peer's script, its packages found through the environment.
fn script_program(contender: Contender) -> anyhow::Result<Command> {
    match contender {
        Contender::RlfEtcd => {
            let modules = NODE_DIR
                .existing("the Node peer's dir")?
                .join("node_modules");
            let mut cmd = Command::new(NODE);
            cmd.env("NODE_PATH", modules).arg(RLF_SCRIPT);
            Ok(cmd)
        }
        Contender::LimitsEtcd => {
            let mut cmd = Command::new(LIMITS_PYTHON.existing("the limits venv")?);
            // etcd3 0.12's generated code predates protobuf 3.21's C++ checks; the pure-Python
            // implementation also takes it on a newer protobuf.
            cmd.env("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "python")
                .arg(LIMITS_SCRIPT);
            Ok(cmd)
        }
        other => bail!("{other:?} is not a script peer"),
    }
}

/// Runs `cmd` to its end: its stdout, trimmed, or an error with its stderr.
fn output(cmd: &mut Command) -> anyhow::Result<String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {:?}", cmd.get_program()))?;
    ensure!(
        out.status.success(),
        "{:?} failed ({}): {}",
        cmd.get_program(),
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Why Redis did not become ready.
enum Ready {
    Exited(std::process::ExitStatus),
    TimedOut,
}

/// Polls until Redis answers PING on `port` (bounded by [`READY_WITHIN`]).
fn wait_ready(redis: &mut ServerProcess, port: u16) -> Result<(), Ready> {
    let started = Instant::now();
    while started.elapsed() < READY_WITHIN {
        if let Some(status) = redis.try_exit() {
            return Err(Ready::Exited(status));
        }
        if ping(port).unwrap_or(false) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(Ready::TimedOut)
}

/// One inline-protocol PING; true on `+PONG`.
fn ping(port: u16) -> std::io::Result<bool> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(1)))?;
    s.write_all(b"PING\r\n")?;
    let mut buf = [0u8; 16];
    let n = s.read(&mut buf)?;
    Ok(buf[..n].starts_with(b"+PONG"))
}
