//! Rate limits over the HTTP/JSON API: list, read and set quotas; check, wait for, peek at and
//! reset a key. Checks go through a `StoreDownGuard` (the `rate_store_down` policy answers while
//! the store is down, and the JSON says so in `source`); every decision carries the RateLimit
//! header fields of the `rate_limit_headers` setting; a denial is a 429 problem naming the limit
//! and the key, with `Retry-After`.

use super::rate_state::unknown;
use super::state::{AppState, Shared, DEFAULT_TIMEOUT, MAX_TIMEOUT};
use crate::common::quota_print::{decision_json, quota_json, quota_text};
use crate::common::quota_spec::{self, FieldError};
use crate::sidecar::body::JsonBody;
use crate::sidecar::header_mode::HeaderMode;
use crate::sidecar::path_param::{path_problem, PathParam};
use crate::sidecar::problem::Problem;
use crate::sidecar::schemas::{self, Quota, QuotaBody, RateLimitedProblem, StoreDownProblem};
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use clusterlimit::rate::headers::{rate_limit_headers, retry_after_secs, HeaderNames};
use clusterlimit::rate::FlowId;
use clusterlimit::{
    validate, CheckOptions, Decision, DecisionSource, Error, GuardedDecision, RateLimit, Waited,
};
use prometheus_client::metrics::gauge::Gauge;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::time::Duration;
use utoipa::ToSchema;

const MAX_KEY_LEN: usize = RateLimit::MAX_KEY_LEN;

/// The metrics domain of the HTTP API's checks (the RLS uses its own domains).
const DOMAIN: &str = "http";

/// The body of `POST /v1/ratelimits/{name}/check`.
// Numbers are i64 so a negative one is reported as out of range for its field.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckBody {
    /// The key checked (1-512 bytes).
    key: String,
    /// Units to take (default 1).
    cost: Option<i64>,
    /// A priority class of the quota (`reserves`): admitted only if its reserve is left after.
    class: Option<String>,
    /// The flow (tenant) checking: on a quota with fair flows, it must leave the others their
    /// due.
    flow: Option<String>,
}

/// The body of `POST /v1/ratelimits/{name}/wait`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WaitBody {
    /// The key checked (1-512 bytes).
    key: String,
    /// Units to take (default 1).
    cost: Option<i64>,
    /// How long to wait at most (default 30000; 0: check once).
    timeout_ms: Option<i64>,
    /// A priority class of the quota: waits until admitted with its reserve left after.
    class: Option<String>,
    /// The flow (tenant) waiting: on a quota with fair flows, waits for its share.
    flow: Option<String>,
}

pub(super) fn check_key(key: &str) -> Result<(), Problem> {
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        return Err(Problem::field(
            "key",
            format!(
                "key must be 1-{MAX_KEY_LEN} bytes of UTF-8, got {} bytes",
                key.len()
            ),
        ));
    }
    Ok(())
}

/// The flow, if given, when it is a flow name (as the library checks it); else 400 on `flow`.
pub(super) fn check_flow(flow: Option<&str>) -> Result<(), Problem> {
    match flow.map(FlowId::of) {
        Some(Err(why)) => Err(Problem::field("flow", why)),
        _ => Ok(()),
    }
}

/// The cost (default 1) if the limit could ever admit it at once. A cost above the cached
/// quota's most is checked again after reading the quota from the store (it may have been
/// raised elsewhere).
async fn admissible_cost(st: &AppState, rl: &RateLimit, cost: Option<i64>) -> Result<u64, Problem> {
    let above = cost.is_some_and(|c| u64::try_from(c).is_ok_and(|c| c > rl.quota().max_cost()));
    if above {
        st.rate.open_fresh(&st.limiter, rl.name()).await?;
    }
    check_cost(rl, cost)
}

/// The cost (default 1) if the limit's quota as known here could ever admit it at once.
fn check_cost(rl: &RateLimit, cost: Option<i64>) -> Result<u64, Problem> {
    let quota = rl.quota();
    let max = quota.max_cost();
    let cost = cost.unwrap_or(1);
    match u64::try_from(cost) {
        Ok(c) if (1..=max).contains(&c) => Ok(c),
        _ => Err(Problem::field(
            "cost",
            format!(
                "cost must be a whole number from 1 to {max} (the most rate limit {:?} admits at once: {}), \
                 got {cost}",
                rl.name(),
                quota_text(&quota)
            ),
        )),
    }
}

/// The class, if given, when the limit's quota declares it (read afresh from the store when
/// the cached quota does not: it may have been added elsewhere) and `cost` plus its reserve
/// fits at once; else 400 on `class`.
pub(super) async fn admissible_class(
    st: &AppState,
    rl: &RateLimit,
    class: Option<&str>,
    cost: u64,
) -> Result<(), Problem> {
    let Some(class) = class else { return Ok(()) };
    if rl.quota().reserves.get(class).is_none() {
        st.rate.open_fresh(&st.limiter, rl.name()).await?;
    }
    rl.quota()
        .check_class(rl.name(), Some(class), cost)
        .map(|_| ())
        .map_err(|e| Problem::from_lib(e, "class"))
}

/// 400 on `cost` when a denial says the cost can never be admitted
/// ([`Decision::never_admits`](clusterlimit::Decision::never_admits): the quota was lowered
/// by another client), rather than a 429 with a meaningless Retry-After.
pub(super) fn never_admitted(rl: &RateLimit, cost: u64) -> Problem {
    Problem::field(
        "cost",
        format!(
            "cost {cost} can never be admitted by the quota now stored for rate limit {:?} ({})",
            rl.name(),
            rl.quota()
        ),
    )
}

fn source_name(s: DecisionSource) -> &'static str {
    match s {
        DecisionSource::Store => "store",
        DecisionSource::FailOpen => "fail_open",
        DecisionSource::FailClosed => "fail_closed",
        DecisionSource::Local => "local",
        _ => "other",
    }
}

/// How a check of `cost` (of `class` and `flow`, if given) asks.
pub(super) fn options(cost: u64, class: Option<&str>, flow: Option<&str>) -> CheckOptions {
    let options = CheckOptions::new().cost(cost);
    let options = match class {
        Some(c) => options.class(c),
        None => options,
    };
    match flow {
        Some(f) => options.flow(f),
        None => options,
    }
}

/// One guarded check (the store gets at most the store timeout).
async fn guarded(
    st: &AppState,
    rl: &RateLimit,
    key: &str,
    options: CheckOptions,
) -> Result<GuardedDecision, Problem> {
    let classed = options.class_of().is_some();
    st.rate
        .guard
        .check_with(rl, key, options)
        .await
        .map_err(|e| check_problem(e, rl.name(), classed))
}

/// The problem of a failed check: a bad argument of a check with a class is the class's
/// (the cost was checked before), else as [`lib_problem`].
pub(super) fn check_problem(e: Error, name: &str, classed: bool) -> Problem {
    match e {
        Error::InvalidArgument(_) if classed => Problem::from_lib(e, "class"),
        e => lib_problem(e, name),
    }
}

/// Counts one answered request in the metrics (a wait counts once, by its last check).
fn record(
    st: &AppState,
    rl: &RateLimit,
    key: &str,
    class: Option<&str>,
    g: &GuardedDecision,
    cost: u64,
) {
    let m = &st.metrics.rate;
    m.record(DOMAIN, rl.name(), g, cost, false, g.store_latency);
    m.record_key(rl.name(), key, class, g, cost);
    m.keys_cached(rl.name(), rl.cached_keys());
}

pub(super) fn lib_problem(e: Error, name: &str) -> Problem {
    match e {
        Error::NotFound(_) => unknown(name),
        Error::InvalidArgument(_) => Problem::from_lib(e, "cost"),
        e => Problem::from_lib(e, "name"),
    }
}

/// Adds the RateLimit fields of `d` to `resp` in the configured naming.
pub(super) fn add_fields(st: &AppState, rl: &RateLimit, d: &Decision, resp: &mut Response) {
    let sets: &[HeaderNames] = match st.rate.headers {
        HeaderMode::Ietf => &[HeaderNames::Ietf],
        HeaderMode::Legacy => &[HeaderNames::Legacy],
        HeaderMode::Both => &[HeaderNames::Ietf, HeaderNames::Legacy],
        HeaderMode::Off => &[],
    };
    let quota = rl.quota();
    for names in sets {
        for (name, value) in rate_limit_headers(rl.name(), &quota, d, *names) {
            if let Ok(v) = HeaderValue::try_from(value) {
                resp.headers_mut().insert(HeaderName::from_static(name), v);
            }
        }
    }
}

/// 200 with the decision, or (`deny_429`) a 429 problem naming the limit and key when denied
/// (503 `store_unavailable` when the fail_closed policy denied it).
fn answer(
    st: &AppState,
    rl: &RateLimit,
    key: &str,
    cost: u64,
    g: &GuardedDecision,
    deny_429: bool,
    why: Option<String>,
) -> Response {
    let d = &g.decision;
    let body = decision_json(rl.name(), key, cost, d, source_name(g.source));
    let mut resp = if d.allowed || !deny_429 {
        (StatusCode::OK, Json(body)).into_response()
    } else {
        // fail_closed denies because the store is down, not because of the limit: a 503 as the
        // tower layer answers, still with Retry-After.
        let (status, code, detail) = if g.source == DecisionSource::FailClosed {
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                format!(
                    "the store is down and the rate_store_down policy is fail_closed: rate limit \
                     {:?} denies key {key:?} (cost {cost}) until it is back",
                    rl.name()
                ),
            )
        } else {
            let detail = why.unwrap_or_else(|| {
                format!(
                    "rate limit {:?} denies key {key:?} (cost {cost}) for now",
                    rl.name()
                )
            });
            (StatusCode::TOO_MANY_REQUESTS, "rate_limited", detail)
        };
        problem_response(body, status, code, detail, d)
    };
    add_fields(st, rl, d, &mut resp);
    resp
}

/// A denial's `body` (its decision's fields) as a problem+json with `status`, `code` and
/// `detail` added, and `Retry-After` from `d`.
pub(super) fn problem_response(
    mut body: Value,
    status: StatusCode,
    code: &str,
    detail: String,
    d: &Decision,
) -> Response {
    if let Value::Object(map) = &mut body {
        for (k, v) in [
            ("type", json!("about:blank")),
            ("title", json!(status.canonical_reason().unwrap_or("Error"))),
            ("status", json!(status.as_u16())),
            ("code", json!(code)),
            ("detail", json!(detail)),
        ] {
            map.insert(k.to_string(), v);
        }
    }
    let mut resp = (status, Json(body)).into_response();
    let headers = resp.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    if let Some(secs) = retry_after_secs(d) {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    resp
}

/// `GET /v1/ratelimits`: every limit's quota.
#[utoipa::path(
    get,
    path = "/v1/ratelimits",
    operation_id = "list_rate_limits",
    tag = "rate limits",
    responses(
        (status = 200, description = "Every rate limit's quota", body = Vec<Quota>),
        (status = 503, description = "The store did not answer", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn list(State(st): State<Shared>) -> Result<Json<Vec<Value>>, Problem> {
    let names = st
        .rate
        .bounded(st.limiter.rate_limits())
        .await?
        .map_err(|e| Problem::from_lib(e, "name"))?;
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let rl = st.rate.open_fresh(&st.limiter, &name).await?;
        out.push(quota_json(&name, &rl.quota()));
    }
    Ok(Json(out))
}

/// `GET /v1/ratelimits/{name}`: its quota.
#[utoipa::path(
    get,
    path = "/v1/ratelimits/{name}",
    tag = "rate limits",
    params(("name" = String, Path, description = "The rate limit")),
    responses(
        (status = 200, description = "Its quota", body = Quota),
        (status = 400, description = "Not a valid rate limit name", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such rate limit", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store did not answer", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn quota(
    State(st): State<Shared>,
    PathParam(name): PathParam,
) -> Result<Json<Value>, Problem> {
    let rl = st.rate.open_fresh(&st.limiter, &name).await?;
    Ok(Json(quota_json(&name, &rl.quota())))
}

/// `PUT /v1/ratelimits/{name}`: creates it with the quota, or changes its quota; the stored
/// reserves and fair flows are kept unless the body gives them.
#[utoipa::path(
    put,
    path = "/v1/ratelimits/{name}",
    tag = "rate limits",
    params(("name" = String, Path, description = "The rate limit")),
    request_body = QuotaBody,
    responses(
        (status = 200, description = "The quota now in force", body = Quota),
        (status = 400, description = "A bad name or quota field (`field` names it)", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store did not answer", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn set_quota(
    State(st): State<Shared>,
    PathParam(name): PathParam,
    JsonBody(body): JsonBody<quota_spec::QuotaBody>,
) -> Result<Json<Value>, Problem> {
    validate::name(&name).map_err(|e| Problem::from_lib(e, "name"))?;
    let field = |e: FieldError| Problem::field(e.field, e.message);
    let parts = body.parts().map_err(field)?;
    let quota = parts.to_quota().map_err(field)?;
    let create_or_change = async {
        match st.limiter.rate_limit(&name, quota).await {
            Ok(rl) => Ok((rl, quota)),
            Err(Error::QuotaMismatch { .. }) => {
                let rl = st
                    .limiter
                    .open_rate_limit(&name)
                    .await
                    .map_err(|e| Problem::from_lib(e, "name"))?;
                let kept = parts
                    .keeping_shares(&rl.quota())
                    .to_quota()
                    .map_err(field)?;
                rl.set_quota(kept)
                    .await
                    .map_err(|e| Problem::from_lib(e, "limit"))?;
                Ok((rl, kept))
            }
            Err(e) => Err(Problem::from_lib(e, "limit")),
        }
    };
    let (rl, quota) = st.rate.bounded(create_or_change).await??;
    st.rate.remember(rl);
    Ok(Json(quota_json(&name, &quota)))
}

/// `POST /v1/ratelimits/{name}/preview` with a quota (the body of a PUT): what it would
/// have denied of the last minutes' checks of the busiest and most denied keys, replayed from
/// this sidecar's per-second counts (`live/replay.rs`), against the current quota. Changes
/// nothing.
#[utoipa::path(
    post,
    path = "/v1/ratelimits/{name}/preview",
    tag = "rate limits",
    params(("name" = String, Path, description = "The rate limit")),
    request_body = QuotaBody,
    responses(
        (status = 200, description = "The replay under the current and the proposed quota", body = PreviewAnswer),
        (status = 400, description = "A bad quota field (`field` names it)", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such rate limit", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store did not answer", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn preview(
    State(st): State<Shared>,
    PathParam(name): PathParam,
    JsonBody(body): JsonBody<quota_spec::QuotaBody>,
) -> Result<Json<PreviewAnswer>, Problem> {
    let proposed = body
        .parts()
        .and_then(|p| p.to_quota())
        .map_err(|e| Problem::field(e.field, e.message))?;
    let rl = st.rate.open_fresh(&st.limiter, &name).await?;
    let current = rl.quota();
    let keys = st.metrics.rate.live.key_seconds(&name);
    let preview = crate::live::replay::preview(&current, &proposed, &keys);
    Ok(Json(PreviewAnswer {
        current: quota_text(&current),
        name,
        preview,
        proposed: quota_text(&proposed),
    }))
}

/// The answer of a preview. Fields in alphabetical order, as the JSON object it replaced
/// printed them.
#[derive(Debug, Serialize, ToSchema)]
pub struct PreviewAnswer {
    /// The current quota, for people.
    current: String,
    name: String,
    #[schema(value_type = schemas::Preview)]
    preview: crate::live::replay::Preview,
    /// The proposed quota, for people.
    proposed: String,
}

/// `POST /v1/ratelimits/{name}/check`: 200 admitted (cost consumed), 429 denied.
#[utoipa::path(
    post,
    path = "/v1/ratelimits/{name}/check",
    tag = "rate limits",
    params(("name" = String, Path, description = "The rate limit")),
    request_body = CheckBody,
    responses(
        (status = 200, description = "Admitted: the cost is taken; the RateLimit header fields", body = schemas::Decision),
        (status = 400, description = "A bad key, cost, class or flow (`field` names it)", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such rate limit", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "Denied (`Retry-After`, RateLimit header fields); nothing taken", body = RateLimitedProblem, content_type = "application/problem+json"),
        (status = 503, description = "The store is down (under fail_closed: the decision's fields too) or did not answer", body = StoreDownProblem, content_type = "application/problem+json"),
    )
)]
pub async fn check(
    State(st): State<Shared>,
    PathParam(name): PathParam,
    JsonBody(body): JsonBody<CheckBody>,
) -> Result<Response, Problem> {
    check_key(&body.key)?;
    check_flow(body.flow.as_deref())?;
    let rl = st.rate.open(&st.limiter, &name).await?;
    let cost = admissible_cost(&st, &rl, body.cost).await?;
    let (class, flow) = (body.class.as_deref(), body.flow.as_deref());
    admissible_class(&st, &rl, class, cost).await?;
    let g = guarded(&st, &rl, &body.key, options(cost, class, flow)).await?;
    if g.decision.never_admits() {
        return Err(never_admitted(&rl, cost));
    }
    record(&st, &rl, &body.key, class, &g, cost);
    Ok(answer(&st, &rl, &body.key, cost, &g, true, None))
}

/// `POST /v1/ratelimits/{name}/wait`: checks (as `class`, if given), and after a denial
/// sleeps its `retry_after`, until admitted (200) or `timeout_ms` would pass (429, nothing
/// consumed; on a quota with a ban, the denial starts the ban); 503 at shutdown.
#[utoipa::path(
    post,
    path = "/v1/ratelimits/{name}/wait",
    tag = "rate limits",
    params(("name" = String, Path, description = "The rate limit")),
    request_body = WaitBody,
    responses(
        (status = 200, description = "Admitted: the cost is taken", body = schemas::Decision),
        (status = 400, description = "A bad key, cost, timeout, class or flow (`field` names it)", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such rate limit", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "Not admitted within `timeout_ms`; nothing taken", body = RateLimitedProblem, content_type = "application/problem+json"),
        (status = 503, description = "The store is down or did not answer, or the sidecar is shutting down", body = StoreDownProblem, content_type = "application/problem+json"),
    )
)]
pub async fn wait(
    State(st): State<Shared>,
    PathParam(name): PathParam,
    JsonBody(body): JsonBody<WaitBody>,
) -> Result<Response, Problem> {
    check_key(&body.key)?;
    check_flow(body.flow.as_deref())?;
    let max = i64::try_from(MAX_TIMEOUT.as_millis()).unwrap_or(i64::MAX);
    let timeout_ms = body
        .timeout_ms
        .unwrap_or(i64::try_from(DEFAULT_TIMEOUT.as_millis()).unwrap_or(0));
    if !(0..=max).contains(&timeout_ms) {
        return Err(Problem::field(
            "timeout_ms",
            format!("timeout_ms must be between 0 and {max}, got {timeout_ms}"),
        ));
    }
    let rl = st.rate.open(&st.limiter, &name).await?;
    let cost = admissible_cost(&st, &rl, body.cost).await?;
    let class = body.class.as_deref();
    admissible_class(&st, &rl, class, cost).await?;
    let timeout = Duration::from_millis(u64::try_from(timeout_ms).unwrap_or(0));
    let _in_flight = InFlight::new(st.metrics.rate.waits_in_flight(rl.name()));
    if st.shutdown.is_cancelled() {
        return Err(shutting_down());
    }
    // The library's one wait; shutdown ends it only while it sleeps (a check cut off
    // mid-write could consume and still answer 503).
    let waited = st
        .rate
        .guard
        .wait_with_or(
            &rl,
            &body.key,
            options(cost, class, body.flow.as_deref()).within(timeout),
            st.shutdown.cancelled(),
        )
        .await
        .map_err(|e| check_problem(e, rl.name(), class.is_some()))?;
    let g = match waited {
        Waited::Admitted(g) => {
            record(&st, &rl, &body.key, class, &g, cost);
            return Ok(answer(&st, &rl, &body.key, cost, &g, true, None));
        }
        Waited::Never(_) => return Err(never_admitted(&rl, cost)),
        Waited::Denied(g) => g,
        _ => return Err(shutting_down()),
    };
    let ban = rl.quota().ban;
    let why = format!(
        "rate limit {name:?} would not admit key {:?} (cost {cost}) within {timeout_ms} ms; \
         nothing was consumed{}",
        body.key,
        if ban.is_zero() {
            String::new()
        } else {
            format!(
                ", but the denial started the quota's ban of {} ms",
                ban.as_millis()
            )
        }
    );
    record(&st, &rl, &body.key, class, &g, cost);
    Ok(answer(&st, &rl, &body.key, cost, &g, true, Some(why)))
}

/// Counts a wait in flight in `clusterlimit_rate_waits_in_flight` until dropped, however the
/// wait ends.
struct InFlight(Gauge);

impl InFlight {
    fn new(gauge: Gauge) -> InFlight {
        gauge.inc();
        InFlight(gauge)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}

fn shutting_down() -> Problem {
    Problem::unavailable("shutting_down", "the sidecar is shutting down")
}

/// The `{name}` and (percent-decoded) `{*key}` of a key route.
fn key_path(
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<(String, String), Problem> {
    let Path((name, key)) = path.map_err(path_problem)?;
    check_key(&key)?;
    Ok((name, key))
}

/// `GET /v1/ratelimits/{name}/keys/{key}`: the key's state (a check of cost 0: nothing
/// consumed); `allowed` tells whether a request of 1 would pass now. Always 200.
#[utoipa::path(
    get,
    path = "/v1/ratelimits/{name}/keys/{*key}",
    tag = "rate limits",
    params(
        ("name" = String, Path, description = "The rate limit"),
        ("key" = String, Path, description = "The key, percent-encoded (it may hold `/`)"),
    ),
    responses(
        (status = 200, description = "The key's state (a check of cost 0)", body = schemas::Decision),
        (status = 400, description = "A bad name or key", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such rate limit", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store did not answer", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn peek(
    State(st): State<Shared>,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<Response, Problem> {
    let (name, key) = key_path(path)?;
    let rl = st.rate.open(&st.limiter, &name).await?;
    let g = guarded(&st, &rl, &key, options(0, None, None)).await?;
    Ok(answer(&st, &rl, &key, 0, &g, false, None))
}

/// `DELETE /v1/ratelimits/{name}/keys/{key}`: forgets the key (full bucket, empty window, no
/// ban). 204.
#[utoipa::path(
    delete,
    path = "/v1/ratelimits/{name}/keys/{*key}",
    tag = "rate limits",
    params(
        ("name" = String, Path, description = "The rate limit"),
        ("key" = String, Path, description = "The key, percent-encoded (it may hold `/`)"),
    ),
    responses(
        (status = 204, description = "Forgotten: full bucket, empty window, no ban"),
        (status = 400, description = "A bad name or key", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such rate limit", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store did not answer", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn reset(
    State(st): State<Shared>,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<StatusCode, Problem> {
    let (name, key) = key_path(path)?;
    let rl = st.rate.open(&st.limiter, &name).await?;
    st.rate
        .bounded(rl.reset(&key))
        .await?
        .map_err(|e| lib_problem(e, &name))?;
    Ok(StatusCode::NO_CONTENT)
}

/// `/v1/ratelimits/{name}/keys/` with no key.
#[utoipa::path(
    method(get, delete),
    path = "/v1/ratelimits/{name}/keys/",
    tag = "rate limits",
    params(("name" = String, Path, description = "The rate limit")),
    responses(
        (status = 400, description = "No key: `field` is `key`", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn empty_key() -> Problem {
    Problem::field(
        "key",
        format!("key must be 1-{MAX_KEY_LEN} bytes of UTF-8, got 0 bytes"),
    )
}
