//! The HTTP/JSON API: routes, request bodies, handlers.

use super::adaptive_view::StatusView;
use super::body::{JsonBody, MAX_BODY};
use super::metrics::Metrics;
use super::path_param::PathParam;
use super::permits::{KeepAlive, Table};
use super::problem::Problem;
use super::rate_routes::{self, RateApi};
use super::release_body::ReleaseBody;
use crate::common::lock;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, delete, get, post};
use axum::{Json, Router};
use clusterlimit::{validate, AcquireOptions, Error, Limiter, Semaphore, Status, MAX_CAPACITY};
use serde::{Deserialize, Serialize};
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
/// How long past its deadline an acquire may take to answer on its own (the library's bound
/// is 40 ms) before the sidecar answers 503 for it.
const ACQUIRE_GRACE: Duration = Duration::from_millis(60);
/// Bound on the store call behind `/readyz`.
const READY_TIMEOUT: Duration = Duration::from_secs(1);

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
    /// The rate-limit routes' guard, header mode and opened limits.
    pub rate: RateApi,
}

type Shared = Arc<AppState>;

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
            rate,
        })
    }

    /// Keeps `sem`, an adaptive semaphore of the config, for the routes.
    pub fn declare_adaptive(&self, sem: Semaphore) {
        lock(&self.adaptive).insert(sem.name().to_string(), sem);
    }

    /// Opens `name` (creating it with `capacity` if given); cached, since semaphores are never
    /// deleted. An adaptive semaphore of the config is always its adaptive handle (it exists:
    /// `capacity` has nothing to create, and its controller sets the capacity).
    pub(super) async fn semaphore(
        &self,
        name: &str,
        capacity: Option<u32>,
    ) -> Result<Semaphore, Problem> {
        validate::name(name).map_err(|e| Problem::from_lib(e, "name"))?;
        if let Some(sem) = lock(&self.adaptive).get(name) {
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
    async fn status_of(&self, name: &str) -> Result<Status, Problem> {
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
async fn bounded_by<T>(
    deadline: tokio::time::Instant,
    budget: Duration,
    call: impl std::future::Future<Output = Result<T, Problem>>,
) -> Result<T, Problem> {
    tokio::time::timeout_at(deadline, call)
        .await
        .unwrap_or_else(|_| Err(store_silent(budget)))
}

/// 503 `store_unavailable`: the store did not answer within the request's `budget`.
fn store_silent(budget: Duration) -> Problem {
    Problem::unavailable(
        "store_unavailable",
        format!("the store did not answer within {} ms", budget.as_millis()),
    )
    .retry_after(1)
}

/// Every route of the sidecar.
pub fn router(state: Shared) -> Router {
    Router::new()
        .route("/v1/semaphores", get(list))
        .route("/v1/semaphores/{name}", get(status).put(set_capacity))
        .route("/v1/semaphores/{name}/permits", post(acquire))
        .route("/v1/permits/{id}/keepalive", post(keepalive))
        .route("/v1/permits/{id}", delete(release))
        // Rate limits (rate_routes.rs).
        .route("/v1/ratelimits", get(rate_routes::list))
        .route(
            "/v1/ratelimits/{name}",
            get(rate_routes::quota).put(rate_routes::set_quota),
        )
        .route("/v1/ratelimits/{name}/check", post(rate_routes::check))
        .route("/v1/ratelimits/{name}/preview", post(rate_routes::preview))
        .route("/v1/ratelimits/{name}/wait", post(rate_routes::wait))
        .route(
            "/v1/ratelimits/{name}/keys/{*key}",
            get(rate_routes::peek).delete(rate_routes::reset),
        )
        .route("/v1/ratelimits/{name}/keys/", any(rate_routes::empty_key))
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .fallback(|| async { Problem::not_found("no such route") })
        .method_not_allowed_fallback(|| async {
            Problem::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "method not allowed on this route",
            )
        })
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
}

/// `POST /v1/semaphores/{name}/permits`. Numbers are read as i64 so that a negative one is
/// reported as out of range for its field, not as a type error.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcquireBody {
    permits: Option<i64>,
    timeout_ms: Option<i64>,
    ttl_ms: Option<i64>,
    owner: Option<String>,
    capacity: Option<i64>,
}

/// 201 answer of an acquire.
#[derive(Debug, Serialize)]
pub struct Granted {
    id: String,
    semaphore: String,
    permits: u32,
    fencing_token: u64,
    ttl_ms: u64,
}

/// `PUT /v1/semaphores/{name}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CapacityBody {
    capacity: i64,
}

/// `value` (or `default`) if within `min..=max`, else a 400 naming `field`.
fn in_range(
    field: &str,
    value: Option<i64>,
    min: i64,
    max: i64,
    default: i64,
) -> Result<i64, Problem> {
    let v = value.unwrap_or(default);
    if v < min || v > max {
        return Err(Problem::field(
            field,
            format!("{field} must be between {min} and {max}, got {v}"),
        ));
    }
    Ok(v)
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Counts a waiting request in the metrics for as long as it lives (also when cancelled).
struct Waiting<'a> {
    metrics: &'a Metrics,
    semaphore: &'a str,
}

impl<'a> Waiting<'a> {
    fn start(metrics: &'a Metrics, semaphore: &'a str) -> Self {
        metrics.waiting(semaphore, 1);
        Waiting { metrics, semaphore }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.metrics.waiting(self.semaphore, -1);
    }
}

async fn acquire(
    State(st): State<Shared>,
    PathParam(name): PathParam,
    JsonBody(body): JsonBody<AcquireBody>,
) -> Result<Response, Problem> {
    validate::name(&name).map_err(|e| Problem::from_lib(e, "name"))?;
    let max = i64::from(MAX_CAPACITY);
    let permits = in_range("permits", body.permits, 1, max, 1)?;
    let timeout_ms = in_range(
        "timeout_ms",
        body.timeout_ms,
        0,
        millis(MAX_TIMEOUT),
        millis(DEFAULT_TIMEOUT),
    )?;
    let ttl_ms = in_range(
        "ttl_ms",
        body.ttl_ms,
        millis(MIN_TTL),
        millis(MAX_TTL),
        millis(st.permit_ttl),
    )?;
    let capacity = match body.capacity {
        Some(c) => Some(in_range("capacity", Some(c), 1, max, 1)?),
        None => None,
    };
    let mut opts = AcquireOptions::new().permits(u32::try_from(permits).unwrap_or(u32::MAX));
    if let Some(owner) = body.owner {
        validate::owner(&owner).map_err(|e| Problem::from_lib(e, "owner"))?;
        opts = opts.owner(owner);
    }
    let timeout = Duration::from_millis(u64::try_from(timeout_ms).unwrap_or(0));
    // One deadline for the whole request: opening the semaphore (a store read the first time)
    // and the wait. Without a wait, the store timeout bounds it.
    let started = tokio::time::Instant::now();
    let budget = if timeout.is_zero() {
        st.store_timeout
    } else {
        timeout
    };
    let deadline = started + budget;
    let capacity = capacity.and_then(|c| u32::try_from(c).ok());
    let sem = bounded_by(deadline, budget, st.semaphore(&name, capacity)).await?;
    opts = if timeout.is_zero() {
        opts.no_wait()
    } else {
        // A store silent until the deadline is 503 store_unavailable, not a 429 "no permit".
        opts.timeout(deadline.saturating_duration_since(tokio::time::Instant::now()))
            .silent_store_is_error()
    };

    let waiting = Waiting::start(&st.metrics, &name);
    let acquiring = async { Ok(sem.acquire_with(opts).await) };
    // The library keeps to the deadline itself (within 40 ms, its queue entry removed, a
    // silent store told from a full semaphore); this is only the net under it.
    let net = deadline + ACQUIRE_GRACE;
    let outcome = tokio::select! {
        r = bounded_by(net, budget, acquiring) => r?,
        () = st.shutdown.cancelled() => Err(Error::Closed),
    };
    drop(waiting);
    let permit = match outcome {
        Ok(p) => p,
        Err(Error::Timeout | Error::NoPermits) => {
            st.metrics.timed_out(&name);
            return Err(Problem::new(
                StatusCode::TOO_MANY_REQUESTS,
                "timeout",
                format!("no {permits} permit(s) of {name:?} within {timeout_ms} ms"),
            )
            .retry_after(1));
        }
        // The store stayed silent until the deadline (`silent_store_is_error`).
        Err(Error::Store(_)) if tokio::time::Instant::now() >= deadline => {
            return Err(store_silent(budget))
        }
        Err(e) => return Err(Problem::from_lib(e, "permits")),
    };
    st.metrics.acquired(&name, started.elapsed().as_secs_f64());
    let granted = Granted {
        id: String::new(),
        semaphore: name.clone(),
        permits: permit.permits(),
        fencing_token: permit.fencing_token(),
        ttl_ms: u64::try_from(ttl_ms).unwrap_or(0),
    };
    let id = st
        .table
        .insert(permit, Duration::from_millis(granted.ttl_ms));
    tracing::debug!(%id, semaphore = %name, permits, token = granted.fencing_token, "acquired");
    let location = HeaderValue::try_from(format!("/v1/permits/{id}")).ok();
    let mut resp = (StatusCode::CREATED, Json(Granted { id, ..granted })).into_response();
    if let Some(loc) = location {
        resp.headers_mut().insert(header::LOCATION, loc);
    }
    Ok(resp)
}

async fn keepalive(
    State(st): State<Shared>,
    PathParam(id): PathParam,
) -> Result<Response, Problem> {
    match st.table.keepalive(&id) {
        KeepAlive::Extended(ttl) => Ok(Json(serde_json::json!({
            "id": id,
            "ttl_ms": u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
        }))
        .into_response()),
        KeepAlive::Lost => Err(Problem::new(
            StatusCode::GONE,
            "permit_lost",
            "the permit was lost (the store session ended): stop the guarded work",
        )),
        KeepAlive::Unknown => Err(unknown_permit(&id)),
    }
}

/// `DELETE /v1/permits/{id}`, with the work's outcome in an optional body (checked before
/// anything is released).
async fn release(
    State(st): State<Shared>,
    PathParam(id): PathParam,
    JsonBody(body): JsonBody<ReleaseBody>,
) -> Result<StatusCode, Problem> {
    let outcome = body.check()?;
    match st.table.release(&id, outcome).await {
        Some(Ok(())) => Ok(StatusCode::NO_CONTENT),
        Some(Err(e)) => {
            // The library keeps retrying in the background and the session is the backstop.
            tracing::warn!(%id, error = %e, "release did not reach the store yet");
            Ok(StatusCode::NO_CONTENT)
        }
        None => Err(unknown_permit(&id)),
    }
}

fn unknown_permit(id: &str) -> Problem {
    Problem::not_found(format!(
        "no permit {id:?} (never granted, released, or expired)"
    ))
}

async fn status(
    State(st): State<Shared>,
    PathParam(name): PathParam,
) -> Result<Json<StatusView>, Problem> {
    st.status_view(&name).await.map(Json)
}

async fn set_capacity(
    State(st): State<Shared>,
    PathParam(name): PathParam,
    JsonBody(body): JsonBody<CapacityBody>,
) -> Result<Json<Status>, Problem> {
    validate::name(&name).map_err(|e| Problem::from_lib(e, "name"))?;
    let cap = in_range(
        "capacity",
        Some(body.capacity),
        1,
        i64::from(MAX_CAPACITY),
        1,
    )?;
    let cap = u32::try_from(cap).unwrap_or(MAX_CAPACITY);
    let change = async {
        st.limiter
            .set_capacity(&name, cap)
            .await
            .map_err(|e| Problem::from_lib(e, "capacity"))
    };
    st.bounded(change).await?;
    st.status_of(&name).await.map(Json)
}

async fn list(State(st): State<Shared>) -> Result<Json<Vec<Status>>, Problem> {
    // Each store call within the store timeout: a long list on a busy store still answers,
    // a silent store fails at its first call.
    let names = async {
        st.limiter
            .semaphores()
            .await
            .map_err(|e| Problem::from_lib(e, "name"))
    };
    let names = st.bounded(names).await?;
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        out.push(st.status_of(&name).await?);
    }
    Ok(Json(out))
}

async fn metrics(State(st): State<Shared>) -> Response {
    st.observe_adaptive().await;
    let body = st.metrics.render(st.limiter.stats());
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        body,
    )
        .into_response()
}

/// 200 while the process runs; with the RLS on, the state of its rules too (reload.rs).
async fn healthz(State(st): State<Shared>) -> String {
    format!("ok\n{}", st.metrics.rls_reload.health_lines())
}

async fn readyz(State(st): State<Shared>) -> Result<String, Problem> {
    if st.shutdown.is_cancelled() {
        return Err(Problem::unavailable(
            "shutting_down",
            "the sidecar is shutting down",
        ));
    }
    if st.store_healthy().await {
        // Ready on the rules in force even when a reload failed: they are still served.
        Ok(format!("ready\n{}", st.metrics.rls_reload.health_lines()))
    } else {
        Err(Problem::unavailable(
            "store_unavailable",
            format!("the store did not answer within {READY_TIMEOUT:?}"),
        ))
    }
}
