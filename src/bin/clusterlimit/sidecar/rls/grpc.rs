//! The gRPC side of the RLS: the tonic service around a shared [`Rls`], the caller's
//! `grpc-timeout` as the budget of its answer, and the bearer token every call needs.

use super::service::Rls;
use crate::sidecar::metrics::Metrics;
use crate::sidecar::otel_rpc;
use crate::sidecar::token::Token;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use std::sync::Arc;
use std::time::Duration;
use tonic::{Request, Response, Status};
use tracing::Instrument as _;

/// The RLS's gRPC service name, as its server spans name it.
const SERVICE: &str = "envoy.service.ratelimit.v3.RateLimitService";

/// What a caller that sent `grpc-timeout` leaves this service for its store calls: the
/// timeout less a margin for the answer's way back (a fifth of it, at least 2 ms). Envoy sends
/// its rate limit filter's `timeout` (20 ms by default) this way.
fn budget_of(metadata: &tonic::metadata::MetadataMap) -> Option<Duration> {
    let timeout = parse_grpc_timeout(metadata.get("grpc-timeout")?.to_str().ok()?)?;
    let margin = (timeout / 5).max(Duration::from_millis(2));
    Some(timeout.saturating_sub(margin).max(Duration::from_millis(1)))
}

/// gRPC's `grpc-timeout`: up to 8 digits and a unit (`H`, `M`, `S`, `m`, `u`, `n`).
fn parse_grpc_timeout(text: &str) -> Option<Duration> {
    let (digits, unit) = text.split_at(text.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.checked_mul(3600)?),
        "M" => Duration::from_secs(n.checked_mul(60)?),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// The tonic service around a shared [`Rls`].
#[derive(Clone)]
pub struct Service(pub Arc<Rls>);

#[tonic::async_trait]
impl RateLimitService for Service {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let span = otel_rpc::server_span(SERVICE, "ShouldRateLimit", request.metadata());
        // Boxed: the answer's future is deep enough to overflow the compiler's layout query
        // inside tonic's own.
        let answer: std::pin::Pin<Box<dyn std::future::Future<Output = _> + Send + '_>> =
            Box::pin(self.0.answer(
                request.get_ref(),
                budget_of(request.metadata()).unwrap_or(Duration::MAX),
            ));
        let answered = answer.instrument(span.clone()).await;
        let code = answered
            .as_ref()
            .map_or_else(Status::code, |_| tonic::Code::Ok);
        otel_rpc::finished(&span, code);
        answered.map(Response::new)
    }
}

/// With a token configured, every call needs `authorization: Bearer TOKEN` metadata.
pub fn require_token(
    token: Option<Token>,
    metrics: Arc<Metrics>,
) -> impl FnMut(Request<()>) -> Result<Request<()>, Status> + Clone {
    move |req: Request<()>| {
        let Some(token) = &token else {
            return Ok(req);
        };
        let presented = req
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        match presented {
            Some(p) if token.matches(p.as_bytes()) => Ok(req),
            _ => {
                metrics.unauthorized();
                Err(Status::unauthenticated(
                    "this RLS needs `authorization: Bearer TOKEN` metadata \
                     (Envoy: grpc_service.initial_metadata)",
                ))
            }
        }
    }
}

#[cfg(test)]
mod grpc_timeout_tests {
    use super::*;

    #[test]
    fn grpc_timeouts_parse_as_the_spec_says_and_leave_a_margin() {
        assert_eq!(parse_grpc_timeout("20m"), Some(Duration::from_millis(20)));
        assert_eq!(parse_grpc_timeout("1S"), Some(Duration::from_secs(1)));
        assert_eq!(parse_grpc_timeout("2M"), Some(Duration::from_secs(120)));
        assert_eq!(parse_grpc_timeout("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_grpc_timeout("500u"), Some(Duration::from_micros(500)));
        assert_eq!(parse_grpc_timeout("7n"), Some(Duration::from_nanos(7)));
        for bad in ["", "m", "20", "20x", "-1m", "123456789m", "1.5S"] {
            assert_eq!(parse_grpc_timeout(bad), None, "{bad:?}");
        }
        let mut md = tonic::metadata::MetadataMap::new();
        assert_eq!(budget_of(&md), None);
        md.insert(
            "grpc-timeout",
            tonic::metadata::MetadataValue::from_static("20m"),
        );
        assert_eq!(budget_of(&md), Some(Duration::from_millis(16)));
        md.insert(
            "grpc-timeout",
            tonic::metadata::MetadataValue::from_static("5m"),
        );
        assert_eq!(budget_of(&md), Some(Duration::from_millis(3)));
        md.insert(
            "grpc-timeout",
            tonic::metadata::MetadataValue::from_static("1m"),
        );
        assert_eq!(budget_of(&md), Some(Duration::from_millis(1)));
    }
}
