//! Helpers for tests of the real `clusterlimit` binary, declared with `mod binary;` in an area's
//! `tests/<area>/main.rs` (its modules `use crate::binary;`).
#![allow(dead_code)]

use std::future::Future;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The binary under test, built by cargo for this test run.
pub const BIN: &str = env!("CARGO_BIN_EXE_clusterlimit");

/// `clusterlimit ARGS` with a clean environment for our variables; killed when dropped.
pub fn cmd(args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(args)
        .env_remove("CLUSTERLIMIT_STORE")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    c
}

/// Output of a finished command.
pub struct Out {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `c` to completion within `limit`, capturing output.
pub async fn output(mut c: Command, limit: Duration) -> Out {
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = c.spawn().expect("spawn clusterlimit");
    let out = within("clusterlimit to finish", limit, child.wait_with_output())
        .await
        .expect("wait for clusterlimit");
    Out {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Awaits `fut`, panicking with `what` if it takes longer than `limit`.
pub async fn within<T>(what: &str, limit: Duration, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(limit, fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {limit:?} waiting for {what}"),
    }
}

/// Polls `check` every 50 ms until it returns `Some`, at most `limit`.
pub async fn eventually<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    for _ in 0..10_000 {
        if let Some(v) = check().await {
            return v;
        }
        if tokio::time::Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{what}: not within {limit:?}")
}

/// Sends a signal to a process by pid (via kill(1), so tests need no signal crate).
pub fn signal(pid: u32, sig: &str) {
    let st = std::process::Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(st.success(), "kill -{sig} {pid} failed");
}

/// Kills the process whose pid a test child wrote to `file`, on drop (children of a SIGKILLed
/// `run` are orphans that nobody else would stop).
pub struct PidFileGuard<'a>(pub &'a Path);

impl Drop for PidFileGuard<'_> {
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(self.0) {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", pid.trim()])
                .status();
        }
    }
}

/// A running `clusterlimit serve` on a free loopback port; SIGKILLed when dropped.
pub struct Sidecar {
    pub child: Child,
    pub url: String,
}

impl Sidecar {
    /// Starts `serve --listen 127.0.0.1:0 ARGS` and reads the bound address from its stdout.
    pub async fn start(args: &[&str]) -> Sidecar {
        let mut all = vec!["serve", "--listen", "127.0.0.1:0"];
        all.extend_from_slice(args);
        let mut c = cmd(&all);
        c.stdout(Stdio::piped()).stderr(Stdio::inherit());
        let mut child = c.spawn().expect("spawn clusterlimit serve");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let url = within(
            "serve to print its address",
            Duration::from_secs(20),
            async {
                for _ in 0..20 {
                    let line = lines
                        .next_line()
                        .await
                        .expect("read serve stdout")
                        .expect("serve exited before listening");
                    if let Some(rest) = line.split("listening on http://").nth(1) {
                        let addr = rest.split_whitespace().next().expect("address");
                        return format!("http://{addr}");
                    }
                }
                panic!("serve printed no address")
            },
        )
        .await;
        // Keep draining stdout so the sidecar never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Sidecar { child, url }
    }

    pub fn pid(&self) -> u32 {
        self.child.id().expect("sidecar still running")
    }
}

/// An HTTP client for a sidecar under test (30 s per request: a hang fails the test).
pub fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("an HTTP client")
}

/// The sidecar's `/metrics` text.
pub async fn metrics(c: &reqwest::Client, base: &str) -> String {
    let r = c.get(format!("{base}/metrics")).send().await;
    r.expect("GET /metrics")
        .text()
        .await
        .expect("the /metrics body")
}

/// Value of the first sample whose line starts with `prefix` (name and labels), if present.
pub fn sample(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// `clusterlimit serve --check-config --config PATH`, bounded to 20 s.
pub async fn check_config(path: &Path) -> Out {
    let path = path.to_str().expect("a UTF-8 temp path");
    let args = ["serve", "--check-config", "--config", path];
    output(cmd(&args), Duration::from_secs(20)).await
}
