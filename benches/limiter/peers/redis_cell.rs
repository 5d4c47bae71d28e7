//! redis-cell's `CL.THROTTLE`: the worker (this bench binary, `--rate-worker`).

use crate::rate::protocol::{WorkerReport, WorkerSetup};

/// Runs one redis-cell worker.
pub fn run_worker(setup: &WorkerSetup) -> anyhow::Result<WorkerReport> {
    anyhow::bail!("the redis-cell worker is not written yet ({setup:?})")
}
