//! The JSON body extractor: 64 KiB limit, unknown fields rejected, and every rejection a
//! problem+json naming the field (axum's own `Json` rejections are plain text).

use super::problem::Problem;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

/// Largest accepted request body.
pub const MAX_BODY: usize = 64 * 1024;

/// A JSON request body of type `T`; an empty body reads as `{}`.
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = Problem;

    async fn from_request(req: Request, state: &S) -> Result<Self, Problem> {
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                Problem::too_large(MAX_BODY)
            } else {
                Problem::malformed(e.body_text())
            }
        })?;
        parse(&bytes).map(JsonBody)
    }
}

/// Deserializes, recording the path of the value at fault.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Problem> {
    let bytes: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        bytes
    };
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut *de).map_err(to_problem)?;
    de.end()
        .map_err(|e| Problem::malformed(format!("malformed JSON: {e}")))?;
    Ok(value)
}

fn to_problem(e: serde_path_to_error::Error<serde_json::Error>) -> Problem {
    let path = e.path().to_string();
    let inner = e.into_inner();
    if !inner.is_data() {
        return Problem::malformed(format!("malformed JSON: {inner}"));
    }
    let message = inner.to_string();
    // serde reports unknown and missing fields at the enclosing object; name the field itself.
    let field = quoted_field(&message, "unknown field `")
        .or_else(|| quoted_field(&message, "missing field `"))
        .unwrap_or(if path == "." {
            "body".to_string()
        } else {
            path
        });
    Problem::field(field, message)
}

fn quoted_field(message: &str, prefix: &str) -> Option<String> {
    let rest = message.strip_prefix(prefix)?;
    rest.split('`').next().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct B {
        permits: Option<i64>,
        capacity: Option<u32>,
    }

    fn field(body: &str) -> Option<String> {
        let p = parse::<B>(body.as_bytes()).unwrap_err();
        serde_json::to_value(&p).unwrap()["field"]
            .as_str()
            .map(str::to_string)
    }

    #[test]
    fn names_fields() {
        assert_eq!(field(r#"{"permits":"x"}"#).as_deref(), Some("permits"));
        assert_eq!(field(r#"{"capacity":-1}"#).as_deref(), Some("capacity"));
        assert_eq!(field(r#"{"bogus":1}"#).as_deref(), Some("bogus"));
        assert_eq!(field(r#"{"permits":1"#), None);
        assert_eq!(field(r#"[1]"#).as_deref(), Some("body"));
        assert!(parse::<B>(b"  ").is_ok());
    }
}
