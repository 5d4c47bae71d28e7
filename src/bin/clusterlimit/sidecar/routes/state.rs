//! What every route shares: the sidecar's state (one store session, the permit table, metrics,
//! the opened semaphores and the rate routes' state), and the bound on a route's store calls.

use super::permit_table::Table;
use super::rate_state::RateApi;
use crate::common::lock;
use crate::sidecar::metrics::Metrics;
use crate::sidecar::problem::Problem;
use clusterlimit::{validate, Error, Limiter, Semaphore, Status};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Shortest client TTL of an HTTP permit.
pub const MIN_TTL: Duration = Duration::from_millis(500);
/// Longest client TTL of an HTTP permit.
pub const MAX_TTL: Duration = Duration::from_secs(3600);
/// Longest wait one acquire request may ask for (clients long-poll again after a 429).
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);
/// Wait of an acquire request that gives no `timeout_ms`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound on the store call behind `/readyz`.
pub(super) const READY_TIMEOUT: Duration = Duration::from_secs(1);

/// What every handler shares: one store session, the permit table, metrics.
pub struct AppState {
    pub limiter: Limiter,
    pub table: Arc<Table>,
    pub metrics: Arc<Metrics>,
    pub permit_ttl: Duration,
    /// Bound on a route's store calls when the request gives none (`request_timeout`).
    pub store_timeout: Duration,
    /// Cancelled on SIGTERM/SIGINT: long-polls answer 503 and the server stops.
    pub shutdown: CancellationToken,
    /// Opened semaphores, so an acquire costs no extra "does it exist" request.
    opened: Mutex<HashMap<String, Semaphore>>,
    /// The adaptive semaphores of the config, opened at start; acquires on their names go
    /// through these handles, so their outcomes reach the controller.
    pub(super) adaptive: Mutex<BTreeMap<String, Semaphore>>,
    /// The per-member semaphores of the config, opened at start and kept for as long as the
    /// sidecar runs: while a handle lives, this sidecar counts as one member.
    per_member: Mutex<BTreeMap<String, Semaphore>>,
    /// The rate-limit routes' guard, header mode and opened limits.
    pub rate: RateApi,
}

pub type Shared = Arc<AppState>;

impl AppState {
    /// State for a sidecar on `limiter`; `permit_ttl` is the default client TTL,
    /// `store_timeout` bounds the store calls of a route that gives no timeout.
    pub fn new(
        limiter: Limiter,
        permit_ttl: Duration,
        store_timeout: Duration,
        rate: RateApi,
    ) -> Shared {
        let metrics = Arc::new(Metrics::new());
        Arc::new(AppState {
            limiter,
            table: Table::new(metrics.clone()),
            metrics,
            permit_ttl,
            store_timeout,
            shutdown: CancellationToken::new(),
            opened: Mutex::new(HashMap::new()),
            adaptive: Mutex::new(BTreeMap::new()),
            per_member: Mutex::new(BTreeMap::new()),
            rate,
        })
    }

    /// Keeps `sem`, an adaptive semaphore of the config, for the routes.
    pub fn declare_adaptive(&self, sem: Semaphore) {
        lock(&self.adaptive).insert(sem.name().to_string(), sem);
    }

    /// Keeps `sem`, a per-member semaphore of the config (this sidecar's membership).
    pub fn declare_per_member(&self, sem: Semaphore) {
        lock(&self.per_member).insert(sem.name().to_string(), sem);
    }

    /// Opens `name` (creating it with `capacity` if given); cached, since semaphores are never
    /// deleted. An adaptive or per-member semaphore of the config is always its handle of the
    /// config (it exists: `capacity` has nothing to create, and its controller sets the
    /// capacity).
    pub(super) async fn semaphore(
        &self,
        name: &str,
        capacity: Option<u32>,
    ) -> Result<Semaphore, Problem> {
        validate::name(name).map_err(|e| Problem::from_lib(e, "name"))?;
        if let Some(sem) = lock(&self.adaptive).get(name) {
            return Ok(sem.clone());
        }
        if let Some(sem) = lock(&self.per_member).get(name) {
            return Ok(sem.clone());
        }
        if capacity.is_none() {
            if let Some(sem) = self.cached(name) {
                return Ok(sem);
            }
        }
        let sem = match capacity {
            Some(cap) => self.limiter.semaphore(name, cap).await,
            None => self
                .limiter
                .open_semaphore(name)
                .await
                .map_err(|e| match e {
                    Error::NotFound(_) => Error::NotFound(name.to_string()),
                    e => e,
                }),
        }
        .map_err(|e| match e {
            Error::NotFound(_) => Problem::not_found(format!(
                "semaphore {name:?} does not exist; give \"capacity\" to create it"
            )),
            e => Problem::from_lib(e, "capacity"),
        })?;
        lock(&self.opened).insert(name.to_string(), sem.clone());
        Ok(sem)
    }

    /// `call` within the store timeout, else 503 `store_unavailable`: no route waits longer
    /// than it says on a silent store.
    pub(super) async fn bounded<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, Problem>>,
    ) -> Result<T, Problem> {
        let deadline = tokio::time::Instant::now() + self.store_timeout;
        bounded_by(deadline, self.store_timeout, call).await
    }

    /// The status of `name` (opening it if needed), within the store timeout.
    pub(super) async fn status_of(&self, name: &str) -> Result<Status, Problem> {
        let read = async {
            let sem = self.semaphore(name, None).await?;
            sem.status().await.map_err(|e| Problem::from_lib(e, "name"))
        };
        self.bounded(read).await
    }

    fn cached(&self, name: &str) -> Option<Semaphore> {
        lock(&self.opened).get(name).cloned()
    }

    /// One cheap store call under a short timeout: is the store answering our session?
    pub async fn store_healthy(&self) -> bool {
        let ok = matches!(
            tokio::time::timeout(READY_TIMEOUT, self.limiter.semaphores()).await,
            Ok(Ok(_))
        );
        self.metrics.store_up(ok);
        ok
    }
}

/// `call` by `deadline`, else 503 `store_unavailable` naming the `budget` the request had.
pub(super) async fn bounded_by<T>(
    deadline: tokio::time::Instant,
    budget: Duration,
    call: impl std::future::Future<Output = Result<T, Problem>>,
) -> Result<T, Problem> {
    tokio::time::timeout_at(deadline, call)
        .await
        .unwrap_or_else(|_| Err(store_silent(budget)))
}

/// 503 `store_unavailable`: the store did not answer within the request's `budget`.
pub(super) fn store_silent(budget: Duration) -> Problem {
    Problem::unavailable(
        "store_unavailable",
        format!("the store did not answer within {} ms", budget.as_millis()),
    )
    .retry_after(1)
}
