//! Errors as RFC 9457 `application/problem+json` bodies, naming the offending field.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

/// An HTTP error answer (RFC 9457 `application/problem+json`).
#[derive(Debug, Serialize, ToSchema)]
pub struct Problem {
    /// Always `about:blank`: `code` says which problem it is.
    #[serde(rename = "type")]
    #[schema(value_type = String)]
    kind: &'static str,
    /// The HTTP status's reason phrase.
    #[schema(value_type = String)]
    title: &'static str,
    /// The HTTP status.
    status: u16,
    /// What failed and what to do, in words.
    detail: String,
    /// Stable machine-readable reason, e.g. `invalid_field`, `timeout`, `permit_lost`.
    #[schema(value_type = String)]
    code: &'static str,
    /// The request field at fault (`permits`, `name`, …), for 400s.
    #[serde(skip_serializing_if = "Option::is_none")]
    field: Option<String>,
    #[serde(skip)]
    retry_after: Option<u64>,
}

impl Problem {
    /// A problem with `status`, machine-readable `code` and human `detail`.
    pub fn new(status: StatusCode, code: &'static str, detail: impl Into<String>) -> Self {
        Problem {
            kind: "about:blank",
            title: status.canonical_reason().unwrap_or("Error"),
            status: status.as_u16(),
            detail: detail.into(),
            code,
            field: None,
            retry_after: None,
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    /// 400 naming the field at fault.
    pub fn field(field: impl Into<String>, detail: impl Into<String>) -> Self {
        let mut p = Problem::new(StatusCode::BAD_REQUEST, "invalid_field", detail);
        p.field = Some(field.into());
        p
    }

    /// 400 for a body that is not JSON at all.
    pub fn malformed(detail: impl Into<String>) -> Self {
        Problem::new(StatusCode::BAD_REQUEST, "malformed_json", detail)
    }

    /// 413 for a body over `limit` bytes.
    pub fn too_large(limit: usize) -> Self {
        Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("request body is larger than {limit} bytes"),
        )
    }

    /// 404.
    pub fn not_found(detail: impl Into<String>) -> Self {
        Problem::new(StatusCode::NOT_FOUND, "not_found", detail)
    }

    /// 503: the store or the sidecar cannot serve this now.
    pub fn unavailable(code: &'static str, detail: impl Into<String>) -> Self {
        Problem::new(StatusCode::SERVICE_UNAVAILABLE, code, detail)
    }

    /// Adds a `Retry-After` header (seconds).
    pub fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs);
        self
    }

    /// Maps a library error; `field` names what an `InvalidArgument` is about.
    pub fn from_lib(e: clusterlimit::Error, field: &str) -> Self {
        use clusterlimit::Error as E;
        match e {
            E::InvalidArgument(msg) => Problem::field(field, msg),
            E::CapacityMismatch { .. } => {
                let mut p = Problem::new(StatusCode::CONFLICT, "capacity_mismatch", e.to_string());
                p.field = Some("capacity".into());
                p
            }
            E::NotFound(_) => Problem::not_found(e.to_string()),
            E::Timeout => {
                Problem::new(StatusCode::TOO_MANY_REQUESTS, "timeout", e.to_string()).retry_after(1)
            }
            E::NoPermits => {
                Problem::new(StatusCode::TOO_MANY_REQUESTS, "no_permits", e.to_string())
                    .retry_after(1)
            }
            E::SessionLost => Problem::unavailable("session_lost", e.to_string()),
            E::Closed => Problem::unavailable("shutting_down", e.to_string()),
            // The store's own words, without the "store error:" prefix; retry in a second.
            E::Store(why) => {
                Problem::unavailable("store_unavailable", why.to_string()).retry_after(1)
            }
            e => Problem::unavailable("store_unavailable", e.to_string()),
        }
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_vec(&self).unwrap_or_default();
        let mut resp = (status, body).into_response();
        let headers = resp.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if let Some(secs) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        resp
    }
}
