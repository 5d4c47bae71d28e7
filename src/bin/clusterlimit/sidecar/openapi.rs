//! The sidecar's OpenAPI 3.1 document, served at `GET /openapi.json` and committed as
//! docs/openapi.json. Each route is registered from its handler's `#[utoipa::path]`
//! attribute (utoipa-axum's `routes!`), so the router and the document share one list; this
//! file adds what every route shares: the bearer token's 401, the body limit's 413, the 400 of
//! a path segment that is not UTF-8.

use super::problem::Problem;
use super::{auth, routes, ui};
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use std::sync::OnceLock;
use utoipa::openapi::path::{Operation, PathItem};
use utoipa::openapi::response::ResponseBuilder;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{ContentBuilder, InfoBuilder, LicenseBuilder, OpenApi, Ref, RefOr};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// The name of the bearer token's security scheme.
const BEARER: &str = "bearer";

/// The route of this document.
pub fn router() -> axum::Router {
    own().split_for_parts().0
}

/// This document's own route, with its operation.
fn own() -> OpenApiRouter {
    OpenApiRouter::new().routes(routes!(serve))
}

/// The whole document, as its JSON text (pretty, ending in a newline).
pub fn document_json() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| {
        let mut text = document()
            .to_pretty_json()
            .unwrap_or_else(|e| format!("{{\"error\": \"the document did not serialize: {e}\"}}"));
        text.push('\n');
        text
    })
}

/// `GET /openapi.json`: this document.
#[utoipa::path(get, path = "/openapi.json", tag = "document", responses(
    (status = 200, description = "This document (OpenAPI 3.1)", body = Object),
))]
pub async fn serve() -> Response {
    let mut r = document_json().into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// The document of every route: the API's, the web view's and this one.
pub fn document() -> OpenApi {
    let mut doc = routes::api().into_openapi();
    doc.merge(ui::api().into_openapi());
    doc.merge(own().into_openapi());
    doc.info = InfoBuilder::new()
        .title("clusterlimit sidecar")
        .version(env!("CARGO_PKG_VERSION"))
        .description(Some(
            "The HTTP API of `clusterlimit serve`: semaphores and their permits, rate limits, \
             costs settled afterwards, probes and the web view. Errors are RFC 9457 \
             problem+json bodies with a stable `code` (and `field` for a 400). See \
             docs/sidecar-http.md.",
        ))
        .license(Some(
            LicenseBuilder::new()
                .name("MIT OR Apache-2.0")
                .identifier(Some("MIT OR Apache-2.0"))
                .build(),
        ))
        .build();
    let paths = std::mem::take(&mut doc.paths.paths);
    for (path, mut item) in paths {
        let guarded = !auth::always_open(&path);
        let shared_id = shares_an_id(&mut item);
        for (method, op) in operations(&mut item) {
            shared_answers(op, guarded);
            // One handler for several methods: each operation needs an id of its own.
            if shared_id {
                if let Some(id) = &mut op.operation_id {
                    id.push('_');
                    id.push_str(method);
                }
            }
        }
        // axum's `{*key}` (the rest of the path) is OpenAPI's `{key}`.
        doc.paths.paths.insert(path.replace("{*", "{"), item);
    }
    doc.components
        .get_or_insert_with(Default::default)
        .add_security_scheme(
            BEARER,
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
    doc
}

/// Every operation of a path, with its method.
fn operations(item: &mut PathItem) -> impl Iterator<Item = (&'static str, &mut Operation)> {
    [
        ("get", &mut item.get),
        ("put", &mut item.put),
        ("post", &mut item.post),
        ("delete", &mut item.delete),
        ("options", &mut item.options),
        ("head", &mut item.head),
        ("patch", &mut item.patch),
        ("trace", &mut item.trace),
    ]
    .into_iter()
    .filter_map(|(method, op)| Some((method, op.as_mut()?)))
}

/// Whether two operations of a path have the same id (one handler serving both methods).
fn shares_an_id(item: &mut PathItem) -> bool {
    let mut ids: Vec<_> = operations(item)
        .filter_map(|(_, op)| op.operation_id.clone())
        .collect();
    let all = ids.len();
    ids.sort();
    ids.dedup();
    ids.len() < all
}

/// The answers every route of its kind may give, whatever its handler does.
fn shared_answers(op: &mut Operation, guarded: bool) {
    if guarded {
        op.security = Some(vec![SecurityRequirement::new(BEARER, Vec::<String>::new())]);
        add(
            op,
            401,
            "The sidecar has a token and the request lacks it (or a web view login)",
        );
    }
    if op.request_body.is_some() {
        add(op, 413, "The body is larger than 64 KiB");
        add(
            op,
            400,
            "The body is not JSON, or a field is bad (`field` names it)",
        );
    }
    if op.parameters.iter().flatten().next().is_some() {
        add(
            op,
            400,
            "A path segment is not UTF-8 once percent-decoded (`field` names it)",
        );
    }
}

/// Adds a problem answer with `status`, unless the operation documents one already.
fn add(op: &mut Operation, status: u16, description: &str) {
    let problem = ContentBuilder::new()
        .schema(Some(RefOr::Ref(Ref::from_schema_name(
            <Problem as ToSchema>::name(),
        ))))
        .build();
    op.responses
        .responses
        .entry(status.to_string())
        .or_insert_with(|| {
            ResponseBuilder::new()
                .description(description)
                .content("application/problem+json", problem)
                .build()
                .into()
        });
}
