//! The layer, its builder and the fallback choices.

use super::admit::Policy;
use super::classify::DefaultClassifier;
use super::fallback::Fallback;
use super::flows::DefaultFlow;
use super::service::ClusterConcurrencyLimit;
use crate::error::{Error, Result};
use crate::semaphore::Semaphore;
use crate::store_down::breaker::StoreHealth;
use crate::store_down::policy::StoreDownPolicy;
use crate::validate;
use std::sync::Arc;
use std::time::Duration;

/// Default [`acquire_timeout`](ClusterConcurrencyLimitLayerBuilder::acquire_timeout): a request
/// waits at most this long for its permit.
pub const DEFAULT_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(1);
/// Default [`store_retry_interval`](ClusterConcurrencyLimitLayerBuilder::store_retry_interval).
pub const DEFAULT_STORE_RETRY_INTERVAL: Duration = Duration::from_secs(1);
/// Default [`retry_after`](ClusterConcurrencyLimitLayerBuilder::retry_after) hint of a rejection.
pub const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);

/// A [`tower_layer::Layer`] that wraps a service in [`ClusterConcurrencyLimit`]: every request
/// holds permits of one cluster-wide [`Semaphore`] while it runs. See the [module
/// docs](crate::tower) for where the permit is taken and for how long.
///
/// Cheap to clone. Every service made by one layer (and its clones) shares its store-health
/// state, so they stop asking a down store together.
///
/// ```
/// # async fn f(limiter: clusterlimit::Limiter) -> clusterlimit::Result<()> {
/// use clusterlimit::tower::ClusterConcurrencyLimitLayer;
/// let layer = ClusterConcurrencyLimitLayer::new(limiter.semaphore("payments-api", 20).await?);
/// let service = tower::ServiceBuilder::new()
///     .layer(layer)
///     .service_fn(|req: u32| async move { Ok::<_, std::io::Error>(req * 2) });
/// # let _ = service;
/// # Ok(()) }
/// ```
pub struct ClusterConcurrencyLimitLayer<C = DefaultClassifier, F = DefaultFlow> {
    policy: Arc<Policy>,
    classify: C,
    flows: Arc<F>,
}

impl<C: Clone, F> Clone for ClusterConcurrencyLimitLayer<C, F> {
    fn clone(&self) -> Self {
        ClusterConcurrencyLimitLayer {
            policy: self.policy.clone(),
            classify: self.classify.clone(),
            flows: self.flows.clone(),
        }
    }
}

impl<C: std::fmt::Debug, F> std::fmt::Debug for ClusterConcurrencyLimitLayer<C, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterConcurrencyLimitLayer")
            .field("policy", &self.policy)
            .field("classify", &self.classify)
            .finish_non_exhaustive()
    }
}

impl ClusterConcurrencyLimitLayer {
    /// One permit per request from `semaphore`, the defaults for everything else: wait at most
    /// [`DEFAULT_ACQUIRE_TIMEOUT`], reject on timeout and when the store is down.
    pub fn new(semaphore: Semaphore) -> Self {
        ClusterConcurrencyLimitLayer {
            policy: Arc::new(ClusterConcurrencyLimitLayerBuilder::new(semaphore).policy()),
            classify: DefaultClassifier,
            flows: Arc::new(DefaultFlow),
        }
    }

    /// Starts a builder to choose the weight, the deadline and the fallbacks.
    pub fn builder(semaphore: Semaphore) -> ClusterConcurrencyLimitLayerBuilder {
        ClusterConcurrencyLimitLayerBuilder::new(semaphore)
    }
}

impl<C, F> ClusterConcurrencyLimitLayer<C, F> {
    /// Name of the semaphore every request takes permits from.
    pub fn semaphore(&self) -> &str {
        self.policy.semaphore.name()
    }

    /// How a finished request's permit reports its [`Outcome`](crate::adaptive::Outcome) to an
    /// [adaptive semaphore](crate::Limiter::adaptive_semaphore) (default
    /// [`DefaultClassifier`]: a response is a success with its latency, an error a drop). A
    /// request dropped before it completes reports nothing.
    ///
    /// ```
    /// # async fn f(limiter: clusterlimit::Limiter) -> clusterlimit::Result<()> {
    /// use clusterlimit::adaptive::{Adaptive, Outcome};
    /// use clusterlimit::tower::ClusterConcurrencyLimitLayer;
    /// let db = limiter.adaptive_semaphore("orders-db", Adaptive::gradient().max(64)).await?;
    /// let layer = ClusterConcurrencyLimitLayer::new(db).classify(
    ///     |r: &Result<http::Response<String>, std::io::Error>, latency| match r {
    ///         Ok(res) if res.status() == 503 => Outcome::Dropped,
    ///         Ok(_) => Outcome::Success(latency),
    ///         Err(_) => Outcome::Dropped,
    ///     },
    /// );
    /// # let _ = layer;
    /// # Ok(()) }
    /// ```
    pub fn classify<C2>(self, classify: C2) -> ClusterConcurrencyLimitLayer<C2, F> {
        ClusterConcurrencyLimitLayer {
            policy: self.policy,
            classify,
            flows: self.flows,
        }
    }

    /// On a [fair semaphore](crate::Limiter::fair_semaphore) (create it with its classes, then
    /// hand it to the layer): each request acquires in the flow, class and weight that `flows`
    /// names for it (a [`FlowFn`](super::FlowFn): a closure `Fn(&Request) -> FairTag`), so
    /// one busy tenant's pile of waiting requests delays another tenant's next request by at
    /// most one grant, and a class with a guaranteed share gets it back release by release.
    /// Without it, requests name no flow (all in the flow `"default"`).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> clusterlimit::Result<()> {
    /// use clusterlimit::fair::{Classes, FairTag};
    /// use clusterlimit::tower::ClusterConcurrencyLimitLayer;
    /// use tower::{service_fn, Layer, ServiceExt};
    ///
    /// let limiter = clusterlimit::Limiter::connect("memory://tower-flows-doc").await?;
    /// let classes: Classes = "interactive=50%,batch".parse()?;
    /// let db = limiter.fair_semaphore("db", 4, classes).await?;
    /// // A request is (tenant, is it a batch job?).
    /// let layer = ClusterConcurrencyLimitLayer::new(db.clone()).flows(|req: &(String, bool)| {
    ///     let tag = FairTag::new(req.0.as_str());
    ///     if req.1 { tag.class("batch") } else { tag }
    /// });
    /// let service = layer.layer(service_fn(|req: (String, bool)| async move {
    ///     Ok::<_, std::convert::Infallible>(format!("hello {}", req.0))
    /// }));
    /// let reply = service.oneshot(("tenant-a".to_string(), true)).await.unwrap();
    /// assert_eq!(reply, "hello tenant-a");
    /// assert_eq!(db.status().await?.classes[1].name, "batch");
    /// # Ok(()) }
    /// ```
    pub fn flows<F2>(self, flows: F2) -> ClusterConcurrencyLimitLayer<C, F2> {
        ClusterConcurrencyLimitLayer {
            policy: self.policy,
            classify: self.classify,
            flows: Arc::new(flows),
        }
    }
}

impl<S, C: Clone, F> tower_layer::Layer<S> for ClusterConcurrencyLimitLayer<C, F> {
    type Service = ClusterConcurrencyLimit<S, C, F>;

    fn layer(&self, inner: S) -> Self::Service {
        ClusterConcurrencyLimit::new(
            inner,
            self.policy.clone(),
            self.classify.clone(),
            self.flows.clone(),
        )
    }
}

/// Options of a [`ClusterConcurrencyLimitLayer`]; [`build`](Self::build) checks them.
///
/// ```
/// # async fn f(sem: clusterlimit::Semaphore) -> clusterlimit::Result<()> {
/// use clusterlimit::tower::{Fallback, ClusterConcurrencyLimitLayer};
/// use clusterlimit::StoreDownPolicy;
/// use std::time::Duration;
/// let layer = ClusterConcurrencyLimitLayer::builder(sem)
///     .permits_per_request(2)                      // heavy requests: weight 2
///     .acquire_timeout(Duration::from_millis(250))
///     .on_timeout(Fallback::Reject)                // full: answer "try later"
///     .on_store_error(StoreDownPolicy::FailOpen)   // store down: serve anyway
///     .store_retry_interval(Duration::from_secs(2))
///     .retry_after(Duration::from_secs(3))         // hint carried by rejections
///     .build()?;
/// # let _ = layer;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct ClusterConcurrencyLimitLayerBuilder {
    semaphore: Semaphore,
    permits: u32,
    acquire_timeout: Option<Duration>,
    on_timeout: Fallback,
    on_store_error: StoreDownPolicy,
    store_retry_interval: Duration,
    retry_after: Duration,
}

impl ClusterConcurrencyLimitLayerBuilder {
    fn new(semaphore: Semaphore) -> Self {
        ClusterConcurrencyLimitLayerBuilder {
            semaphore,
            permits: 1,
            acquire_timeout: Some(DEFAULT_ACQUIRE_TIMEOUT),
            on_timeout: Fallback::Reject,
            on_store_error: StoreDownPolicy::FailClosed,
            store_retry_interval: DEFAULT_STORE_RETRY_INTERVAL,
            retry_after: DEFAULT_RETRY_AFTER,
        }
    }

    /// Permits each request holds (default 1), granted at once. Above the semaphore's capacity,
    /// every request fails with [`LimitError::Limiter`](super::LimitError::Limiter).
    pub fn permits_per_request(mut self, permits: u32) -> Self {
        self.permits = permits;
        self
    }

    /// Longest wait for a permit (default [`DEFAULT_ACQUIRE_TIMEOUT`]); then
    /// [`on_timeout`](Self::on_timeout) decides.
    pub fn acquire_timeout(mut self, timeout: Duration) -> Self {
        self.acquire_timeout = Some(timeout);
        self
    }

    /// Wait for a permit as long as it takes (tower's `ConcurrencyLimit` behaviour). Only a
    /// store failure ends the wait early (after the Limiter's `request_timeout`, retries
    /// included).
    pub fn wait_forever(mut self) -> Self {
        self.acquire_timeout = None;
        self
    }

    /// What to do when the deadline passes with the semaphore still full (default
    /// [`Fallback::Reject`]).
    pub fn on_timeout(mut self, fallback: Fallback) -> Self {
        self.on_timeout = fallback;
        self
    }

    /// What to do when the store fails or does not answer: the rate layers' vocabulary,
    /// [`StoreDownPolicy::FailClosed`] (default: answer
    /// [`LimitError::StoreUnavailable`](super::LimitError::StoreUnavailable)) or
    /// [`StoreDownPolicy::FailOpen`] (run the request without a permit); [`Fallback`] is
    /// accepted too. A local share ([`StoreDownPolicy::Local`]) is for rate limits only:
    /// [`build`](Self::build) refuses it.
    pub fn on_store_error(mut self, policy: impl Into<StoreDownPolicy>) -> Self {
        self.on_store_error = policy.into();
        self
    }

    /// While the store is down, one request per interval tries it again (default
    /// [`DEFAULT_STORE_RETRY_INTERVAL`]); the others get [`on_store_error`](Self::on_store_error)
    /// at once.
    pub fn store_retry_interval(mut self, interval: Duration) -> Self {
        self.store_retry_interval = interval;
        self
    }

    /// When a rejected client should try again, as carried by
    /// [`LimitError::retry_after`](super::LimitError::retry_after) (default
    /// [`DEFAULT_RETRY_AFTER`]).
    pub fn retry_after(mut self, after: Duration) -> Self {
        self.retry_after = after;
        self
    }

    /// Checks the options: `InvalidArgument` for a weight of 0 (or above the largest
    /// capacity), or a zero timeout, retry interval or retry-after.
    pub fn build(self) -> Result<ClusterConcurrencyLimitLayer> {
        validate::permits(self.permits)?;
        if self.acquire_timeout.is_some_and(|t| t.is_zero()) {
            return Err(Error::invalid(
                "acquire timeout must be above zero (use wait_forever() to wait without one)",
            ));
        }
        if !matches!(
            self.on_store_error,
            StoreDownPolicy::FailOpen | StoreDownPolicy::FailClosed
        ) {
            return Err(Error::invalid(format!(
                "a concurrency layer's store-down policy is fail_open or fail_closed, got {} (a local share is for rate limits only)",
                self.on_store_error
            )));
        }
        if self.store_retry_interval.is_zero() {
            return Err(Error::invalid("store retry interval must be above zero"));
        }
        if self.retry_after.is_zero() {
            return Err(Error::invalid("retry-after must be above zero"));
        }
        Ok(ClusterConcurrencyLimitLayer {
            policy: Arc::new(self.policy()),
            classify: DefaultClassifier,
            flows: Arc::new(DefaultFlow),
        })
    }

    fn policy(self) -> Policy {
        Policy {
            semaphore: self.semaphore,
            permits: self.permits,
            acquire_timeout: self.acquire_timeout,
            on_timeout: self.on_timeout,
            on_store_error: self.on_store_error,
            retry_after: self.retry_after,
            health: StoreHealth::new(self.store_retry_interval),
        }
    }
}
