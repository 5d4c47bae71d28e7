//! The contenders, and what each replica puts in front of its calls: nothing, a cluster
//! semaphore on etcd (fixed capacity, or the adaptive one), or its own tower-acc limiter.
//! Every gate admits the same way: it waits at most the admission timeout for a permit (see
//! `Unloaded::admission`), and a call it does not admit in that time is a rejection.

use crate::flight::Flight;
use anyhow::Context as _;
use clusterlimit::adaptive::{Adaptive, Outcome};
use clusterlimit::{Error, Limiter, Semaphore};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;
use tower::{Service, ServiceExt as _};

/// One contender of a run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Contender {
    NoLimit,
    /// A cluster semaphore of this capacity; `label` says how it compares with the workers.
    Fixed {
        capacity: u32,
        label: &'static str,
    },
    /// tower-acc's default algorithm (Vegas), one limiter per replica.
    TowerAcc,
    /// clusterlimit's adaptive semaphore, one Limiter per replica, created with capacity
    /// `initial` (a guess it has to correct) and bounded by `max`.
    Ours {
        initial: u32,
        label: &'static str,
        algo: Algo,
        max: u32,
    },
}

/// Which of the library's adaptive algorithms ours runs (each with its default settings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algo {
    Gradient,
    Aimd,
}

impl Algo {
    pub fn name(self) -> &'static str {
        match self {
            Algo::Gradient => "gradient",
            Algo::Aimd => "AIMD",
        }
    }
}

/// The window issue 31's benchmark was specified with (the grid keeps it).
pub const WINDOW: Duration = Duration::from_millis(500);

/// Ours: the settings issue 31's benchmark was specified with (min 1, the 500 ms window), from
/// a first capacity, up to `max`.
fn adaptive(algo: Algo, initial: u32, max: u32) -> Adaptive {
    let base = match algo {
        Algo::Gradient => Adaptive::gradient(),
        Algo::Aimd => Adaptive::aimd(),
    };
    base.min(1).max(max).initial(initial).window(WINDOW)
}

impl Contender {
    /// Every contender, in the report's order, for a dependency of `workers` workers.
    pub fn all(workers: usize) -> Vec<Contender> {
        let w = u32::try_from(workers).unwrap_or(u32::MAX);
        vec![
            Contender::NoLimit,
            Contender::Fixed {
                capacity: w,
                label: "= workers",
            },
            Contender::Fixed {
                capacity: w * 2,
                label: "2× too high",
            },
            Contender::Fixed {
                capacity: (w / 2).max(1),
                label: "2× too low",
            },
            Contender::TowerAcc,
            // Started from a bad guess either way: it has to find the capacity itself.
            Contender::Ours {
                initial: (w / 4).max(1),
                label: "4× too low",
                algo: Algo::Gradient,
                max: 256,
            },
            Contender::Ours {
                initial: w * 4,
                label: "4× too high",
                algo: Algo::Gradient,
                max: 256,
            },
        ]
    }

    pub fn name(&self) -> String {
        match self {
            Contender::NoLimit => "no limit".to_string(),
            Contender::Fixed { capacity, label } => format!("fixed {capacity} ({label})"),
            Contender::TowerAcc => "tower-acc Vegas per replica".to_string(),
            Contender::Ours {
                initial,
                label,
                algo,
                ..
            } => {
                format!("ours: adaptive {} from {initial} ({label})", algo.name())
            }
        }
    }

    /// A short name for etcd prefixes and progress lines.
    pub fn slug(&self) -> String {
        match self {
            Contender::NoLimit => "none".to_string(),
            Contender::Fixed { capacity, .. } => format!("fixed-{capacity}"),
            Contender::TowerAcc => "tower-acc".to_string(),
            Contender::Ours { initial, algo, .. } => match algo {
                Algo::Gradient => format!("ours-{initial}"),
                Algo::Aimd => format!("ours-aimd-{initial}"),
            },
        }
    }

    /// Whether its replicas share one stored capacity (its in-flight sum is checked against it).
    pub fn is_cluster(&self) -> bool {
        matches!(self, Contender::Fixed { .. } | Contender::Ours { .. })
    }
}

/// The semaphore's name in each contender's own etcd prefix.
pub const SEMAPHORE: &str = "dep";

/// How a call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// 200 before the client's deadline.
    Success,
    /// The limiter did not admit it within the admission timeout.
    Rejected,
    /// The dependency answered 503 (its queue was full).
    Refused,
    /// No answer before the client's deadline.
    TimedOut,
    /// Anything else: a transport or store error (should not happen; logged in `ErrorLog`).
    Failed,
    /// Never sent: the harness was past the call's deadline before it could start it, or it
    /// already had its bound of calls outstanding (a library that does not answer must not
    /// make the bench itself grow without bound).
    NotSent,
}

/// The store and transport errors of a run: each counted once, the first few kept word for
/// word for the report.
#[derive(Default)]
pub struct ErrorLog(Mutex<(usize, Vec<String>)>);

/// Errors quoted in the report; the rest are only counted.
const ERRORS_KEPT: usize = 3;

impl ErrorLog {
    pub fn add(&self, what: String) {
        let mut e = self.0.lock().unwrap_or_else(|p| p.into_inner());
        e.0 += 1;
        if e.1.len() < ERRORS_KEPT {
            e.1.push(what);
        }
    }

    /// How many errors, and the first few.
    pub fn get(&self) -> (usize, Vec<String>) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// What the calls of one run share: where the dependency is, the timeouts, the in-flight count.
pub struct CallSetup {
    pub url: String,
    /// A call's deadline, from its scheduled time.
    pub client_timeout: Duration,
    /// The longest a call waits to be admitted.
    pub admission: Duration,
    pub flight: Arc<Flight>,
}

/// One replica's client and limiter.
pub struct Replica {
    client: reqwest::Client,
    gate: Gate,
    errors: Arc<ErrorLog>,
}

enum Gate {
    Open,
    Cluster {
        limiter: Limiter,
        sem: Semaphore,
    },
    /// Cloned per call: the clones share the limiter (its algorithm and semaphore).
    TowerAcc(Acc),
}

type Acc = tower_acc::ConcurrencyLimit<HttpCall, Observed<tower_acc::Vegas>>;

/// What every replica of a run is opened with.
pub struct Opening {
    pub contender: Contender,
    /// The contender's own etcd prefix.
    pub etcd_url: String,
    pub dependency_url: String,
    pub errors: Arc<ErrorLog>,
}

impl Opening {
    /// Replica `index`: its own HTTP client and, for a cluster contender, its own Limiter (one
    /// session). `limit` receives a tower-acc limiter's current limit.
    pub async fn replica(&self, index: usize, limit: Arc<AtomicUsize>) -> anyhow::Result<Replica> {
        let client = reqwest::Client::builder()
            .build()
            .context("build an HTTP client")?;
        let owner = format!("replica-{index}");
        let gate = match self.contender {
            Contender::NoLimit => Gate::Open,
            Contender::Fixed { capacity, .. } => {
                let limiter = crate::stores::limiter(&self.etcd_url, &owner).await?;
                let sem = limiter
                    .semaphore(SEMAPHORE, capacity)
                    .await
                    .context("open the fixed semaphore")?;
                Gate::Cluster { limiter, sem }
            }
            Contender::Ours {
                initial, algo, max, ..
            } => {
                let limiter = crate::stores::limiter(&self.etcd_url, &owner).await?;
                let sem = limiter
                    .adaptive_semaphore(SEMAPHORE, adaptive(algo, initial, max))
                    .await
                    .context("open the adaptive semaphore")?;
                Gate::Cluster { limiter, sem }
            }
            Contender::TowerAcc => {
                let inner = HttpCall {
                    client: client.clone(),
                    url: self.dependency_url.as_str().into(),
                    errors: self.errors.clone(),
                };
                let algorithm = Observed::new(tower_acc::Vegas::default(), limit);
                Gate::TowerAcc(tower_acc::ConcurrencyLimit::new(inner, algorithm))
            }
        };
        Ok(Replica {
            client,
            gate,
            errors: self.errors.clone(),
        })
    }
}

impl Replica {
    /// The replica's Limiter, if it has one.
    pub fn limiter(&self) -> Option<&Limiter> {
        match &self.gate {
            Gate::Cluster { limiter, .. } => Some(limiter),
            _ => None,
        }
    }

    /// The call scheduled at `scheduled`, made now (late if the harness is late): admission,
    /// the HTTP call, release. Returns how it ended and when its caller knew: at the answer,
    /// before the permit's release (which a caller need not wait for).
    pub async fn call(&self, setup: &CallSetup, scheduled: Instant) -> (Kind, Instant) {
        let deadline = scheduled + setup.client_timeout;
        let Some(admission) = deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .map(|left| left.min(setup.admission))
        else {
            return (Kind::TimedOut, Instant::now());
        };
        let started = Instant::now();
        let send = || send(&self.client, &setup.url, deadline, &self.errors);
        match &self.gate {
            Gate::Open => {
                let _in = setup.flight.enter(started);
                (send().await, Instant::now())
            }
            Gate::Cluster { sem, .. } => {
                let permit = match sem.acquire_timeout(admission).await {
                    Ok(p) => p,
                    Err(Error::Timeout | Error::NoPermits) => {
                        return (Kind::Rejected, Instant::now())
                    }
                    Err(e) => {
                        self.errors.add(format!("acquire: {e}"));
                        return (Kind::Failed, Instant::now());
                    }
                };
                let (kind, sent, answered) = {
                    let _in = setup.flight.enter(started);
                    let sent = Instant::now();
                    (send().await, sent, Instant::now())
                };
                // Only an adaptive semaphore uses the outcome; a fixed one ignores it.
                let outcome = match kind {
                    Kind::Success => Outcome::Success(answered - sent),
                    Kind::Refused | Kind::TimedOut => Outcome::Dropped,
                    Kind::Rejected | Kind::Failed | Kind::NotSent => Outcome::Ignore,
                };
                if let Err(e) = permit.release_with(outcome).await {
                    self.errors.add(format!("release: {e}"));
                }
                (kind, answered)
            }
            Gate::TowerAcc(acc) => {
                let mut acc = acc.clone();
                match tokio::time::timeout(admission, acc.ready()).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(kind)) => return (kind, Instant::now()),
                    Err(_) => return (Kind::Rejected, Instant::now()),
                }
                let _in = setup.flight.enter(started);
                let kind = acc.call(deadline).await.err().unwrap_or(Kind::Success);
                (kind, Instant::now())
            }
        }
    }
}

/// One GET of the dependency, answered by `deadline` or timed out.
async fn send(client: &reqwest::Client, url: &str, deadline: Instant, errors: &ErrorLog) -> Kind {
    match tokio::time::timeout_at(deadline, client.get(url).send()).await {
        Err(_) => Kind::TimedOut,
        Ok(Ok(resp)) if resp.status().is_success() => Kind::Success,
        Ok(Ok(resp)) if resp.status() == reqwest::StatusCode::SERVICE_UNAVAILABLE => Kind::Refused,
        Ok(Ok(resp)) => {
            errors.add(format!("the dependency answered {}", resp.status()));
            Kind::Failed
        }
        Ok(Err(e)) => {
            errors.add(format!("call the dependency: {e}"));
            Kind::Failed
        }
    }
}

/// The dependency as a tower service, for tower-acc: a request is the call's deadline, an
/// answer other than 200 is an error (tower-acc's default classifier counts it as overload).
#[derive(Clone)]
struct HttpCall {
    client: reqwest::Client,
    url: Arc<str>,
    errors: Arc<ErrorLog>,
}

impl Service<Instant> for HttpCall {
    type Response = ();
    type Error = Kind;
    type Future = Pin<Box<dyn Future<Output = Result<(), Kind>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Kind>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, deadline: Instant) -> Self::Future {
        let (client, url, errors) = (self.client.clone(), self.url.clone(), self.errors.clone());
        Box::pin(async move {
            match send(&client, &url, deadline, &errors).await {
                Kind::Success => Ok(()),
                other => Err(other),
            }
        })
    }
}

/// A tower-acc algorithm whose current limit the harness can read (the sum over replicas is
/// what the dependency may see in flight).
struct Observed<A> {
    inner: A,
    limit: Arc<AtomicUsize>,
}

impl<A: tower_acc::Algorithm> Observed<A> {
    fn new(inner: A, limit: Arc<AtomicUsize>) -> Observed<A> {
        limit.store(inner.max_concurrency(), Ordering::Relaxed);
        Observed { inner, limit }
    }
}

impl<A: tower_acc::Algorithm> tower_acc::Algorithm for Observed<A> {
    fn max_concurrency(&self) -> usize {
        self.inner.max_concurrency()
    }

    fn update(&mut self, rtt: Duration, num_inflight: usize, is_error: bool, is_canceled: bool) {
        self.inner.update(rtt, num_inflight, is_error, is_canceled);
        self.limit
            .store(self.inner.max_concurrency(), Ordering::Relaxed);
    }
}
