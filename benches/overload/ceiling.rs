//! The store-limited ceiling of the saturation rows (and the mark on the grid's rows): how many
//! enqueue + remove pairs per second the run's etcd takes, measured with etcd-client directly,
//! as benches/limiter/latency.rs measures its floor: a put of a key bound to a lease (what an
//! acquire writes), then the delete of that key (what a release writes). `CONNECTIONS` clients,
//! each with `PER_CONNECTION` loops doing pairs back to back: enough outstanding requests to
//! keep a 1-node etcd on 2 cores busy, so the figure is what the store can write, not what one
//! caller's round trips allow.

use crate::stats::Samples;
use anyhow::Context as _;
use etcd_client::{Client, ConnectOptions, PutOptions};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;
use tokio::time::Instant;

/// As many clients as the saturation rows have Limiters.
pub const CONNECTIONS: usize = 6;
const PER_CONNECTION: usize = 32;
/// Pairs in the first moments are not counted: the connections warm up.
const WARM_UP: Duration = Duration::from_millis(500);
/// A permit's value: about as many bytes as the Limiter writes.
const VALUE: &str = r#"{"permits":1,"owner":"bench-host/12345","since_unix_ms":1795343284245}"#;

/// What the store took.
#[derive(Debug, Clone)]
pub struct Ceiling {
    pub pairs_per_s: f64,
    /// One pair's latency (put + delete) under that load.
    pub pair: Samples,
    /// Pairs that failed (a busy etcd may refuse some): counted, not in the rate.
    pub failed: usize,
    pub measured_for: Duration,
}

/// The best of `rounds` measurements of `measure_for` each: the machine is shared, and a
/// ceiling is what the store can do, not what it did while something else ran.
pub async fn best_of(
    endpoints: &[String],
    rounds: usize,
    measure_for: Duration,
) -> anyhow::Result<Ceiling> {
    let mut best: Option<Ceiling> = None;
    for round in 0..rounds.max(1) {
        let c = measure(endpoints, &format!("overload-ceiling/{round}"), measure_for).await?;
        if best.as_ref().is_none_or(|b| c.pairs_per_s > b.pairs_per_s) {
            best = Some(c);
        }
    }
    best.context("no ceiling round ran")
}

/// Measures for `measure_for` (after a short warm-up) under `prefix`.
pub async fn measure(
    endpoints: &[String],
    prefix: &str,
    measure_for: Duration,
) -> anyhow::Result<Ceiling> {
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let counted_from = start + WARM_UP;
    let mut loops = JoinSet::new();
    for c in 0..CONNECTIONS {
        let mut client = connect(endpoints).await?;
        let lease = client
            .lease_grant(60, None)
            .await
            .context("grant the ceiling's lease")?
            .id();
        for l in 0..PER_CONNECTION {
            let key = format!("{prefix}/ceiling/{c}-{l}");
            let (client, stop) = (client.clone(), stop.clone());
            loops.spawn(pairs(client, lease, key, stop, counted_from));
        }
    }
    tokio::time::sleep_until(counted_from + measure_for).await;
    stop.store(true, Ordering::Relaxed);
    let (mut latencies, mut failed) = (Vec::new(), 0);
    while let Some(done) = loops.join_next().await {
        let (l, f) = done.context("a ceiling loop panicked")?;
        latencies.extend(l);
        failed += f;
    }
    Ok(Ceiling {
        pairs_per_s: latencies.len() as f64 / measure_for.as_secs_f64(),
        pair: Samples::new(latencies),
        failed,
        measured_for: measure_for,
    })
}

/// A client of its own (its own connection), with a bound on each request.
async fn connect(endpoints: &[String]) -> anyhow::Result<Client> {
    let opts = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(5))
        .with_timeout(Duration::from_secs(2));
    Client::connect(endpoints, Some(opts))
        .await
        .context("connect a ceiling client")
}

/// One loop: pairs back to back until `stop`; the latencies of those begun after
/// `counted_from` and ended before `stop`, and how many failed.
async fn pairs(
    mut client: Client,
    lease: i64,
    key: String,
    stop: Arc<AtomicBool>,
    counted_from: Instant,
) -> (Vec<Duration>, usize) {
    let (mut latencies, mut failed) = (Vec::new(), 0);
    while !stop.load(Ordering::Relaxed) {
        let t = Instant::now();
        let put = client
            .put(
                key.as_str(),
                VALUE,
                Some(PutOptions::new().with_lease(lease)),
            )
            .await;
        let ok = match put {
            Ok(_) => client.delete(key.as_str(), None).await.is_ok(),
            Err(_) => false,
        };
        if stop.load(Ordering::Relaxed) || t < counted_from {
            continue;
        }
        if ok {
            latencies.push(t.elapsed());
        } else {
            failed += 1;
        }
    }
    (latencies, failed)
}
