//! Row 3, failover on a hot key: Limiters × callers closed loop on one key of a 3-member etcd
//! (its bucket emptied first, as in row 1) for `run`. At a third of it the bench SIGKILLs
//! etcd's leader and leaves it down (two members keep the quorum); at two thirds it SIGKILLs
//! a Limiter process: Limiter 0 runs in a process of its own (victim.rs; the others are
//! Limiters of this process), its callers the same `call` as the bench's own, so its leases
//! are abandoned mid-run as a crash leaves them. Each caller here counts into bins it shares
//! with the bench; the process prints its new counts every millisecond and the bench adds what
//! it read up to the kill. What its callers were admitted after its last print is not in the
//! exactness check: `unprinted` long (about a millisecond; more when it waited for a core),
//! about `killed_per_sec × unprinted` checks, which no one outside the process ever saw (as a
//! request a server admits and dies before serving).

use crate::bins::{Bins, Exactness};
use crate::hammer::{drain, KEY};
use crate::support::{etcd::leader, EtcdCluster};
use crate::victim::Victim;
use anyhow::{ensure, Context as _};
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
    /// Store requests and lease counts of every Limiter (the killed one's as of its last
    /// report before the kill).
    pub used: RequestStats,
    /// Units left in the killed Limiter's leases, as it reported them `held_age` before its
    /// kill (it reports every 50 ms).
    pub held_by_killed: u64,
    pub held_age: Duration,
    /// The killed Limiter's admitted checks a second (as printed) from the run's start to
    /// its kill: what one flush interval of its may hold.
    pub killed_per_sec: f64,
    /// From the killed Limiter's last print of its counts to its kill: its admissions then
    /// are in no count.
    pub unprinted: Duration,
    pub exactness: Exactness,
}

/// Where a caller counts its checks: bins shared with the bench in this process, what the
/// Limiter process prints for the bench in that one.
pub trait Tally: Send + 'static {
    /// An admitted check that ran from `start` to `end` (Unix ns).
    fn admitted(&mut self, start: u64, end: u64);
    /// A check that failed.
    fn failed(&mut self);
}

/// One caller's counts, shared with the bench.
struct Counts {
    bins: Bins,
    errors: u64,
}

impl Tally for Counts {
    fn admitted(&mut self, start: u64, end: u64) {
        self.bins.record(start, end);
    }

    fn failed(&mut self) {
        self.errors += 1;
    }
}

type Shared = Arc<Mutex<Counts>>;
type Caller = (JoinHandle<anyhow::Result<()>>, Shared);

/// A caller's counts, even if another caller panicked holding them.
pub fn lock<T>(t: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    t.lock().unwrap_or_else(PoisonError::into_inner)
}

pub async fn run(etcd: &mut EtcdCluster, s: &Setup) -> anyhow::Result<Outcome> {
    let url = etcd.url("leases-failover");
    let quota = Quota::per_second(s.quota);
    let mut victim = Victim::spawn(&url, &s.name, s.quota, s.leases, s.callers).await?;
    let (limiters, limits) = connect(&url, s, quota).await?;
    let drained = drain(&url, &s.name, s.quota).await?;
    let before: Vec<RequestStats> = limiters.iter().map(Limiter::stats).collect();
    let (started, base) = (Instant::now(), unix_ns());
    let len_ns = u64::try_from(s.run.as_nanos()).unwrap_or(u64::MAX);
    victim.go(base, len_ns).await?;
    let callers: Vec<Caller> = (limits.iter())
        .flat_map(|rl| spawn_callers(rl, s.callers, started + s.run, Bins::new(base, len_ns)))
        .collect();

    let leader_at = kill_leader(etcd, started + s.run / 3).await;
    tokio::time::sleep_until((started + s.run * 2 / 3).into()).await;
    let killed = victim.kill().await?;

    let mut tallies = Vec::new();
    for (task, tally) in callers {
        task.await.context("a caller task ended abnormally")??;
        tallies.push(tally);
    }
    let secs = started.elapsed().as_secs_f64();
    let survivors = limiters.iter().zip(&before);
    let used = survivors
        .map(|(l, b)| l.stats().since(b))
        .sum::<RequestStats>()
        + killed.used;
    for l in &limiters {
        l.close().await.context("close a Limiter")?;
    }
    let (mut bins, errors) = merged(&tallies, Bins::new(base, len_ns));
    let killed_admitted: u64 = killed.bins.by_end().iter().sum();
    let killed_secs = killed.at.saturating_sub(base) as f64 / 1e9;
    eprintln!(
        "leases bench: the Limiter process printed {killed_admitted} admitted checks before \
         its SIGKILL at +{killed_secs:.2} s, its last {:.2} ms before",
        killed.unprinted.as_secs_f64() * 1e3
    );
    ensure!(
        killed_admitted > 0,
        "the Limiter process printed no admitted check in the {killed_secs:.2} s before its \
         SIGKILL: its callers never got an answer? (its messages, if any, are above)"
    );
    bins.merge(&killed.bins);
    Ok(Outcome {
        secs,
        admitted: bins.by_end().iter().sum(),
        errors: errors + killed.failed,
        series: bins.by_end().to_vec(),
        leader_kill: bins.bin_at(leader_at),
        limiter_kill: bins.bin_at(killed.at),
        end: bins.bin_at(base + len_ns),
        used,
        held_by_killed: killed.held,
        held_age: killed.held_age,
        unprinted: killed.unprinted,
        killed_per_sec: killed_admitted as f64 / killed_secs.max(1e-9),
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
    // Limiter 0 is the process of its own (victim.rs).
    for i in 1..s.limiters {
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
            let tally = Arc::new(Mutex::new(Counts {
                bins: bins.clone(),
                errors: 0,
            }));
            let task = tokio::spawn(call(rl.clone(), stop, tally.clone()));
            (task, tally)
        })
        .collect()
}

/// One caller: checks back to back until `stop`; a denied one sleeps its `retry_after` (at
/// most 5 ms), a failed one `ERROR_PAUSE`, counted.
pub async fn call<T: Tally>(
    rl: RateLimit,
    stop: Instant,
    tally: Arc<Mutex<T>>,
) -> anyhow::Result<()> {
    let mut calls = 0u64;
    while Instant::now() < stop && calls < MAX_CALLS {
        calls += 1;
        let start = unix_ns();
        let answer = tokio::time::timeout(CALL_BOUND, rl.check(KEY))
            .await
            .context("a check took over 10 s")?;
        match answer {
            Ok(d) if d.allowed => {
                lock(&tally).admitted(start, unix_ns());
                tokio::task::yield_now().await;
            }
            Ok(d) => {
                let pause = d.retry_after.unwrap_or(Duration::from_millis(1));
                tokio::time::sleep(pause.min(Duration::from_millis(5))).await;
            }
            Err(_) => {
                lock(&tally).failed();
                tokio::time::sleep(ERROR_PAUSE).await;
            }
        }
    }
    Ok(())
}
