//! Costs charged after the fact over HTTP: `POST …/charge` (may run the key into debt),
//! `POST …/refund` (gives back, never past full) and `GET …/balances/{key}` (a peek with the
//! debt). Each answers the key's balance.

use super::rate_limits::check_key;
use super::rate_state::unknown;
use super::state::Shared;
use crate::common::quota_print::balance_json;
use crate::sidecar::body::JsonBody;
use crate::sidecar::path_param::{path_problem, PathParam};
use crate::sidecar::problem::Problem;
use crate::sidecar::schemas::Balance;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::Json;
use clusterlimit::{Error, MAX_CHARGE};
use serde::Deserialize;
use serde_json::Value;
use utoipa::ToSchema;

/// The body of `POST /v1/ratelimits/{name}/charge`.
// i64 so a negative cost is reported as out of range.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChargeBody {
    /// The key (1-512 bytes).
    key: String,
    /// The units the work used (required).
    cost: Option<i64>,
}

/// The body of `POST /v1/ratelimits/{name}/refund`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RefundBody {
    /// The key (1-512 bytes).
    key: String,
    /// The units to give back (required).
    amount: Option<i64>,
}

/// `n` of `field` if from 0 to `MAX_CHARGE`, else 400 naming it.
fn units(field: &str, n: Option<i64>, what: &str) -> Result<u64, Problem> {
    let Some(n) = n else {
        return Err(Problem::field(
            field,
            format!("{field} is required: {what}"),
        ));
    };
    u64::try_from(n)
        .ok()
        .filter(|n| *n <= MAX_CHARGE)
        .ok_or_else(|| {
            Problem::field(
                field,
                format!("{field} must be a whole number from 0 to {MAX_CHARGE}, got {n}"),
            )
        })
}

/// The problem of a failed charge, refund or balance; a bad argument is `field`'s.
fn problem(e: Error, name: &str, field: &str) -> Problem {
    match e {
        Error::NotFound(_) => unknown(name),
        e => Problem::from_lib(e, field),
    }
}

/// `POST /v1/ratelimits/{name}/charge`: charges `cost` to `key` whatever it holds (into debt
/// past what it has left). 200 with the balance.
#[utoipa::path(
    post,
    path = "/v1/ratelimits/{name}/charge",
    tag = "costs",
    params(("name" = String, Path, description = "The rate limit")),
    request_body = ChargeBody,
    responses(
        (status = 200, description = "Charged: the key's balance", body = Balance),
        (status = 400, description = "A bad key or cost (`field` names it)", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such rate limit", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store did not answer", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn charge(
    State(st): State<Shared>,
    PathParam(name): PathParam,
    JsonBody(body): JsonBody<ChargeBody>,
) -> Result<Json<Value>, Problem> {
    check_key(&body.key)?;
    let cost = units("cost", body.cost, "the units the work used")?;
    let rl = st.rate.open(&st.limiter, &name).await?;
    // Applied even if this request is dropped once the charge is sent (the library's word).
    let b = st
        .rate
        .bounded(rl.charge(&body.key, cost))
        .await?
        .map_err(|e| problem(e, &name, "cost"))?;
    st.metrics.settle.adjusted(&name, false, cost);
    Ok(Json(balance_json(&name, &body.key, &b)))
}

/// `POST /v1/ratelimits/{name}/refund`: gives `amount` back to `key` (never past full). 200
/// with the balance.
#[utoipa::path(
    post,
    path = "/v1/ratelimits/{name}/refund",
    tag = "costs",
    params(("name" = String, Path, description = "The rate limit")),
    request_body = RefundBody,
    responses(
        (status = 200, description = "Refunded: the key's balance", body = Balance),
        (status = 400, description = "A bad key or amount (`field` names it)", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such rate limit", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store did not answer", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn refund(
    State(st): State<Shared>,
    PathParam(name): PathParam,
    JsonBody(body): JsonBody<RefundBody>,
) -> Result<Json<Value>, Problem> {
    check_key(&body.key)?;
    let amount = units("amount", body.amount, "the units to give back")?;
    let rl = st.rate.open(&st.limiter, &name).await?;
    let b = st
        .rate
        .bounded(rl.refund(&body.key, amount))
        .await?
        .map_err(|e| problem(e, &name, "amount"))?;
    st.metrics.settle.adjusted(&name, true, amount);
    Ok(Json(balance_json(&name, &body.key, &b)))
}

/// `GET /v1/ratelimits/{name}/balances/{key}`: the key as it stands, with its debt (nothing
/// taken). 200.
#[utoipa::path(
    get,
    path = "/v1/ratelimits/{name}/balances/{*key}",
    tag = "costs",
    params(
        ("name" = String, Path, description = "The rate limit"),
        ("key" = String, Path, description = "The key, percent-encoded (it may hold `/`)"),
    ),
    responses(
        (status = 200, description = "The key's balance", body = Balance),
        (status = 400, description = "A bad name or key", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such rate limit", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store did not answer", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn balance(
    State(st): State<Shared>,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<Json<Value>, Problem> {
    let Path((name, key)) = path.map_err(path_problem)?;
    check_key(&key)?;
    let rl = st.rate.open(&st.limiter, &name).await?;
    let b = st
        .rate
        .bounded(rl.balance(&key))
        .await?
        .map_err(|e| problem(e, &name, "key"))?;
    Ok(Json(balance_json(&name, &key, &b)))
}

/// `/v1/ratelimits/{name}/balances/` with no key.
#[utoipa::path(
    get,
    path = "/v1/ratelimits/{name}/balances/",
    operation_id = "empty_balance_key",
    tag = "costs",
    params(("name" = String, Path, description = "The rate limit")),
    responses(
        (status = 400, description = "No key: `field` is `key`", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn empty_key() -> Problem {
    super::rate_limits::empty_key().await
}
