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
    let message = without_position(&inner.to_string());
    let (field, detail) = super::body_words::explain(&path, &message);
    Problem::field(field, detail)
}

/// serde_json's message without its ` at line 1 column 15`, which a one-line body does not
/// need (syntax errors keep theirs: there the position is the point).
fn without_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(i) if message[i..].contains(" column ") => message[..i].to_string(),
        _ => message.to_string(),
    }
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

    fn detail(body: &str) -> String {
        let p = parse::<B>(body.as_bytes()).unwrap_err();
        serde_json::to_value(&p).unwrap()["detail"]
            .as_str()
            .unwrap()
            .to_string()
    }

    #[test]
    fn details_are_in_plain_words() {
        assert_eq!(
            detail(r#"{"permits":"x"}"#),
            "`permits` must be a whole number from 1 to 1000000, got the string \"x\""
        );
        assert_eq!(
            detail(r#"{"capacity":-1}"#),
            "`capacity` must be a whole number from 1 to 1000000, got -1"
        );
        assert_eq!(
            detail(r#"{"bogus":1}"#),
            "unknown field `bogus`; expected one of: permits, capacity"
        );
        assert_eq!(detail("[1]"), "the body must be a JSON object, got a list");
        assert_eq!(
            detail(r#"{"permits":1"#),
            "malformed JSON: EOF while parsing an object at line 1 column 12"
        );
    }
}
