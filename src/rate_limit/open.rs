//! The Limiter's rate-limit methods: create or open a limit, list them, and the clock option.

use super::batch::rate_store;
use super::RateLimit;
use crate::error::{Error, Result};
use crate::limiter::Limiter;
use crate::rate::Quota;
use crate::validate;

impl Limiter {
    /// Creates the rate limit `name` with `quota` if absent, or opens it.
    ///
    /// Errors: `InvalidArgument` for a bad name or quota, `QuotaMismatch` if it exists with
    /// another quota (open it with [`open_rate_limit`](Limiter::open_rate_limit), change it
    /// with [`RateLimit::set_quota`]). One store request. Cancel-safe (creation is atomic).
    pub async fn rate_limit(&self, name: &str, quota: Quota) -> Result<RateLimit> {
        validate::name(name)?;
        quota.validate()?;
        self.open(name, Some(quota)).await
    }

    /// Opens an existing rate limit whatever its quota; `NotFound` if it does not exist.
    pub async fn open_rate_limit(&self, name: &str) -> Result<RateLimit> {
        validate::name(name)?;
        self.open(name, None).await
    }

    /// Names of every rate limit in the store (under this URL's prefix), sorted.
    pub async fn rate_limits(&self) -> Result<Vec<String>> {
        self.inner.check_open()?;
        let store = rate_store(&self.inner)?;
        self.inner.closed_or_result(store.limits().await)
    }

    async fn open(&self, name: &str, quota: Option<Quota>) -> Result<RateLimit> {
        self.inner.check_open()?;
        let store = rate_store(&self.inner)?;
        let encoded = quota.map(|q| q.encode());
        let stored = store.ensure_limit(name, encoded.as_deref()).await;
        let stored = self.inner.closed_or_result(stored)?;
        let found = Quota::decode(&stored.value)?;
        if let Some(requested) = quota.filter(|q| *q != found) {
            return Err(Error::QuotaMismatch {
                stored: Box::new(found),
                requested: Box::new(requested),
            });
        }
        let shared = self.inner.rates.limit(name, found, stored.version);
        Ok(RateLimit::new(self.inner.clone(), shared))
    }
}
