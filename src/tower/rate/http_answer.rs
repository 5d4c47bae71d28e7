//! The HTTP answers: a rejection as a status with an RFC 9457 `application/problem+json`
//! body (the sidecar's shape: `type`, `title`, `status`, `detail`, `code`, and `field` or
//! `limit`), `Retry-After` and the RateLimit fields.

use super::admit::Fields;
use super::error::{RateLimitError, RateLimitInfo};
use crate::error::Error;
use crate::rate::headers::retry_after_secs;
use crate::store_down::DecisionSource;
use http::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::StatusCode;
use serde_json::json;
use std::convert::Infallible;

/// The response to a request that was not run.
pub(crate) fn rejection<B: From<String>>(
    rejection: RateLimitError<Infallible>,
    fields: &Fields,
) -> http::Response<B> {
    let detail = public_detail(&rejection);
    let (status, code, extra, retry, info) = match rejection {
        RateLimitError::RateLimited {
            limit,
            decision,
            source,
        } => {
            let (status, code) = if source == DecisionSource::FailClosed {
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

/// The `detail` of the problem body. A limiter error is logged in full, but the client sees
/// only what is safe to show: the setup mistakes this crate names itself (a closed Limiter, a
/// deleted limit, no Tokio runtime), never a store's own error text (addresses, paths).
fn public_detail(rejection: &RateLimitError<Infallible>) -> String {
    let RateLimitError::Limiter(e) = rejection else {
        return rejection.to_string();
    };
    tracing::error!(error = %e, "cannot rate-limit a request; answered 500");
    match e {
        Error::Closed | Error::NotFound(_) | Error::InvalidArgument(_) => rejection.to_string(),
        _ => "cannot rate-limit the request: the rate limiter failed (the server's log has the \
              cause)"
            .to_string(),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn body(r: RateLimitError<Infallible>) -> (StatusCode, serde_json::Value) {
        let res: http::Response<String> = rejection(r, &Vec::new());
        (res.status(), serde_json::from_str(res.body()).unwrap())
    }

    #[test]
    fn a_store_error_text_is_logged_not_shown() {
        let store = Error::Store("etcd 10.1.2.3:2379: /secret/prefix/rk/api/sk-live-1".into());
        let (status, body) = body(RateLimitError::Limiter(store));
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(body["code"], "limiter_error");
        let detail = body["detail"].as_str().unwrap();
        assert!(
            detail.contains("the server's log has the cause"),
            "{detail}"
        );
        assert!(
            !detail.contains("10.1.2.3") && !detail.contains("secret"),
            "{detail}"
        );
    }

    #[test]
    fn a_setup_mistake_is_named() {
        let (status, body) = body(RateLimitError::Limiter(Error::Closed));
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(
            body["detail"].as_str().unwrap().contains("closed"),
            "{body}"
        );
    }
}
