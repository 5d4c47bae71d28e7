//! Starts real etcd servers (the Debian `etcd-server` 3.4 binary) as child processes.
//!
//! Tests prove behaviour against the store we ship for, so nothing here is mocked: each
//! [`EtcdCluster`] is one or more `etcd` processes on loopback, on ports picked at run time,
//! with data and logs in temporary directories that disappear with the cluster.

use std::fmt::Write as _;
use std::future::Future;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use etcd_client::{Client, ConnectOptions, GetOptions};

use super::process::{first_exit, free_ports, start_with_retries, Attempt, ServerProcess};

/// Default location of the Debian package's binary.
const DEFAULT_ETCD_BIN: &str = "/usr/bin/etcd";
/// Environment variable that overrides [`DEFAULT_ETCD_BIN`] (for non-Debian machines).
const ETCD_BIN_ENV: &str = "CLUSTERLIMIT_ETCD_BIN";
/// Upper bound for one start (or restart) to become healthy; a healthy start takes < 1 s.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// Readiness poll interval: short, because tests start many clusters.
const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// Budget of one `/health` probe (connect + request + response); a healthy member answers in ms.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);
/// etcd's log line once it serves its peer port (zap logger, etcd 3.4 and 3.5).
const LOG_SERVING_PEERS: &str = "serving peer traffic";
/// etcd's log line once it serves its client port, i.e. after it joined a cluster with a leader.
const LOG_SERVING_CLIENTS: &str = "serving client traffic";
/// How long to wait for those log lines before probing anyway (another etcd version may word
/// them differently; then startup is only slower, not broken).
const LOG_GATE_TIMEOUT: Duration = Duration::from_secs(3);
/// Lines of a member's log quoted in a panic message.
const LOG_TAIL_LINES: usize = 40;

/// Makes cluster tokens unique within the process (the pid makes them unique across processes).
static CLUSTER_SEQ: AtomicU64 = AtomicU64::new(0);

/// Path of the etcd binary: `$CLUSTERLIMIT_ETCD_BIN`, else `/usr/bin/etcd`.
///
/// Panics when it does not exist: these tests must never pass by silently skipping the store.
pub fn etcd_binary() -> PathBuf {
    let path = match std::env::var_os(ETCD_BIN_ENV) {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(DEFAULT_ETCD_BIN),
    };
    if !path.is_file() {
        panic!(
            "etcd not found at {} (override with ${ETCD_BIN_ENV}): install it with \
             `apt-get install etcd-server` or run scripts/test",
            path.display()
        );
    }
    path
}

/// A set of etcd servers on 127.0.0.1 forming one cluster, owned by a test.
///
/// Owns the child processes and their temp dirs; dropping it SIGKILLs every member and waits
/// for it, so no server outlives the test (and a watchdog kills them if the test process dies):
/// see [`ServerProcess`].
pub struct EtcdCluster {
    token: String,
    members: Vec<Member>,
    options: EtcdOptions,
}

/// How the members serve clients. The default is plain text, what every other suite uses;
/// [`EtcdCluster::start_with`] takes others (kept across restarts).
#[derive(Debug, Clone, Default)]
pub struct EtcdOptions {
    /// Serve clients over TLS only (`https://` client URLs; `/health` then moves to a plain
    /// metrics port on 127.0.0.1, for the readiness probe).
    pub tls: Option<ServerTls>,
    /// `--auth-token-ttl` in seconds (how long an idle simple token lives; etcd's default 300).
    pub auth_token_ttl: Option<u32>,
}

/// The server side of TLS.
#[derive(Debug, Clone)]
pub struct ServerTls {
    /// Server certificate and key (PEM).
    pub cert: PathBuf,
    pub key: PathBuf,
    /// When set, clients must present a certificate signed by this CA (`--client-cert-auth`).
    pub client_ca: Option<PathBuf>,
}

/// One etcd server: fixed name, ports and data dir, so it can be killed and restarted.
struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    /// Plain-text `/health` port of a TLS member (`--listen-metrics-urls`).
    metrics_port: Option<u16>,
    /// etcd itself; its temp dir holds `data/` and `etcd.log`, removed with the cluster.
    process: ServerProcess,
}

impl Member {
    /// Where `/health` answers in plain HTTP.
    fn health_port(&self) -> u16 {
        self.metrics_port.unwrap_or(self.client_port)
    }
}

/// Why a start attempt failed.
enum StartError {
    /// A member process exited before the cluster became healthy (e.g. port already taken).
    EarlyExit { member: usize, status: ExitStatus },
    /// The deadline passed; lists the members that were not healthy.
    Timeout { unhealthy: Vec<usize> },
}

impl EtcdCluster {
    /// Starts a cluster of `members` servers (1 or 3) and blocks until every member answers
    /// `/health` with `"health":"true"` (etcd reports false while there is no leader).
    ///
    /// Retries the whole start with fresh ports up to 3 times if a member exits early, because
    /// a probed free port can be taken before etcd binds it. Panics with the log tail otherwise.
    pub fn start(members: usize) -> EtcdCluster {
        Self::start_with(members, EtcdOptions::default())
    }

    /// [`EtcdCluster::start`] with TLS or auth settings.
    pub fn start_with(members: usize, options: EtcdOptions) -> EtcdCluster {
        assert!(
            (1..=7).contains(&members),
            "EtcdCluster::start: {members} members requested, expected 1..=7 (normally 1 or 3)"
        );
        let bin = etcd_binary();
        start_with_retries(&format!("{members}-member etcd cluster"), |what| {
            let mut cluster = EtcdCluster::prepare(members, options.clone());
            let deadline = Instant::now() + READY_TIMEOUT;
            let err = match cluster
                .spawn_all(&bin, deadline)
                .and_then(|()| cluster.wait_healthy(deadline))
            {
                Ok(()) => return Attempt::Started(cluster),
                Err(err) => err,
            };
            let message = cluster.failure_message(what, &err);
            match err {
                StartError::EarlyExit { member, status } => {
                    let m = &cluster.members[member];
                    let summary = format!(
                        "member {} (client port {}, peer port {}) exited early with {status}; \
                         last log line: {}",
                        m.name,
                        m.client_port,
                        m.peer_port,
                        m.process.log_tail(1).trim_end()
                    );
                    Attempt::EarlyExit { summary, message }
                }
                StartError::Timeout { .. } => Attempt::Failed { message },
            }
            // Dropping `cluster` here kills its members.
        })
    }

    /// A single-member cluster: what most tests need.
    pub fn single() -> EtcdCluster {
        Self::start(1)
    }

    /// Client endpoints of all members (killed ones included), as `127.0.0.1:PORT`.
    pub fn endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.client_port))
            .collect()
    }

    /// The library's connection URL for this cluster, `etcd://HOST:PORT,HOST:PORT/prefix`
    /// (`etcds://` for a TLS cluster; add the `?cacert=…` settings yourself).
    pub fn url(&self, prefix: &str) -> String {
        let scheme = if self.options.tls.is_some() {
            "etcds"
        } else {
            "etcd"
        };
        format!(
            "{scheme}://{}/{}",
            self.endpoints().join(","),
            prefix.trim_start_matches('/')
        )
    }

    /// SIGKILLs one member and waits for it: a crash, with no graceful shutdown.
    /// Does nothing if the member is already down; [`EtcdCluster::restart`] brings it back.
    pub fn kill(&mut self, member: usize) {
        self.check_index(member);
        self.members[member].process.stop();
    }

    /// Starts a member again with the same name, data dir and ports (killing it first if it
    /// still runs), then blocks until every running member is healthy. Panics with the log tail.
    pub fn restart(&mut self, member: usize) {
        self.check_index(member);
        self.members[member].process.stop();
        let bin = etcd_binary();
        if let Err(e) = self.spawn_member(&bin, member) {
            panic!(
                "cannot respawn {} for etcd member {}: {e}",
                bin.display(),
                self.members[member].name
            );
        }
        if let Err(err) = self.wait_healthy(Instant::now() + READY_TIMEOUT) {
            let msg = self.failure_message(
                &format!(
                    "restart of etcd member {} failed",
                    self.members[member].name
                ),
                &err,
            );
            panic!("{msg}");
        }
    }

    /// Starts every member again (killing any that still runs) with the same names, data dirs
    /// and ports, then blocks until all are healthy: recovery after a whole-cluster outage,
    /// which [`EtcdCluster::restart`] cannot do one member at a time (no quorum to wait for).
    pub fn restart_all(&mut self) {
        let bin = etcd_binary();
        for i in 0..self.members.len() {
            self.members[i].process.stop();
            if let Err(e) = self.spawn_member(&bin, i) {
                panic!(
                    "cannot respawn {} for etcd member {}: {e}",
                    bin.display(),
                    self.members[i].name
                );
            }
        }
        if let Err(err) = self.wait_healthy(Instant::now() + READY_TIMEOUT) {
            let msg = self.failure_message("restart of the whole etcd cluster failed", &err);
            panic!("{msg}");
        }
    }

    /// SIGSTOPs a member: a hung server (GC pause, frozen VM) whose connections stay open but
    /// answer nothing. Undo with [`EtcdCluster::resume`].
    pub fn pause(&mut self, member: usize) {
        self.signal(member, "-STOP");
    }

    /// SIGCONTs a member stopped with [`EtcdCluster::pause`]; does not wait for anything.
    pub fn resume(&mut self, member: usize) {
        self.signal(member, "-CONT");
    }

    fn signal(&self, member: usize, sig: &str) {
        self.check_index(member);
        let m = &self.members[member];
        let pid = m.process.pid();
        let pid =
            pid.unwrap_or_else(|| panic!("kill {sig}: etcd member {} is not running", m.name));
        let ok = Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "kill {sig} {pid} (etcd member {}) failed", m.name);
    }

    /// OS pid of a member, `None` after [`EtcdCluster::kill`]: lets tests send other signals
    /// (e.g. SIGSTOP to simulate a hung server).
    pub fn pid(&self, member: usize) -> Option<u32> {
        self.check_index(member);
        self.members[member].process.pid()
    }

    /// One `/health` probe of a member (true only if it is up and sees a leader).
    pub fn is_healthy(&self, member: usize) -> bool {
        self.check_index(member);
        self.members[member].process.is_running()
            && probe_health(self.members[member].health_port())
    }

    /// Whether a member's process runs (healthy or not).
    pub fn is_running(&self, member: usize) -> bool {
        self.check_index(member);
        self.members[member].process.is_running()
    }

    /// Path of a member's log file (etcd's stdout and stderr), for debugging failed tests.
    pub fn log_path(&self, member: usize) -> PathBuf {
        self.check_index(member);
        self.members[member].process.log_path()
    }

    /// Allocates ports, names and temp dirs for a new cluster without starting anything.
    fn prepare(n: usize, options: EtcdOptions) -> EtcdCluster {
        let seq = CLUSTER_SEQ.fetch_add(1, Ordering::Relaxed);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let token = format!("clusterlimit-test-{}-{seq}-{nanos:x}", std::process::id());
        let per_member = if options.tls.is_some() { 3 } else { 2 };
        let ports = free_ports(per_member * n);
        let members = (0..n)
            .map(|i| Member {
                name: format!("n{i}"),
                client_port: ports[per_member * i],
                peer_port: ports[per_member * i + 1],
                metrics_port: (per_member == 3).then(|| ports[per_member * i + 2]),
                process: ServerProcess::new(
                    "etcd",
                    &format!("clusterlimit-etcd-n{i}-"),
                    "etcd.log",
                ),
            })
            .collect();
        EtcdCluster {
            token,
            members,
            options,
        }
    }

    fn check_index(&self, member: usize) {
        assert!(
            member < self.members.len(),
            "etcd member index {member} out of range: the cluster has {} members",
            self.members.len()
        );
    }

    /// `--initial-cluster` value listing every member's peer URL.
    fn initial_cluster(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Spawns one member process (plus its watchdog), logging to `etcd.log` in its temp dir.
    fn spawn_member(&mut self, bin: &Path, i: usize) -> std::io::Result<()> {
        let initial_cluster = self.initial_cluster();
        let m = &mut self.members[i];
        let client_scheme = if self.options.tls.is_some() {
            "https"
        } else {
            "http"
        };
        let client_url = format!("{client_scheme}://127.0.0.1:{}", m.client_port);
        let peer_url = format!("http://127.0.0.1:{}", m.peer_port);
        let mut cmd = Command::new(bin);
        // etcd reads ETCD_* variables as flags; a developer's environment must not leak in.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("ETCD_") {
                cmd.env_remove(key);
            }
        }
        cmd.arg("--name")
            .arg(&m.name)
            .arg("--data-dir")
            .arg(m.process.dir().join("data"))
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &initial_cluster])
            .args(["--initial-cluster-token", &self.token])
            // Ignored by etcd when the data dir already holds a member (restart).
            .args(["--initial-cluster-state", "new"])
            // Fast elections and failover; also keeps the minimum lease TTL at 1 s.
            .args(["--heartbeat-interval", "50", "--election-timeout", "250"])
            // Test data is throwaway; fsync would only slow every write down.
            .arg("--unsafe-no-fsync")
            // zap avoids capnslog's deprecation noise; JSON lines are fine in a log file.
            .args(["--logger", "zap", "--log-outputs", "stderr"]);
        if let Some(tls) = &self.options.tls {
            cmd.arg("--cert-file")
                .arg(&tls.cert)
                .arg("--key-file")
                .arg(&tls.key);
            if let Some(ca) = &tls.client_ca {
                cmd.arg("--trusted-ca-file")
                    .arg(ca)
                    .arg("--client-cert-auth");
            }
        }
        if let Some(port) = m.metrics_port {
            cmd.args(["--listen-metrics-urls", &format!("http://127.0.0.1:{port}")]);
        }
        if let Some(ttl) = self.options.auth_token_ttl {
            cmd.args(["--auth-token-ttl", &ttl.to_string()]);
        }
        let banner = format!(
            "starting etcd member {} (client 127.0.0.1:{}, peer 127.0.0.1:{})",
            m.name, m.client_port, m.peer_port
        );
        m.process.spawn(&mut cmd, &banner)
    }

    /// Spawns the members one after the other, each once the previous one serves its peer port.
    ///
    /// A new etcd 3.4 member first asks every peer URL whether it was bootstrapped already,
    /// with a 1 s timeout per peer. If the members start together, each finds the others'
    /// peer ports bound but not yet served, and the cluster needs 1–2 s instead of ~0.2 s.
    fn spawn_all(&mut self, bin: &Path, deadline: Instant) -> Result<(), StartError> {
        let n = self.members.len();
        for i in 0..n {
            if let Err(e) = self.spawn_member(bin, i) {
                panic!(
                    "cannot spawn {} for etcd member {}: {e}",
                    bin.display(),
                    self.members[i].name
                );
            }
            if i + 1 < n {
                self.wait_log_line(&[i], LOG_SERVING_PEERS, deadline)?;
            }
        }
        Ok(())
    }

    /// Waits until each of `members` has logged `needle` since its spawn, or [`LOG_GATE_TIMEOUT`]
    /// passed (then the caller goes on regardless), or a member exited.
    ///
    /// Why wait instead of probing: etcd binds its ports well before it serves them, and a
    /// connection made in between stalls, and stalls the next ones, for about a second
    /// (observed on 3.4.23 on both peer and client ports).
    fn wait_log_line(
        &mut self,
        members: &[usize],
        needle: &str,
        deadline: Instant,
    ) -> Result<(), StartError> {
        let gate = deadline.min(Instant::now() + LOG_GATE_TIMEOUT);
        loop {
            self.check_exits()?;
            if members
                .iter()
                .all(|&i| self.members[i].process.log_since_spawn().contains(needle))
            {
                // The line is logged just before the accept loop starts.
                std::thread::sleep(Duration::from_millis(5));
                return Ok(());
            }
            if Instant::now() >= gate {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Reports a member process that has exited (and reaps it), if any.
    fn check_exits(&mut self) -> Result<(), StartError> {
        match first_exit(self.members.iter_mut().map(|m| &mut m.process)) {
            Some((member, status)) => Err(StartError::EarlyExit { member, status }),
            None => Ok(()),
        }
    }

    /// Polls until every running member reports healthy, a member exits, or `deadline` passes.
    fn wait_healthy(&mut self, deadline: Instant) -> Result<(), StartError> {
        let running: Vec<usize> = (0..self.members.len())
            .filter(|&i| self.members[i].process.is_running())
            .collect();
        self.wait_log_line(&running, LOG_SERVING_CLIENTS, deadline)?;
        loop {
            self.check_exits()?;
            // Probe in parallel: an early /health can stall for its whole timeout, and
            // sequential probes would add those stalls up.
            let running: Vec<(usize, u16)> = self
                .members
                .iter()
                .enumerate()
                .filter(|(_, m)| m.process.is_running())
                .map(|(i, m)| (i, m.health_port()))
                .collect();
            let unhealthy: Vec<usize> = std::thread::scope(|s| {
                let probes: Vec<_> = running
                    .iter()
                    .map(|&(i, port)| (i, s.spawn(move || probe_health(port))))
                    .collect();
                probes
                    .into_iter()
                    .filter_map(|(i, probe)| (!matches!(probe.join(), Ok(true))).then_some(i))
                    .collect()
            });
            if unhealthy.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(StartError::Timeout { unhealthy });
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// Panic text for a failed start: the reason plus the log tail of the members concerned.
    fn failure_message(&self, what: &str, err: &StartError) -> String {
        let (reason, members) = match err {
            StartError::EarlyExit { member, status } => (
                format!(
                    "member {} exited early with {status}",
                    self.members[*member].name
                ),
                vec![*member],
            ),
            StartError::Timeout { unhealthy } => (
                format!(
                    "not healthy within {READY_TIMEOUT:?}: members {:?} never answered \
                     /health with \"health\":\"true\"",
                    unhealthy
                        .iter()
                        .map(|&i| self.members[i].name.as_str())
                        .collect::<Vec<_>>()
                ),
                unhealthy.clone(),
            ),
        };
        let mut msg = format!("{what}: {reason} (etcd binary {})", etcd_binary().display());
        for i in members {
            let m = &self.members[i];
            let _ = write!(
                msg,
                "\n---- last {LOG_TAIL_LINES} lines of etcd.log of member {} \
                 (client port {}, peer port {}) ----\n{}",
                m.name,
                m.client_port,
                m.peer_port,
                m.process.log_tail(LOG_TAIL_LINES)
            );
        }
        msg
    }
}

/// One `/health` probe: etcd 3.4 answers `{"health":"true"}` only when the member sees a
/// leader and a quorum read through raft succeeds.
fn probe_health(port: u16) -> bool {
    http_get(port, "/health").is_some_and(|body| body.contains(r#""health":"true""#))
}

/// One HTTP/1.0 GET on 127.0.0.1, given at most [`PROBE_TIMEOUT`] in total so polling stays
/// bounded; returns the whole response (status line, headers, body) if it came in time.
///
/// etcd binds its ports before it serves them, so a request can connect and then stall; a slow
/// answer counts as "not yet" and the caller simply asks again.
fn http_get(port: u16, path: &str) -> Option<String> {
    let deadline = Instant::now() + PROBE_TIMEOUT;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&addr, PROBE_TIMEOUT).ok()?;
    stream.set_write_timeout(Some(PROBE_TIMEOUT)).ok()?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut response = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        stream.set_read_timeout(Some(left)).ok()?;
        match stream.read(&mut buf).ok()? {
            0 => break,
            n if response.len() + n <= 64 * 1024 => response.extend_from_slice(&buf[..n]),
            _ => return None,
        }
    }
    let response = String::from_utf8_lossy(&response).into_owned();
    response.starts_with("HTTP/1.").then_some(response)
}

/// A raw client for the given endpoints, for test set-up and checks.
///
/// Short timeouts, so a dead or hung server makes calls fail (and the caller retry) instead of
/// hanging: a write sent just after the leader died can otherwise wait ~5 s for etcd's own
/// request timeout. Connecting is lazy in etcd-client: this never fails for a dead server.
pub async fn connect(endpoints: &[String]) -> Client {
    let options = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(1))
        .with_timeout(Duration::from_secs(2));
    Client::connect(endpoints, Some(options))
        .await
        .unwrap_or_else(|e| panic!("etcd_client::Client::connect({endpoints:?}) failed: {e}"))
}

/// Index of the member that leads now, asking each running member in turn; polls for at most
/// 10 s (an election may be under way) and panics if no member claims the lead by then.
pub async fn leader(cluster: &EtcdCluster) -> usize {
    let endpoints = cluster.endpoints();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        for (i, ep) in endpoints.iter().enumerate() {
            let mut c = connect(std::slice::from_ref(ep)).await;
            if let Ok(Ok(st)) = tokio::time::timeout(Duration::from_secs(1), c.status()).await {
                if st.header().is_some_and(|h| h.member_id() == st.leader()) {
                    return i;
                }
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no etcd member claimed the lead within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Compacts the cluster's history up to its current revision (what an operator or etcd's
/// auto-compaction does), so watches resuming from an older revision get `Compacted`.
/// Returns the revision compacted to.
pub async fn compact_to_current(endpoints: &[String]) -> i64 {
    let client = connect(endpoints).await;
    let revision = super::waiting::retry_call("etcd get (for the revision)", || {
        let mut c = client.clone();
        async move { c.get("compaction-probe", None).await }
    })
    .await
    .header()
    .map_or(0, |h| h.revision());
    super::waiting::retry_call("etcd compact", || {
        let mut c = client.clone();
        async move { c.compact(revision, None).await }
    })
    .await;
    revision
}

/// Revokes every lease the cluster knows, deleting all keys attached to them: simulates "the
/// store lost our lease behind our back" (expiry during a pause, an operator, a failover).
pub async fn revoke_all_leases(endpoints: &[String]) {
    let client = connect(endpoints).await;
    let leases = super::waiting::retry_call("etcd lease list", || {
        let mut c = client.clone();
        async move { c.leases().await }
    })
    .await;
    for id in leases.leases().iter().map(|l| l.id()) {
        super::waiting::retry_call("etcd lease revoke", || {
            let mut c = client.clone();
            async move {
                match c.lease_revoke(id).await {
                    Ok(_) => Ok(()),
                    // Already gone (expired or revoked by someone else): that is the goal.
                    Err(e) if e.to_string().contains("lease not found") => Ok(()),
                    Err(e) => Err(e),
                }
            }
        })
        .await;
    }
}

/// Number of keys under `prefix`, read straight from etcd: checks that nothing is left behind
/// (orphaned waiters, unreleased permits) independently of the library's own view.
pub async fn count_keys(endpoints: &[String], prefix: &str) -> i64 {
    let client = connect(endpoints).await;
    let prefix = prefix.to_owned();
    let resp = super::waiting::retry_call("etcd count keys", || {
        let mut c = client.clone();
        let prefix = prefix.clone();
        async move {
            c.get(
                prefix,
                Some(GetOptions::new().with_prefix().with_count_only()),
            )
            .await
        }
    })
    .await;
    resp.count()
}

/// Every key under `prefix` with its value, read straight from etcd (not through the library):
/// what a check of leftovers sees.
pub async fn list_entries(endpoints: &[String], prefix: &str) -> Vec<(String, String)> {
    let client = connect(endpoints).await;
    let prefix = prefix.to_owned();
    let resp = super::waiting::retry_call("etcd range of a prefix", || {
        let mut c = client.clone();
        let prefix = prefix.clone();
        async move { c.get(prefix, Some(GetOptions::new().with_prefix())).await }
    })
    .await;
    resp.kvs()
        .iter()
        .map(|kv| {
            (
                String::from_utf8_lossy(kv.key()).into_owned(),
                String::from_utf8_lossy(kv.value()).into_owned(),
            )
        })
        .collect()
}

/// The cluster's current revision (read with a raw get).
pub async fn current_revision(endpoints: &[String]) -> i64 {
    let client = connect(endpoints).await;
    super::waiting::retry_call("etcd get (for the revision)", || {
        let mut c = client.clone();
        async move { c.get("revision-probe", None).await }
    })
    .await
    .header()
    .map_or(0, |h| h.revision())
}

/// What etcd holds about `key`, for a failure message: its create and mod revision, its lease,
/// the lease's remaining TTL and how many keys the lease holds. Best effort: a failed read is
/// reported in the text.
pub async fn describe_key(endpoints: &[String], key: &str) -> String {
    let mut client = connect(endpoints).await;
    let kv = match client.get(key, None).await {
        Ok(r) => match r.kvs().first() {
            Some(kv) => kv.clone(),
            None => return "gone".into(),
        },
        Err(e) => return format!("get failed: {e}"),
    };
    let keys = etcd_client::LeaseTimeToLiveOptions::new().with_keys();
    let lease = match client.lease_time_to_live(kv.lease(), Some(keys)).await {
        Ok(l) => format!(
            "lease {:x}: TTL left {} s of {} s, {} keys",
            kv.lease(),
            l.ttl(),
            l.granted_ttl(),
            l.keys().len()
        ),
        Err(e) => format!("lease {:x}: {e}", kv.lease()),
    };
    format!(
        "create_revision {}, mod_revision {}, {lease}",
        kv.create_revision(),
        kv.mod_revision()
    )
}
