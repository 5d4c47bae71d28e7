//! The server span of each RLS call (`rls/grpc.rs`), joined to the caller's trace: W3C
//! `traceparent` and `tracestate` taken from the call's gRPC metadata. At DEBUG like the
//! library's spans, so it is not created at the default log level without an export.

use opentelemetry::propagation::{Extractor, TextMapPropagator as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tonic::metadata::{KeyRef, MetadataMap};
use tracing::field::Empty;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// The span of a call of `method` on `service`, a child of the caller's span when `metadata`
/// carries a valid `traceparent` (else the root of a new trace). [`finished`] records its status.
pub fn server_span(service: &'static str, method: &'static str, metadata: &MetadataMap) -> Span {
    let span = tracing::debug_span!(
        "rpc.request",
        "otel.name" = %format_args!("{service}/{method}"),
        "otel.kind" = "server",
        "rpc.system" = "grpc",
        "rpc.service" = service,
        "rpc.method" = method,
        "rpc.grpc.status_code" = Empty,
        "otel.status_code" = Empty,
    );
    if !span.is_disabled() {
        // A missing or malformed traceparent starts a new trace: nothing to refuse.
        let _ = span.set_parent(TraceContextPropagator::new().extract(&Metadata(metadata)));
    }
    span
}

/// Records the call's gRPC status code (0: OK) on its span.
pub fn finished(span: &Span, code: tonic::Code) {
    span.record("rpc.grpc.status_code", code as i32);
    if code != tonic::Code::Ok {
        span.record("otel.status_code", "ERROR");
    }
}

/// The call's metadata as the propagator reads it (ASCII entries only: traceparent is one).
struct Metadata<'a>(&'a MetadataMap);

impl Extractor for Metadata<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0
            .keys()
            .filter_map(|k| match k {
                KeyRef::Ascii(k) => Some(k.as_str()),
                KeyRef::Binary(_) => None,
            })
            .collect()
    }
}
