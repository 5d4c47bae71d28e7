//! One clusterlimit hot-key / uncontended worker process (see `protocol`).

use super::protocol::{WorkerReport, WorkerSetup};

/// Runs the worker `setup` describes with clusterlimit's library.
pub fn run(setup: &WorkerSetup) -> anyhow::Result<WorkerReport> {
    anyhow::bail!("the clusterlimit worker is not written yet ({setup:?})")
}
