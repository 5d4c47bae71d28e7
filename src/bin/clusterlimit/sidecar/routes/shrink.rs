//! `POST /v1/permits/{id}/shrink`: lowers a held permit's weight (acquired at an estimate,
//! shrunk to the real figure once known); the weight freed goes to the waiters.

use super::permit_table::Shrunk;
use super::state::Shared;
use crate::sidecar::body::JsonBody;
use crate::sidecar::path_param::PathParam;
use crate::sidecar::problem::Problem;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The body of `POST /v1/permits/{id}/shrink`.
// Read as i64 so that a negative one is reported as out of range for its field, not as a
// type error.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ShrinkBody {
    /// The weight to hold from now on: at least 1, at most the weight held.
    permits: Option<i64>,
}

/// 200 answer: the weight held now.
#[derive(Debug, Serialize, ToSchema)]
pub struct ShrinkAnswer {
    id: String,
    permits: u32,
}

/// Lowers permit `id` to the body's `permits`: 400 naming `permits` for 0, more than held or
/// not a number, 404 for an unknown permit, 410 for a lost one.
#[utoipa::path(
    post,
    path = "/v1/permits/{id}/shrink",
    tag = "permits",
    params(("id" = String, Path, description = "The permit's id")),
    request_body = ShrinkBody,
    responses(
        (status = 200, description = "The weight held now", body = ShrinkAnswer),
        (status = 400, description = "`permits` missing, 0, or more than held", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such permit", body = Problem, content_type = "application/problem+json"),
        (status = 410, description = "The permit was lost (the store session ended)", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn shrink(
    State(st): State<Shared>,
    PathParam(id): PathParam,
    JsonBody(body): JsonBody<ShrinkBody>,
) -> Result<Json<ShrinkAnswer>, Problem> {
    let permits = checked(body.permits)?;
    match st.table.shrink(&id, permits).await {
        Shrunk::Done(Ok(permits)) => Ok(Json(ShrinkAnswer { id, permits })),
        Shrunk::Done(Err(e)) => Err(Problem::from_lib(e, "permits")),
        Shrunk::Lost => Err(Problem::new(
            StatusCode::GONE,
            "permit_lost",
            "the permit was lost (the store session ended): stop the guarded work",
        )),
        Shrunk::Unknown => Err(Problem::not_found(format!(
            "no permit {id:?} (never granted, released, or expired)"
        ))),
    }
}

/// `permits` as a weight of at least 1, or a 400 naming it (the library checks the upper
/// bound: the weight held).
fn checked(permits: Option<i64>) -> Result<u32, Problem> {
    let Some(permits) = permits else {
        return Err(Problem::field(
            "permits",
            "permits is required: the weight to hold from now on",
        ));
    };
    u32::try_from(permits)
        .ok()
        .filter(|&p| p >= 1)
        .ok_or_else(|| {
            Problem::field(
                "permits",
                format!("permits must be at least 1 and at most the weight held, got {permits}"),
            )
        })
}
