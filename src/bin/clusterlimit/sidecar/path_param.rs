//! One segment of a route's path (`{name}`, `{id}`) as every route reads it: a segment that is
//! not UTF-8 once percent-decoded is a 400 problem+json naming it, in words (axum's own
//! rejection is plain text naming Rust types: "Cannot parse `…` to a `String`").

use super::problem::Problem;
use axum::extract::path::ErrorKind;
use axum::extract::rejection::PathRejection;
use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;

/// The one `{…}` segment of a route with a single path parameter.
pub struct PathParam(pub String);

impl<S: Send + Sync> FromRequestParts<S> for PathParam {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Problem> {
        let Path(segment) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(path_problem)?;
        Ok(PathParam(segment))
    }
}

/// A path rejection as a problem naming the segment at fault (`name` unless axum names another).
pub fn path_problem(e: PathRejection) -> Problem {
    let field = match &e {
        PathRejection::FailedToDeserializePathParams(f) => match f.kind() {
            ErrorKind::InvalidUtf8InPathParam { key }
            | ErrorKind::ParseErrorAtKey { key, .. }
            | ErrorKind::DeserializeError { key, .. } => key.clone(),
            _ => "name".to_string(),
        },
        _ => "name".to_string(),
    };
    let detail = match &e {
        PathRejection::FailedToDeserializePathParams(_) => {
            format!("`{field}` in the path must be UTF-8 text once percent-decoded")
        }
        _ => format!("the path does not name a `{field}`"),
    };
    Problem::field(field, detail)
}
