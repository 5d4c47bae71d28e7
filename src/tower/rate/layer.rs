//! The layer and its options.

use super::admit::Policy;
use super::class::NoClass;
use super::cost::OnePerRequest;
use super::flow::NoRateFlow;
use super::options::{OnLimit, OnMissingKey};
use super::respond::{AsErrors, HttpResponses};
use super::service::{ClusterRateLimit, Parts};
use super::settle::{NoSettle, OnNoResponse};
use super::settling::SettleStats;
use crate::rate::headers::HeaderNames;
use crate::rate_limit::RateLimit;
use crate::store_down::{StoreDownGuard, StoreDownPolicy, DEFAULT_GUARD_RETRY_INTERVAL};
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

/// Default [`store_timeout`](ClusterRateLimitLayer::store_timeout): a check the store has not
/// answered within this counts as the store being down.
pub const DEFAULT_RATE_STORE_TIMEOUT: Duration = Duration::from_secs(1);

/// A [`tower_layer::Layer`] that checks every request against a cluster-wide [`RateLimit`]:
/// at most the quota per key across every replica of the service (each with its own
/// [`Limiter`](crate::Limiter) on the same store). See the [module docs](crate::tower) for the
/// answers, the store-down behaviour and cancel-safety.
///
/// `K` finds each request's key ([`key::header`](super::key::header),
/// [`key::peer_ip`](super::key::peer_ip), or a closure `Fn(&Req) -> String | Option<String> |
/// Result<String, E>`); `C` its cost ([`cost`](Self::cost), default 1); `M` how rejections
/// are answered: [`HttpResponses`] (default, `http::Request`/`http::Response` services) or
/// [`AsErrors`] ([`reject_as_error`](Self::reject_as_error), any other service); `L` its
/// priority class ([`classes`](Self::classes), default none); `F` its flow
/// ([`flows`](Self::flows), default none); `X` how its real cost is read off the response
/// ([`settle`](Self::settle), default none: the cost is final).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> clusterlimit::Result<()> {
/// use clusterlimit::tower::{key, ClusterRateLimitLayer, OnMissingKey};
/// use clusterlimit::{Limiter, Quota, StoreDownPolicy};
/// use std::time::Duration;
/// use tower::{service_fn, Layer, ServiceExt};
///
/// let limiter = Limiter::connect("memory://rate-layer-doc").await?;
/// let api = limiter.rate_limit("api", Quota::per_second(10).burst(2)).await?;
/// let layer = ClusterRateLimitLayer::new(api, key::header("x-api-key"))
///     .on_missing_key(OnMissingKey::UseKey("anonymous".into()))
///     .store_down(StoreDownPolicy::Local { replicas: 3 }) // a third of the limit each, if the store is down
///     .store_timeout(Duration::from_millis(300));
/// let service = layer.layer(service_fn(|_req: http::Request<String>| async {
///     Ok::<_, std::convert::Infallible>(http::Response::new("hi".to_string()))
/// }));
/// let mut statuses = Vec::new();
/// for _ in 0..3 {
///     let req = http::Request::builder().header("x-api-key", "k1").body(String::new()).unwrap();
///     let res = service.clone().oneshot(req).await.unwrap();
///     statuses.push(res.status().as_u16());
/// }
/// assert_eq!(statuses, [200, 200, 429]); // burst of 2
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use]
pub struct ClusterRateLimitLayer<
    K,
    C = OnePerRequest,
    M = HttpResponses,
    L = NoClass,
    F = NoRateFlow,
    X = NoSettle,
> {
    policy: Policy,
    key: Arc<K>,
    cost: Arc<C>,
    classes: Arc<L>,
    flows: Arc<F>,
    settle: Arc<X>,
    store_down: StoreDownPolicy,
    store_timeout: Duration,
    store_retry_interval: Duration,
    mode: PhantomData<fn() -> M>,
}

impl<K, C, M, L, F, X> Clone for ClusterRateLimitLayer<K, C, M, L, F, X> {
    fn clone(&self) -> Self {
        ClusterRateLimitLayer {
            policy: self.policy.clone(),
            key: self.key.clone(),
            cost: self.cost.clone(),
            classes: self.classes.clone(),
            flows: self.flows.clone(),
            settle: self.settle.clone(),
            store_down: self.store_down,
            store_timeout: self.store_timeout,
            store_retry_interval: self.store_retry_interval,
            mode: PhantomData,
        }
    }
}

impl<K> ClusterRateLimitLayer<K> {
    /// Checks each request's `key` against `limit`, with the defaults: cost 1, rejected at
    /// once over the limit ([`OnLimit::Reject`]), a request without a key rejected
    /// ([`OnMissingKey::Reject`]), IETF `RateLimit` fields, and while the store is down
    /// [`StoreDownPolicy::FailOpen`] (availability before the limit, as Envoy's default),
    /// with a check counting as "store down" after [`DEFAULT_RATE_STORE_TIMEOUT`].
    pub fn new(limit: RateLimit, key: K) -> Self {
        let store_down = StoreDownPolicy::default();
        let guard = build_guard(
            store_down,
            DEFAULT_RATE_STORE_TIMEOUT,
            DEFAULT_GUARD_RETRY_INTERVAL,
        );
        ClusterRateLimitLayer {
            policy: Policy {
                limit,
                guard,
                on_limit: OnLimit::Reject,
                on_missing_key: OnMissingKey::Reject,
                headers: Some(HeaderNames::Ietf),
                reserve: false,
                on_no_response: OnNoResponse::KeepEstimate,
                settle_counts: Arc::default(),
            },
            key: Arc::new(key),
            cost: Arc::new(OnePerRequest),
            classes: Arc::new(NoClass),
            flows: Arc::new(NoRateFlow),
            settle: Arc::new(NoSettle),
            store_down,
            store_timeout: DEFAULT_RATE_STORE_TIMEOUT,
            store_retry_interval: DEFAULT_GUARD_RETRY_INTERVAL,
            mode: PhantomData,
        }
    }
}

impl<K, C, M, L, F, X> ClusterRateLimitLayer<K, C, M, L, F, X> {
    /// Each request costs `cost(&req)` (a `Fn(&Req) -> u64`), e.g. by its size. 0 lets it
    /// through unchecked; above what the quota admits at once (its burst, or a window's
    /// limit) it is refused as a bad request (400, `field: "cost"`).
    pub fn cost<C2>(self, cost: C2) -> ClusterRateLimitLayer<K, C2, M, L, F, X> {
        ClusterRateLimitLayer {
            policy: self.policy,
            key: self.key,
            cost: Arc::new(cost),
            classes: self.classes,
            flows: self.flows,
            settle: self.settle,
            store_down: self.store_down,
            store_timeout: self.store_timeout,
            store_retry_interval: self.store_retry_interval,
            mode: PhantomData,
        }
    }

    /// Services that are not HTTP: a rejection is the error
    /// [`RateLimitError`](super::RateLimitError) instead of a 429 response.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> clusterlimit::Result<()> {
    /// use clusterlimit::tower::{ClusterRateLimitLayer, RateLimitError};
    /// use clusterlimit::{Limiter, Quota};
    /// use tower::{service_fn, Layer, ServiceExt};
    ///
    /// let limiter = Limiter::connect("memory://rate-layer-errors-doc").await?;
    /// let jobs = limiter.rate_limit("jobs", Quota::per_minute(1)).await?;
    /// // Requests are (tenant, job) pairs; the key is the tenant.
    /// let svc = ClusterRateLimitLayer::new(jobs, |req: &(String, u32)| req.0.clone())
    ///     .reject_as_error()
    ///     .layer(service_fn(|(_, job): (String, u32)| async move {
    ///         Ok::<_, std::io::Error>(job)
    ///     }));
    /// assert_eq!(svc.clone().oneshot(("acme".into(), 1)).await.unwrap(), 1);
    /// match svc.oneshot(("acme".into(), 2)).await {
    ///     Err(e @ RateLimitError::RateLimited { .. }) => assert!(e.retry_after().is_some()),
    ///     other => panic!("{other:?}"),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn reject_as_error(self) -> ClusterRateLimitLayer<K, C, AsErrors, L, F, X> {
        ClusterRateLimitLayer {
            policy: self.policy,
            key: self.key,
            cost: self.cost,
            classes: self.classes,
            flows: self.flows,
            settle: self.settle,
            store_down: self.store_down,
            store_timeout: self.store_timeout,
            store_retry_interval: self.store_retry_interval,
            mode: PhantomData,
        }
    }

    /// Each request is checked as the priority class `classes(&req)` names (a
    /// [`ClassFn`](super::ClassFn): a closure returning a class name or an `Option` of one),
    /// on a quota that keeps a reserve per class ([`Quota::reserve`](crate::Quota::reserve)):
    /// admitted only if the class's reserve is left after it, in both modes
    /// ([`OnLimit::WaitUpTo`] waits as the class) and by the store-down answers (a `Local`
    /// share keeps the class's share of its reserve). A class the quota lacks, or a cost above
    /// what the class can ever take, is refused without a check: 400 with `field: "class"`
    /// (or [`RateLimitError::InvalidRequest`](super::RateLimitError::InvalidRequest)).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> clusterlimit::Result<()> {
    /// use clusterlimit::tower::ClusterRateLimitLayer;
    /// use clusterlimit::{Limiter, Quota};
    /// use tower::{service_fn, Layer, ServiceExt};
    ///
    /// let limiter = Limiter::connect("memory://rate-layer-classes-doc").await?;
    /// // Reports (class `batch`) must leave 2 of 3 for the rest.
    /// let api = limiter.rate_limit("api", Quota::per_minute(3).reserve("batch", 2)).await?;
    /// let svc = ClusterRateLimitLayer::new(api, |_: &http::Request<String>| "tenant-1".to_string())
    ///     .classes(|req: &http::Request<String>| req.uri().path().starts_with("/reports").then_some("batch"))
    ///     .layer(service_fn(|_req: http::Request<String>| async {
    ///         Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
    ///     }));
    /// let get = |path: &str| http::Request::get(path).body(String::new()).unwrap();
    /// let status = |res: http::Response<String>| res.status().as_u16();
    /// assert_eq!(status(svc.clone().oneshot(get("/reports/1")).await.unwrap()), 200);
    /// assert_eq!(status(svc.clone().oneshot(get("/reports/2")).await.unwrap()), 429);
    /// assert_eq!(status(svc.clone().oneshot(get("/orders")).await.unwrap()), 200); // the reserve
    /// # Ok(()) }
    /// ```
    pub fn classes<L2>(self, classes: L2) -> ClusterRateLimitLayer<K, C, M, L2, F, X> {
        ClusterRateLimitLayer {
            policy: self.policy,
            key: self.key,
            cost: self.cost,
            classes: Arc::new(classes),
            flows: self.flows,
            settle: self.settle,
            store_down: self.store_down,
            store_timeout: self.store_timeout,
            store_retry_interval: self.store_retry_interval,
            mode: PhantomData,
        }
    }

    /// Each request is checked as the flow `flows(&req)` names (a [`RateFlowFn`](super::RateFlowFn):
    /// a closure returning a flow name or an `Option` of one), on a quota that shares each key
    /// max-min fairly among its flows ([`Quota::fair_flows`](crate::Quota::fair_flows)): a
    /// request must leave the other flows of its key their due, in both modes
    /// ([`OnLimit::WaitUpTo`] waits for the flow's share) and by the store-down answers (a
    /// `Local` share keeps fair flows among this process's requests). A bad flow name is
    /// refused without a check: 400 with `field: "flow"` (or
    /// [`RateLimitError::InvalidRequest`](super::RateLimitError::InvalidRequest)).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> clusterlimit::Result<()> {
    /// use clusterlimit::tower::ClusterRateLimitLayer;
    /// use clusterlimit::{Algorithm, Limiter, Quota};
    /// use std::time::Duration;
    /// use tower::{service_fn, Layer, ServiceExt};
    ///
    /// let limiter = Limiter::connect("memory://rate-layer-flows-doc").await?;
    /// let year = Duration::from_secs(365 * 86_400);
    /// let quota = Quota::new(10, year).algorithm(Algorithm::FixedWindow).fair_flows();
    /// let upstream = limiter.rate_limit("upstream", quota).await?;
    /// // One key for everyone, each tenant (its `x-tenant` header) a flow.
    /// let svc = ClusterRateLimitLayer::new(upstream, |_: &http::Request<String>| "all".to_string())
    ///     .cost(|req: &http::Request<String>| req.body().len() as u64)
    ///     .flows(|req: &http::Request<String>| {
    ///         req.headers().get("x-tenant").and_then(|v| v.to_str().ok()).map(str::to_string)
    ///     })
    ///     .layer(service_fn(|_req: http::Request<String>| async {
    ///         Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
    ///     }));
    /// let req = |tenant: &str, cost: usize| {
    ///     http::Request::post("/").header("x-tenant", tenant).body("x".repeat(cost)).unwrap()
    /// };
    /// let status = |res: http::Response<String>| res.status().as_u16();
    /// assert_eq!(status(svc.clone().oneshot(req("big", 8)).await.unwrap()), 200);
    /// assert_eq!(status(svc.clone().oneshot(req("small", 5)).await.unwrap()), 429); // 2 left: asked
    /// assert_eq!(status(svc.clone().oneshot(req("big", 1)).await.unwrap()), 429); // small's due
    /// assert_eq!(status(svc.clone().oneshot(req("small", 2)).await.unwrap()), 200);
    /// # Ok(()) }
    /// ```
    pub fn flows<F2>(self, flows: F2) -> ClusterRateLimitLayer<K, C, M, L, F2, X> {
        ClusterRateLimitLayer {
            policy: self.policy,
            key: self.key,
            cost: self.cost,
            classes: self.classes,
            flows: Arc::new(flows),
            settle: self.settle,
            store_down: self.store_down,
            store_timeout: self.store_timeout,
            store_retry_interval: self.store_retry_interval,
            mode: PhantomData,
        }
    }

    /// Each request's cost is an estimate, settled at the real cost once the inner service
    /// answers: `settle(&response)` (a [`SettleFn`](super::SettleFn): a closure returning a
    /// `u64`, or an `Option` of one) reads it off the response, e.g. an LLM's token usage from
    /// a header. The estimate ([`cost`](Self::cost)) is reserved before the inner call
    /// ([`RateLimit::reserve_with`]: admitted and denied as a check of it, answered as any
    /// denial); then a smaller real cost gives the difference back and a larger one charges
    /// the rest, into debt if need be (the key's next requests are refused until time pays it
    /// off). `None` from the closure (the response does not say) keeps the estimate; an error
    /// or a dropped request settles as [`on_no_response`](Self::on_no_response) says.
    ///
    /// The response never waits for the settlement: a store write (real cost ≠ estimate) runs
    /// in a spawned task after the response is handed on, so the key shows it a moment later.
    /// A failed settlement is logged as a warning and counted
    /// ([`settle_stats`](Self::settle_stats)). An estimate of 0 is a peek (admitted while the
    /// key is not in debt, checked once even in wait mode), charged afterwards. While the
    /// store is down the store-down answer is final: nothing is settled.
    ///
    /// The closure sees the response head, not the body: for a usage the body reports, have
    /// the inner service copy it into a header or a response extension.
    pub fn settle<X2>(self, settle: X2) -> ClusterRateLimitLayer<K, C, M, L, F, X2> {
        let mut policy = self.policy;
        policy.reserve = true;
        ClusterRateLimitLayer {
            policy,
            key: self.key,
            cost: self.cost,
            classes: self.classes,
            flows: self.flows,
            settle: Arc::new(settle),
            store_down: self.store_down,
            store_timeout: self.store_timeout,
            store_retry_interval: self.store_retry_interval,
            mode: PhantomData,
        }
    }

    /// What an admitted request that got no response settles at (with
    /// [`settle`](Self::settle)): one whose inner service failed, or whose response future was
    /// dropped before the inner service answered. Default [`OnNoResponse::KeepEstimate`].
    pub fn on_no_response(mut self, policy: OnNoResponse) -> Self {
        self.policy.on_no_response = policy;
        self
    }

    /// How this layer's settlements went so far (with [`settle`](Self::settle)), over every
    /// service it made: settled, and failed.
    pub fn settle_stats(&self) -> SettleStats {
        self.policy.settle_counts.stats()
    }

    /// What a request over the limit gets (default [`OnLimit::Reject`]).
    pub fn on_limit(mut self, on_limit: OnLimit) -> Self {
        self.policy.on_limit = on_limit;
        self
    }

    /// Same as [`on_limit(OnLimit::WaitUpTo(up_to))`](OnLimit::WaitUpTo): wait up to
    /// `up_to` for the key to admit the request, then reject it.
    pub fn wait_up_to(self, up_to: Duration) -> Self {
        self.on_limit(OnLimit::WaitUpTo(up_to))
    }

    /// What a request without a key gets (default [`OnMissingKey::Reject`]).
    pub fn on_missing_key(mut self, on_missing_key: OnMissingKey) -> Self {
        self.policy.on_missing_key = on_missing_key;
        self
    }

    /// The answer while the store is down (default [`StoreDownPolicy::FailOpen`]); see
    /// [`StoreDownGuard`].
    pub fn store_down(mut self, policy: StoreDownPolicy) -> Self {
        self.store_down = policy;
        self.rebuild_guard()
    }

    /// A check the store has not answered within `timeout` counts as the store being down
    /// (default [`DEFAULT_RATE_STORE_TIMEOUT`]; at least 1 ms). The request then gets the
    /// store-down answer at once, and for the next
    /// [`store_retry_interval`](Self::store_retry_interval) so do all others.
    pub fn store_timeout(mut self, timeout: Duration) -> Self {
        self.store_timeout = timeout.max(Duration::from_millis(1));
        self.rebuild_guard()
    }

    /// While the store is down, one request per `interval` asks it again (default
    /// [`DEFAULT_RETRY_INTERVAL`](StoreDownGuard::DEFAULT_RETRY_INTERVAL); at least 1 ms).
    pub fn store_retry_interval(mut self, interval: Duration) -> Self {
        self.store_retry_interval = interval;
        self.rebuild_guard()
    }

    /// Which RateLimit fields responses carry: [`HeaderNames::Ietf`] (default),
    /// [`HeaderNames::Legacy`], or `None` for none (`Retry-After` on a 429 stays).
    pub fn headers(mut self, names: impl Into<Option<HeaderNames>>) -> Self {
        self.policy.headers = names.into();
        self
    }

    /// The rate limit every request is checked against.
    pub fn rate_limit(&self) -> &RateLimit {
        &self.policy.limit
    }

    /// The store-down guard shared by every service of this layer (whether the store is
    /// known down right now: [`StoreDownGuard::store_down`]).
    pub fn guard(&self) -> &StoreDownGuard {
        &self.policy.guard
    }

    fn rebuild_guard(mut self) -> Self {
        self.policy.guard = build_guard(
            self.store_down,
            self.store_timeout,
            self.store_retry_interval,
        );
        self
    }
}

fn build_guard(policy: StoreDownPolicy, timeout: Duration, retry: Duration) -> StoreDownGuard {
    StoreDownGuard::new(policy)
        .retry_interval(retry)
        .store_timeout(timeout)
}

impl<S, K, C, M, L, F, X> tower_layer::Layer<S> for ClusterRateLimitLayer<K, C, M, L, F, X> {
    type Service = ClusterRateLimit<S, K, C, M, L, F, X>;

    fn layer(&self, inner: S) -> Self::Service {
        let parts = Parts {
            key: self.key.clone(),
            cost: self.cost.clone(),
            classes: self.classes.clone(),
            flows: self.flows.clone(),
            settle: self.settle.clone(),
        };
        ClusterRateLimit::new(inner, Arc::new(self.policy.clone()), parts)
    }
}
