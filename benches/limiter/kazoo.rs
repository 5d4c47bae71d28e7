//! Row 7: the peer. kazoo's Semaphore recipe (Debian `python3-kazoo`, run by `/usr/bin/python3`)
//! on the same ZooKeeper server in the same run, driven by `benches/kazoo_peer.py`, which prints
//! its results as JSON.

use crate::contended::Setup;
use crate::stats::Samples;
use anyhow::{bail, ensure, Context as _};
use serde::Deserialize;
use std::process::Stdio;
use std::time::Duration;
use tokio::process::Command;

const PYTHON: &str = "/usr/bin/python3";
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/kazoo_peer.py");
const INSTALL_HINT: &str = "kazoo is needed for the peer row: install it with \
                            `apt-get install python3-kazoo` (or run `scripts/test --install-deps` as root)";
/// Margin on top of the work itself for python to start, connect and report.
const SLACK: Duration = Duration::from_secs(120);

/// Fails with an install hint unless `/usr/bin/python3` can import kazoo. Checked before any
/// server starts: the peer row is never skipped.
pub async fn check_available() -> anyhow::Result<()> {
    let out = Command::new(PYTHON)
        .args(["-c", "import kazoo.recipe.lock"])
        .stdin(Stdio::null())
        .output()
        .await
        .with_context(|| format!("cannot run {PYTHON}: {INSTALL_HINT}"))?;
    ensure!(
        out.status.success(),
        "{PYTHON} cannot import kazoo ({}): {INSTALL_HINT}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

#[derive(Deserialize)]
struct Uncontended {
    samples_ns: Vec<u64>,
}

/// kazoo acquire+release pairs on `hosts` (a ZooKeeper connect string).
pub async fn uncontended(hosts: &str, capacity: u32, iterations: usize) -> anyhow::Result<Samples> {
    let args = [
        "uncontended".to_string(),
        format!("--hosts={hosts}"),
        "--path=/kazoo/uncontended".to_string(),
        format!("--capacity={capacity}"),
        format!("--iterations={iterations}"),
    ];
    let r: Uncontended = run(&args, Duration::from_secs(iterations as u64 / 10)).await?;
    ensure!(
        r.samples_ns.len() == iterations,
        "kazoo returned {} samples, expected {iterations}",
        r.samples_ns.len()
    );
    Ok(Samples::new(
        r.samples_ns.into_iter().map(Duration::from_nanos).collect(),
    ))
}

#[derive(Deserialize, Debug, Clone)]
pub struct Contended {
    pub per_client: Vec<u64>,
    pub max_holders: usize,
    pub seconds: f64,
}

impl Contended {
    pub fn per_second(&self) -> f64 {
        self.per_client.iter().sum::<u64>() as f64 / self.seconds
    }
}

/// kazoo's contended run with the same setup as row 3 (one process and session per client).
pub async fn contended(hosts: &str, setup: Setup) -> anyhow::Result<Contended> {
    let path = format!("/kazoo/contended-{}ms", setup.hold.as_millis());
    let args = [
        "contended".to_string(),
        format!("--hosts={hosts}"),
        format!("--path={path}"),
        format!("--clients={}", setup.clients),
        format!("--capacity={}", setup.capacity),
        format!("--hold-ms={}", setup.hold.as_secs_f64() * 1e3),
        format!("--seconds={}", setup.run_for.as_secs_f64()),
    ];
    let r: Contended = run(&args, setup.run_for).await?;
    if r.max_holders > setup.capacity as usize {
        bail!(
            "kazoo let {} clients hold at once with capacity {}",
            r.max_holders,
            setup.capacity
        );
    }
    Ok(r)
}

/// Runs the script and parses its JSON, within `work` + [`SLACK`].
async fn run<T: for<'de> Deserialize<'de>>(args: &[String], work: Duration) -> anyhow::Result<T> {
    let child = Command::new(PYTHON)
        .arg(SCRIPT)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("spawn {PYTHON} {SCRIPT}"))?;
    let out = tokio::time::timeout(work + SLACK, child.wait_with_output())
        .await
        .with_context(|| format!("kazoo_peer.py {} did not finish in time", args[0]))?
        .context("wait for kazoo_peer.py")?;
    ensure!(
        out.status.success(),
        "kazoo_peer.py {} failed ({}): {}",
        args[0],
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "kazoo_peer.py {} printed no JSON: {}",
            args[0],
            String::from_utf8_lossy(&out.stdout)
        )
    })
}
