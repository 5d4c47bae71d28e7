//! What the rate-limit routes share: the `StoreDownGuard` every check goes through, the
//! header mode, the limits opened so far, and the open reservations.

use super::reservation_table::Reservations;
use crate::common::format_duration;
use crate::common::lock;
use crate::sidecar::header_mode::HeaderMode;
use crate::sidecar::problem::Problem;
use crate::sidecar::rate_settings::RateSettings;
use clusterlimit::{validate, Error, Limiter, RateLimit, StoreDownGuard};
use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

/// What the rate routes share: the guard, the header mode, and the limits opened so far.
pub struct RateApi {
    pub(super) guard: StoreDownGuard,
    pub(super) headers: HeaderMode,
    store_timeout: Duration,
    /// Opened limits, so a check costs no extra "does it exist" request and a limit used once
    /// is still answered by the policy while the store is down.
    opened: Mutex<HashMap<String, RateLimit>>,
    /// Reservations admitted and not settled yet (`reservations.rs`).
    pub(super) reservations: Reservations,
}

impl RateApi {
    /// The rate API with `settings`.
    pub fn new(settings: &RateSettings) -> RateApi {
        RateApi {
            guard: StoreDownGuard::new(settings.store_down).store_timeout(settings.store_timeout),
            headers: settings.headers,
            store_timeout: settings.store_timeout,
            opened: Mutex::new(HashMap::new()),
            reservations: Reservations::new(settings.max_reservations),
        }
    }

    /// The guard every check of the HTTP API goes through (its breaker is in `/metrics`).
    pub fn guard(&self) -> &StoreDownGuard {
        &self.guard
    }

    /// How long a rate route waits for the store (`rate_store_timeout`).
    pub(super) fn store_timeout(&self) -> Duration {
        self.store_timeout
    }

    /// Remembers an opened limit (the declared ones at start, each one a request opens).
    pub fn remember(&self, rl: RateLimit) {
        lock(&self.opened).insert(rl.name().to_string(), rl);
    }

    /// Opens `name` (cached). While the store (a sharded store's first cluster, which keeps
    /// every quota) is known down, a limit this sidecar never opened answers 503 at once
    /// rather than waiting for the store.
    pub(super) async fn open(&self, limiter: &Limiter, name: &str) -> Result<RateLimit, Problem> {
        validate::name(name).map_err(|e| Problem::from_lib(e, "name"))?;
        if let Some(rl) = lock(&self.opened).get(name).cloned() {
            return Ok(rl);
        }
        if self.guard.cluster_down(0) {
            return Err(Problem::unavailable(
                "store_unavailable",
                format!("the store is down and rate limit {name:?} was not used here before"),
            ));
        }
        self.fetch(limiter, name).await
    }

    /// Opens `name` reading its quota from the store now, so a quota changed by another
    /// sidecar or `clusterlimit rate set-quota` shows at once (the handles share their quota, so
    /// the cached one learns it too). The cached handle answers only while the store is known
    /// down.
    pub(super) async fn open_fresh(
        &self,
        limiter: &Limiter,
        name: &str,
    ) -> Result<RateLimit, Problem> {
        validate::name(name).map_err(|e| Problem::from_lib(e, "name"))?;
        if self.guard.cluster_down(0) {
            return self.open(limiter, name).await;
        }
        self.fetch(limiter, name).await
    }

    /// Reads `name` from the store within the store timeout, and remembers it.
    async fn fetch(&self, limiter: &Limiter, name: &str) -> Result<RateLimit, Problem> {
        let rl = self
            .bounded(limiter.open_rate_limit(name))
            .await?
            .map_err(|e| match e {
                Error::NotFound(_) => unknown(name),
                e => Problem::from_lib(e, "name"),
            })?;
        self.remember(rl.clone());
        Ok(rl)
    }

    /// `call` within the store timeout, else 503 `store_unavailable`.
    pub(super) async fn bounded<T>(&self, call: impl Future<Output = T>) -> Result<T, Problem> {
        tokio::time::timeout(self.store_timeout, call)
            .await
            .map_err(|_| {
                Problem::unavailable(
                    "store_unavailable",
                    format!(
                        "the store did not answer within {}",
                        format_duration(self.store_timeout)
                    ),
                )
            })
    }
}

pub(super) fn unknown(name: &str) -> Problem {
    Problem::not_found(format!(
        "rate limit {name:?} does not exist; PUT /v1/ratelimits/{name} with a quota creates it"
    ))
}
