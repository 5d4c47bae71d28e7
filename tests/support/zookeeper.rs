//! Starts real ZooKeeper servers (the Debian `zookeeper` 3.8 package) as child processes.
//!
//! Like the etcd harness, nothing here is mocked: each [`ZkCluster`] is one standalone server or
//! a 3-member ensemble of `java … QuorumPeerMain zoo.cfg` processes on 127.0.0.1, on ports
//! picked at run time, with data, config and logs in temp dirs that disappear with the cluster.
//!
//! ```ignore
//! let zk = ZkCluster::single();                          // ready in ~0.5 s
//! let client = zk_connect(&zk.connect_string()).await;   // zookeeper-client, 4 s session
//! let url = zk.url("tests/foo");                          // "zk://127.0.0.1:P/tests/foo"
//!
//! let mut zk = ZkCluster::builder().members(3).tick_time_ms(500).start();
//! let l = zk.leader().unwrap();
//! zk.kill(l);                                             // SIGKILL, no graceful shutdown
//! let new_leader = zk.wait_leader(Duration::from_secs(10));
//! zk.restart(l);                                          // same ports and data, waits ready
//! zk.pause(0); zk.resume(0);                              // SIGSTOP / SIGCONT: a hung server
//! ```
//!
//! How a server is run (no service script, no `/etc/zookeeper`):
//! `java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -cp /usr/share/java/zookeeper.jar:
//! /usr/share/java/slf4j-simple.jar … org.apache.zookeeper.server.quorum.QuorumPeerMain zoo.cfg`.
//! `zookeeper.jar`'s manifest `Class-Path` names its own dependencies (netty, jute, metrics,
//! snappy, slf4j-api, …); `slf4j-simple` only makes it log to stderr, which goes to `zk.log`.
//! C1-only JIT (`TieredStopAtLevel=1`) starts a server ~30 % faster and is plenty for tests.
//!
//! Readiness is the `srvr` four-letter word answering with a `Mode:` line (standalone, leader or
//! follower); an ensemble is ready when every running, unpaused member answers and exactly one
//! of them is the leader. Session timeouts: `tickTime` defaults to 500 ms so expiry tests are
//! fast, and `minSessionTimeout`/`maxSessionTimeout` are set to 1 s / 20 s explicitly (ZooKeeper's
//! own default range would be 2..20 × tickTime = 1..10 s).
//!
//! Helpers that talk to the servers ([`zk_connect`], [`count_children`], [`delete_recursive`],
//! [`expire_session`]) use the `zookeeper-client` crate, the one the library uses.

use std::fmt::Write as _;
use std::future::Future;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use zookeeper_client as zk;

/// Re-exported for tests that need a port nothing listens on; one set of used ports with etcd.
pub(crate) use super::process::free_ports;
use super::process::{first_exit, start_with_retries, Attempt, ServerProcess};

/// Default java launcher (Debian's `default-jre-headless`, pulled in by `zookeeper`).
const DEFAULT_JAVA: &str = "/usr/bin/java";
/// Environment variable that overrides [`DEFAULT_JAVA`].
const JAVA_ENV: &str = "CLUSTERLIMIT_JAVA";
/// The Debian package's server jar; its manifest lists the dependency jars.
const DEFAULT_ZK_JAR: &str = "/usr/share/java/zookeeper.jar";
/// SLF4J binding that logs to stderr (package `libslf4j-java`, a dependency of `zookeeper`).
const DEFAULT_SLF4J_BINDING: &str = "/usr/share/java/slf4j-simple.jar";
/// Environment variable that replaces the whole classpath (for non-Debian machines).
const ZK_CLASSPATH_ENV: &str = "CLUSTERLIMIT_ZK_CLASSPATH";
/// ZooKeeper's main class for both standalone and ensemble mode.
const ZK_MAIN: &str = "org.apache.zookeeper.server.quorum.QuorumPeerMain";
/// Install hint quoted whenever something is missing.
const INSTALL_HINT: &str = "install it with `apt-get install zookeeper` (pulls in a JRE) or run \
                            `bash scripts/test --install-deps` as root";

/// Log lines about elections and syncs, see [`ZkCluster::election_log`].
const ELECTION_EVENTS: [&str; 8] = [
    "QuorumPeer - LOOKING",
    "QuorumPeer - LEADING",
    "QuorumPeer - FOLLOWING",
    "ELECTION TOOK",
    "different epoch",
    "Shutdown called",
    "Exception when following",
    "Have quorum of supporters",
];

/// What a new leader logs when ZooKeeper 3.8.0 (Debian 12's) loses a race of its own: a
/// follower that holds proposals of the dead leader's epoch logs them when the sync ends and
/// acknowledges them, asynchronously, next to its `NEWLEADER` acknowledgement; when the
/// proposals' acknowledgement arrives first the leader rejects it ("NEWLEADER ACK from sid: 2
/// is from a different epoch - current 0x25… received 0x24…"), waits `initLimit` ticks for a
/// quorum that cannot come, and the ensemble elects again, to the same race. Seen here (3
/// members, tick 200 ms, 8–16 clients with pipelined writes, a leader SIGKILL every ~2 s):
/// 2–3 elections in 30–40 took 2.6–7.2 s, each slow one we read had such rejections; in one CI
/// run the two survivors did not serve for 20 s. fsync on (`forceSync=yes`) did not prevent it.
pub const REJECTED_NEWLEADER_ACK: &str = "NEWLEADER ACK from sid";

/// Default `tickTime`: short, so session expiry tests are fast.
pub const DEFAULT_TICK_TIME_MS: u32 = 500;
/// Default `minSessionTimeout`: clients may ask for sessions as short as 1 s.
pub const DEFAULT_MIN_SESSION_TIMEOUT_MS: u32 = 1_000;
/// Default `maxSessionTimeout`: clients may ask for sessions as long as 20 s.
pub const DEFAULT_MAX_SESSION_TIMEOUT_MS: u32 = 20_000;
/// Session timeout of the clients made by [`zk_connect`].
pub const HELPER_SESSION_TIMEOUT: Duration = Duration::from_secs(4);

/// Upper bound for one start (or restart) to become ready; a healthy start takes ~0.5–1.5 s
/// (more on a loaded 2-core machine: the JVM start dominates).
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Readiness poll interval.
const POLL_INTERVAL: Duration = Duration::from_millis(25);
/// Budget of one four-letter-word probe (connect + command + whole answer).
const PROBE_TIMEOUT: Duration = Duration::from_millis(1_000);
/// Lines of a member's log quoted in a panic message.
const LOG_TAIL_LINES: usize = 40;
/// Depth cap of [`delete_recursive`] (ZooKeeper paths in tests are shallow).
const MAX_DELETE_DEPTH: usize = 64;

/// Path of the java launcher: `$CLUSTERLIMIT_JAVA`, else `/usr/bin/java`. Panics with an
/// install hint when missing: these tests must never pass by silently skipping the store.
pub fn java_binary() -> PathBuf {
    let path = match std::env::var_os(JAVA_ENV) {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(DEFAULT_JAVA),
    };
    if !path.is_file() {
        panic!(
            "java not found at {} (override with ${JAVA_ENV}); ZooKeeper tests need it: \
             {INSTALL_HINT}",
            path.display()
        );
    }
    path
}

/// Classpath of the ZooKeeper server: `$CLUSTERLIMIT_ZK_CLASSPATH`, else Debian's
/// `zookeeper.jar` (whose manifest pulls in its dependencies) plus `slf4j-simple.jar` for logs.
/// Panics with an install hint when the jar is missing.
pub fn zookeeper_classpath() -> String {
    if let Some(cp) = std::env::var_os(ZK_CLASSPATH_ENV) {
        if !cp.is_empty() {
            return cp.to_string_lossy().into_owned();
        }
    }
    if !Path::new(DEFAULT_ZK_JAR).is_file() {
        panic!(
            "ZooKeeper not found: {DEFAULT_ZK_JAR} is missing (override the classpath with \
             ${ZK_CLASSPATH_ENV}): {INSTALL_HINT}"
        );
    }
    if Path::new(DEFAULT_SLF4J_BINDING).is_file() {
        format!("{DEFAULT_ZK_JAR}:{DEFAULT_SLF4J_BINDING}")
    } else {
        // Still runs; it just logs nothing (SLF4J falls back to its no-op logger).
        DEFAULT_ZK_JAR.to_owned()
    }
}

/// The role a server reports in its `srvr` answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZkMode {
    Standalone,
    Leader,
    Follower,
    Observer,
}

impl ZkMode {
    /// Parses the `Mode: …` line of a `srvr`/`stat` answer.
    pub fn parse(srvr: &str) -> Option<ZkMode> {
        let mode = srvr.lines().find_map(|l| l.strip_prefix("Mode:"))?.trim();
        match mode {
            "standalone" => Some(ZkMode::Standalone),
            "leader" => Some(ZkMode::Leader),
            "follower" => Some(ZkMode::Follower),
            "observer" => Some(ZkMode::Observer),
            _ => None,
        }
    }

    /// True for the member that accepts writes (standalone counts).
    pub fn is_leader(self) -> bool {
        matches!(self, ZkMode::Standalone | ZkMode::Leader)
    }
}

/// Settings of a cluster to start; see [`ZkCluster::builder`].
#[derive(Clone, Debug)]
pub struct ZkBuilder {
    members: usize,
    tick_time_ms: u32,
    min_session_timeout_ms: u32,
    max_session_timeout_ms: u32,
    /// Extra `zoo.cfg` lines (see [`ZkBuilder::config_line`]).
    extra_config: Vec<String>,
    /// Jars appended to the classpath (see [`ZkBuilder::classpath_jar`]).
    extra_jars: Vec<String>,
    /// Also serve on a `secureClientPort` (see [`ZkBuilder::secure_client_port`]).
    secure_port: bool,
}

impl ZkBuilder {
    /// Appends `line` (`key=value`) to every member's `zoo.cfg`. ZooKeeper turns keys it does
    /// not know into `zookeeper.<key>` system properties, so this also sets those (e.g.
    /// `enforce.auth.enabled=true`, `ssl.keyStore.location=…`).
    pub fn config_line(mut self, line: impl Into<String>) -> Self {
        self.extra_config.push(line.into());
        self
    }

    /// Appends a jar to the servers' classpath (e.g. netty jars that Debian's `zookeeper.jar`
    /// manifest leaves out but `NettyServerCnxnFactory`, needed for TLS, uses).
    pub fn classpath_jar(mut self, jar: impl Into<String>) -> Self {
        self.extra_jars.push(jar.into());
        self
    }

    /// Gives every member a free `secureClientPort` on 127.0.0.1 too (TLS; the `ssl.*` settings
    /// and the Netty factory come from [`ZkBuilder::config_line`]); see
    /// [`ZkCluster::secure_connect_string`].
    pub fn secure_client_port(mut self) -> Self {
        self.secure_port = true;
        self
    }

    /// Number of servers: 1 (standalone, the default) or an odd ensemble size (normally 3).
    pub fn members(mut self, members: usize) -> Self {
        self.members = members;
        self
    }

    /// ZooKeeper's `tickTime` (default 500 ms). Failure detection inside an ensemble scales
    /// with it (`syncLimit` = 5 ticks).
    pub fn tick_time_ms(mut self, ms: u32) -> Self {
        self.tick_time_ms = ms;
        self
    }

    /// Range of session timeouts the servers grant (default 1 s ..= 20 s); a client asking for
    /// less or more gets the bound.
    pub fn session_timeout_range_ms(mut self, min: u32, max: u32) -> Self {
        self.min_session_timeout_ms = min;
        self.max_session_timeout_ms = max;
        self
    }

    /// Starts the cluster and blocks until it is ready; see [`ZkCluster::start`].
    pub fn start(self) -> ZkCluster {
        ZkCluster::start_with(self)
    }
}

impl Default for ZkBuilder {
    fn default() -> Self {
        ZkBuilder {
            members: 1,
            tick_time_ms: DEFAULT_TICK_TIME_MS,
            min_session_timeout_ms: DEFAULT_MIN_SESSION_TIMEOUT_MS,
            max_session_timeout_ms: DEFAULT_MAX_SESSION_TIMEOUT_MS,
            extra_config: Vec::new(),
            extra_jars: Vec::new(),
            secure_port: false,
        }
    }
}

/// ZooKeeper servers on 127.0.0.1 forming one standalone server or one ensemble, owned by a test.
///
/// Dropping it SIGKILLs and reaps every member (and a shell watchdog kills them if the test
/// process dies without running `Drop`), then removes the temp dirs: see [`ServerProcess`].
pub struct ZkCluster {
    opts: ZkBuilder,
    members: Vec<Member>,
}

/// One server: fixed id, ports and data dir, so it can be killed and restarted.
struct Member {
    /// ZooKeeper's server id (`myid`), 1-based.
    id: usize,
    client_port: u16,
    /// Quorum (follower ↔ leader) port; unused by a standalone server.
    quorum_port: u16,
    /// Leader election port; unused by a standalone server.
    election_port: u16,
    /// `secureClientPort`, if the builder asked for one.
    secure_port: Option<u16>,
    /// java; its temp dir holds `zoo.cfg`, `data/` and `zk.log`, removed with the cluster.
    process: ServerProcess,
    /// SIGSTOPped by [`ZkCluster::pause`] and not resumed yet.
    paused: bool,
}

/// Why a start attempt failed.
enum StartError {
    /// A member process exited before the cluster became ready (e.g. port already taken).
    EarlyExit { member: usize, status: ExitStatus },
    /// The deadline passed; says what the members answered to `srvr` the last time.
    Timeout { state: Vec<(usize, String)> },
}

impl ZkCluster {
    /// Settings for a cluster: `ZkCluster::builder().members(3).tick_time_ms(200).start()`.
    pub fn builder() -> ZkBuilder {
        ZkBuilder::default()
    }

    /// Starts `members` servers (1 = standalone, 3 = ensemble) with default settings and blocks
    /// until ready: every member answers `srvr` with a mode and exactly one leads.
    ///
    /// Retries the whole start with fresh ports up to 3 times if a member exits early (a probed
    /// free port can be taken before java binds it). Panics with the log tail otherwise.
    pub fn start(members: usize) -> ZkCluster {
        Self::builder().members(members).start()
    }

    /// A standalone server: what most tests need.
    pub fn single() -> ZkCluster {
        Self::start(1)
    }

    fn start_with(opts: ZkBuilder) -> ZkCluster {
        let n = opts.members;
        assert!(
            n == 1 || (n % 2 == 1 && n <= 7),
            "ZkCluster: {n} members requested, expected 1 or an odd ensemble size up to 7"
        );
        assert!(
            opts.tick_time_ms > 0 && opts.min_session_timeout_ms <= opts.max_session_timeout_ms,
            "ZkCluster: bad settings {opts:?}"
        );
        let java = java_binary();
        let classpath = zookeeper_classpath();
        start_with_retries(&format!("{n}-member ZooKeeper cluster"), |what| {
            let mut cluster = ZkCluster::prepare(opts.clone());
            let deadline = Instant::now() + READY_TIMEOUT;
            for i in 0..n {
                cluster.spawn_or_panic(&java, &classpath, i);
            }
            let err = match cluster.wait_ready_until(deadline) {
                Ok(()) => return Attempt::Started(cluster),
                Err(err) => err,
            };
            let message = cluster.failure_message(what, &err);
            match err {
                StartError::EarlyExit { member, status } => {
                    let m = &cluster.members[member];
                    let summary = format!(
                        "server {} (client port {}, quorum port {}, election port {}) exited \
                         early with {status}; last log line: {}",
                        m.id,
                        m.client_port,
                        m.quorum_port,
                        m.election_port,
                        m.process.log_tail(1).trim_end()
                    );
                    Attempt::EarlyExit { summary, message }
                }
                StartError::Timeout { .. } => Attempt::Failed { message },
            }
            // Dropping `cluster` here kills its members.
        })
    }

    /// Number of members (killed ones included).
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Client ports of all members (killed ones included), in member order.
    pub fn client_ports(&self) -> Vec<u16> {
        self.members.iter().map(|m| m.client_port).collect()
    }

    /// Client address of one member.
    pub fn client_addr(&self, member: usize) -> SocketAddr {
        self.check_index(member);
        SocketAddr::from(([127, 0, 0, 1], self.members[member].client_port))
    }

    /// ZooKeeper connect string of all members: `127.0.0.1:P1,127.0.0.1:P2,…`.
    pub fn connect_string(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.client_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Connect string of every member's `secureClientPort`; panics unless the builder asked
    /// for them ([`ZkBuilder::secure_client_port`]).
    pub fn secure_connect_string(&self) -> String {
        self.members
            .iter()
            .map(|m| {
                let port = m
                    .secure_port
                    .expect("ZkCluster started without ZkBuilder::secure_client_port");
                format!("127.0.0.1:{port}")
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The library's connection URL, `zk://127.0.0.1:P1,…/chroot`; see [`zk_url`].
    pub fn url(&self, chroot: &str) -> String {
        zk_url(&self.connect_string(), chroot)
    }

    /// The `tickTime` the servers run with.
    pub fn tick_time(&self) -> Duration {
        Duration::from_millis(u64::from(self.opts.tick_time_ms))
    }

    /// One `srvr` probe of a member: its whole answer, or an empty string if it is down,
    /// paused or did not answer within 1 s.
    pub fn srvr(&self, member: usize) -> String {
        self.four_letter_word(member, "srvr")
    }

    /// Any whitelisted four-letter word (`srvr`, `stat`, `mntr`, `ruok`, `cons`, `dump`,
    /// `conf`): the answer, or an empty string if the member did not answer within 1 s.
    pub fn four_letter_word(&self, member: usize, word: &str) -> String {
        self.check_index(member);
        let m = &self.members[member];
        if !m.process.is_running() || m.paused {
            return String::new();
        }
        four_letter_word(m.client_port, word).unwrap_or_default()
    }

    /// The mode a member reports right now (`None` when down, paused or not serving).
    pub fn mode(&self, member: usize) -> Option<ZkMode> {
        ZkMode::parse(&self.srvr(member))
    }

    /// Index of the member that currently leads (the standalone server for 1 member), by
    /// asking every running member; `None` if none says so right now.
    pub fn leader(&self) -> Option<usize> {
        self.modes()
            .into_iter()
            .find_map(|(i, mode)| mode.filter(|m| m.is_leader()).map(|_| i))
    }

    /// Blocks until the running, unpaused members are ready (all serve, exactly one leads)
    /// and returns the leader; panics with the members' state and log tails after `timeout`.
    pub fn wait_leader(&mut self, timeout: Duration) -> usize {
        self.wait_ready_or_panic("waiting for a leader", timeout);
        self.leader()
            .expect("a ready cluster has a leader (it answered srvr a moment ago)")
    }

    /// Blocks until every running, unpaused member serves and exactly one of them leads;
    /// panics with the members' state and log tails after 30 s.
    pub fn wait_ready(&mut self) {
        self.wait_ready_or_panic("waiting until ready", READY_TIMEOUT);
    }

    /// SIGKILLs one member and reaps it: a crash without graceful shutdown. Does nothing if it
    /// is already down; [`ZkCluster::restart`] brings it back. Does not wait for a new leader.
    pub fn kill(&mut self, member: usize) {
        self.check_index(member);
        self.members[member].stop();
    }

    /// Starts a member again with the same id, ports and data dir (killing it first if it
    /// still runs), then blocks until the cluster is ready. Panics with the log tail.
    pub fn restart(&mut self, member: usize) {
        self.check_index(member);
        self.members[member].stop();
        let java = java_binary();
        let classpath = zookeeper_classpath();
        self.spawn_or_panic(&java, &classpath, member);
        let what = format!("restart of ZooKeeper server {}", self.members[member].id);
        self.wait_ready_or_panic(&what, READY_TIMEOUT);
    }

    /// Starts every member again (killing any that still runs) with the same ids, ports and
    /// data dirs, then blocks until the ensemble is ready: recovery after a whole-cluster
    /// outage, which [`ZkCluster::restart`] cannot do one member at a time (no quorum).
    pub fn restart_all(&mut self) {
        let java = java_binary();
        let classpath = zookeeper_classpath();
        for i in 0..self.members.len() {
            self.members[i].stop();
            self.spawn_or_panic(&java, &classpath, i);
        }
        self.wait_ready_or_panic("restart of the whole ZooKeeper cluster", READY_TIMEOUT);
    }

    /// SIGSTOPs a member: a hung server (GC pause, frozen VM). Its connections stay open but
    /// nothing answers; an ensemble notices after `syncLimit` ticks. Undo with [`resume`].
    ///
    /// [`resume`]: ZkCluster::resume
    pub fn pause(&mut self, member: usize) {
        self.check_index(member);
        let m = &mut self.members[member];
        let pid = m.process.pid();
        let pid = pid.unwrap_or_else(|| panic!("pause: ZooKeeper server {} is not running", m.id));
        send_signal(pid, "-STOP");
        m.paused = true;
    }

    /// SIGCONTs a member paused with [`ZkCluster::pause`]; does not wait for anything.
    pub fn resume(&mut self, member: usize) {
        self.check_index(member);
        let m = &mut self.members[member];
        if let (Some(pid), true) = (m.process.pid(), m.paused) {
            send_signal(pid, "-CONT");
        }
        m.paused = false;
    }

    /// OS pid of a member's java process, `None` after [`ZkCluster::kill`].
    pub fn pid(&self, member: usize) -> Option<u32> {
        self.check_index(member);
        self.members[member].process.pid()
    }

    /// True if the member process runs (paused or not).
    pub fn is_running(&self, member: usize) -> bool {
        self.check_index(member);
        self.members[member].process.is_running()
    }

    /// Path of a member's log file (java's stdout and stderr), for debugging failed tests.
    pub fn log_path(&self, member: usize) -> PathBuf {
        self.check_index(member);
        self.members[member].process.log_path()
    }

    /// The last `lines` lines of a member's log about elections and leader-follower syncs
    /// (state changes, election times, rejected acknowledgements, sync failures): why an
    /// ensemble did not serve, for a failed test's report.
    pub fn election_log(&self, member: usize, lines: usize) -> String {
        let text = std::fs::read_to_string(self.log_path(member)).unwrap_or_default();
        let events: Vec<&str> = text
            .lines()
            .filter(|l| ELECTION_EVENTS.iter().any(|e| l.contains(e)))
            .collect();
        events[events.len().saturating_sub(lines)..].join("\n")
    }

    /// How many times, over all its runs, a member leading an ensemble rejected a follower's
    /// `NEWLEADER` acknowledgement (see [`REJECTED_NEWLEADER_ACK`]).
    pub fn rejected_newleader_acks(&self, member: usize) -> usize {
        std::fs::read_to_string(self.log_path(member))
            .map_or(0, |text| text.matches(REJECTED_NEWLEADER_ACK).count())
    }

    /// Allocates ports and temp dirs and writes every member's `zoo.cfg` and `myid`.
    fn prepare(opts: ZkBuilder) -> ZkCluster {
        let n = opts.members;
        let ports = free_ports(3 * n);
        let secure = if opts.secure_port {
            free_ports(n)
        } else {
            Vec::new()
        };
        let members: Vec<Member> = (0..n)
            .map(|i| Member {
                id: i + 1,
                client_port: ports[3 * i],
                quorum_port: ports[3 * i + 1],
                election_port: ports[3 * i + 2],
                secure_port: secure.get(i).copied(),
                process: ServerProcess::new(
                    "zookeeper",
                    &format!("clusterlimit-zk-s{}-", i + 1),
                    "zk.log",
                ),
                paused: false,
            })
            .collect();
        let cluster = ZkCluster { opts, members };
        for m in &cluster.members {
            let data = m.process.dir().join("data");
            std::fs::create_dir_all(&data).expect("cannot create ZooKeeper data dir");
            std::fs::write(data.join("myid"), format!("{}\n", m.id)).expect("cannot write myid");
            std::fs::write(m.config_path(), cluster.config(m)).expect("cannot write zoo.cfg");
        }
        cluster
    }

    /// `zoo.cfg` of one member.
    fn config(&self, m: &Member) -> String {
        let o = &self.opts;
        let mut cfg = format!(
            "# written by clusterlimit's test harness (tests/support/zookeeper.rs)\n\
             dataDir={data}\n\
             clientPort={client}\n\
             clientPortAddress=127.0.0.1\n\
             tickTime={tick}\n\
             initLimit=10\n\
             syncLimit=5\n\
             minSessionTimeout={min}\n\
             maxSessionTimeout={max}\n\
             4lw.commands.whitelist=srvr,stat,mntr,ruok,cons,dump,conf\n\
             admin.enableServer=false\n\
             # throwaway data: no fsync, 1 MiB instead of 64 MiB log preallocation\n\
             forceSync=no\n\
             preAllocSize=1024\n\
             maxClientCnxns=0\n",
            data = m.process.dir().join("data").display(),
            client = m.client_port,
            tick = o.tick_time_ms,
            min = o.min_session_timeout_ms,
            max = o.max_session_timeout_ms,
        );
        if self.members.len() > 1 {
            cfg.push_str("standaloneEnabled=false\nreconfigEnabled=false\n");
            for p in &self.members {
                let _ = writeln!(
                    cfg,
                    "server.{}=127.0.0.1:{}:{}",
                    p.id, p.quorum_port, p.election_port
                );
            }
        }
        if let Some(port) = m.secure_port {
            let _ = writeln!(
                cfg,
                "secureClientPort={port}\nsecureClientPortAddress=127.0.0.1"
            );
        }
        for line in &o.extra_config {
            let _ = writeln!(cfg, "{line}");
        }
        cfg
    }

    fn check_index(&self, member: usize) {
        assert!(
            member < self.members.len(),
            "ZooKeeper member index {member} out of range: the cluster has {} members",
            self.members.len()
        );
    }

    fn spawn_or_panic(&mut self, java: &Path, classpath: &str, i: usize) {
        if let Err(e) = self.spawn_member(java, classpath, i) {
            panic!(
                "cannot spawn {} for ZooKeeper server {}: {e}",
                java.display(),
                self.members[i].id
            );
        }
    }

    /// Spawns one server process (plus its watchdog), logging to `zk.log` in its temp dir.
    fn spawn_member(&mut self, java: &Path, classpath: &str, i: usize) -> std::io::Result<()> {
        let mut classpath = classpath.to_owned();
        for jar in &self.opts.extra_jars {
            classpath.push(':');
            classpath.push_str(jar);
        }
        let m = &mut self.members[i];
        let mut cmd = Command::new(java);
        // Options a developer's environment would inject into every JVM.
        for var in [
            "JAVA_TOOL_OPTIONS",
            "_JAVA_OPTIONS",
            "JDK_JAVA_OPTIONS",
            "CLASSPATH",
        ] {
            cmd.env_remove(var);
        }
        cmd.args(["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"])
            // No /tmp/hsperfdata_* files per JVM.
            .arg("-XX:-UsePerfData")
            .arg("-cp")
            .arg(classpath)
            .arg("-Dzookeeper.admin.enableServer=false")
            .arg(format!("-Dzookeeper.log.dir={}", m.process.dir().display()))
            .arg("-Dzookeeper.jmx.log4j.disable=true")
            .arg("-Dorg.slf4j.simpleLogger.showDateTime=true")
            .arg("-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS")
            .arg(ZK_MAIN)
            .arg(m.config_path())
            .current_dir(m.process.dir());
        let banner = format!(
            "starting ZooKeeper server {} (client 127.0.0.1:{}, quorum {}, election {})",
            m.id, m.client_port, m.quorum_port, m.election_port
        );
        m.paused = false;
        m.process.spawn(&mut cmd, &banner)
    }

    /// Reports a member process that has exited (and reaps it), if any.
    fn check_exits(&mut self) -> Result<(), StartError> {
        match first_exit(self.members.iter_mut().map(|m| &mut m.process)) {
            Some((member, status)) => {
                self.members[member].paused = false;
                Err(StartError::EarlyExit { member, status })
            }
            None => Ok(()),
        }
    }

    /// `srvr` modes of all running, unpaused members, probed in parallel.
    fn modes(&self) -> Vec<(usize, Option<ZkMode>)> {
        self.answers("srvr")
            .into_iter()
            .map(|(i, a)| (i, ZkMode::parse(&a)))
            .collect()
    }

    /// One four-letter word to every running, unpaused member, in parallel (a stalled member
    /// costs one probe timeout, not one per member).
    fn answers(&self, word: &str) -> Vec<(usize, String)> {
        let targets: Vec<(usize, u16)> = self
            .members
            .iter()
            .enumerate()
            .filter(|(_, m)| m.process.is_running() && !m.paused)
            .map(|(i, m)| (i, m.client_port))
            .collect();
        std::thread::scope(|s| {
            let probes: Vec<_> = targets
                .iter()
                .map(|&(i, port)| (i, s.spawn(move || four_letter_word(port, word))))
                .collect();
            probes
                .into_iter()
                .map(|(i, p)| (i, p.join().ok().flatten().unwrap_or_default()))
                .collect()
        })
    }

    /// Polls until every running, unpaused member serves and exactly one leads, a member
    /// exits, or `deadline` passes.
    fn wait_ready_until(&mut self, deadline: Instant) -> Result<(), StartError> {
        loop {
            self.check_exits()?;
            let answers = self.answers("srvr");
            let modes: Vec<Option<ZkMode>> =
                answers.iter().map(|(_, a)| ZkMode::parse(a)).collect();
            let leaders = modes.iter().flatten().filter(|m| m.is_leader()).count();
            if !answers.is_empty() && modes.iter().all(Option::is_some) && leaders == 1 {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(StartError::Timeout { state: answers });
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    fn wait_ready_or_panic(&mut self, what: &str, timeout: Duration) {
        if let Err(err) = self.wait_ready_until(Instant::now() + timeout) {
            let msg = self.failure_message(what, &err);
            panic!("{msg}");
        }
    }

    /// Panic text: the reason plus the log tail of the members concerned.
    fn failure_message(&self, what: &str, err: &StartError) -> String {
        let (reason, members) = match err {
            StartError::EarlyExit { member, status } => (
                format!(
                    "server {} exited early with {status}",
                    self.members[*member].id
                ),
                vec![*member],
            ),
            StartError::Timeout { state } => {
                let mut s = String::from("not ready in time (need: every running member serves, exactly one leads); last srvr modes:");
                for (i, answer) in state {
                    let shown = match ZkMode::parse(answer) {
                        Some(mode) => format!("{mode:?}"),
                        None if answer.is_empty() => "no answer".to_owned(),
                        None => format!("{:?}", answer.lines().next().unwrap_or("")),
                    };
                    let _ = write!(s, " server {}: {shown};", self.members[*i].id);
                }
                (s, state.iter().map(|(i, _)| *i).collect())
            }
        };
        let mut msg = format!(
            "{what}: {reason} (java {}, classpath {})",
            java_binary().display(),
            zookeeper_classpath()
        );
        for i in members {
            let m = &self.members[i];
            let _ = write!(
                msg,
                "\n---- last {LOG_TAIL_LINES} lines of zk.log of server {} (client port {}, \
                 quorum port {}, election port {}) ----\n{}",
                m.id,
                m.client_port,
                m.quorum_port,
                m.election_port,
                m.process.log_tail(LOG_TAIL_LINES)
            );
        }
        msg
    }
}

impl Member {
    fn config_path(&self) -> PathBuf {
        self.process.dir().join("zoo.cfg")
    }

    /// Kills the server (SIGKILL also ends a paused one); it is no longer paused then.
    fn stop(&mut self) {
        self.process.stop();
        self.paused = false;
    }
}

/// Sends a signal with `/bin/kill` (no libc dependency); panics if that fails.
fn send_signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "kill {sig} {pid} failed");
}

/// The library's connection URL for a connect string, `zk://127.0.0.1:P1,…/chroot` (no
/// trailing `/` when `chroot` is empty).
pub fn zk_url(connect: &str, chroot: &str) -> String {
    let chroot = chroot.trim_matches('/');
    if chroot.is_empty() {
        format!("zk://{connect}")
    } else {
        format!("zk://{connect}/{chroot}")
    }
}

/// Sends a four-letter word to 127.0.0.1:`port` and reads the whole answer (the server closes
/// the connection after it), within [`PROBE_TIMEOUT`] in total. `None` on any failure.
pub fn four_letter_word(port: u16, word: &str) -> Option<String> {
    let deadline = Instant::now() + PROBE_TIMEOUT;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&addr, PROBE_TIMEOUT).ok()?;
    stream.set_write_timeout(Some(PROBE_TIMEOUT)).ok()?;
    stream.write_all(word.as_bytes()).ok()?;
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        stream.set_read_timeout(Some(left)).ok()?;
        match stream.read(&mut buf).ok()? {
            0 => break,
            n if answer.len() + n <= 1024 * 1024 => answer.extend_from_slice(&buf[..n]),
            _ => return None,
        }
    }
    Some(String::from_utf8_lossy(&answer).into_owned())
}

/// A raw zookeeper-client session (4 s timeout) for test set-up and checks, retried while the
/// ensemble elects a leader; panics after ~15 s. `connect` is a connect string
/// (`127.0.0.1:P1,…`, optionally with `/chroot`), not a `zk://` URL.
pub async fn zk_connect(connect: &str) -> zk::Client {
    zk_connect_with(connect, HELPER_SESSION_TIMEOUT).await
}

/// [`zk_connect`] with a chosen session timeout (the server clamps it to its range).
pub async fn zk_connect_with(connect: &str, session_timeout: Duration) -> zk::Client {
    let connect = connect.to_owned();
    super::waiting::retry_call(&format!("ZooKeeper connect to {connect}"), || {
        let connect = connect.clone();
        async move {
            let attempt = zk::Client::connector()
                .with_session_timeout(session_timeout)
                .with_fail_eagerly()
                .connect(&connect);
            match tokio::time::timeout(Duration::from_secs(5), attempt).await {
                Ok(r) => r,
                Err(_) => Err(zk::Error::Timeout),
            }
        }
    })
    .await
}

/// True for errors after which the same call may succeed on a retry. `Custom` is how
/// zookeeper-client 0.11 reports an I/O error of the connection (e.g. a reset) to requests in
/// flight; nothing else produces it for plain reads and deletes.
fn is_transient(e: &zk::Error) -> bool {
    matches!(
        e,
        zk::Error::ConnectionLoss
            | zk::Error::Custom(_)
            | zk::Error::Timeout
            | zk::Error::NoHosts
            | zk::Error::SessionMoved
            | zk::Error::Throttled
    )
}

/// Number of children of `path`, read straight from ZooKeeper (0 if `path` does not exist):
/// checks that nothing is left behind independently of the library's own view.
pub async fn count_children(connect: &str, path: &str) -> usize {
    count_children_but(connect, path, None).await
}

/// The queue entries of a semaphore node at `path`: its children but a fair semaphore's
/// record (`fair`).
pub async fn count_queue_entries(connect: &str, path: &str) -> usize {
    count_children_but(connect, path, Some("fair")).await
}

async fn count_children_but(connect: &str, path: &str, but: Option<&str>) -> usize {
    let client = zk_connect(connect).await;
    let path = path.to_owned();
    let r = super::waiting::retry_call(&format!("ZooKeeper list children of {path}"), || {
        let client = client.clone();
        let path = path.clone();
        async move {
            match client.list_children(&path).await {
                Ok(c) => Ok(Ok(c.iter().filter(|n| Some(n.as_str()) != but).count())),
                Err(e) if is_transient(&e) => Err(e),
                Err(e) => Ok(Err(e)),
            }
        }
    })
    .await;
    match r {
        Ok(n) => n,
        Err(zk::Error::NoNode) => 0,
        Err(e) => panic!("ZooKeeper list children of {path} failed: {e}"),
    }
}

/// Children of `path`, sorted (empty if `path` does not exist).
pub async fn list_children(connect: &str, path: &str) -> Vec<String> {
    let client = zk_connect(connect).await;
    let mut children = match client.list_children(path).await {
        Ok(c) => c,
        Err(zk::Error::NoNode) => Vec::new(),
        Err(e) => panic!("ZooKeeper list children of {path} failed: {e}"),
    };
    children.sort();
    children
}

/// Deletes `path` and everything below it (nothing if it does not exist). Tolerates nodes
/// vanishing or appearing concurrently by retrying a bounded number of times.
pub async fn delete_recursive(connect: &str, path: &str) {
    let client = zk_connect(connect).await;
    for _ in 0..20 {
        match delete_tree(&client, path, 0).await {
            Ok(()) => return,
            Err(e) if is_transient(&e) || matches!(e, zk::Error::NotEmpty) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("ZooKeeper delete_recursive({path}) failed: {e}"),
        }
    }
    panic!("ZooKeeper delete_recursive({path}) did not finish after 20 rounds");
}

/// Depth-first delete of one subtree; `NoNode` anywhere counts as done.
fn delete_tree<'a>(
    client: &'a zk::Client,
    path: &'a str,
    depth: usize,
) -> std::pin::Pin<Box<dyn Future<Output = Result<(), zk::Error>> + Send + 'a>> {
    Box::pin(async move {
        if depth > MAX_DELETE_DEPTH {
            panic!("delete_recursive: deeper than {MAX_DELETE_DEPTH} levels at {path}");
        }
        let children = match client.list_children(path).await {
            Ok(c) => c,
            Err(zk::Error::NoNode) => return Ok(()),
            Err(e) => return Err(e),
        };
        for child in children {
            let child_path = if path == "/" {
                format!("/{child}")
            } else {
                format!("{path}/{child}")
            };
            delete_tree(client, &child_path, depth + 1).await?;
        }
        if path == "/" || path == "/zookeeper" {
            return Ok(());
        }
        match client.delete(path, None).await {
            Ok(()) | Err(zk::Error::NoNode) => Ok(()),
            Err(e) => Err(e),
        }
    })
}

/// Ends another client's session as if it had expired (Curator's "kill session" trick): a
/// second connection takes the session over with its id and password, which makes the server
/// drop the first connection, and then closes it. The original client sees `Expired` when it
/// reconnects (within its connection timeout); its ephemeral nodes are gone at once.
pub async fn expire_session(connect: &str, session: &zk::SessionInfo) {
    // Dropping the last handle of a non-detached client closes its session, but in the
    // background; so take the session over again until the server says it is gone.
    let id = format!("{:?}", session.id());
    let mut last = String::from("no attempt made");
    for _ in 0..50 {
        let attempt = zk::Client::connector()
            .with_session(session.clone())
            .with_fail_eagerly()
            .connect(connect);
        match tokio::time::timeout(Duration::from_secs(5), attempt).await {
            Ok(Err(zk::Error::SessionExpired)) => return,
            Ok(Ok(thief)) => {
                drop(thief);
                last = "session still alive after a takeover and close".to_owned();
            }
            // The takeover failed without an answer (seen once in CI under load: "no
            // available hosts", the server cut the handshake): ask the servers themselves.
            failed => {
                last = match failed {
                    Ok(Err(e)) => e.to_string(),
                    _ => "takeover attempt timed out after 5 s".to_owned(),
                };
                match session_listed(connect, &id) {
                    Some(false) => return,
                    Some(true) => last.push_str("; the servers still list the session"),
                    None => last.push_str("; not every server answered `dump`"),
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("expire_session({id}) via {connect}: session not closed: {last}");
}

/// Whether the servers of `connect` (`host:port,…[/chroot]`, all on 127.0.0.1) list session
/// `id` (`0x…`) in their session tracker (`dump`: every member lists the global sessions);
/// `None` unless every one of them answered.
pub fn session_listed(connect: &str, id: &str) -> Option<bool> {
    let hosts = connect.split('/').next().unwrap_or("");
    let mut listed = false;
    for host in hosts.split(',') {
        let port = host.rsplit(':').next()?.parse().ok()?;
        let dump = four_letter_word(port, "dump")?;
        let tracker = dump.split("Connections dump").next()?;
        if !tracker.contains("SessionTracker dump") {
            return None;
        }
        listed |= tracker
            .lines()
            .any(|l| l.split_whitespace().next() == Some(id));
    }
    Some(listed)
}

/// Waits until `watcher` reports a state matching `want` (checking the current one first);
/// returns it, or `None` after `timeout`.
pub async fn wait_state(
    watcher: &mut zk::StateWatcher,
    want: impl Fn(zk::SessionState) -> bool,
    timeout: Duration,
) -> Option<zk::SessionState> {
    let now = watcher.peek_state();
    if want(now) {
        return Some(now);
    }
    let deadline = tokio::time::Instant::now() + timeout;
    for _ in 0..1_000 {
        match tokio::time::timeout_at(deadline, watcher.changed()).await {
            Ok(state) if want(state) => return Some(state),
            Ok(state) if state.is_terminated() => return None,
            Ok(_) => {}
            Err(_) => return None,
        }
    }
    None
}

/// Every child of `path` with its data, read straight from ZooKeeper (not through the
/// library; empty if `path` does not exist). A child deleted between the listing and its read
/// is left out.
pub async fn children_with_data(connect: &str, path: &str) -> Vec<(String, String)> {
    let client = zk_connect(connect).await;
    let mut out = Vec::new();
    for name in list_children_of(&client, path).await {
        let child = format!("{path}/{name}");
        let got = super::waiting::retry_call(&format!("ZooKeeper get {child}"), || {
            let client = client.clone();
            let child = child.clone();
            async move {
                match client.get_data(&child).await {
                    Ok((data, _)) => Ok(Some(data)),
                    Err(zk::Error::NoNode) => Ok(None),
                    Err(e) if is_transient(&e) => Err(e),
                    Err(e) => panic!("ZooKeeper get {child} failed: {e}"),
                }
            }
        })
        .await;
        if let Some(data) = got {
            out.push((name, String::from_utf8_lossy(&data).into_owned()));
        }
    }
    out
}

/// Children of `path` on an open client, retried while transient (empty if no such node).
async fn list_children_of(client: &zk::Client, path: &str) -> Vec<String> {
    let path = path.to_owned();
    super::waiting::retry_call(&format!("ZooKeeper list children of {path}"), || {
        let client = client.clone();
        let path = path.clone();
        async move {
            match client.list_children(&path).await {
                Ok(c) => Ok(c),
                Err(zk::Error::NoNode) => Ok(Vec::new()),
                Err(e) if is_transient(&e) => Err(e),
                Err(e) => panic!("ZooKeeper list children of {path} failed: {e}"),
            }
        }
    })
    .await
}

/// What ZooKeeper holds about the node `path`, for a failure message: its owner session (the
/// form the client logs: `0x…`), creation zxid and the server's creation time. Best effort.
pub async fn describe_node(connect: &str, path: &str) -> String {
    let client = zk_connect(connect).await;
    match client.get_data(path).await {
        Ok((_, stat)) => format!(
            "ephemeral owner session {:#x}, czxid {:#x}, ctime unix ms {}",
            stat.ephemeral_owner, stat.czxid, stat.ctime
        ),
        Err(e) => format!("get failed: {e}"),
    }
}
