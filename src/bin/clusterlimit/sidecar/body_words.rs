//! A request body's type errors in plain words: serde says `invalid type: string "x", expected
//! i64` or `expected struct AcquireBody`; a client needs the field, what it takes and what it
//! got, without Rust's type names. What each field takes is said once, here, for every route's
//! body (permits, rate limits, release outcomes).

use clusterlimit::Semaphore;

const MAX_CAPACITY: u32 = Semaphore::MAX_CAPACITY;

/// What each body field takes, in words.
fn takes(field: &str) -> Option<String> {
    let whole_from_1 = "a whole number from 1";
    Some(match field {
        "permits" | "capacity" => format!("a whole number from 1 to {MAX_CAPACITY}"),
        "timeout_ms" | "ttl_ms" | "period_ms" | "ban_ms" | "warmup_ms" => {
            "a whole number of milliseconds".to_string()
        }
        "cost" | "limit" | "burst" => whole_from_1.to_string(),
        "owner" | "key" | "flow" | "class" | "classes" => "a string".to_string(),
        "weight" => "a whole number from 1 to 1000000".to_string(),
        "cold_factor" => "a whole number from 2 to 10".to_string(),
        "period" | "ban" | "warmup" => "a duration such as \"1s\", \"500ms\" or \"1m\"".to_string(),
        "algorithm" => "one of: gcra, sliding_window, fixed_window".to_string(),
        "outcome" => "one of: success, dropped, ignore".to_string(),
        "latency_ms" => "a number of milliseconds".to_string(),
        _ => return None,
    })
}

/// The field at fault and the detail for a serde data error `message` at `path` (`.` for the
/// body itself).
pub fn explain(path: &str, message: &str) -> (String, String) {
    if let Some(rest) = message.strip_prefix("unknown field `") {
        let (field, expected) = rest.split_once('`').unwrap_or((rest, ""));
        let known = names(expected);
        let detail = if known.is_empty() {
            format!("unknown field `{field}`; this body takes no fields")
        } else {
            format!("unknown field `{field}`; expected one of: {known}")
        };
        return (field.to_string(), detail);
    }
    if let Some(rest) = message.strip_prefix("missing field `") {
        let field = rest.split('`').next().unwrap_or(rest);
        return (field.to_string(), format!("`{field}` is required"));
    }
    let field = path.trim_start_matches('.').to_string();
    let got = got(message);
    if field.is_empty() {
        let detail = match got {
            Some(got) => format!("the body must be a JSON object, got {got}"),
            None => "the body must be a JSON object".to_string(),
        };
        return ("body".to_string(), detail);
    }
    let expected = takes(&field).unwrap_or_else(|| plain_expected(message));
    let detail = match got {
        Some(got) => format!("`{field}` must be {expected}, got {got}"),
        None => format!("`{field}` must be {expected}"),
    };
    (field, detail)
}

/// "`a`, `b`" (serde's list of expected names) as "a, b".
fn names(expected: &str) -> String {
    expected
        .split('`')
        .skip(1)
        .step_by(2)
        .collect::<Vec<_>>()
        .join(", ")
}

/// What was given, from `invalid type: string "x", expected …` / `invalid value: integer
/// `-1`, expected …` / `unknown variant `x`, expected …`.
fn got(message: &str) -> Option<String> {
    // serde reads a struct from a list too, and then complains about the list's length.
    if message.starts_with("invalid length ") {
        return Some("a list".to_string());
    }
    if let Some(rest) = message.strip_prefix("unknown variant `") {
        return rest.split('`').next().map(|v| format!("\"{v}\""));
    }
    let rest = message
        .strip_prefix("invalid type: ")
        .or_else(|| message.strip_prefix("invalid value: "))?;
    let given = rest.split(", expected").next()?;
    let value = |prefix: &str| {
        given
            .strip_prefix(prefix)
            .map(|v| v.trim_matches('`').to_string())
    };
    Some(if let Some(s) = given.strip_prefix("string ") {
        format!("the string {s}")
    } else if let Some(v) = value("integer ")
        .or_else(|| value("floating point "))
        .or_else(|| value("boolean "))
    {
        v
    } else {
        match given {
            "sequence" => "a list".to_string(),
            "map" => "an object".to_string(),
            "null" | "unit value" => "null".to_string(),
            other => other.to_string(),
        }
    })
}

/// A field not in `takes`: serde's expectation without Rust's words.
fn plain_expected(message: &str) -> String {
    let expected = message.rsplit(", expected ").next().unwrap_or("");
    match expected {
        "i8" | "i16" | "i32" | "i64" | "i128" | "isize" | "u8" | "u16" | "u32" | "u64" | "u128"
        | "usize" => "a whole number",
        "f32" | "f64" => "a number",
        e if e.contains("bool") => "true or false",
        e if e.contains("string") => "a string",
        e if e.starts_with("struct") || e.contains("map") => "a JSON object",
        e if e.contains("sequence") => "a list",
        _ => "a value of another kind",
    }
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_rust_words() {
        let cases = [
            (".permits", "invalid type: string \"x\", expected i64"),
            (".owner", "invalid type: integer `5`, expected a string"),
            (
                ".algorithm",
                "unknown variant `leaky`, expected one of `gcra`, `sliding_window`, `fixed_window`",
            ),
            (".", "invalid type: sequence, expected struct AcquireBody"),
            (
                ".",
                "unknown field `foo`, expected one of `permits`, `timeout_ms`",
            ),
            (".", "unknown field `foo`, there are no fields"),
            (".", "missing field `key`"),
            (".", "invalid length 1, expected struct B with 2 elements"),
            (".other", "invalid type: boolean `true`, expected u32"),
            (".other", "invalid type: map, expected f64"),
            (".limit", "invalid type: null, expected i64"),
        ];
        for (path, message) in cases {
            let (field, detail) = explain(path, message);
            assert!(!field.is_empty(), "{message}");
            for rust in [
                "i64", "u32", "f64", "struct", "Option", "enum", "sequence", "map,",
            ] {
                assert!(!detail.contains(rust), "{message} → {detail}");
            }
        }
        assert_eq!(
            explain(
                ".algorithm",
                "unknown variant `leaky`, expected one of `gcra`"
            )
            .1,
            "`algorithm` must be one of: gcra, sliding_window, fixed_window, got \"leaky\""
        );
        assert_eq!(explain(".", "missing field `key`").1, "`key` is required");
        assert_eq!(
            explain(".other", "invalid type: boolean `true`, expected u32").1,
            "`other` must be a whole number, got true"
        );
    }
}
