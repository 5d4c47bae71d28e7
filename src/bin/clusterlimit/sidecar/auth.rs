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
        always_open(path) || (path == "/metrics" && self.metrics_without_token)
    }

    /// Whether the request carries a live web view login, and for a change, its CSRF value;
    /// if not, why.
    fn login(&self, req: &Request) -> Result<(), Refusal> {
        let Some(id) = req
            .headers()
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find_map(|v| super::ui::logins::cookie(v, super::ui::logins::COOKIE))
        else {
            return Err(Refusal::NoToken);
        };
        let Some(csrf) = self.logins.csrf(id) else {
            return Err(Refusal::LoginEnded);
        };
        if req.method().is_safe() {
            return Ok(());
        }
        match req.headers().get(super::ui::logins::CSRF_HEADER) {
            None => Err(Refusal::CsrfMissing),
            Some(v) if Token::from_bytes(csrf.as_bytes()).matches(v.as_bytes()) => Ok(()),
            Some(_) => Err(Refusal::CsrfWrong),
        }
    }

    /// Passes a request with the token or a login; says why not otherwise.
    fn allows(&self, req: &Request) -> Result<(), Refusal> {
        let Some(token) = &self.token else {
            return Ok(());
        };
        if self.is_open(req.uri().path()) {
            return Ok(());
        }
        let presented = req.headers().get(header::AUTHORIZATION);
        if presented
            .and_then(|v| bearer(v.as_bytes()))
            .is_some_and(|p| token.matches(p))
        {
            return Ok(());
        }
        match self.login(req) {
            Ok(()) => Ok(()),
            // A token was sent and is wrong: that, rather than what the cookie lacks.
            Err(_) if presented.is_some() => Err(Refusal::WrongToken),
            Err(why) => Err(why),
        }
    }
}

/// Whether `path` is open whatever the configuration: the probes and the web view's page
/// and login (`/metrics` is open only if configured so).
pub fn always_open(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz") || super::ui::is_open(path)
}

/// Why a request is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    /// Neither a token nor a login cookie.
    NoToken,
    /// `Authorization: Bearer` with another token.
    WrongToken,
    /// A login cookie the sidecar does not know (any more).
    LoginEnded,
    /// A change with a login cookie, without the CSRF header.
    CsrfMissing,
    /// A change with a login cookie, its CSRF header not the login's.
    CsrfWrong,
}

impl Refusal {
    /// The problem's code and detail: what failed and what to do.
    fn words(self) -> (&'static str, &'static str) {
        match self {
            Refusal::NoToken => (
                "unauthorized",
                "this sidecar requires `Authorization: Bearer <token>`",
            ),
            Refusal::WrongToken => ("invalid_token", "the bearer token is not the sidecar's"),
            Refusal::LoginEnded => (
                "login_ended",
                "the web view login of this cookie has ended (logged out, older than 12 h, or \
                 the sidecar restarted): log in again, or send `Authorization: Bearer <token>`",
            ),
            Refusal::CsrfMissing => (
                "csrf_missing",
                "a change made with the web view's login cookie must carry the login's CSRF \
                 value in the `x-csrf-token` header (the page sends it: reload the page), or \
                 send `Authorization: Bearer <token>` instead of the cookie",
            ),
            Refusal::CsrfWrong => (
                "csrf_mismatch",
                "the `x-csrf-token` header is not this login's CSRF value: reload the page \
                 (it asks for the value again), or send `Authorization: Bearer <token>` \
                 instead of the cookie",
            ),
        }
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
    let refusal = match access.allows(&req) {
        Ok(()) => return next.run(req).await,
        Err(why) => why,
    };
    access.metrics.unauthorized();
    // The path only: never the header's value.
    tracing::debug!(path = %req.uri().path(), ?refusal, "request without a valid token or login");
    let (code, detail) = refusal.words();
    let mut resp = Problem::new(StatusCode::UNAUTHORIZED, code, detail).into_response();
    let challenge = if refusal == Refusal::WrongToken {
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
