//! Real Redis servers as child processes (Debian's `redis-server` and `redis-sentinel`): one
//! server, a Redis Cluster of primaries joined with `redis-cli --cluster create`, or a primary
//! with a replica watched by a sentinel.

use super::process::{free_ports, ServerProcess};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

const INSTALL_HINT: &str =
    "install Debian's redis-server and redis-sentinel (scripts/test --install-deps does)";

fn binary(name: &str) -> &str {
    let found = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {name}"))
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(found, "{name} not found: {INSTALL_HINT}");
    name
}

/// Sends one inline command to `port` and returns the raw reply (`None`: no connection).
pub fn raw_command(port: u16, command: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(format!("{command}\r\n").as_bytes()).ok()?;
    let mut buf = [0u8; 4096];
    let n = s.read(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf[..n]).into_owned())
}

fn wait_for_pong(server: &mut ServerProcess, port: u16) {
    let until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < until {
        if raw_command(port, "PING").is_some_and(|r| r.starts_with("+PONG")) {
            return;
        }
        if let Some(status) = server.try_exit() {
            panic!(
                "redis on port {port} exited at start ({status}):\n{}",
                server.log_tail(20)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!(
        "redis on port {port} did not answer PING within 20 s:\n{}",
        server.log_tail(20)
    );
}

/// One Redis server on 127.0.0.1, no persistence.
pub struct RedisServer {
    pub port: u16,
    server: ServerProcess,
    extra: Vec<String>,
}

impl RedisServer {
    pub fn start() -> RedisServer {
        Self::start_with(&[])
    }

    /// A server started with extra `redis-server` arguments (`--cluster-enabled yes`, …).
    pub fn start_with(extra: &[&str]) -> RedisServer {
        let port = free_ports(1)[0];
        let mut r = RedisServer {
            port,
            server: ServerProcess::new("redis", "clusterlimit-redis-", "redis.log"),
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        r.spawn();
        r
    }

    fn spawn(&mut self) {
        let mut cmd = Command::new(binary("redis-server"));
        cmd.arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(self.server.dir())
            .args(&self.extra);
        self.server
            .spawn(&mut cmd, &format!("redis-server on port {}", self.port))
            .unwrap_or_else(|e| panic!("cannot start redis-server: {e}; {INSTALL_HINT}"));
        wait_for_pong(&mut self.server, self.port);
    }

    /// A server that also listens for TLS (certificates of `pki`, client certificates
    /// optional) on the returned port, with `extra` arguments.
    pub fn start_tls(pki: &super::certs::TestPki, extra: &[&str]) -> (RedisServer, u16) {
        let tls_port = free_ports(1)[0].to_string();
        let (cert, key, ca) = (
            pki.server.cert.display().to_string(),
            pki.server.key.display().to_string(),
            pki.ca.display().to_string(),
        );
        let mut args = vec![
            "--tls-port",
            &tls_port,
            "--tls-cert-file",
            &cert,
            "--tls-key-file",
            &key,
            "--tls-ca-cert-file",
            &ca,
            "--tls-auth-clients",
            "optional",
        ];
        args.extend_from_slice(extra);
        let server = RedisServer::start_with(&args);
        (server, tls_port.parse().expect("port"))
    }

    /// `redis://127.0.0.1:PORT/prefix`.
    pub fn url(&self, prefix: &str) -> String {
        format!("redis://127.0.0.1:{}/{prefix}", self.port)
    }

    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.server.pid().expect("redis is running")
    }

    /// Kills the server (SIGKILL).
    pub fn kill(&mut self) {
        self.server.stop();
    }

    /// Runs `redis-cli` against this server and returns its output.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new(binary("redis-cli"))
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("run redis-cli");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// A Redis Cluster of `n` primaries (no replicas), every slot assigned.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub fn start(n: usize) -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..n)
            .map(|_| {
                RedisServer::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "2000",
                ])
            })
            .collect();
        let hosts: Vec<String> = nodes.iter().map(RedisServer::host).collect();
        let out = Command::new(binary("redis-cli"))
            .args(["--cluster", "create"])
            .args(&hosts)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("run redis-cli --cluster create");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let c = RedisCluster { nodes };
        c.wait_ok();
        c
    }

    /// Waits until every node reports `cluster_state:ok`.
    fn wait_ok(&self) {
        let until = Instant::now() + Duration::from_secs(30);
        while Instant::now() < until {
            if self
                .nodes
                .iter()
                .all(|n| n.cli(&["cluster", "info"]).contains("cluster_state:ok"))
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("the Redis Cluster did not reach cluster_state:ok within 30 s");
    }

    /// `redis+cluster://H1,H2,…/prefix`.
    pub fn url(&self, prefix: &str) -> String {
        let hosts: Vec<String> = self.nodes.iter().map(RedisServer::host).collect();
        format!("redis+cluster://{}/{prefix}", hosts.join(","))
    }
}

/// A primary, replicas of it, and one sentinel (quorum 1) watching them as `service`.
pub struct RedisSentinel {
    pub primary: RedisServer,
    pub replicas: Vec<RedisServer>,
    pub sentinel_port: u16,
    sentinel: ServerProcess,
}

impl RedisSentinel {
    pub const SERVICE: &'static str = "clusterlimit";

    /// With one replica, for tests that keep the primary: the sentinel waits 30 s before it
    /// calls the primary down, so a primary starved of CPU for a second on a busy 2-core
    /// machine is not failed over in the middle of a contract case (pub/sub wakeups and
    /// writes would then move to the replica while the case times its waits).
    pub fn start() -> RedisSentinel {
        Self::start_watching(1, Duration::from_secs(30))
    }

    /// With `n` replicas, for failover tests: the primary is called down after 1 s.
    pub fn start_with_replicas(n: usize) -> RedisSentinel {
        Self::start_watching(n, Duration::from_secs(1))
    }

    fn start_watching(n: usize, down_after: Duration) -> RedisSentinel {
        let primary = RedisServer::start();
        let replicas: Vec<RedisServer> = (0..n).map(|_| RedisServer::start()).collect();
        for r in &replicas {
            r.cli(&["replicaof", "127.0.0.1", &primary.port.to_string()]);
        }
        let sentinel_port = free_ports(1)[0];
        let mut sentinel =
            ServerProcess::new("redis-sentinel", "clusterlimit-sentinel-", "sentinel.log");
        let conf = sentinel.dir().join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {sentinel_port}\nbind 127.0.0.1\ndir {dir}\n\
                 sentinel monitor {service} 127.0.0.1 {p} 1\n\
                 sentinel down-after-milliseconds {service} {down}\n\
                 sentinel failover-timeout {service} 5000\n",
                dir = sentinel.dir().display(),
                down = down_after.as_millis(),
                service = Self::SERVICE,
                p = primary.port
            ),
        )
        .expect("write sentinel.conf");
        let mut cmd = Command::new(binary("redis-sentinel"));
        cmd.arg(&conf);
        sentinel
            .spawn(&mut cmd, &format!("redis-sentinel on port {sentinel_port}"))
            .unwrap_or_else(|e| panic!("cannot start redis-sentinel: {e}; {INSTALL_HINT}"));
        wait_for_pong(&mut sentinel, sentinel_port);
        // A failover needs replicas in sync that the sentinel knows of (it learns replicas
        // from the primary's INFO, every 10 s at first): wait for all.
        let until = Instant::now() + Duration::from_secs(30);
        while !replicas.iter().all(|r| {
            let synced = r
                .cli(&["info", "replication"])
                .contains("master_link_status:up");
            let known = Command::new(binary("redis-cli"))
                .args(["-p", &sentinel_port.to_string()])
                .args(["sentinel", "replicas", Self::SERVICE])
                .output()
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(&r.port.to_string()));
            synced && known
        }) {
            assert!(
                Instant::now() < until,
                "the sentinel did not learn of the synced replicas within 30 s:\n{}",
                sentinel.log_tail(20)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        RedisSentinel {
            primary,
            replicas,
            sentinel_port,
            sentinel,
        }
    }

    /// `redis+sentinel://127.0.0.1:PORT/SERVICE/prefix`.
    pub fn url(&self, prefix: &str) -> String {
        format!(
            "redis+sentinel://127.0.0.1:{}/{}/{prefix}",
            self.sentinel_port,
            Self::SERVICE
        )
    }
}
