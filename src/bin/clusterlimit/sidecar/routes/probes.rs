//! The process routes: `/metrics`, `/healthz`, `/readyz`.

use super::state::{Shared, READY_TIMEOUT};
use crate::sidecar::problem::Problem;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

/// The Prometheus metrics.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "probes",
    responses(
        (status = 200, description = "The metrics", body = String, content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8"),
    )
)]
pub async fn metrics(State(st): State<Shared>) -> Response {
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
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "probes",
    responses(
        (status = 200, description = "`ok`, with the state of the RLS rules when served", body = String, content_type = "text/plain; charset=utf-8"),
    )
)]
pub async fn healthz(State(st): State<Shared>) -> String {
    format!("ok\n{}", st.metrics.rls_reload.health_lines())
}

/// 200 while the store answers.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "probes",
    responses(
        (status = 200, description = "`ready`, with the state of the RLS rules when served", body = String, content_type = "text/plain; charset=utf-8"),
        (status = 503, description = "The store did not answer within 1 s, or the sidecar is shutting down", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn readyz(State(st): State<Shared>) -> Result<String, Problem> {
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
