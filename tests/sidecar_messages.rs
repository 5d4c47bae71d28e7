//! The real sidecar's 400s say what is wrong in plain words: the field at fault, what it
//! takes and what it got, never Rust's type names (`i64`, `struct AcquireBody`, `Option`),
//! for every route's body and path. Against a real etcd.

use crate::binary;
use crate::support;

use binary::Sidecar;
use reqwest::{Client, Method, StatusCode};
use serde_json::Value;
use std::time::Duration;
use support::EtcdCluster;

/// What no `detail` may contain.
const RUST_WORDS: &[&str] = &[
    "i64",
    "u32",
    "u64",
    "struct",
    "Option",
    "enum",
    "String",
    "::",
    "Some(",
    "sequence",
    "invalid type",
    "line 1 column",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_and_path_errors_are_in_plain_words() {
    let cluster = EtcdCluster::single();
    let url = cluster.url("sidecar-msg");
    let sc = Sidecar::start(&["--store", &url]).await;
    let c = Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let permits = "/v1/semaphores/s/permits";
    let cases: &[(Method, &str, &str, &str, &str)] = &[
        (Method::POST, permits, r#"{"permits":"x"}"#, "permits",
         "`permits` must be a whole number from 1 to 1000000, got the string \"x\""),
        (Method::POST, permits, r#"{"permits":1.5}"#, "permits", "got 1.5"),
        (Method::POST, permits, r#"{"foo":1}"#, "foo",
         "unknown field `foo`; expected one of: permits, timeout_ms, ttl_ms, owner, capacity, flow, class, weight"),
        (Method::POST, permits, "[1]", "body", "the body must be a JSON object, got a list"),
        (Method::POST, permits, "5", "body", "the body must be a JSON object, got 5"),
        (Method::POST, permits, r#"{"owner":7}"#, "owner", "`owner` must be a string, got 7"),
        (Method::POST, permits, r#"{"timeout_ms":"soon"}"#, "timeout_ms",
         "`timeout_ms` must be a whole number of milliseconds"),
        (Method::PUT, "/v1/semaphores/s", r#"{"capacity":true}"#, "capacity",
         "`capacity` must be a whole number from 1 to 1000000, got true"),
        (Method::PUT, "/v1/semaphores/s", "{}", "capacity", "`capacity` is required"),
        (Method::PUT, "/v1/ratelimits/r", r#"{"limit":"ten","period":"1s"}"#, "limit",
         "`limit` must be a whole number from 1, got the string \"ten\""),
        (Method::PUT, "/v1/ratelimits/r", r#"{"limit":1,"period":5}"#, "period",
         "`period` must be a duration such as"),
        (Method::PUT, "/v1/ratelimits/r", r#"{"limit":1,"period":"1s","algorithm":"leaky"}"#,
         "algorithm",
         "`algorithm` must be one of: gcra, sliding_window, fixed_window, got \"leaky\""),
        (Method::PUT, "/v1/ratelimits/r", r#"{"limit":1,"per":"1s"}"#, "per",
         "unknown field `per`; expected one of: limit, period, period_ms, burst, algorithm, ban, ban_ms, \
          warmup, warmup_ms, cold_factor"),
        (Method::PUT, "/v1/ratelimits/r", r#"{"limit":1,"period":"1s","warmup":30}"#, "warmup",
         "`warmup` must be a duration such as"),
        (Method::PUT, "/v1/ratelimits/r", r#"{"limit":1,"period":"1s","warmup_ms":"30s"}"#,
         "warmup_ms", "`warmup_ms` must be a whole number of milliseconds, got the string \"30s\""),
        (Method::PUT, "/v1/ratelimits/r", r#"{"limit":1,"period":"1s","warmup":"1h","cold_factor":"x"}"#,
         "cold_factor", "`cold_factor` must be a whole number from 2 to 10, got the string \"x\""),
        (Method::PUT, "/v1/ratelimits/r", r#"{"limit":1,"period":"1s","warmup":"1h","cold_factor":12}"#,
         "cold_factor", "cold_factor must be a whole number from 2 to 10, got 12"),
        (Method::PUT, "/v1/ratelimits/r", r#"{"limit":1,"period":"1s","warmup":"1s"}"#, "warmup",
         "warmup must be at least cold_factor × period / limit (3s: the time one admission takes \
          from cold), got 1s"),
        (Method::POST, "/v1/ratelimits/r/check", r#"{"cost":1}"#, "key", "`key` is required"),
        (Method::POST, "/v1/ratelimits/r/check", r#"{"key":1}"#, "key",
         "`key` must be a string, got 1"),
        (Method::POST, "/v1/ratelimits/r/wait", r#"{"key":"k","timeout_ms":"soon"}"#,
         "timeout_ms", "`timeout_ms` must be a whole number of milliseconds"),
        (Method::GET, "/v1/ratelimits/%FF", "", "name", "`name` in the path must be UTF-8"),
        (Method::GET, "/v1/semaphores/%FF", "", "name", "`name` in the path must be UTF-8"),
        (Method::POST, "/v1/semaphores/%FF/permits", "{}", "name",
         "`name` in the path must be UTF-8"),
        (Method::POST, "/v1/permits/%FF/keepalive", "", "id", "`id` in the path must be UTF-8"),
        (Method::DELETE, "/v1/permits/%FF", "", "id", "`id` in the path must be UTF-8"),
    ];
    for (method, path, body, field, want) in cases {
        let r = c
            .request(method.clone(), format!("{}{path}", sc.url))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(
            r.status(),
            StatusCode::BAD_REQUEST,
            "{method} {path} {body}"
        );
        let p: Value = r.json().await.unwrap();
        let detail = p["detail"].as_str().unwrap_or_default();
        assert_eq!(p["field"], *field, "{method} {path} {body}: {p}");
        assert!(
            detail.contains(want),
            "{method} {path} {body}: {want:?} in {detail:?}"
        );
        for rust in RUST_WORDS {
            assert!(
                !detail.contains(rust),
                "{method} {path} {body}: {rust:?} in {detail:?}"
            );
        }
    }
}
