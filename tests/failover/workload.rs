//! Contending workers: each its own Limiter (its own session) reaching the cluster through its
//! own fault proxies, taking permits of random weight for random hold times and recording
//! every grant in the history.

use crate::cluster::{Cluster, REQUEST_TIMEOUT, TTL};
use crate::history::{Grant, Wait, Window};
use crate::support::ProxyGroup;
use clusterlimit::{Error, Limiter, Permit, Semaphore};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Capacity of the contended semaphore.
pub const CAPACITY: u32 = 3;
/// The prefix (etcd) or chroot (ZooKeeper) every client of the suite uses.
pub const NAMESPACE: &str = "failover";
/// Name of the contended semaphore.
pub const SEMAPHORE: &str = "jobs";
/// Weights a worker draws from (mixed: mostly 1, sometimes 2).
const WEIGHTS: [u32; 3] = [1, 1, 2];
/// How long a worker waits for a permit before giving up on one attempt.
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(4);
/// A call that takes longer than this has hung: the acquire timeout, plus the removal of the
/// entry and retries of the requests around it, each bounded by the request timeout.
pub fn hang_bound() -> Duration {
    ACQUIRE_TIMEOUT + 3 * REQUEST_TIMEOUT + Duration::from_secs(1)
}
/// Upper bound on attempts per worker, so the loop stays bounded whatever the clock does.
const MAX_ATTEMPTS: usize = 100_000;

/// A failed call seen by a holder (expected during outages; hangs are not).
#[derive(Clone, Debug)]
pub struct Failure {
    pub holder: String,
    pub error: String,
    /// The call outlived [`hang_bound`].
    pub hang: bool,
}

/// What the holders of a run saw, shared by the workers.
#[derive(Default)]
pub struct Log {
    grants: Mutex<Vec<Grant>>,
    failures: Mutex<Vec<Failure>>,
    waits: Mutex<Vec<Wait>>,
    windows: Mutex<Vec<Window>>,
}

impl Log {
    pub fn grant(&self, g: Grant) {
        lock(&self.grants).push(g);
    }

    pub fn fail(&self, holder: &str, error: String, hang: bool) {
        lock(&self.failures).push(Failure {
            holder: holder.to_string(),
            error,
            hang,
        });
    }

    /// Records one acquire call of a worker (for the liveness judge).
    pub fn wait(&self, holder: &str, start: Instant, granted: bool) {
        lock(&self.waits).push(Wait {
            holder: holder.to_string(),
            start,
            end: Instant::now(),
            granted,
        });
    }

    /// Records a fault a scenario injected, from `start` until now (healed, or the store is
    /// whole again). Returns now.
    pub fn fault(&self, what: &str, start: Instant) -> Instant {
        let end = Instant::now();
        lock(&self.windows).push(Window {
            what: what.to_string(),
            start,
            end,
        });
        end
    }

    pub fn waits(&self) -> Vec<Wait> {
        lock(&self.waits).clone()
    }

    pub fn windows(&self) -> Vec<Window> {
        lock(&self.windows).clone()
    }

    pub fn grants(&self) -> Vec<Grant> {
        lock(&self.grants).clone()
    }

    pub fn failures(&self) -> Vec<Failure> {
        lock(&self.failures).clone()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A client of the suite: a Limiter of its own behind its own proxies to every member.
pub struct Client {
    pub name: String,
    pub limiter: Limiter,
    pub proxies: ProxyGroup,
}

impl Client {
    /// Connects a client named `name` through new proxies to the given members.
    pub async fn connect(cluster: &Cluster, name: &str, members: &[usize]) -> Client {
        Client::connect_with(cluster, name, members, false).await
    }

    /// [`Client::connect`], with leases of hot rate-limit keys on or off
    /// (`LimiterBuilder::hot_key_leases`).
    pub async fn connect_with(
        cluster: &Cluster,
        name: &str,
        members: &[usize],
        leases: bool,
    ) -> Client {
        let addrs = cluster.member_addrs();
        let upstreams: Vec<_> = members.iter().map(|&m| addrs[m]).collect();
        let proxies = ProxyGroup::start(&upstreams);
        let url = cluster.url_via(&proxies, NAMESPACE);
        let mut last = String::new();
        // The cluster may still be settling (a restart): a few bounded attempts.
        for _ in 0..10 {
            match Limiter::builder(&url)
                .owner(name)
                .session_ttl(TTL)
                .request_timeout(REQUEST_TIMEOUT)
                .hot_key_leases(leases)
                .connect()
                .await
            {
                Ok(limiter) => {
                    return Client {
                        name: name.to_string(),
                        limiter,
                        proxies,
                    }
                }
                Err(e) => last = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        panic!("client {name} cannot connect to {url}: {last}");
    }

    /// The contended semaphore (retried briefly: its first use writes the capacity).
    pub async fn semaphore(&self, name: &str, capacity: u32) -> Semaphore {
        let mut last = String::new();
        for _ in 0..10 {
            match self.limiter.semaphore(name, capacity).await {
                Ok(s) => return s,
                Err(e) => last = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        panic!("client {}: semaphore {name}: {last}", self.name);
    }
}

/// Records one held permit into `log`: holds it until `hold` passes or `lost()` fires, then
/// releases it (bounded). Returns whether it was lost.
pub async fn hold_and_record(
    log: &Log,
    holder: &str,
    permit: Permit,
    granted_at: Instant,
    hold: Duration,
) -> bool {
    let lost = tokio::select! {
        _ = tokio::time::sleep(hold) => false,
        _ = permit.lost() => true,
    };
    let work_end = Instant::now();
    let weight = permit.permits();
    let token = permit.fencing_token();
    let released_at = if lost {
        drop(permit);
        None
    } else {
        match tokio::time::timeout(hang_bound(), permit.release()).await {
            Ok(Ok(())) => Some(Instant::now()),
            Ok(Err(e)) => {
                log.fail(holder, format!("release: {e}"), false);
                None
            }
            Err(_) => {
                log.fail(holder, "release hung".into(), true);
                None
            }
        }
    };
    log.grant(Grant {
        holder: holder.to_string(),
        weight,
        token,
        granted_at,
        work_end,
        released_at,
        lost,
    });
    lost
}

/// Eight or more contending workers on [`SEMAPHORE`].
pub struct Workload {
    pub clients: Vec<Arc<Client>>,
    /// The members the workers reach.
    pub members: Vec<usize>,
    pub log: Arc<Log>,
    /// The run's seed, for a scenario's own random choices.
    pub seed: u64,
    /// Clients a scenario adds that stay open until the end of the run, like the workers: their
    /// entries count in the live-session leftover check.
    extras: Mutex<Vec<Arc<Client>>>,
    stop: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl Workload {
    /// Connects `workers` clients (each to every member, through its own proxies) and starts
    /// them contending.
    pub async fn start(
        cluster: &Cluster,
        members: &[usize],
        workers: usize,
        seed: u64,
    ) -> Workload {
        let log = Arc::new(Log::default());
        let stop = CancellationToken::new();
        let mut clients = Vec::new();
        let mut tasks = Vec::new();
        for i in 0..workers {
            let client = Arc::new(Client::connect(cluster, &format!("w{i}"), members).await);
            let sem = client.semaphore(SEMAPHORE, CAPACITY).await;
            tasks.push(tokio::spawn(work(
                client.name.clone(),
                sem,
                log.clone(),
                stop.clone(),
                seed.wrapping_add(i as u64 * 7919),
            )));
            clients.push(client);
        }
        Workload {
            clients,
            members: members.to_vec(),
            log,
            seed,
            extras: Mutex::new(Vec::new()),
            stop,
            tasks,
        }
    }

    /// Sets every worker's proxies at once (a fault for all clients).
    pub fn each_proxy(&self, f: impl Fn(&ProxyGroup)) {
        for c in &self.clients {
            f(&c.proxies);
        }
    }

    /// Keeps `client` open until [`Workload::close`], like a worker.
    pub fn adopt(&self, client: Arc<Client>) {
        lock(&self.extras).push(client);
    }

    /// Names of the clients whose sessions live until [`Workload::close`].
    pub fn live_owners(&self) -> Vec<String> {
        let mut names: Vec<String> = self.clients.iter().map(|c| c.name.clone()).collect();
        names.extend(lock(&self.extras).iter().map(|c| c.name.clone()));
        names
    }

    /// Stops the workers: each finishes the permit it holds; a wait in progress is cancelled
    /// (its entry is removed in the background). The Limiters stay open.
    pub async fn stop_workers(&mut self) {
        self.stop.cancel();
        for t in self.tasks.drain(..) {
            if tokio::time::timeout(hang_bound() * 2, t).await.is_err() {
                self.log
                    .fail("workload", "a worker did not stop in time".into(), true);
            }
        }
    }

    /// Closes every Limiter (workers and adopted clients).
    pub async fn close(self) -> Arc<Log> {
        let extras = std::mem::take(&mut *lock(&self.extras));
        for c in self.clients.iter().chain(extras.iter()) {
            c.proxies.pass();
            let _ = tokio::time::timeout(REQUEST_TIMEOUT * 3, c.limiter.close()).await;
        }
        self.log
    }
}

/// One worker: acquire a random weight, hold it a random 5–40 ms (or until lost), release;
/// on an error back off 50 ms and go on.
async fn work(name: String, sem: Semaphore, log: Arc<Log>, stop: CancellationToken, seed: u64) {
    let mut rng = Rng(seed | 1);
    for _ in 0..MAX_ATTEMPTS {
        if stop.is_cancelled() {
            break;
        }
        let weight = WEIGHTS[rng.below(WEIGHTS.len() as u64) as usize];
        let acquire = sem.acquire_many_timeout(weight, ACQUIRE_TIMEOUT);
        let start = Instant::now();
        let outcome = tokio::select! {
            _ = stop.cancelled() => {
                log.wait(&name, start, false);
                break;
            }
            r = tokio::time::timeout(hang_bound(), acquire) => r,
        };
        log.wait(&name, start, matches!(outcome, Ok(Ok(_))));
        match outcome {
            Ok(Ok(permit)) => {
                let granted_at = Instant::now();
                let hold = Duration::from_millis(5 + rng.below(36));
                hold_and_record(&log, &name, permit, granted_at, hold).await;
            }
            Ok(Err(e)) => {
                log.fail(&name, describe(&e), false);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(_) => log.fail(&name, "acquire hung".into(), true),
        }
    }
}

/// A short, stable name for an error, for counting by kind.
pub fn describe(e: &Error) -> String {
    match e {
        Error::Timeout => "Timeout".into(),
        Error::SessionLost => "SessionLost".into(),
        Error::Closed => "Closed".into(),
        Error::NoPermits => "NoPermits".into(),
        // Store errors carry the client library's whole chain: keep the gist, for counting.
        other => {
            let text = other.to_string();
            let gist = [
                "unavailable",
                "Timeout expired",
                "cancelled",
                "connection reset",
                "transport error",
                "did not answer",
            ]
            .into_iter()
            .find(|k| text.contains(k));
            match gist {
                Some(k) => format!("store: {k}"),
                None => text.chars().take(80).collect(),
            }
        }
    }
}

/// xorshift64: reproducible randomness without a dependency; the seed is printed per run.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}
