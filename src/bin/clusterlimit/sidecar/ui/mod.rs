//! The web view (`GET /ui`): a page shipped inside the binary (no CDN, no build step) that
//! shows the live picture (`live/`) as server-sent events, once a second, and offers the
//! API's changes (capacity, quota with a preview, key reset) behind the same token.
//!
//! Routes: `/ui`, `/ui/app.js`, `/ui/app.css` and `POST /ui/login` are open (they hold no
//! data); `GET /ui/session`, `POST /ui/logout`, `GET /v1/live` and `GET /v1/live/events` need
//! the token or a login (see `auth.rs`).

mod feed;
pub mod logins;

pub use feed::Feed;
pub use logins::Logins;

use super::body::{JsonBody, MAX_BODY};
use super::problem::Problem;
use axum::extract::DefaultBodyLimit;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

const PAGE: &str = include_str!("page.html");
const SCRIPT: &str = include_str!("app.js");
const STYLE: &str = include_str!("app.css");

/// What the view's routes share.
#[derive(Clone)]
pub struct Ui {
    pub feed: Arc<Feed>,
    pub logins: Arc<Logins>,
    /// The sidecar's token, if it has one (`None`: the API and the view are open).
    pub token: Option<super::token::Token>,
    /// Cancelled at shutdown: event streams end so the server can stop.
    pub shutdown: tokio_util::sync::CancellationToken,
}

/// Whether `path` is one of the view's open routes.
pub fn is_open(path: &str) -> bool {
    matches!(
        path,
        "/ui" | "/ui/" | "/ui/app.js" | "/ui/app.css" | "/ui/login"
    )
}

/// The view's routes, with the API's body limit (the login's body is a token).
pub fn router(ui: Ui) -> axum::Router {
    api()
        .split_for_parts()
        .0
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(ui)
}

/// The view's routes, each from its handler's `#[utoipa::path]` (see `openapi.rs`).
pub fn api() -> OpenApiRouter<Ui> {
    OpenApiRouter::new()
        .routes(routes!(page))
        .routes(routes!(page_slash))
        .routes(routes!(script))
        .routes(routes!(style))
        .routes(routes!(login))
        .routes(routes!(logout))
        .routes(routes!(session))
        .routes(routes!(live))
        .routes(routes!(events))
}

/// The page's own files: no other origin, no inline script.
fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut r = body.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'",
        ),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

/// The web view's page.
#[utoipa::path(get, path = "/ui", tag = "web view", responses(
    (status = 200, description = "The page", body = String, content_type = "text/html; charset=utf-8"),
))]
async fn page() -> Response {
    asset("text/html; charset=utf-8", PAGE)
}

/// The web view's page, at `/ui/` too.
#[utoipa::path(get, path = "/ui/", tag = "web view", responses(
    (status = 200, description = "The page", body = String, content_type = "text/html; charset=utf-8"),
))]
async fn page_slash() -> Response {
    page().await
}

/// The page's script.
#[utoipa::path(get, path = "/ui/app.js", tag = "web view", responses(
    (status = 200, description = "The script", body = String, content_type = "text/javascript; charset=utf-8"),
))]
async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

/// The page's style sheet.
#[utoipa::path(get, path = "/ui/app.css", tag = "web view", responses(
    (status = 200, description = "The style sheet", body = String, content_type = "text/css; charset=utf-8"),
))]
async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}

/// `POST /ui/login` body.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct LoginBody {
    /// The sidecar's token (the content of its token_file).
    #[serde(default)]
    token: String,
}

/// A login's (or the session's) CSRF value, and whether the sidecar has a token at all.
#[derive(Serialize, ToSchema)]
struct LoginAnswer {
    /// Send it in `x-csrf-token` with every change made with the login's cookie (empty
    /// without a login).
    csrf: String,
    token_required: bool,
}

/// The answer to a login body that cannot be read: what it must be, never what it was (a
/// token sent raw would be echoed back by the JSON parser's message).
fn unreadable_login(p: Problem) -> Response {
    if p.status() == StatusCode::PAYLOAD_TOO_LARGE {
        return p.into_response();
    }
    Problem::malformed(
        "the body must be JSON: {\"token\": \"…\"} with the sidecar's token (the content of its \
         token_file); what was sent is not repeated here, as it may be the token",
    )
    .into_response()
}

fn cookie_header(value: &str, max_age: Duration) -> Option<HeaderValue> {
    HeaderValue::from_str(&format!(
        "{}={value}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}",
        logins::COOKIE,
        max_age.as_secs()
    ))
    .ok()
}

/// Trades the token for a login: a cookie, and the CSRF value in the answer.
#[utoipa::path(post, path = "/ui/login", tag = "web view", request_body = LoginBody, responses(
    (status = 200, description = "Logged in (`Set-Cookie`), or no token needed", body = LoginAnswer),
    (status = 400, description = "Not a login body (what was sent is not repeated)", body = Problem, content_type = "application/problem+json"),
    (status = 401, description = "Not this sidecar's token", body = Problem, content_type = "application/problem+json"),
))]
async fn login(State(ui): State<Ui>, body: Result<JsonBody<LoginBody>, Problem>) -> Response {
    let body = match body {
        Ok(JsonBody(body)) => body,
        Err(p) => return unreadable_login(p),
    };
    let Some(token) = &ui.token else {
        let answer = LoginAnswer {
            csrf: String::new(),
            token_required: false,
        };
        return Json(answer).into_response();
    };
    if !token.matches(body.token.trim().as_bytes()) {
        return Problem::new(
            StatusCode::UNAUTHORIZED,
            "invalid_token",
            "that is not this sidecar's token (the content of its token_file)",
        )
        .into_response();
    }
    let (id, csrf) = ui.logins.start();
    let answer = LoginAnswer {
        csrf,
        token_required: true,
    };
    let mut r = Json(answer).into_response();
    if let Some(c) = cookie_header(&id, logins::LOGIN_LIFETIME) {
        r.headers_mut().insert(header::SET_COOKIE, c);
    }
    r
}

fn login_id(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| logins::cookie(v, logins::COOKIE))
        .map(str::to_string)
}

/// Ends the login and clears the cookie.
#[utoipa::path(post, path = "/ui/logout", tag = "web view", responses(
    (status = 204, description = "Logged out; the cookie cleared"),
))]
async fn logout(State(ui): State<Ui>, headers: HeaderMap) -> Response {
    if let Some(id) = login_id(&headers) {
        ui.logins.end(&id);
    }
    let mut r = StatusCode::NO_CONTENT.into_response();
    if let Some(c) = cookie_header("", Duration::ZERO) {
        r.headers_mut().insert(header::SET_COOKIE, c);
    }
    r
}

/// The login's CSRF value (after a reload the page asks again; the cookie survives it).
#[utoipa::path(get, path = "/ui/session", tag = "web view", responses(
    (status = 200, description = "The login's CSRF value (empty without one)", body = LoginAnswer),
))]
async fn session(State(ui): State<Ui>, headers: HeaderMap) -> Response {
    let csrf = login_id(&headers)
        .and_then(|id| ui.logins.csrf(&id))
        .unwrap_or_default();
    Json(LoginAnswer {
        csrf,
        token_required: ui.token.is_some(),
    })
    .into_response()
}

/// `GET /v1/live`: one picture, taken now.
#[utoipa::path(get, path = "/v1/live", tag = "web view", responses(
    (status = 200, description = "The live picture the web view draws (its fields are the view's own, not part of this contract)", body = Object),
))]
async fn live(State(ui): State<Ui>) -> Response {
    Json(ui.feed.picture().await).into_response()
}

/// `GET /v1/live/events`: a `picture` event a second while the client listens.
#[utoipa::path(get, path = "/v1/live/events", tag = "web view", responses(
    (status = 200, description = "Server-sent events: a `picture` event (the JSON of `GET /v1/live`) a second", body = String, content_type = "text/event-stream"),
))]
async fn events(State(ui): State<Ui>) -> Response {
    let mut rx = ui.feed.subscribe();
    // The current picture first, if there is one.
    rx.mark_changed();
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        loop {
            rx.changed().await.ok()?;
            let json = rx.borrow_and_update().clone();
            if !json.is_empty() {
                let event = Event::default().event("picture").data(&*json);
                return Some((Ok::<_, Infallible>(event), rx));
            }
        }
    })
    .take_until(ui.shutdown.cancelled_owned());
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}
