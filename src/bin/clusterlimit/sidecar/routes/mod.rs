//! The sidecar's HTTP/JSON API, by resource: `semaphores.rs` (semaphores and the permits taken of
//! them, held in `permit_table.rs`, lowered by `shrink.rs`), `adaptive.rs` (what the routes read of
//! adaptive semaphores), `rate_limits.rs` (rate limits and their keys, with `rate_state.rs` their
//! shared state; `reservations.rs` with `reservation_table.rs` and `charges.rs` for costs
//! known afterwards), `probes.rs` (`/metrics`, `/healthz`, `/readyz`); `state.rs` is what every route
//! shares. This file only builds the router.

mod adaptive;
mod charges;
mod permit_table;
mod probes;
mod rate_limits;
mod rate_state;
mod reservation_table;
mod reservations;
mod semaphores;
mod shrink;
mod state;

pub use rate_state::RateApi;
pub use reservations::sweep as sweep_reservations;
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
        // Costs known afterwards (reservations.rs, charges.rs).
        .route(
            "/v1/ratelimits/{name}/reservations",
            post(reservations::reserve),
        )
        .route(
            "/v1/ratelimits/{name}/reservations/{id}/settle",
            post(reservations::settle),
        )
        .route(
            "/v1/ratelimits/{name}/reservations/{id}",
            delete(reservations::keep),
        )
        .route("/v1/ratelimits/{name}/charge", post(charges::charge))
        .route("/v1/ratelimits/{name}/refund", post(charges::refund))
        .route(
            "/v1/ratelimits/{name}/balances/{*key}",
            get(charges::balance),
        )
        .route(
            "/v1/ratelimits/{name}/balances/",
            any(rate_limits::empty_key),
        )
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
