//! The sidecar's HTTP/JSON API, by resource: `semaphores.rs` (semaphores and the permits taken of
//! them, held in `permit_table.rs`, lowered by `shrink.rs`), `adaptive.rs` (what the routes read of
//! adaptive semaphores), `rate_limits.rs` (rate limits and their keys, with `rate_state.rs` their
//! shared state), `probes.rs` (`/metrics`, `/healthz`, `/readyz`); `state.rs` is what every route
//! shares. This file only builds the router.

mod adaptive;
mod permit_table;
mod probes;
mod rate_limits;
mod rate_state;
mod semaphores;
mod shrink;
mod state;

pub use rate_state::RateApi;
pub use state::{AppState, Shared, MIN_TTL};

use crate::sidecar::body::MAX_BODY;
use crate::sidecar::problem::Problem;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::routing::{any, delete, get, post};
use axum::Router;

/// Every route of the sidecar.
pub fn router(state: Shared) -> Router {
    Router::new()
        .route("/v1/semaphores", get(semaphores::list))
        .route(
            "/v1/semaphores/{name}",
            get(semaphores::status).put(semaphores::set_capacity),
        )
        .route("/v1/semaphores/{name}/permits", post(semaphores::acquire))
        .route("/v1/permits/{id}/keepalive", post(semaphores::keepalive))
        .route("/v1/permits/{id}/shrink", post(shrink::shrink))
        .route("/v1/permits/{id}", delete(semaphores::release))
        // Rate limits (rate_limits.rs).
        .route("/v1/ratelimits", get(rate_limits::list))
        .route(
            "/v1/ratelimits/{name}",
            get(rate_limits::quota).put(rate_limits::set_quota),
        )
        .route("/v1/ratelimits/{name}/check", post(rate_limits::check))
        .route("/v1/ratelimits/{name}/preview", post(rate_limits::preview))
        .route("/v1/ratelimits/{name}/wait", post(rate_limits::wait))
        .route(
            "/v1/ratelimits/{name}/keys/{*key}",
            get(rate_limits::peek).delete(rate_limits::reset),
        )
        .route("/v1/ratelimits/{name}/keys/", any(rate_limits::empty_key))
        .route("/metrics", get(probes::metrics))
        .route("/healthz", get(probes::healthz))
        .route("/readyz", get(probes::readyz))
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
