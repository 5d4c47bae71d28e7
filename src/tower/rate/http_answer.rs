//! The HTTP answers: a rejection as a status with an RFC 9457 `application/problem+json`
//! body (the sidecar's shape: `type`, `title`, `status`, `detail`, `code`, and `field` or
//! `limit`), `Retry-After` and the RateLimit fields.

use super::admit::Fields;
use super::error::{RateLimitError, RateLimitInfo};
use crate::rate::headers::retry_after_secs;
use crate::rate_guard::Source;
use http::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::StatusCode;
use serde_json::json;
use std::convert::Infallible;

/// The response to a request that was not run.
pub(crate) fn rejection<B: From<String>>(
    rejection: RateLimitError<Infallible>,
    fields: &Fields,
) -> http::Response<B> {
    let detail = rejection.to_string();
    let (status, code, extra, retry, info) = match rejection {
        RateLimitError::RateLimited {
            limit,
            decision,
            source,
        } => {
            let (status, code) = if source == Source::FailClosed {
                (StatusCode::SERVICE_UNAVAILABLE, "store_unavailable")
            } else {
                (StatusCode::TOO_MANY_REQUESTS, "rate_limited")
            };
            let retry = retry_after_secs(&decision);
            let extra = ("limit", limit.clone());
            let info = RateLimitInfo {
                limit,
                decision,
                source,
            };
            (status, code, Some(extra), retry, Some(info))
        }
        RateLimitError::MissingKey { .. } => (
            StatusCode::BAD_REQUEST,
            "missing_key",
            Some(("field", "key".to_string())),
            None,
            None,
        ),
        RateLimitError::InvalidRequest { field, .. } => (
            StatusCode::BAD_REQUEST,
            "invalid_field",
            Some(("field", field.to_string())),
            None,
            None,
        ),
        RateLimitError::Limiter(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "limiter_error",
            None,
            None,
            None,
        ),
        RateLimitError::Service(never) => match never {},
    };
    let mut body = json!({
        "type": "about:blank",
        "title": status.canonical_reason().unwrap_or("Error"),
        "status": status.as_u16(),
        "detail": detail,
        "code": code,
    });
    if let (Some((name, value)), Some(obj)) = (extra, body.as_object_mut()) {
        obj.insert(name.to_string(), value.into());
    }
    let mut res = http::Response::new(B::from(body.to_string()));
    *res.status_mut() = status;
    let headers = res.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    if let Some(secs) = retry {
        headers.insert(RETRY_AFTER, HeaderValue::from(secs));
    }
    add_fields(headers, fields);
    if let Some(info) = info {
        res.extensions_mut().insert(info);
    }
    res
}

/// Adds the RateLimit fields. The IETF fields are lists, so a layer inside another adds its
/// own entry (`append`); the legacy `X-RateLimit-*` are single values: the outermost wins.
pub(crate) fn add_fields(headers: &mut HeaderMap, fields: &Fields) {
    for (name, value) in fields {
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) else {
            continue; // Not reachable: names are constants, values escaped ASCII.
        };
        if name.as_str().starts_with("x-") {
            headers.insert(name, value);
        } else {
            headers.append(name, value);
        }
    }
}
