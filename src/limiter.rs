//! `Limiter`: a connection to one store with one session, and the factory of semaphores,
//! adaptive semaphores and rate limits (every method of it is here; what they start lives in
//! `semaphore.rs`, `adaptive/`, `rate_limit/`).

use crate::adaptive::config::Adaptive;
use crate::backend::Backend;
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::limiter_builder::LimiterBuilder;
use crate::limiter_inner::LimiterInner;
use crate::rate::{Decision, Quota};
use crate::rate_limit::batch::rate_store;
use crate::rate_limit::check_all::{self, KeyCheck};
use crate::rate_limit::handle::RateLimit;
use crate::release::Releaser;
use crate::semaphore::Semaphore;
use crate::stats::RequestStats;
use crate::validate;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

pub use crate::timing::{
    DEFAULT_REQUEST_TIMEOUT, DEFAULT_SESSION_TTL, MAX_REQUEST_TIMEOUT, MIN_SESSION_TTL,
};

/// A handle to a store with one session (an etcd lease, a ZooKeeper session, or an in-process
/// session for `memory://`). Every permit taken through it belongs to that session, so when the
/// process dies, its permits come back within the session TTL.
///
/// Cheap to clone (`Arc` inside), `Send + Sync`.
///
/// ```
/// # async fn f() -> clusterlimit::Result<()> {
/// let limiter = clusterlimit::Limiter::connect("memory://docs").await?;
/// let exports = limiter.semaphore("nightly-export", 4).await?;
/// let permit = exports.acquire().await?;
/// println!("export slot taken, fencing token {}", permit.fencing_token());
/// permit.release().await?;
/// limiter.close().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Limiter {
    pub(crate) inner: Arc<LimiterInner>,
}

impl Limiter {
    /// Connects with default options. See [`LimiterBuilder`] for the URL forms.
    ///
    /// Cancel-safe: dropping the future leaves nothing behind (a half-made session expires).
    pub async fn connect(url: &str) -> Result<Limiter> {
        Self::builder(url).connect().await
    }

    /// Starts a builder for options.
    pub fn builder(url: &str) -> LimiterBuilder {
        LimiterBuilder::new(url)
    }

    /// Wraps a custom [`Backend`].
    pub fn from_backend(backend: Arc<dyn Backend>, owner: impl Into<String>) -> Result<Limiter> {
        Self::wrap(
            backend,
            owner.into(),
            Clock::system(),
            crate::timing::DEFAULT_REQUEST_TIMEOUT,
        )
    }

    pub(crate) fn wrap(
        backend: Arc<dyn Backend>,
        owner: String,
        clock: Clock,
        request_timeout: Duration,
    ) -> Result<Limiter> {
        validate::owner(&owner)?;
        let handle = tokio::runtime::Handle::try_current()
            .map_err(|_| Error::invalid("clusterlimit needs a Tokio runtime"))?;
        let releaser = Releaser::spawn(backend.clone(), &handle);
        backend.set_orphan_sink(releaser.orphan_sink());
        let mut inner = LimiterInner::new(backend, releaser, owner, handle);
        inner.clock = clock;
        inner.request_timeout = request_timeout;
        Ok(Limiter {
            inner: Arc::new(inner),
        })
    }

    /// Creates the semaphore `name` with `capacity` if absent, or opens it.
    ///
    /// Errors: `InvalidArgument` for a bad name or capacity, `CapacityMismatch` if it exists
    /// with another capacity. Cancel-safe (creation is atomic; a dropped call either created
    /// the semaphore or not).
    pub async fn semaphore(&self, name: &str, capacity: u32) -> Result<Semaphore> {
        validate::name(name)?;
        validate::capacity(capacity)?;
        self.inner.check_open()?;
        let ensured = self
            .inner
            .backend
            .ensure_semaphore(name, Some(capacity))
            .await;
        self.inner.closed_or_result(ensured)?;
        Ok(Semaphore::new(self.inner.clone(), name))
    }

    /// Opens an existing semaphore whatever its capacity; `NotFound` if it does not exist.
    /// Cancel-safe.
    pub async fn open_semaphore(&self, name: &str) -> Result<Semaphore> {
        validate::name(name)?;
        self.inner.check_open()?;
        let ensured = self.inner.backend.ensure_semaphore(name, None).await;
        self.inner.closed_or_result(ensured)?;
        Ok(Semaphore::new(self.inner.clone(), name))
    }

    /// Sets the capacity of `name` for every client, creating the semaphore with it if absent:
    /// what `clusterlimit set-capacity` and the sidecar's `PUT /v1/semaphores/{name}` do.
    ///
    /// Shrinking never revokes current holders; new grants wait until usage fits. If another
    /// client creates the semaphore at the same moment with another capacity, ours is set over
    /// it (last writer wins). Returns [`CapacityChange::Set`] also when the capacity already
    /// was `capacity`.
    ///
    /// Errors: `InvalidArgument` for a bad name or capacity (checked before any store request).
    /// Cancel-safe step by step: a dropped call leaves the semaphore absent, created with
    /// `capacity`, or as it was with or without our capacity set (each change is atomic).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> clusterlimit::Result<()> {
    /// use clusterlimit::{CapacityChange, Limiter};
    /// let limiter = Limiter::connect("memory://set-capacity-doc").await?;
    /// assert_eq!(limiter.set_capacity("exports", 4).await?, CapacityChange::Created);
    /// assert_eq!(limiter.set_capacity("exports", 2).await?, CapacityChange::Set);
    /// assert_eq!(limiter.open_semaphore("exports").await?.status().await?.capacity, 2);
    /// # Ok(()) }
    /// ```
    pub async fn set_capacity(&self, name: &str, capacity: u32) -> Result<CapacityChange> {
        validate::name(name)?;
        validate::capacity(capacity)?;
        match self.open_semaphore(name).await {
            Ok(sem) => sem
                .set_capacity(capacity)
                .await
                .map(|()| CapacityChange::Set),
            Err(Error::NotFound(_)) => match self.semaphore(name, capacity).await {
                Ok(_) => Ok(CapacityChange::Created),
                // Created concurrently with another capacity: set ours, last writer wins.
                Err(Error::CapacityMismatch { .. }) => {
                    let sem = self.open_semaphore(name).await?;
                    sem.set_capacity(capacity)
                        .await
                        .map(|()| CapacityChange::Set)
                }
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        }
    }

    /// Names of every semaphore in the store (under this URL's prefix), sorted. Cancel-safe.
    pub async fn semaphores(&self) -> Result<Vec<String>> {
        self.inner.check_open()?;
        let names = self.inner.backend.list().await;
        self.inner.closed_or_result(names)
    }

    /// Owner label recorded with this Limiter's permits.
    pub fn owner(&self) -> &str {
        &self.inner.owner
    }

    /// Requests sent to the store so far, by kind, and the state of background removals.
    pub fn stats(&self) -> RequestStats {
        let removals = self.inner.releaser.counters();
        RequestStats {
            pending_removals: removals.pending(),
            removal_session_ends: removals.sessions_ended(),
            rate_batches: self.inner.rate_counts.batches.load(Relaxed),
            rate_local_answers: self.inner.rate_counts.local_answers.load(Relaxed),
            ..self.inner.backend.stats()
        }
    }

    /// Creates the rate limit `name` with `quota` if absent, or opens it.
    ///
    /// Errors: `InvalidArgument` for a bad name or quota, `QuotaMismatch` if it exists with
    /// another quota (open it with [`open_rate_limit`](Limiter::open_rate_limit), change it
    /// with [`RateLimit::set_quota`]). One store request. Cancel-safe (creation is atomic).
    pub async fn rate_limit(&self, name: &str, quota: Quota) -> Result<RateLimit> {
        validate::name(name)?;
        quota.validate()?;
        self.open_rate(name, Some(quota)).await
    }

    /// Opens an existing rate limit whatever its quota; `NotFound` if it does not exist.
    pub async fn open_rate_limit(&self, name: &str) -> Result<RateLimit> {
        validate::name(name)?;
        self.open_rate(name, None).await
    }

    /// Names of every rate limit in the store (under this URL's prefix), sorted.
    pub async fn rate_limits(&self) -> Result<Vec<String>> {
        self.inner.check_open()?;
        let store = rate_store(&self.inner)?;
        self.inner.closed_or_result(store.limits().await)
    }

    async fn open_rate(&self, name: &str, quota: Option<Quota>) -> Result<RateLimit> {
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

    /// Checks several keys, of one or several rate limits of this Limiter, all or nothing:
    /// every check is admitted (and consumed) in one atomic store write, or none is, and then
    /// nothing is consumed.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> clusterlimit::Result<()> {
    /// use clusterlimit::{KeyCheck, Limiter, Quota};
    /// let limiter = Limiter::connect("memory://check-all-doc").await?;
    /// let per_user = limiter.rate_limit("per-user", Quota::per_second(10)).await?;
    /// let global = limiter.rate_limit("global", Quota::per_second(1)).await?;
    /// let ds = limiter
    ///     .check_all(&[KeyCheck::new(&per_user, "user-42", 1), KeyCheck::new(&global, "all", 1)])
    ///     .await?;
    /// assert!(ds.iter().all(|d| d.allowed));
    /// let ds = limiter
    ///     .check_all(&[KeyCheck::new(&per_user, "user-42", 1), KeyCheck::new(&global, "all", 1)])
    ///     .await?;
    /// assert!(ds.iter().all(|d| !d.allowed)); // global is spent, so user-42 is not charged
    /// assert_eq!(ds[0].remaining, 9);
    /// # Ok(()) }
    /// ```
    ///
    /// Returns one decision per check, in order. When any is denied, all are: the ones that
    /// would have passed say `allowed: false`, their `remaining` as it is, and the longest
    /// `retry_after` of the denials. Checks of the same key are decided in order, in one write.
    ///
    /// Errors: `InvalidArgument` for no checks, a bad key or cost, or a limit of another
    /// Limiter; the rest as [`RateLimit::check_n`]. Costs: a denial the known states prove
    /// takes no request; calls made while this Limiter's previous `check_all` write is in
    /// flight go together in the next one (decided in arrival order, all or nothing each), so
    /// concurrent calls sharing a hot key cost one request per batch, one more per conflict.
    pub async fn check_all(&self, checks: &[KeyCheck<'_>]) -> Result<Vec<Decision>> {
        check_all::run(self, checks).await
    }

    /// Opens the adaptive semaphore `name`, creating it with `config`'s initial capacity if it
    /// does not exist: a cluster semaphore whose capacity follows the outcomes its holders
    /// report ([`Permit::release_with`](crate::Permit::release_with)).
    ///
    /// Every Limiter that has it open sums its holders' outcomes per window and announces the
    /// sum; one of them at a time (the holder of the semaphore `<name>.controller`, taken over
    /// within a session TTL when it dies) merges the sums, takes one step of `config`'s
    /// algorithm and stores the new capacity. The capacity stays within `config`'s bounds; a
    /// change is an ordinary live capacity change (holders are never revoked). The controller
    /// uses its own `config`: give every Limiter the same one. Opening the same name again in
    /// this Limiter shares the first one's window and task; they stop when the last handle is
    /// dropped or the Limiter closes.
    ///
    /// Errors: `InvalidArgument` for a bad name (at most
    /// [`MAX_NAME_LEN`](crate::MAX_NAME_LEN) − 11 characters, room for `.controller`) or
    /// setting, checked before any store request.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> clusterlimit::Result<()> {
    /// use clusterlimit::adaptive::{Adaptive, Outcome};
    /// use std::time::Duration;
    /// let limiter = clusterlimit::Limiter::connect("memory://adaptive-doc").await?;
    /// let config = Adaptive::gradient().min(2).max(100).initial(10);
    /// let payments = limiter.adaptive_semaphore("payments-api", config).await?;
    /// let permit = payments.acquire().await?;
    /// // ... call the payments API ...
    /// permit.release_with(Outcome::Success(Duration::from_millis(40))).await?;
    /// assert_eq!(payments.status().await?.capacity, 10); // until the first window's step
    /// # Ok(()) }
    /// ```
    pub async fn adaptive_semaphore(&self, name: &str, config: Adaptive) -> Result<Semaphore> {
        crate::adaptive::open::open(self, name, config).await
    }

    /// Ends the session: every permit of this Limiter is released at once (one request on
    /// etcd: the lease is revoked), its permits report lost, waits fail with `Closed`, and later
    /// calls fail with `Closed`. Calling it again does nothing.
    ///
    /// Cancel-safe in effect: once started, the session is marked closed; if the revoke does not
    /// reach the store, the TTL frees the permits.
    pub async fn close(&self) -> Result<()> {
        if self.inner.mark_closed() {
            return Ok(());
        }
        self.inner.backend.close().await
    }
}

/// What [`Limiter::set_capacity`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapacityChange {
    /// The semaphore was absent: it was created with the capacity given.
    Created,
    /// The semaphore existed (or was just created by another client): its capacity is now the
    /// one given, whether or not it was before.
    Set,
}
