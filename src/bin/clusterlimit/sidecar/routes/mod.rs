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
use axum::Router;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// Every route of the API, each from its handler's `#[utoipa::path]` (its path, methods and
/// OpenAPI operation): the router and the document (`openapi.rs`) are built from this list.
pub fn api() -> OpenApiRouter<Shared> {
    OpenApiRouter::new()
        .routes(routes!(semaphores::list))
        .routes(routes!(semaphores::status, semaphores::set_capacity))
        .routes(routes!(semaphores::acquire))
        .routes(routes!(semaphores::keepalive))
        .routes(routes!(shrink::shrink))
        .routes(routes!(semaphores::release))
        // Rate limits (rate_limits.rs).
        .routes(routes!(rate_limits::list))
        .routes(routes!(rate_limits::quota, rate_limits::set_quota))
        .routes(routes!(rate_limits::check))
        .routes(routes!(rate_limits::preview))
        .routes(routes!(rate_limits::wait))
        .routes(routes!(rate_limits::peek, rate_limits::reset))
        .routes(routes!(rate_limits::empty_key))
        // Costs known afterwards (reservations.rs, charges.rs).
        .routes(routes!(reservations::reserve))
        .routes(routes!(reservations::settle))
        .routes(routes!(reservations::keep))
        .routes(routes!(charges::charge))
        .routes(routes!(charges::refund))
        .routes(routes!(charges::balance))
        .routes(routes!(charges::empty_key))
        .routes(routes!(probes::metrics))
        .routes(routes!(probes::healthz))
        .routes(routes!(probes::readyz))
}

/// Every route of the sidecar's API.
pub fn router(state: Shared) -> Router {
    let (router, _) = api().split_for_parts();
    router
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
