//! Runs worker processes (`protocol::worker_command`) and reads their one-line reports.

use super::protocol::{worker_command, WorkerReport, WorkerSetup};
use anyhow::{bail, Context as _};
use std::process::Stdio;
use std::time::Duration;

/// Starts one process per setup, waits for them all (each at most `bound`), and returns their
/// reports in order. A worker that fails, hangs or prints no report is an error (killed).
pub async fn run_all(setups: &[WorkerSetup], bound: Duration) -> anyhow::Result<Vec<WorkerReport>> {
    let mut children = Vec::new();
    for s in setups {
        let mut cmd = tokio::process::Command::from(worker_command(s)?);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        let child = cmd
            .spawn()
            .with_context(|| format!("start a {:?} worker", s.contender))?;
        children.push((s, child));
    }
    let mut reports = Vec::new();
    for (s, child) in children {
        let out = tokio::time::timeout(bound, child.wait_with_output())
            .await
            .with_context(|| format!("a {:?} worker ran over {bound:?}", s.contender))?
            .with_context(|| format!("wait for a {:?} worker", s.contender))?;
        if !out.status.success() {
            bail!(
                "a {:?} worker failed ({}); its stderr is above",
                s.contender,
                out.status
            );
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = stdout
            .lines()
            .rev()
            .find(|l| l.trim_start().starts_with('{'))
            .with_context(|| format!("a {:?} worker printed no report: {stdout}", s.contender))?;
        let report: WorkerReport = serde_json::from_str(line)
            .with_context(|| format!("a {:?} worker's report: {line}", s.contender))?;
        reports.push(report);
    }
    Ok(reports)
}
