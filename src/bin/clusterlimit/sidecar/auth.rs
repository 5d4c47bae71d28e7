//! Bearer-token access control: with a token configured, every route but `/healthz` and
//! `/readyz` (and `/metrics`, if configured so) answers 401 to a request without
//! `Authorization: Bearer <token>`, before any handler runs, so nothing changes. The web
//! view's page and login routes are open (the page holds no data); a web view login (a
//! cookie, see `ui/logins.rs`) counts as the token for reads, and for changes only with its
//! CSRF value in a header too.

use super::metrics::Metrics;
use super::problem::Problem;
use super::token::Token;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// What the access check needs.
#[derive(Clone)]
pub struct Access {
    pub token: Option<Token>,
    pub metrics_without_token: bool,
    /// Counts the 401s.
    pub metrics: Arc<Metrics>,
    /// The web view's logins.
    pub logins: Arc<super::ui::Logins>,
}

impl Access {
    fn is_open(&self, path: &str) -> bool {
        matches!(path, "/healthz" | "/readyz")
            || (path == "/metrics" && self.metrics_without_token)
            || super::ui::is_open(path)
    }

    /// Whether the request carries a live web view login, and for a change, its CSRF value.
    fn logged_in(&self, req: &Request) -> bool {
        let Some(id) = req
            .headers()
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find_map(|v| super::ui::logins::cookie(v, super::ui::logins::COOKIE))
        else {
            return false;
        };
        let Some(csrf) = self.logins.csrf(id) else {
            return false;
        };
        if req.method().is_safe() {
            return true;
        }
        req.headers()
            .get(super::ui::logins::CSRF_HEADER)
            .is_some_and(|v| Token::from_bytes(csrf.as_bytes()).matches(v.as_bytes()))
    }

    fn allows(&self, req: &Request) -> bool {
        let Some(token) = &self.token else {
            return true;
        };
        if self.is_open(req.uri().path()) {
            return true;
        }
        req.headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| bearer(v.as_bytes()))
            .is_some_and(|presented| token.matches(presented))
            || self.logged_in(req)
    }
}

/// The credentials of an `Authorization: Bearer <credentials>` value (scheme case-insensitive).
fn bearer(value: &[u8]) -> Option<&[u8]> {
    let scheme = b"bearer ";
    if value.len() < scheme.len() || !value[..scheme.len()].eq_ignore_ascii_case(scheme) {
        return None;
    }
    let rest = &value[scheme.len()..];
    let start = rest.iter().position(|b| *b != b' ')?;
    Some(&rest[start..])
}

/// The middleware: passes the request on, or answers 401 with a problem body and
/// `WWW-Authenticate: Bearer`.
pub async fn require_token(State(access): State<Access>, req: Request, next: Next) -> Response {
    if access.allows(&req) {
        return next.run(req).await;
    }
    access.metrics.unauthorized();
    let presented = req.headers().contains_key(header::AUTHORIZATION);
    // The path only: never the header's value.
    tracing::debug!(path = %req.uri().path(), presented, "request without a valid token");
    let (code, detail) = if presented {
        ("invalid_token", "the bearer token is not the sidecar's")
    } else {
        (
            "unauthorized",
            "this sidecar requires `Authorization: Bearer <token>`",
        )
    };
    let mut resp = Problem::new(StatusCode::UNAUTHORIZED, code, detail).into_response();
    let challenge = if presented {
        "Bearer realm=\"clusterlimit\", error=\"invalid_token\""
    } else {
        "Bearer realm=\"clusterlimit\""
    };
    resp.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static(challenge),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_scheme_is_parsed() {
        assert_eq!(bearer(b"Bearer abc"), Some(&b"abc"[..]));
        assert_eq!(bearer(b"bearer  abc"), Some(&b"abc"[..]));
        assert_eq!(bearer(b"Basic abc"), None);
        assert_eq!(bearer(b"Bearer "), None);
    }
}
