//! Row 3, failover on a hot key: Limiters × callers closed loop on one key of a 3-member etcd
//! (its bucket emptied first, as in row 1) for `run`. At a third of it the bench SIGKILLs
//! etcd's leader and leaves it down (two members keep the quorum); at two thirds it kills one
//! Limiter in this process: its callers' tasks are aborted at once and it is dropped without
//! `close`, so its leases are abandoned as a SIGKILL would leave them. Each caller counts into
//! bins it shares with the bench, so an aborted caller keeps what it was admitted.

use crate::bins::{Bins, Exactness};
use crate::hammer::{drain, KEY};
use crate::support::{etcd::leader, EtcdCluster};
use anyhow::Context as _;
use clusterlimit::testing::rate_history::unix_ns;
use clusterlimit::{Limiter, Quota, RateLimit, RequestStats};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// Bound on one call: a check waits out an election, which takes about a second.
const CALL_BOUND: Duration = Duration::from_secs(10);
/// A caller's calls are bounded in count as well as in time.
const MAX_CALLS: u64 = 50_000_000;
/// After an error, a caller pauses this long before its next check.
const ERROR_PAUSE: Duration = Duration::from_millis(5);
/// The Limiter the bench kills.
const VICTIM: usize = 0;

/// One run's shape.
#[derive(Debug, Clone)]
pub struct Setup {
    /// The rate limit's name: a new one per run, so its key starts full.
    pub name: String,
    pub quota: u64,
    pub leases: bool,
    pub limiters: usize,
    /// Callers on each Limiter.
    pub callers: usize,
    pub run: Duration,
}

/// What one run measured.
#[derive(Debug)]
pub struct Outcome {
    pub secs: f64,
    pub admitted: u64,
    /// Checks that failed (the store unreachable) instead of answering.
    pub errors: u64,
    /// Admitted checks per 5 ms bin, by their end.
    pub series: Vec<u64>,
    /// Bins of the leader's kill, the Limiter's kill and the run's end.
    pub leader_kill: usize,
    pub limiter_kill: usize,
    pub end: usize,
    /// Store requests and lease counts of every Limiter (the killed one's until its kill).
    pub used: RequestStats,
    /// Units left in the killed Limiter's leases just before it was dropped.
    pub held_by_killed: u64,
    pub exactness: Exactness,
}

/// One caller's counts, shared with the bench.
struct Tally {
    bins: Bins,
    errors: u64,
}

type Shared = Arc<Mutex<Tally>>;
type Caller = (JoinHandle<anyhow::Result<()>>, Shared);

fn lock(t: &Shared) -> std::sync::MutexGuard<'_, Tally> {
    t.lock().unwrap_or_else(PoisonError::into_inner)
}

pub async fn run(etcd: &mut EtcdCluster, s: &Setup) -> anyhow::Result<Outcome> {
    let url = etcd.url("leases-failover");
    let quota = Quota::per_second(s.quota);
    let (mut limiters, mut limits) = connect(&url, s, quota).await?;
    let drained = drain(&url, &s.name, s.quota).await?;
    let mut before: Vec<RequestStats> = limiters.iter().map(Limiter::stats).collect();
    let (started, base) = (Instant::now(), unix_ns());
    let len_ns = u64::try_from(s.run.as_nanos()).unwrap_or(u64::MAX);
    let mut callers: Vec<Vec<Caller>> = (limits.iter())
        .map(|rl| spawn_callers(rl, s.callers, started + s.run, Bins::new(base, len_ns)))
        .collect();

    let leader_at = kill_leader(etcd, started + s.run / 3).await;
    tokio::time::sleep_until((started + s.run * 2 / 3).into()).await;
    let killed_at = unix_ns();
    let mine = callers.remove(VICTIM);
    let shared: Vec<Shared> = mine.iter().map(|(_, t)| t.clone()).collect();
    let (killed_used, held_by_killed) = kill(
        limiters.remove(VICTIM),
        limits.remove(VICTIM),
        mine,
        &before.remove(VICTIM),
    )
    .await?;

    let mut tallies = shared;
    for (task, tally) in callers.into_iter().flatten() {
        task.await.context("a caller task ended abnormally")??;
        tallies.push(tally);
    }
    let secs = started.elapsed().as_secs_f64();
    let survivors = limiters.iter().zip(&before);
    let used = survivors
        .map(|(l, b)| l.stats().since(b))
        .sum::<RequestStats>()
        + killed_used;
    for l in &limiters {
        l.close().await.context("close a Limiter")?;
    }
    let (bins, errors) = merged(&tallies, Bins::new(base, len_ns));
    Ok(Outcome {
        secs,
        admitted: bins.by_end().iter().sum(),
        errors,
        series: bins.by_end().to_vec(),
        leader_kill: bins.bin_at(leader_at),
        limiter_kill: bins.bin_at(killed_at),
        end: bins.bin_at(base + len_ns),
        used,
        held_by_killed,
        exactness: bins.exactness(&quota, drained),
    })
}

/// SIGKILLs the etcd member that leads at `at` (left down): the kill's Unix ns.
async fn kill_leader(etcd: &mut EtcdCluster, at: Instant) -> u64 {
    tokio::time::sleep_until(at.into()).await;
    let lead = leader(etcd).await;
    let killed_at = unix_ns();
    etcd.kill(lead);
    killed_at
}

/// Every caller's counts added into `bins`, and their failed checks.
fn merged(tallies: &[Shared], mut bins: Bins) -> (Bins, u64) {
    let mut errors = 0;
    for t in tallies {
        let t = lock(t);
        bins.merge(&t.bins);
        errors += t.errors;
    }
    (bins, errors)
}

/// The Limiters (leases as `s` says) and their handles of the rate limit.
async fn connect(
    url: &str,
    s: &Setup,
    quota: Quota,
) -> anyhow::Result<(Vec<Limiter>, Vec<RateLimit>)> {
    let (mut limiters, mut limits) = (Vec::new(), Vec::new());
    for i in 0..s.limiters {
        let l = Limiter::builder(url)
            .owner(format!("leases-failover-{i}"))
            .hot_key_leases(s.leases)
            .connect()
            .await
            .with_context(|| format!("connect Limiter {i} to {url}"))?;
        let rl = (l.rate_limit(&s.name, quota).await).context("open the rate limit")?;
        limits.push(rl);
        limiters.push(l);
    }
    Ok((limiters, limits))
}

fn spawn_callers(rl: &RateLimit, n: usize, stop: Instant, bins: Bins) -> Vec<Caller> {
    (0..n)
        .map(|_| {
            let tally = Arc::new(Mutex::new(Tally {
                bins: bins.clone(),
                errors: 0,
            }));
            let task = tokio::spawn(call(rl.clone(), stop, tally.clone()));
            (task, tally)
        })
        .collect()
}

/// Kills a Limiter as a SIGKILL would: its callers stop at once and it is dropped without
/// `close`, its leases abandoned. Returns its stats since `before` and the units its leases
/// had left just before the drop.
async fn kill(
    l: Limiter,
    rl: RateLimit,
    callers: Vec<Caller>,
    before: &RequestStats,
) -> anyhow::Result<(RequestStats, u64)> {
    for (task, _) in &callers {
        task.abort();
    }
    for (task, _) in callers {
        match task.await {
            Ok(ended) => ended?,
            Err(e) if e.is_cancelled() => {}
            Err(e) => return Err(e).context("a caller of the killed Limiter ended abnormally"),
        }
    }
    let held = l.leased_keys().iter().map(|k| k.units_left).sum();
    let used = l.stats().since(before);
    drop(rl);
    drop(l);
    Ok((used, held))
}

/// One caller: checks back to back until `stop`; a denied one sleeps its `retry_after` (at
/// most 5 ms), a failed one `ERROR_PAUSE`, counted.
async fn call(rl: RateLimit, stop: Instant, tally: Shared) -> anyhow::Result<()> {
    let mut calls = 0u64;
    while Instant::now() < stop && calls < MAX_CALLS {
        calls += 1;
        let start = unix_ns();
        let answer = tokio::time::timeout(CALL_BOUND, rl.check(KEY))
            .await
            .context("a check took over 10 s")?;
        match answer {
            Ok(d) if d.allowed => {
                lock(&tally).bins.record(start, unix_ns());
                tokio::task::yield_now().await;
            }
            Ok(d) => {
                let pause = d.retry_after.unwrap_or(Duration::from_millis(1));
                tokio::time::sleep(pause.min(Duration::from_millis(5))).await;
            }
            Err(_) => {
                lock(&tally).errors += 1;
                tokio::time::sleep(ERROR_PAUSE).await;
            }
        }
    }
    Ok(())
}
