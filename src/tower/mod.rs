//! [Tower](https://docs.rs/tower) layers that cap a service's in-flight requests
//! ([`concurrency`]) and its request rate per key ([`rate`]) across the whole cluster (cargo
//! feature `tower`, on by default), laid out like tower's own `limit::{concurrency, rate}`, with
//! the layers' names at this module's root too.
//!
//! [`ClusterConcurrencyLimitLayer`] is tower's `ConcurrencyLimitLayer` with the count kept in a
//! clusterlimit [`Semaphore`](crate::Semaphore): every request takes a permit, every replica of
//! the service shares the semaphore, so at most *capacity* requests run at once in the whole
//! fleet, however many replicas there are. (Tower's own `GlobalConcurrencyLimitLayer` shares
//! one count between the services of a single process; this module's layer carried that name
//! before 0.2.0, and the old names remain as deprecated aliases for one release.)
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> clusterlimit::Result<()> {
//! use clusterlimit::tower::ClusterConcurrencyLimitLayer;
//! use clusterlimit::StoreDownPolicy;
//! use std::time::Duration;
//! use tower::{service_fn, Layer, Service, ServiceExt};
//!
//! let limiter = clusterlimit::Limiter::connect("memory://tower-doc").await?;
//! let semaphore = limiter.semaphore("reports-api", 8).await?; // 8 in flight, cluster-wide
//! let layer = ClusterConcurrencyLimitLayer::builder(semaphore)
//!     .acquire_timeout(Duration::from_millis(500)) // then answer LimitError::Timeout
//!     .on_store_error(StoreDownPolicy::FailOpen)   // a down store must not take the API down
//!     .build()?;
//!
//! let mut service = layer.layer(service_fn(|name: String| async move {
//!     Ok::<_, std::convert::Infallible>(format!("hello {name}"))
//! }));
//! let reply = service.ready().await.unwrap().call("ops".into()).await;
//! assert_eq!(reply.unwrap(), "hello ops");
//! # Ok(()) }
//! ```
//!
//! # Where the permit is taken
//!
//! Not in `poll_ready`: a service that is polled ready but never called (a load balancer
//! probing its backends, a `Buffer` worker) would hold a cluster permit that no request uses,
//! and a cluster permit is shared with every other replica. `poll_ready` only asks the inner
//! service; `call` moves that ready inner service into the [`ResponseFuture`], which first takes
//! the permit and only then calls the inner service. So a replica whose inner service is not
//! ready holds no permit, and the inner service is `Clone` (as tower's own
//! middleware that defers calls requires; axum routes and `Buffer` are). The price: the inner
//! service's own readiness (a slot of a local `ConcurrencyLimit`, say) is held while the request
//! waits for its cluster permit.
//!
//! # How long the permit is held
//!
//! From the grant until the inner service's future completes, or until the [`ResponseFuture`]
//! is dropped (a client that hung up, a timeout layer above): dropping releases the permit in
//! the background, and a request dropped while it still waits leaves the queue. For HTTP this
//! covers the handler up to the response head, not a streaming body sent after it: work that
//! continues while a body streams is not counted. Carry the permit in the body yourself (take
//! one with [`Semaphore::acquire`](crate::Semaphore::acquire) in the handler) if it must be.
//!
//! The permit is not watched while the request runs: if it is [lost](crate::Permit::lost)
//! (the store session ended behind this replica), the request still finishes, so for that moment
//! the cluster may run more than *capacity* requests. Cancelling requests in flight would turn
//! a store outage into failed requests; guard work that must never overlap with
//! [`Permit::lost`](crate::Permit::lost) and the fencing token instead.
//!
//! # When no permit comes
//!
//! * **Deadline** ([`acquire_timeout`](ClusterConcurrencyLimitLayerBuilder::acquire_timeout),
//!   default 1 s): if the semaphore stays full that long, [`on_timeout`](ClusterConcurrencyLimitLayerBuilder::on_timeout)
//!   decides: [`Fallback::Reject`] (default) answers [`LimitError::Timeout`] without running the
//!   request; [`Fallback::FailOpen`] runs it without a permit.
//! * **Store down** (an error from the store, or no answer at all: the acquire's deadline plus
//!   0.5 s passed without a reply): [`on_store_error`](ClusterConcurrencyLimitLayerBuilder::on_store_error)
//!   decides, in the rate layers' vocabulary ([`StoreDownPolicy`](crate::StoreDownPolicy)):
//!   fail closed, [`LimitError::StoreUnavailable`] (default), or fail open. After such a failure
//!   the layer stops asking the store for every request: one request per
//!   [`store_retry_interval`](ClusterConcurrencyLimitLayerBuilder::store_retry_interval)
//!   (default 1 s) tries it, the others get the fallback at once, so a down store costs no
//!   latency per request.
//! * **Anything else** (a weight above the capacity, a closed [`Limiter`](crate::Limiter), a
//!   semaphore that is gone) is [`LimitError::Limiter`]: a setup mistake no fallback hides.
//!
//! Map the rejections to your protocol's "try later" answer; for HTTP, 503 with a
//! `Retry-After` of [`LimitError::retry_after`] (see `examples/axum_service.rs`).
//!
//! # Adaptive capacity
//!
//! On an [adaptive semaphore](crate::Limiter::adaptive_semaphore) every completed request
//! reports an [`Outcome`](crate::adaptive::Outcome): by default a response is a success with
//! its latency (from the inner call's start) and an error a drop; choose with
//! [`ClusterConcurrencyLimitLayer::classify`] (for HTTP, count a 503 from the dependency as a
//! drop). The semaphore's controller turns the fleet's outcomes into its capacity, so every
//! replica's layer follows the dependency together. A request dropped before it completes
//! reports nothing.
//!
//! # Fair semaphores
//!
//! Given a [fair semaphore](crate::Limiter::fair_semaphore), the layer shares its permits
//! between flows (tenants, users) and classes: [`ClusterConcurrencyLimitLayer::flows`] takes a
//! closure that names each request's flow, class and weight ([`FlowFn`], a
//! [`FairTag`](crate::fair::FairTag)). A tenant with a thousand requests waiting then delays
//! another tenant's next request by one grant, not a thousand.
//!
//! # Rate limits
//!
//! [`ClusterRateLimitLayer`] checks every request against a cluster-wide
//! [`RateLimit`](crate::RateLimit) ("at most N per period, per key"), shared by every replica
//! through the store:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> clusterlimit::Result<()> {
//! use clusterlimit::tower::{key, ClusterRateLimitLayer};
//! use clusterlimit::{Limiter, Quota};
//! use std::time::Duration;
//! use tower::{service_fn, Layer, ServiceExt};
//!
//! let limiter = clusterlimit::Limiter::connect("memory://tower-rate-doc").await?;
//! let per_ip = limiter.rate_limit("per-ip", Quota::per_minute(60)).await?;
//! let layer = ClusterRateLimitLayer::new(per_ip, key::peer_ip())
//!     .cost(|req: &http::Request<String>| if req.method() == http::Method::POST { 5 } else { 1 })
//!     .wait_up_to(Duration::from_millis(200)); // smooth short bursts instead of refusing them
//! let service = layer.layer(service_fn(|_req: http::Request<String>| async {
//!     Ok::<_, std::convert::Infallible>(http::Response::new("ok".to_string()))
//! }));
//! let mut req = http::Request::new(String::new());
//! req.extensions_mut().insert("10.0.0.7:40000".parse::<std::net::SocketAddr>().unwrap());
//! let res = service.oneshot(req).await.unwrap();
//! assert_eq!(res.status(), 200);
//! assert_eq!(res.headers()["ratelimit"], r#""per-ip";r=59;t=1"#);
//! # Ok(()) }
//! ```
//!
//! * **Key**: a closure over the request, or [`key::header`] / [`key::peer_ip`]. A request
//!   without one: [`OnMissingKey`] (reject with 400, default; count it under a shared key; or
//!   run it unchecked). Keys are stored as they are (etcd key names, ZooKeeper paths): hash a
//!   secret one ([`key::Header::hashed`]).
//! * **Priority class**: a closure over the request ([`classes`](ClusterRateLimitLayer::classes))
//!   names the class it is checked as, on a quota that keeps reserves
//!   ([`Quota::reserve`](crate::Quota::reserve)), in both modes and by the store-down answers;
//!   a class the quota lacks is a 400 on `class`.
//! * **Flow**: a closure over the request ([`flows`](ClusterRateLimitLayer::flows)) names the
//!   flow (tenant) it is checked as, on a quota that shares each key among its flows
//!   ([`Quota::fair_flows`](crate::Quota::fair_flows)), in both modes and by the store-down
//!   answers; a bad flow name is a 400 on `flow`.
//! * **Over the limit**: [`OnLimit::Reject`] (default) or [`OnLimit::WaitUpTo`] (checks again
//!   after each denial's `retry_after` until the deadline; rejected then, nothing consumed).
//! * **Answers**: for `http` services ([`HttpResponses`], the default), a rejection is a
//!   response: 429 with `Retry-After`, the `RateLimit` fields
//!   ([`crate::rate::headers`]) and an `application/problem+json` body (`code`
//!   `rate_limited`); 503 `store_unavailable` for a fail-closed store outage; 400
//!   `missing_key` / `invalid_field` (with `field`); 500 `limiter_error` for a setup mistake
//!   (closed Limiter, deleted limit). Admitted responses carry the `RateLimit` fields, and
//!   every checked response a [`RateLimitInfo`] extension. Any other service uses
//!   [`reject_as_error`](ClusterRateLimitLayer::reject_as_error): rejections are
//!   [`RateLimitError`]s.
//! * **Store down** (an error, or no answer within
//!   [`store_timeout`](ClusterRateLimitLayer::store_timeout), default 1 s): the
//!   [`StoreDownPolicy`](crate::StoreDownPolicy) of a [`StoreDownGuard`](crate::StoreDownGuard)
//!   the layer's services share (fail-open by default); while the store is known down every
//!   request gets that answer at once, and one per
//!   [`store_retry_interval`](ClusterRateLimitLayer::store_retry_interval) asks the store
//!   again. Never a panic or a hang.
//! * **poll_ready** is the inner service's; the check runs in the response future, before the
//!   inner service is called. In wait mode the request gives the inner service's readiness
//!   back while it waits, and polls a fresh clone ready once admitted. Nothing is held across the request (a rate limit consumes, it
//!   does not hold), so a dropped request leaves nothing behind; a check dropped in flight may
//!   or may not have consumed, one dropped while waiting between checks has not.
//! * **Costs known from the response** ([`settle`](ClusterRateLimitLayer::settle)): the cost
//!   is an estimate, reserved before the inner call, and settled at what a closure reads off
//!   the response (a usage header, an extension): the difference given back, or charged into
//!   debt. An error or a dropped request settles as [`OnNoResponse`] says. The settlement's
//!   store write is spawned: the response never waits for it.
//! * **Hot keys**: when the rate limit's Limiter was built with
//!   [`hot_key_leases`](crate::LimiterBuilder::hot_key_leases), the layer's checks and waits of
//!   a hot key are admitted from leased units like any plain check (those with a class or flow,
//!   and `settle`'s reservations, go to the store).

mod admitting;
pub mod concurrency;
mod inner;
pub mod rate;

// The layers' names at the module root too, as tower's `limit` has them.
pub use concurrency::{
    Classify, ClusterConcurrencyLimit, ClusterConcurrencyLimitLayer,
    ClusterConcurrencyLimitLayerBuilder, DefaultClassifier, DefaultFlow, Fallback, FlowFn,
    LimitError, ResponseFuture, DEFAULT_ACQUIRE_TIMEOUT, DEFAULT_RETRY_AFTER,
    DEFAULT_STORE_RETRY_INTERVAL,
};
#[allow(deprecated)]
pub use concurrency::{
    GlobalConcurrencyLimit, GlobalConcurrencyLimitLayer, GlobalConcurrencyLimitLayerBuilder,
};
pub use rate::{
    key, AsErrors, ClassFn, ClusterRateLimit, ClusterRateLimitLayer, CostFn, HttpResponses,
    IntoActual, IntoClass, NoClass, NoRateFlow, NoResponse, NoResponseFn, NoSettle, OnLimit,
    OnMissingKey, OnNoResponse, OnePerRequest, RateFlowFn, RateLimitError, RateLimitFuture,
    RateLimitInfo, Respond, SettleFn, SettleStats, DEFAULT_RATE_STORE_TIMEOUT,
};
