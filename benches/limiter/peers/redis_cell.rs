//! redis-cell's `CL.THROTTLE`: the worker (this bench binary, `--rate-worker`). Like one
//! `Limiter` per process, one multiplexed connection per process carries every caller's checks.

use super::drive;
use crate::rate::protocol::{Mode, WorkerReport, WorkerSetup};
use anyhow::{ensure, Context as _};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A request that takes longer counts as an error (so a hung server cannot hang the worker).
const TIMEOUT: Duration = Duration::from_secs(5);

/// Runs one redis-cell worker.
pub fn run_worker(setup: &WorkerSetup) -> anyhow::Result<WorkerReport> {
    let throttle = Throttle::new(setup)?;
    crate::common::runtime()?.block_on(async {
        let client = redis::Client::open(setup.target.as_str())
            .with_context(|| format!("bad redis URL in target: {}", setup.target))?;
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(TIMEOUT))
            .set_response_timeout(Some(TIMEOUT));
        let conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .with_context(|| format!("connect to redis at {}", setup.target))?;
        // Fresh mode: each call's key is new (`KEY-PID-N`).
        let fresh = (setup.mode == Mode::Fresh).then(|| Arc::new(AtomicU64::new(0)));
        // redis-cell has one algorithm; whatever the setup asked for, GCRA is what runs.
        drive::run(setup, "gcra", move || {
            let mut conn = conn.clone();
            let cmd = throttle.command(fresh.as_ref().map(|n| n.fetch_add(1, Ordering::Relaxed)));
            async move {
                let reply: Vec<i64> = cmd.query_async(&mut conn).await?;
                // [limited (0 = admitted), limit, remaining, retry after s, reset after s]
                match reply.first() {
                    Some(limited) => Ok(*limited == 0),
                    None => anyhow::bail!("CL.THROTTLE answered an empty array"),
                }
            }
        })
        .await
    })
}

/// `CL.THROTTLE key max_burst count period`: the setup's quota as redis-cell takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Throttle {
    key: String,
    max_burst: u64,
    /// `count` per `period_s` seconds: the quota's exact rate (redis-cell's period is whole
    /// seconds, so a sub-second period is scaled up).
    count: u64,
    period_s: u64,
}

impl Throttle {
    fn new(setup: &WorkerSetup) -> anyhow::Result<Throttle> {
        ensure!(setup.limit > 0, "limit must be at least 1");
        ensure!(setup.period_ms > 0, "period_ms must be at least 1");
        ensure!(setup.burst > 0, "burst must be at least 1");
        let per_s = setup
            .limit
            .checked_mul(1_000)
            .context("limit is too large")?;
        let g = gcd(per_s, setup.period_ms);
        Ok(Throttle {
            key: format!("{}:{}", setup.limit_name, setup.key),
            max_burst: setup.burst - 1,
            count: per_s / g,
            period_s: setup.period_ms / g,
        })
    }

    /// The command for the setup's key, or for its `n`-th fresh variant.
    fn command(&self, fresh: Option<u64>) -> redis::Cmd {
        let mut cmd = redis::cmd("CL.THROTTLE");
        match fresh {
            Some(n) => cmd.arg(format!("{}-{}-{n}", self.key, std::process::id())),
            None => cmd.arg(&self.key),
        };
        cmd.arg(self.max_burst).arg(self.count).arg(self.period_s);
        cmd
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}
