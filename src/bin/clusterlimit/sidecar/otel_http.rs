//! The server span of each HTTP request, joined to the caller's trace: W3C `traceparent` and
//! `tracestate` taken from the request's headers. Installed (one layer on the router,
//! `running.rs`) only when traces are exported (`otel_export.rs`).

use axum::extract::{MatchedPath, Request};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::Response;
use opentelemetry::propagation::{Extractor, TextMapPropagator as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::field::Empty;
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// Serves `req` inside its server span: method, route and status, a child of the caller's
/// span when the request carries a valid `traceparent` (else the root of a new trace).
pub async fn server_span(req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string());
    let method = req.method().clone();
    let span = tracing::debug_span!(
        "http.request",
        "otel.name" = %format_args!("{method} {}", route.as_deref().unwrap_or("(no route)")),
        "otel.kind" = "server",
        "http.request.method" = %method,
        "http.route" = route,
        "url.path" = req.uri().path(),
        "http.response.status_code" = Empty,
        "otel.status_code" = Empty,
    );
    // A missing or malformed traceparent starts a new trace: nothing to refuse.
    let _ = span.set_parent(TraceContextPropagator::new().extract(&Headers(req.headers())));
    let response = next.run(req).instrument(span.clone()).await;
    let status = response.status();
    span.record("http.response.status_code", status.as_u16());
    if status.is_server_error() {
        span.record("otel.status_code", "ERROR");
    }
    response
}

/// The request's headers as the propagator reads them.
struct Headers<'a>(&'a HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}
