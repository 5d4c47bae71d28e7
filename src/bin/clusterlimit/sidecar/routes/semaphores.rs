//! Semaphores and their permits over the HTTP/JSON API: list, read and set a capacity; take a
//! permit, keep it alive, release it.

use super::permit_table::KeepAlive;
use super::state::{
    bounded_by, store_silent, Shared, DEFAULT_TIMEOUT, MAX_TIMEOUT, MAX_TTL, MIN_TTL,
};
use crate::sidecar::adaptive_view::StatusView;
use crate::sidecar::body::JsonBody;
use crate::sidecar::metrics::Metrics;
use crate::sidecar::path_param::PathParam;
use crate::sidecar::problem::Problem;
use crate::sidecar::release_body::ReleaseBody;
use crate::sidecar::schemas::{SemaphoreStatus, SemaphoreView};
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use clusterlimit::fair::FairTag;
use clusterlimit::{validate, AcquireOptions, Error, Semaphore, Status};
use serde::{Deserialize, Serialize};
use std::time::Duration;
use utoipa::ToSchema;

/// How long past its deadline an acquire may take to answer on its own (the library's bound
/// is 40 ms) before the sidecar answers 503 for it.
const ACQUIRE_GRACE: Duration = Duration::from_millis(60);

/// The body of `POST /v1/semaphores/{name}/permits` (every field optional).
// Numbers are read as i64 so that a negative one is reported as out of range for its field,
// not as a type error.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AcquireBody {
    /// Permits to take (default 1).
    permits: Option<i64>,
    /// How long to wait for them (default 30000; 0: answer at once).
    timeout_ms: Option<i64>,
    /// How long the permit lives without a keepalive (default: the sidecar's `permit_ttl`).
    ttl_ms: Option<i64>,
    /// The holder's label in the semaphore's status.
    owner: Option<String>,
    /// Creates the semaphore with this capacity if absent (409 if it exists with another).
    capacity: Option<i64>,
    /// On a fair semaphore: the request's flow, class and its flow's weight.
    flow: Option<String>,
    class: Option<String>,
    weight: Option<i64>,
}

/// 201 answer of an acquire.
#[derive(Debug, Serialize, ToSchema)]
pub struct Granted {
    /// The permit's id, for keepalive, shrink and release.
    id: String,
    semaphore: String,
    permits: u32,
    fencing_token: u64,
    ttl_ms: u64,
}

/// The body of `PUT /v1/semaphores/{name}`.
#[derive(Debug, Deserialize, ToSchema)]
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

/// An acquire's body, checked.
struct AcquireRequest {
    permits: i64,
    timeout_ms: i64,
    ttl_ms: i64,
    capacity: Option<u32>,
    opts: AcquireOptions,
    /// The first of `flow`, `class`, `weight` the body gave: the field a refusal of the tag
    /// names (see [`fair_refusal`]).
    tagged: Option<&'static str>,
}

impl AcquireRequest {
    /// The body's fields within range (defaults filled in), or the first at fault.
    fn checked(body: AcquireBody, permit_ttl: Duration) -> Result<AcquireRequest, Problem> {
        let max = i64::from(Semaphore::MAX_CAPACITY);
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
            millis(permit_ttl),
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
        let mut tagged = None;
        if let Some(flow) = body.flow {
            FairTag::new(flow.as_str())
                .check()
                .map_err(|e| Problem::from_lib(e, "flow"))?;
            opts = opts.flow(flow);
            tagged = tagged.or(Some("flow"));
        }
        if let Some(class) = body.class {
            FairTag::default()
                .class(class.as_str())
                .check()
                .map_err(|e| Problem::from_lib(e, "class"))?;
            opts = opts.class(class);
            tagged = tagged.or(Some("class"));
        }
        if body.weight.is_some() {
            let weight = in_range("weight", body.weight, 1, MAX_WEIGHT, 1)?;
            opts = opts.weight(u32::try_from(weight).unwrap_or(1));
            tagged = tagged.or(Some("weight"));
        }
        Ok(AcquireRequest {
            permits,
            timeout_ms,
            ttl_ms,
            capacity: capacity.and_then(|c| u32::try_from(c).ok()),
            opts,
            tagged,
        })
    }
}

/// Largest `weight` of a flow (the library's bound).
const MAX_WEIGHT: i64 = 1_000_000;

/// A refusal of an acquire's `flow`, `class` or `weight` by the semaphore (a class it does not
/// have, a plain semaphore, a store that keeps no fair semaphores), as a 400 naming the field;
/// `None` for any other failure. The library says which in its message only.
fn fair_refusal(e: &Error, name: &str, tagged: Option<&'static str>) -> Option<Problem> {
    let (Error::InvalidArgument(why), Some(field)) = (e, tagged) else {
        return None;
    };
    if why.starts_with("class ") {
        return Some(Problem::field("class", why.clone()));
    }
    if why.contains("plain FIFO semaphore") {
        return Some(Problem::field(
            field,
            format!(
                "semaphore {name:?} is a plain FIFO semaphore: flow, class and weight need a \
                 fair one (declare it with `classes` under [[semaphores]] in the sidecar's config)"
            ),
        ));
    }
    why.contains("fair semaphore")
        .then(|| Problem::field(field, why.clone()))
}

/// Takes permits of a semaphore, waiting up to `timeout_ms` for them.
#[utoipa::path(
    post,
    path = "/v1/semaphores/{name}/permits",
    tag = "semaphores",
    params(("name" = String, Path, description = "The semaphore")),
    request_body = AcquireBody,
    responses(
        (status = 201, description = "Granted; `Location` names the permit", body = Granted),
        (status = 400, description = "A field out of range or malformed (`field` names it)", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such semaphore, and no `capacity` to create it", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`capacity` differs from the stored one", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "No permit within `timeout_ms` (`Retry-After`)", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store did not answer, or the sidecar is shutting down", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn acquire(
    State(st): State<Shared>,
    PathParam(name): PathParam,
    JsonBody(body): JsonBody<AcquireBody>,
) -> Result<Response, Problem> {
    validate::name(&name).map_err(|e| Problem::from_lib(e, "name"))?;
    let req = AcquireRequest::checked(body, st.permit_ttl)?;
    let started = tokio::time::Instant::now();
    let permit = wait_for_permit(&st, &name, &req).await?;
    st.metrics.acquired(&name, started.elapsed().as_secs_f64());
    let granted = Granted {
        id: String::new(),
        semaphore: name.clone(),
        permits: permit.permits(),
        fencing_token: permit.fencing_token(),
        ttl_ms: u64::try_from(req.ttl_ms).unwrap_or(0),
    };
    let id = st
        .table
        .insert(permit, Duration::from_millis(granted.ttl_ms));
    tracing::debug!(%id, semaphore = %name, permits = req.permits, token = granted.fencing_token, "acquired");
    let location = HeaderValue::try_from(format!("/v1/permits/{id}")).ok();
    let mut resp = (StatusCode::CREATED, Json(Granted { id, ..granted })).into_response();
    if let Some(loc) = location {
        resp.headers_mut().insert(header::LOCATION, loc);
    }
    Ok(resp)
}

/// Opens the semaphore and waits for the permits, within one deadline for both; a timeout is
/// 429, a store silent until the deadline 503.
async fn wait_for_permit(
    st: &Shared,
    name: &str,
    req: &AcquireRequest,
) -> Result<clusterlimit::Permit, Problem> {
    let timeout = Duration::from_millis(u64::try_from(req.timeout_ms).unwrap_or(0));
    // One deadline for the whole request: opening the semaphore (a store read the first time)
    // and the wait. Without a wait, the store timeout bounds it.
    let budget = if timeout.is_zero() {
        st.store_timeout
    } else {
        timeout
    };
    let deadline = tokio::time::Instant::now() + budget;
    let sem = bounded_by(deadline, budget, st.semaphore(name, req.capacity)).await?;
    let opts = if timeout.is_zero() {
        req.opts.clone().no_wait()
    } else {
        // A store silent until the deadline is 503 store_unavailable, not a 429 "no permit".
        req.opts
            .clone()
            .timeout(deadline.saturating_duration_since(tokio::time::Instant::now()))
            .silent_store_is_error()
    };
    let waiting = Waiting::start(&st.metrics, name);
    let acquiring = async { Ok(sem.acquire_with(opts).await) };
    // The library keeps to the deadline itself (within 40 ms, its queue entry removed, a
    // silent store told from a full semaphore); this is only the net under it.
    let net = deadline + ACQUIRE_GRACE;
    let outcome = tokio::select! {
        r = bounded_by(net, budget, acquiring) => r?,
        () = st.shutdown.cancelled() => Err(Error::Closed),
    };
    drop(waiting);
    match outcome {
        Ok(p) => Ok(p),
        Err(Error::Timeout | Error::NoPermits) => {
            st.metrics.timed_out(name);
            Err(Problem::new(
                StatusCode::TOO_MANY_REQUESTS,
                "timeout",
                format!(
                    "no {} permit(s) of {name:?} within {} ms",
                    req.permits, req.timeout_ms
                ),
            )
            .retry_after(1))
        }
        // The store stayed silent until the deadline (`silent_store_is_error`).
        Err(Error::Store(_)) if tokio::time::Instant::now() >= deadline => {
            Err(store_silent(budget))
        }
        Err(e) => {
            Err(fair_refusal(&e, name, req.tagged)
                .unwrap_or_else(|| Problem::from_lib(e, "permits")))
        }
    }
}

/// Answer of a keepalive: the permit's new time to live.
#[derive(Debug, Serialize, ToSchema)]
pub struct KeptAlive {
    id: String,
    ttl_ms: u64,
}

/// Extends a permit's time to live.
#[utoipa::path(
    post,
    path = "/v1/permits/{id}/keepalive",
    tag = "permits",
    params(("id" = String, Path, description = "The permit's id")),
    responses(
        (status = 200, description = "Extended", body = KeptAlive),
        (status = 404, description = "No such permit (released, expired, never granted)", body = Problem, content_type = "application/problem+json"),
        (status = 410, description = "The permit was lost (the store session ended): stop the work", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn keepalive(
    State(st): State<Shared>,
    PathParam(id): PathParam,
) -> Result<Response, Problem> {
    match st.table.keepalive(&id) {
        KeepAlive::Extended(ttl) => Ok(Json(KeptAlive {
            id,
            ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
        })
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
#[utoipa::path(
    delete,
    path = "/v1/permits/{id}",
    tag = "permits",
    params(("id" = String, Path, description = "The permit's id")),
    request_body(content = Option<ReleaseBody>, description = "Optional: the work's outcome, for an adaptive semaphore"),
    responses(
        (status = 204, description = "Released"),
        (status = 400, description = "A bad outcome body (`field` names it); the permit is still held", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such permit", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn release(
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

/// A semaphore's status, with its adaptive or per-member state if it has one.
#[utoipa::path(
    get,
    path = "/v1/semaphores/{name}",
    tag = "semaphores",
    params(("name" = String, Path, description = "The semaphore")),
    responses(
        (status = 200, description = "Its status", body = SemaphoreView),
        (status = 400, description = "Not a valid semaphore name", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such semaphore", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store did not answer", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn status(
    State(st): State<Shared>,
    PathParam(name): PathParam,
) -> Result<Json<StatusView>, Problem> {
    st.status_view(&name).await.map(Json)
}

/// Creates a semaphore with a capacity, or changes its capacity.
#[utoipa::path(
    put,
    path = "/v1/semaphores/{name}",
    tag = "semaphores",
    params(("name" = String, Path, description = "The semaphore")),
    request_body = CapacityBody,
    responses(
        (status = 200, description = "Its status after the change", body = SemaphoreStatus),
        (status = 400, description = "A bad name or capacity (`field` names it)", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store did not answer", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn set_capacity(
    State(st): State<Shared>,
    PathParam(name): PathParam,
    JsonBody(body): JsonBody<CapacityBody>,
) -> Result<Json<Status>, Problem> {
    validate::name(&name).map_err(|e| Problem::from_lib(e, "name"))?;
    let cap = in_range(
        "capacity",
        Some(body.capacity),
        1,
        i64::from(Semaphore::MAX_CAPACITY),
        1,
    )?;
    let cap = u32::try_from(cap).unwrap_or(Semaphore::MAX_CAPACITY);
    let change = async {
        st.limiter
            .set_capacity(&name, cap)
            .await
            .map_err(|e| Problem::from_lib(e, "capacity"))
    };
    st.bounded(change).await?;
    st.status_of(&name).await.map(Json)
}

/// Every semaphore's status.
#[utoipa::path(
    get,
    path = "/v1/semaphores",
    operation_id = "list_semaphores",
    tag = "semaphores",
    responses(
        (status = 200, description = "Every semaphore's status", body = Vec<SemaphoreStatus>),
        (status = 503, description = "The store did not answer", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn list(State(st): State<Shared>) -> Result<Json<Vec<Status>>, Problem> {
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
