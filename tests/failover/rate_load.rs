//! A hot rate-limit key under load: several Limiters (each its own client behind its own
//! proxies), each with many concurrent callers checking one key, recording every admitted check
//! as an [`Admitted`] interval (call start and end, Unix ns) and every error apart.

use crate::cluster::{Cluster, REQUEST_TIMEOUT};
use crate::workload::{describe, Client, Rng};
use clusterlimit::testing::rate_history::{unix_ns, Admitted};
use clusterlimit::{Quota, RateLimit, RequestStats};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The contended rate limit and its one key.
pub const LIMIT: &str = "hot";
pub const KEY: &str = "k";
/// Upper bound on checks per caller, so a loop stays bounded whatever the clock does.
const MAX_CHECKS: usize = 200_000;
/// Longest pause after a denial: a caller comes back at least this often, so a freed slot
/// finds takers at once (the pause follows `retry_after` below this).
const MAX_DENIED_PAUSE: Duration = Duration::from_millis(50);
/// Pause after an error (a store that fails fast must not make callers spin).
const ERROR_PAUSE: Duration = Duration::from_millis(20);

/// A check may take at most this: `check_n` promises a decision or an error within twice the
/// request timeout; the margin is for scheduling on a loaded 2-core machine.
pub fn call_bound() -> Duration {
    REQUEST_TIMEOUT * 2 + Duration::from_secs(1)
}

/// A failed check, as its caller saw it.
#[derive(Clone, Debug)]
pub struct RateError {
    /// Unix ns when the call started.
    pub start: u64,
    /// Unix ns when the call returned (or was given up on).
    pub at: u64,
    pub error: String,
    /// The call outlived [`call_bound`].
    pub hung: bool,
}

/// What every caller saw.
#[derive(Default)]
pub struct RateLog {
    admitted: Mutex<Vec<Admitted>>,
    errors: Mutex<Vec<RateError>>,
    denied: Mutex<u64>,
    /// Longest check call seen (ns).
    longest: Mutex<u64>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl RateLog {
    pub fn admitted(&self) -> Vec<Admitted> {
        lock(&self.admitted).clone()
    }

    pub fn errors(&self) -> Vec<RateError> {
        lock(&self.errors).clone()
    }

    pub fn denied(&self) -> u64 {
        *lock(&self.denied)
    }

    pub fn longest_call(&self) -> Duration {
        Duration::from_nanos(*lock(&self.longest))
    }

    /// Adds an admission seen elsewhere (a child process's, read from its output).
    pub fn record(&self, admitted: Admitted) {
        lock(&self.admitted).push(admitted);
    }

    /// The first admitted check that started at or after `t` (Unix ns): when it returned.
    pub fn first_admitted_from(&self, t: u64) -> Option<u64> {
        lock(&self.admitted)
            .iter()
            .filter(|e| e.start >= t)
            .map(|e| e.end)
            .min()
    }

    fn call_took(&self, ns: u64) {
        let mut l = lock(&self.longest);
        *l = (*l).max(ns);
    }
}

/// The callers of a run.
pub struct RateLoad {
    pub clients: Vec<Arc<Client>>,
    pub log: Arc<RateLog>,
    stop: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl RateLoad {
    /// Connects `limiters` clients to every member (with leases of hot keys if `leases`), opens
    /// [`LIMIT`] with `quota` on each and starts `callers` checking tasks per client.
    pub async fn start(
        cluster: &Cluster,
        quota: Quota,
        (limiters, callers): (usize, usize),
        leases: bool,
        seed: u64,
    ) -> RateLoad {
        let all: Vec<usize> = (0..cluster.len()).collect();
        let log = Arc::new(RateLog::default());
        let stop = CancellationToken::new();
        let mut clients = Vec::new();
        let mut tasks = Vec::new();
        for i in 0..limiters {
            let name = format!("r{i}");
            let client = Arc::new(Client::connect_with(cluster, &name, &all, leases).await);
            let rl = open(&client, quota).await;
            for j in 0..callers {
                tasks.push(tokio::spawn(caller(
                    rl.clone(),
                    log.clone(),
                    stop.clone(),
                    seed.wrapping_add((i * callers + j) as u64 * 7919),
                )));
            }
            clients.push(client);
        }
        RateLoad {
            clients,
            log,
            stop,
            tasks,
        }
    }

    /// The requests and lease counts of every Limiter, summed.
    pub fn stats(&self) -> RequestStats {
        self.clients.iter().map(|c| c.limiter.stats()).sum()
    }

    /// Stops the callers (each after its call in progress, itself bounded) and closes every
    /// Limiter.
    pub async fn stop(&mut self) {
        self.stop.cancel();
        for t in self.tasks.drain(..) {
            if tokio::time::timeout(call_bound() * 2, t).await.is_err() {
                lock(&self.log.errors).push(RateError {
                    start: unix_ns(),
                    at: unix_ns(),
                    error: "a caller did not stop in time".into(),
                    hung: true,
                });
            }
        }
        for c in &self.clients {
            c.proxies.pass();
            let _ = tokio::time::timeout(REQUEST_TIMEOUT * 3, c.limiter.close()).await;
        }
    }
}

/// The contended limit on `client` (retried briefly: the cluster may still be settling).
async fn open(client: &Client, quota: Quota) -> RateLimit {
    let mut last = String::new();
    for _ in 0..10 {
        match client.limiter.rate_limit(LIMIT, quota).await {
            Ok(rl) => return rl,
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    panic!("client {}: rate limit {LIMIT}: {last}", client.name);
}

/// One caller: check the hot key again and again; after a denial pause its `retry_after`
/// (capped, plus a little jitter so callers do not wake in lockstep), after an error a moment.
async fn caller(rl: RateLimit, log: Arc<RateLog>, stop: CancellationToken, seed: u64) {
    let mut rng = Rng(seed | 1);
    for _ in 0..MAX_CHECKS {
        if stop.is_cancelled() {
            break;
        }
        let start = unix_ns();
        let outcome = tokio::time::timeout(call_bound(), rl.check(KEY)).await;
        let end = unix_ns();
        log.call_took(end.saturating_sub(start));
        let pause = match outcome {
            Ok(Ok(d)) if d.allowed => {
                lock(&log.admitted).push(Admitted {
                    start,
                    end,
                    cost: 1,
                });
                Duration::ZERO
            }
            Ok(Ok(d)) => {
                *lock(&log.denied) += 1;
                d.retry_after
                    .unwrap_or(Duration::from_millis(1))
                    .clamp(Duration::from_millis(1), MAX_DENIED_PAUSE)
                    + Duration::from_micros(rng.below(2000))
            }
            Ok(Err(e)) => {
                lock(&log.errors).push(RateError {
                    start,
                    at: end,
                    error: describe(&e),
                    hung: false,
                });
                ERROR_PAUSE
            }
            Err(_) => {
                lock(&log.errors).push(RateError {
                    start,
                    at: end,
                    error: "check hung".into(),
                    hung: true,
                });
                ERROR_PAUSE
            }
        };
        if !pause.is_zero() {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }
}
