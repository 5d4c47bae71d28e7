//! Reservations over HTTP: work admitted at an estimate of its cost and settled at the real
//! cost once known (LLM tokens, bytes, rows). `POST …/reservations` admits (201, with an id)
//! or denies (429, as a check); `POST …/reservations/{id}/settle` gives back what the work
//! did not use or charges what it used beyond, into debt if need be; `DELETE
//! …/reservations/{id}` settles at the estimate. The reservations live in
//! `reservation_table.rs`; settling runs in a task of its own, so a client that hangs up
//! mid-request still has its reservation settled.

use super::rate_limits::{
    add_fields, admissible_class, check_flow, check_key, check_problem, lib_problem,
    never_admitted, options, problem_response,
};
use super::reservation_table::{Ended, Taken};
use super::state::{bounded_by, AppState, Shared, MAX_TIMEOUT};
use crate::common::quota_print::{balance_json, quota_text};
use crate::sidecar::body::JsonBody;
use crate::sidecar::path_param::{path_problem, PathParam};
use crate::sidecar::problem::Problem;
use crate::sidecar::schemas::{Balance, ReservationProblem};
use crate::sidecar::settle_metrics::Ending;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use clusterlimit::{Error, RateLimit, Reservation, DEFAULT_SETTLE_WITHIN, MAX_CHARGE};
use serde::{Deserialize, Serialize};
use std::time::Duration;
use utoipa::ToSchema;

/// The longest time limit a reservation may ask for (`settle_within_ms`): a client that
/// vanishes holds a place in the table at most this long.
pub const MAX_SETTLE_WITHIN: Duration = Duration::from_secs(3600);

/// How often the table forgets the reservations past their time limit.
const SWEEP_EVERY: Duration = Duration::from_millis(250);

/// The body of `POST /v1/ratelimits/{name}/reservations`.
// Numbers are i64 so a negative one is reported as out of range for its field.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReserveBody {
    /// The key (1-512 bytes).
    key: String,
    /// The most the work is expected to cost (required; 0: admit now, settle at the real cost).
    estimate: Option<i64>,
    /// A priority class of the quota.
    class: Option<String>,
    /// The flow (tenant), on a quota with fair flows.
    flow: Option<String>,
    /// How long the check may wait for the store (default: the rate store timeout).
    timeout_ms: Option<i64>,
    /// How long the reservation may be settled (default 10 minutes).
    settle_within_ms: Option<i64>,
}

/// The body of `POST /v1/ratelimits/{name}/reservations/{id}/settle`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SettleBody {
    /// What the work really cost (required).
    actual: Option<i64>,
}

/// Milliseconds `ms` of `field` if from 1 to `max`, else 400 naming it; `default` if absent.
fn millis(
    field: &str,
    ms: Option<i64>,
    max: Duration,
    default: Duration,
) -> Result<Duration, Problem> {
    let Some(ms) = ms else { return Ok(default) };
    let max_ms = u64::try_from(max.as_millis()).unwrap_or(u64::MAX);
    match u64::try_from(ms) {
        Ok(m) if (1..=max_ms).contains(&m) => Ok(Duration::from_millis(m)),
        _ => Err(Problem::field(
            field,
            format!("{field} must be from 1 to {max_ms}, got {ms}"),
        )),
    }
}

/// The estimate if the limit could ever admit it at once (0, a peek, included). One above the
/// cached quota's most is checked again after reading the quota from the store.
async fn admissible_estimate(
    st: &AppState,
    rl: &RateLimit,
    estimate: Option<i64>,
) -> Result<u64, Problem> {
    let Some(estimate) = estimate else {
        return Err(Problem::field(
            "estimate",
            "estimate is required: the most the work is expected to cost (0: admit now, settle at the real cost)",
        ));
    };
    let fits = |rl: &RateLimit| {
        u64::try_from(estimate)
            .ok()
            .filter(|e| *e <= rl.quota().max_cost())
    };
    if let Some(e) = fits(rl) {
        return Ok(e);
    }
    if estimate > 0 {
        st.rate.open_fresh(&st.limiter, rl.name()).await?;
    }
    fits(rl).ok_or_else(|| {
        let quota = rl.quota();
        Problem::field(
            "estimate",
            format!(
                "estimate must be a whole number from 0 to {} (the most rate limit {:?} admits at once: {}), got {estimate}",
                quota.max_cost(),
                rl.name(),
                quota_text(&quota)
            ),
        )
    })
}

/// 503: the table of open reservations is full; nothing was taken.
fn table_full(cap: usize) -> Problem {
    Problem::unavailable(
        "too_many_reservations",
        format!(
            "this sidecar holds {cap} open reservations, its max_reservations: settle some or \
             let them expire, then retry; nothing was taken"
        ),
    )
    .retry_after(1)
}

/// A reservation's answer (`id` only when admitted). Fields in alphabetical order, as the
/// JSON object it replaced printed them.
#[derive(Debug, Serialize, ToSchema)]
pub struct Reserved {
    allowed: bool,
    estimate: u64,
    /// The id to settle it by.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = true, nullable = false)]
    id: Option<String>,
    key: String,
    limit: u64,
    name: String,
    remaining: u64,
    reset_after_ms: u64,
    #[schema(required = true)]
    retry_after_ms: Option<u64>,
    /// How long it may be settled; past that it is settled at its estimate.
    settle_within_ms: u64,
}

impl Reserved {
    fn new(rl: &RateLimit, r: &Reservation, within: Duration) -> Reserved {
        let d = r.decision();
        Reserved {
            allowed: d.allowed,
            estimate: r.estimate(),
            id: None,
            key: r.key().to_string(),
            limit: d.limit,
            name: rl.name().to_string(),
            remaining: d.remaining,
            reset_after_ms: millis_up(d.reset_after),
            retry_after_ms: d.retry_after.map(millis_up),
            settle_within_ms: u64::try_from(within.as_millis()).unwrap_or(u64::MAX),
        }
    }
}

/// Milliseconds rounded up: a client that waits this long is never early.
fn millis_up(d: Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

/// `POST /v1/ratelimits/{name}/reservations`: 201 admitted (the estimate taken, an id to
/// settle it by), 429 denied (nothing taken), 503 when the table is full.
#[utoipa::path(
    post,
    path = "/v1/ratelimits/{name}/reservations",
    tag = "costs",
    params(("name" = String, Path, description = "The rate limit")),
    request_body = ReserveBody,
    responses(
        (status = 201, description = "Admitted: the estimate is taken; `id` settles it", body = Reserved),
        (status = 400, description = "A bad key, estimate, class, flow or time (`field` names it)", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such rate limit", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "Denied (`Retry-After`); nothing taken", body = ReservationProblem, content_type = "application/problem+json"),
        (status = 503, description = "The store did not answer, or this sidecar holds its `max_reservations`", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn reserve(
    State(st): State<Shared>,
    PathParam(name): PathParam,
    JsonBody(body): JsonBody<ReserveBody>,
) -> Result<Response, Problem> {
    check_key(&body.key)?;
    check_flow(body.flow.as_deref())?;
    let within = millis(
        "settle_within_ms",
        body.settle_within_ms,
        MAX_SETTLE_WITHIN,
        DEFAULT_SETTLE_WITHIN,
    )?;
    let budget = millis(
        "timeout_ms",
        body.timeout_ms,
        MAX_TIMEOUT,
        st.rate.store_timeout(),
    )?;
    let table = &st.rate.reservations;
    if table.full() {
        return Err(table_full(table.cap()));
    }
    let rl = st.rate.open(&st.limiter, &name).await?;
    let estimate = admissible_estimate(&st, &rl, body.estimate).await?;
    let (class, flow) = (body.class.as_deref(), body.flow.as_deref());
    admissible_class(&st, &rl, class, estimate).await?;
    let asked = options(estimate, class, flow).settle_within(within);
    let reserving = async {
        rl.reserve_with(&body.key, asked)
            .await
            .map_err(|e| check_problem(e, rl.name(), class.is_some()))
    };
    let deadline = tokio::time::Instant::now() + budget;
    let r = bounded_by(deadline, budget, reserving).await?;
    if r.decision().never_admits() {
        return Err(never_admitted(&rl, estimate));
    }
    st.metrics.settle.reserved(rl.name(), r.allowed());
    let mut fields = Reserved::new(&rl, &r, within);
    let d = *r.decision();
    if !r.allowed() {
        let detail = format!(
            "rate limit {name:?} denies key {:?} a reservation of {estimate} for now; nothing was taken",
            body.key
        );
        let mut resp = problem_response(
            serde_json::to_value(&fields).unwrap_or_default(),
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            detail,
            &d,
        );
        add_fields(&st, &rl, &d, &mut resp);
        return Ok(resp);
    }
    let id = table.insert(rl.name(), r).map_err(|r| {
        // Filled up meanwhile: give the estimate back.
        tokio::spawn((*r).settle(0));
        table_full(table.cap())
    })?;
    st.metrics.settle.open(table.len());
    fields.id = Some(id);
    let mut resp = (StatusCode::CREATED, Json(fields)).into_response();
    add_fields(&st, &rl, &d, &mut resp);
    Ok(resp)
}

/// The `{name}` and `{id}` of a reservation's route.
fn id_path(
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<(String, String), Problem> {
    let Path((name, id)) = path.map_err(path_problem)?;
    Ok((name, id))
}

/// `POST /v1/ratelimits/{name}/reservations/{id}/settle` with the real cost `actual`: 200
/// with the key's balance; 409 settled before, 410 past its time limit, 404 unknown.
#[utoipa::path(
    post,
    path = "/v1/ratelimits/{name}/reservations/{id}/settle",
    tag = "costs",
    params(
        ("name" = String, Path, description = "The rate limit"),
        ("id" = String, Path, description = "The reservation's id"),
    ),
    request_body = SettleBody,
    responses(
        (status = 200, description = "Settled: the key's balance", body = Balance),
        (status = 400, description = "`actual` missing, negative, or too far above the estimate", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such reservation", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Already settled", body = Problem, content_type = "application/problem+json"),
        (status = 410, description = "Its time limit passed: it was settled at its estimate", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store did not answer (the settlement may or may not have applied)", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn settle(
    State(st): State<Shared>,
    path: Result<Path<(String, String)>, PathRejection>,
    JsonBody(body): JsonBody<SettleBody>,
) -> Result<Json<serde_json::Value>, Problem> {
    let (name, id) = id_path(path)?;
    let Some(actual) = body.actual else {
        return Err(Problem::field(
            "actual",
            "actual is required: what the work really cost",
        ));
    };
    let Ok(actual) = u64::try_from(actual) else {
        return Err(Problem::field(
            "actual",
            format!("actual must be 0 or more, got {actual}"),
        ));
    };
    in_task(st, name, id, Some(actual)).await
}

/// `DELETE /v1/ratelimits/{name}/reservations/{id}`: settles it at its estimate now (200 with
/// the key's balance); 409, 410 and 404 as a settle.
#[utoipa::path(
    delete,
    path = "/v1/ratelimits/{name}/reservations/{id}",
    tag = "costs",
    params(
        ("name" = String, Path, description = "The rate limit"),
        ("id" = String, Path, description = "The reservation's id"),
    ),
    responses(
        (status = 200, description = "Settled at its estimate: the key's balance", body = Balance),
        (status = 404, description = "No such reservation", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Already settled", body = Problem, content_type = "application/problem+json"),
        (status = 410, description = "Its time limit passed: it was settled at its estimate", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store did not answer", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn keep(
    State(st): State<Shared>,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<Json<serde_json::Value>, Problem> {
    let (name, id) = id_path(path)?;
    in_task(st, name, id, None).await
}

/// Settles `id` at `actual` (`None`: its estimate) in a task of its own: the client hanging up
/// does not stop it halfway.
async fn in_task(
    st: Shared,
    name: String,
    id: String,
    actual: Option<u64>,
) -> Result<Json<serde_json::Value>, Problem> {
    let task = tokio::spawn(async move { settle_now(&st, &name, &id, actual).await });
    match task.await {
        Ok(answer) => answer.map(Json),
        Err(_) => Err(Problem::unavailable(
            "shutting_down",
            "the settlement was stopped (the sidecar is shutting down)",
        )),
    }
}

/// Takes `id` out of the table and settles it.
async fn settle_now(
    st: &AppState,
    name: &str,
    id: &str,
    actual: Option<u64>,
) -> Result<serde_json::Value, Problem> {
    let table = &st.rate.reservations;
    if let (Some(actual), Some(estimate)) = (actual, table.estimate(name, id)) {
        check_actual(actual, estimate)?;
    }
    let r = match table.take(name, id) {
        Taken::Open(r) => r,
        Taken::ExpiredNow(limit) => {
            st.metrics.settle.ended(&limit, Ending::Expired);
            return Err(gone(id));
        }
        Taken::Ended(Ended::Expired) => return Err(gone(id)),
        Taken::Ended(Ended::Settled) => {
            return Err(Problem::new(
                StatusCode::CONFLICT,
                "already_settled",
                format!("reservation {id:?} is already settled"),
            ))
        }
        Taken::Unknown => {
            return Err(Problem::not_found(format!(
                "no reservation {id:?} on rate limit {name:?} (never made here, or ended long ago)"
            )))
        }
    };
    st.metrics.settle.open(table.len());
    let estimate = r.estimate();
    let kept = actual.is_none();
    let actual = actual.unwrap_or(estimate);
    let key = r.key().to_string();
    let budget = st.rate.store_timeout();
    let settled = bounded_by(tokio::time::Instant::now() + budget, budget, async {
        r.settle(actual).await.map_err(|e| match e {
            // The only bad argument left: its time limit passed since it was taken out.
            Error::InvalidArgument(_) => gone(id),
            e => lib_problem(e, name),
        })
    })
    .await;
    let ending = if kept { Ending::Kept } else { Ending::Settled };
    st.metrics.settle.ended(name, ending);
    let balance = settled.inspect_err(|p| {
        if p.status() == StatusCode::SERVICE_UNAVAILABLE {
            tracing::warn!(%id, limit = name, key = %key, "settling a reservation: the store did not answer; it may or may not have applied");
        }
    })?;
    st.metrics.settle.settled(name, estimate, actual);
    Ok(balance_json(name, &key, &balance))
}

/// `actual` if settling at it moves the key by at most `MAX_CHARGE`, else 400 naming it.
fn check_actual(actual: u64, estimate: u64) -> Result<(), Problem> {
    let max = MAX_CHARGE.saturating_add(estimate);
    if actual > max {
        return Err(Problem::field(
            "actual",
            format!(
                "actual may be at most {max} (the estimate {estimate} plus the most one charge may add, {MAX_CHARGE}), got {actual}"
            ),
        ));
    }
    Ok(())
}

/// 410: the reservation's time limit passed.
fn gone(id: &str) -> Problem {
    Problem::new(
        StatusCode::GONE,
        "reservation_expired",
        format!(
            "reservation {id:?} was settled at its estimate when its time limit passed; charge any extra (POST …/charge)"
        ),
    )
}

/// Forgets the reservations past their time limit every `SWEEP_EVERY` (each stays settled
/// at its estimate), until shutdown: a client that vanished costs no memory for longer.
pub async fn sweep(st: Shared) {
    let mut tick = tokio::time::interval(SWEEP_EVERY);
    loop {
        tokio::select! {
            () = st.shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let expired = st.rate.reservations.sweep();
        for limit in &expired {
            st.metrics.settle.ended(limit, Ending::Expired);
        }
        if !expired.is_empty() {
            tracing::debug!(
                count = expired.len(),
                "reservations passed their time limit unsettled: settled at their estimates"
            );
            st.metrics.settle.open(st.rate.reservations.len());
        }
    }
}
