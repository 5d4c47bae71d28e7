//! Row 3 (and the contended half of row 5): `clients` clients, each with its own Limiter (own
//! session), loop acquire → hold → release on one semaphore of `capacity` for a fixed time.
//! Records throughput, fairness (acquisitions per client), the most holders seen at once (a
//! safety check: above the capacity is an error), and the requests the Limiters sent.

use crate::stores::{client, close_all, total_stats};
use anyhow::{bail, Context as _};
use clusterlimit::{RequestStats, Semaphore};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Bound on one acquire: with 8 clients and short holds, a healthy wait is milliseconds.
const ACQUIRE_BOUND: Duration = Duration::from_secs(30);
/// Cap on one client's iterations, so the loop is bounded in count as well as in time.
const MAX_ITERATIONS: u64 = 50_000_000;

/// Settings of one contended run.
#[derive(Debug, Clone, Copy)]
pub struct Setup {
    pub clients: usize,
    pub capacity: u32,
    pub hold: Duration,
    pub run_for: Duration,
}

#[derive(Debug, Clone)]
pub struct Outcome {
    /// Acquisitions granted within the run, per client.
    pub per_client: Vec<u64>,
    pub run_for: Duration,
    pub max_holders: usize,
    /// Acquisitions in total (the last ones, granted after the end, included).
    pub all_acquisitions: u64,
    /// Requests of every client, without session keepalives.
    pub requests: RequestStats,
}

impl Outcome {
    pub fn total(&self) -> u64 {
        self.per_client.iter().sum()
    }

    pub fn per_second(&self) -> f64 {
        self.total() as f64 / self.run_for.as_secs_f64()
    }

    /// Requests (acquire and release together) per acquisition, apart from the one-time watch
    /// setups (a Limiter's first wait on a semaphore), which [`Outcome::requests`] also holds.
    pub fn requests_per_acquisition(&self) -> f64 {
        (self.requests.total() - self.requests.watch) as f64 / self.all_acquisitions.max(1) as f64
    }
}

/// Holders seen at once across every client of the run.
#[derive(Default)]
struct Occupancy {
    now: AtomicUsize,
    max: AtomicUsize,
}

pub async fn run(url: &str, name: &str, setup: Setup) -> anyhow::Result<Outcome> {
    let mut limiters = Vec::new();
    let mut sems = Vec::new();
    for i in 0..setup.clients {
        let (l, s) = client(url, &format!("client-{i}"), name, setup.capacity).await?;
        limiters.push(l);
        sems.push(s);
    }
    let before = total_stats(&limiters);
    let occupancy = Arc::new(Occupancy::default());
    let deadline = Instant::now() + setup.run_for;
    let tasks: Vec<_> = sems
        .into_iter()
        .map(|s| tokio::spawn(client_loop(s, setup.hold, deadline, occupancy.clone())))
        .collect();
    let mut per_client = Vec::new();
    let mut all_acquisitions = 0;
    for (i, t) in tasks.into_iter().enumerate() {
        let (in_run, all) = t
            .await
            .context("a contended client panicked")?
            .with_context(|| {
                format!(
                    "contended client {i} on {url}, semaphore {name}, hold {:?}",
                    setup.hold
                )
            })?;
        per_client.push(in_run);
        all_acquisitions += all;
    }
    let requests = total_stats(&limiters).since(&before);
    close_all(&limiters).await?;
    let max_holders = occupancy.max.load(SeqCst);
    if max_holders > setup.capacity as usize {
        bail!(
            "SAFETY VIOLATION on {url}: {max_holders} holders at once with capacity {}",
            setup.capacity
        );
    }
    Ok(Outcome {
        per_client,
        run_for: setup.run_for,
        max_holders,
        all_acquisitions,
        requests,
    })
}

/// One client: acquire, hold, release until the deadline. Returns (acquisitions granted
/// before the deadline, all acquisitions).
async fn client_loop(
    sem: Semaphore,
    hold: Duration,
    deadline: Instant,
    occupancy: Arc<Occupancy>,
) -> anyhow::Result<(u64, u64)> {
    let (mut in_run, mut all) = (0, 0);
    while Instant::now() < deadline && all < MAX_ITERATIONS {
        let permit = tokio::time::timeout(ACQUIRE_BOUND, sem.acquire())
            .await
            .context("a contended acquire took over 30 s")??;
        // Counted between the grant and the release request, so a correct semaphore can
        // never let this exceed its capacity (the next grant follows the release's write).
        let holders = occupancy.now.fetch_add(1, SeqCst) + 1;
        occupancy.max.fetch_max(holders, SeqCst);
        all += 1;
        if Instant::now() <= deadline {
            in_run += 1;
        }
        if !hold.is_zero() {
            hold_for(hold).await?;
        }
        occupancy.now.fetch_sub(1, SeqCst);
        permit.release().await?;
    }
    Ok((in_run, all))
}

/// Holds for `hold` with the OS's sleep (as kazoo's `time.sleep` does): tokio's timer rounds up
/// to whole milliseconds, which would make a 5 ms hold 5–6 ms and cap throughput lower.
async fn hold_for(hold: Duration) -> anyhow::Result<()> {
    tokio::task::spawn_blocking(move || std::thread::sleep(hold))
        .await
        .context("the hold's sleeping thread panicked")
}
