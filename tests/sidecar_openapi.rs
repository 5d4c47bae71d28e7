//! The sidecar's OpenAPI 3.1 document (`GET /openapi.json`, committed as docs/openapi.json)
//! against the real `clusterlimit serve` on a real etcd: every route of the document driven
//! with real requests, to every answer the document lists (successes, each problem+json, the
//! token's 401, the body limit's 413, a store killed for the 503s and the lost permits' 410),
//! each answer's status, content type and body checked against the document (objects closed:
//! a field the schema lacks fails); the committed file is what the code serves; and routes are
//! registered only from their documented handlers.

use crate::binary::{self, Sidecar};
use crate::support::EtcdCluster;
use reqwest::Method;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

/// The committed document.
const COMMITTED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/openapi.json");

/// How to refresh it after an intended change.
const REFRESH: &str = "CLUSTERLIMIT_OPENAPI=refresh cargo test --all-features --test sidecar \
                       sidecar_openapi::committed_document";

const TOKEN: &str = "openapi-contract-token-5d1c";

#[tokio::test]
async fn committed_document_is_what_the_code_serves() {
    let sc = Sidecar::start(&["--store", "memory://"]).await;
    let served = binary::http_client()
        .get(format!("{}/openapi.json", sc.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    if std::env::var("CLUSTERLIMIT_OPENAPI").as_deref() == Ok("refresh") {
        std::fs::write(COMMITTED, &served).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(COMMITTED).unwrap_or_default();
    if committed != served {
        let line = committed
            .lines()
            .zip(served.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(committed.lines().count().min(served.lines().count()));
        panic!(
            "docs/openapi.json differs from what the sidecar serves (first at line {}: \
             committed {:?}, served {:?}).\nIf the change is intended, refresh it and commit \
             it:\n  {REFRESH}\n",
            line + 1,
            committed.lines().nth(line),
            served.lines().nth(line)
        );
    }
}

/// A route can only reach the router through `routes!` of a handler with `#[utoipa::path]`
/// (which puts it in the document): no plain axum routing anywhere in the binary.
#[test]
fn routes_are_registered_only_from_documented_handlers() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/bin/clusterlimit");
    let mut found = Vec::new();
    let mut dirs = vec![root];
    for _ in 0..1000 {
        let Some(dir) = dirs.pop() else { break };
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                for (n, line) in text.lines().enumerate() {
                    let code = line.split("//").next().unwrap_or("");
                    let plain = [
                        ".route(",
                        ".route_service(",
                        ".nest(",
                        ".nest_service(",
                        "routing::",
                    ];
                    if plain.iter().any(|p| code.contains(p)) {
                        found.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
                    }
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "routes registered with axum's own routing, so missing from the OpenAPI document: give \
         the handler a #[utoipa::path] and register it with `.routes(routes!(handler))`:\n{}",
        found.join("\n")
    );
}

/// The document as served, the answers seen, and a client with the token.
struct Contract {
    doc: Value,
    base: String,
    client: reqwest::Client,
    /// (method, path template, status) of every answer checked.
    seen: BTreeSet<(String, String, u16)>,
}

/// A request's body.
enum Body {
    None,
    Json(Value),
    Raw(Vec<u8>),
}

impl Contract {
    async fn new(base: &str) -> Contract {
        let client = binary::http_client();
        let doc = client
            .get(format!("{base}/openapi.json"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        Contract::of(doc, base)
    }

    fn of(doc: Value, base: &str) -> Contract {
        Contract {
            doc,
            base: base.to_string(),
            client: binary::http_client(),
            seen: BTreeSet::new(),
        }
    }

    /// Sends `method path` with the token and `body` (a route of `template`), checks the answer
    /// against the document and returns its status and JSON body (`null` if not JSON).
    async fn call(&mut self, method: &str, template: &str, path: &str, body: Body) -> (u16, Value) {
        self.send(method, template, path, body, true).await
    }

    /// As `call`, asserting the status.
    async fn expect(
        &mut self,
        status: u16,
        method: &str,
        template: &str,
        path: &str,
        body: Value,
    ) -> Value {
        let body = if body.is_null() {
            Body::None
        } else {
            Body::Json(body)
        };
        let (s, v) = self.call(method, template, path, body).await;
        assert_eq!(s, status, "{method} {path}: {v}");
        v
    }

    async fn send(
        &mut self,
        method: &str,
        template: &str,
        path: &str,
        body: Body,
        token: bool,
    ) -> (u16, Value) {
        let m = Method::from_bytes(method.as_bytes()).unwrap();
        let mut req = self.client.request(m, format!("{}{path}", self.base));
        if token {
            req = req.bearer_auth(TOKEN);
        }
        req = match body {
            Body::None => req,
            Body::Json(v) => req.json(&v),
            Body::Raw(b) => req.header("content-type", "application/json").body(b),
        };
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let ct = resp
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_string());
        // An event stream does not end: its status and type are what can be checked.
        let bytes = if ct.as_deref() == Some("text/event-stream") {
            Vec::new()
        } else {
            resp.bytes().await.unwrap().to_vec()
        };
        self.check(method, template, status, ct.as_deref(), &bytes);
        self.seen
            .insert((method.to_string(), template.to_string(), status));
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    /// The answer is one the operation documents: its status, content type and body.
    fn check(&self, method: &str, template: &str, status: u16, ct: Option<&str>, bytes: &[u8]) {
        let text = String::from_utf8_lossy(bytes);
        let op = &self.doc["paths"][template][method.to_lowercase()];
        assert!(op.is_object(), "{method} {template} is not in the document");
        let answer = &op["responses"][status.to_string()];
        assert!(
            answer.is_object(),
            "{method} {template} answered {status}, which its operation does not list: {text}"
        );
        let Some(content) = answer.get("content").and_then(Value::as_object) else {
            assert!(
                bytes.is_empty(),
                "{method} {template} {status}: a body the document does not give: {text}"
            );
            return;
        };
        let ct = ct.unwrap_or_else(|| panic!("{method} {template} {status}: no content type"));
        let media = content.get(ct).unwrap_or_else(|| {
            let listed: Vec<_> = content.keys().collect();
            panic!(
                "{method} {template} {status}: content type {ct:?}, the document lists {listed:?}"
            )
        });
        if !(ct == "application/json" || ct == "application/problem+json") {
            return;
        }
        let value: Value = serde_json::from_slice(bytes)
            .unwrap_or_else(|e| panic!("{method} {template} {status}: not JSON ({e}): {text}"));
        let mut schema = self.closed(&media["schema"], 0);
        schema["$schema"] = json!("https://json-schema.org/draft/2020-12/schema");
        if let Err(e) = jsonschema::validate(&schema, &value) {
            panic!(
                "{method} {template} {status}: the body does not match the document: {e}\n\
                 at {}\nbody: {value}",
                e.instance_path()
            );
        }
    }

    /// `schema` with its references resolved and every object closed to fields it does not
    /// name (`additionalProperties: false`).
    fn closed(&self, schema: &Value, depth: usize) -> Value {
        assert!(depth < 32, "schemas nested too deep (a cycle?)");
        match schema {
            Value::Object(map) => {
                if let Some(r) = map.get("$ref").and_then(Value::as_str) {
                    let name = r.trim_start_matches("#/components/schemas/");
                    let target = &self.doc["components"]["schemas"][name];
                    assert!(target.is_object(), "unresolved reference {r}");
                    return self.closed(target, depth + 1);
                }
                let mut out = serde_json::Map::new();
                for (k, v) in map {
                    out.insert(k.clone(), self.closed(v, depth + 1));
                }
                if out.contains_key("properties") && !out.contains_key("additionalProperties") {
                    out.insert("additionalProperties".into(), json!(false));
                }
                Value::Object(out)
            }
            Value::Array(items) => {
                Value::Array(items.iter().map(|v| self.closed(v, depth + 1)).collect())
            }
            other => other.clone(),
        }
    }

    /// Every (method, path template) of the document.
    fn operations(&self) -> Vec<(String, String, Value)> {
        let mut out = Vec::new();
        for (template, item) in self.doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                out.push((method.to_uppercase(), template.clone(), op.clone()));
            }
        }
        out
    }

    /// Every documented answer not seen yet.
    fn unseen(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (method, template, op) in self.operations() {
            for status in op["responses"].as_object().unwrap().keys() {
                let key = (method.clone(), template.clone(), status.parse().unwrap());
                if !self.seen.contains(&key) {
                    out.push(format!("{method} {template} {status}"));
                }
            }
        }
        out
    }
}

/// The checks themselves fail: a field the schema lacks, a field missing, a status or a
/// content type the operation does not list.
#[test]
fn the_checks_refuse_what_the_document_does_not_say() {
    let doc = serde_json::from_str(&std::fs::read_to_string(COMMITTED).unwrap()).unwrap();
    let c = Contract::of(doc, "");
    let balance = json!({"name": "c", "key": "a", "limit": 10, "remaining": 9, "debt": 0,
                         "retry_after_ms": null, "reset_after_ms": 360000});
    let route = ("GET", "/v1/ratelimits/{name}/balances/{key}");
    let check = |status: u16, ct: &str, body: &Value| {
        let bytes = serde_json::to_vec(body).unwrap();
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            c.check(route.0, route.1, status, Some(ct), &bytes)
        }))
        .is_ok()
    };
    assert!(check(200, "application/json", &balance));
    let mut extra = balance.clone();
    extra["owed"] = json!(1);
    assert!(
        !check(200, "application/json", &extra),
        "an unknown field passed"
    );
    let mut missing = balance.clone();
    missing.as_object_mut().unwrap().remove("debt");
    assert!(
        !check(200, "application/json", &missing),
        "a missing field passed"
    );
    assert!(
        !check(418, "application/json", &balance),
        "an unlisted status passed"
    );
    assert!(
        !check(200, "text/plain", &balance),
        "an unlisted content type passed"
    );
}

/// Operation ids are unique (OpenAPI requires it; generated clients name methods by them).
#[test]
fn operation_ids_are_unique() {
    let doc = serde_json::from_str(&std::fs::read_to_string(COMMITTED).unwrap()).unwrap();
    let c = Contract::of(doc, "");
    let mut seen = BTreeSet::new();
    for (method, template, op) in c.operations() {
        let id = op["operationId"].as_str().unwrap_or_default().to_string();
        assert!(!id.is_empty(), "{method} {template} has no operationId");
        assert!(
            seen.insert(id.clone()),
            "operationId {id:?} twice ({method} {template})"
        );
    }
}

/// `template` with each `{param}` replaced by `value`.
fn fill(template: &str, value: &str) -> String {
    let mut out = String::new();
    let mut rest = template;
    for _ in 0..8 {
        let Some(open) = rest.find('{') else { break };
        let close = rest[open..].find('}').unwrap() + open;
        out.push_str(&rest[..open]);
        out.push_str(value);
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    out
}

/// The answers every route of a kind gives: 401 without the token, 413 for a body over the
/// limit, 400 for a path segment that is not UTF-8.
async fn shared_answers(c: &mut Contract) {
    let big = format!("{{\"key\": \"{}\"}}", "x".repeat(70 * 1024)).into_bytes();
    for (method, template, op) in c.operations() {
        let responses = &op["responses"];
        if op.get("security").is_some() {
            let (s, p) = c
                .send(&method, &template, &fill(&template, "x"), Body::None, false)
                .await;
            assert_eq!(s, 401, "{method} {template} without the token: {p}");
        }
        if responses.get("413").is_some() {
            let body = Body::Raw(big.clone());
            let (s, p) = c
                .call(&method, &template, &fill(&template, "x"), body)
                .await;
            assert_eq!(s, 413, "{method} {template} with 70 KiB: {p}");
        }
        if op.get("parameters").is_some() {
            let (s, p) = c
                .call(&method, &template, &fill(&template, "%FF"), Body::None)
                .await;
            assert_eq!(
                (s, p["field"].is_string()),
                (400, true),
                "{method} {template} %FF: {p}"
            );
        }
    }
}

const SEM: &str = "/v1/semaphores/{name}";
const PERMITS: &str = "/v1/semaphores/{name}/permits";
const KEEPALIVE: &str = "/v1/permits/{id}/keepalive";
const SHRINK: &str = "/v1/permits/{id}/shrink";
const PERMIT: &str = "/v1/permits/{id}";

/// Acquires on `name`: the permit's id.
async fn acquire(c: &mut Contract, name: &str, body: Value) -> String {
    let path = format!("/v1/semaphores/{name}/permits");
    let g = c.expect(201, "POST", PERMITS, &path, body).await;
    g["id"].as_str().unwrap().to_string()
}

/// Semaphores and permits, the store up. Returns permits to lose: one to keep alive, one of
/// weight 2 to shrink.
async fn semaphores(c: &mut Contract) -> (String, String) {
    c.expect(200, "PUT", SEM, "/v1/semaphores/s", json!({"capacity": 2}))
        .await;
    c.expect(400, "PUT", SEM, "/v1/semaphores/s", json!({"capacity": 0}))
        .await;
    c.expect(200, "GET", "/v1/semaphores", "/v1/semaphores", Value::Null)
        .await;
    c.expect(200, "GET", SEM, "/v1/semaphores/s", Value::Null)
        .await;
    c.expect(404, "GET", SEM, "/v1/semaphores/nope", Value::Null)
        .await;
    c.expect(400, "GET", SEM, "/v1/semaphores/a%20b", Value::Null)
        .await;
    let kept = acquire(c, "s", json!({"ttl_ms": 60000})).await;
    acquire(c, "s", json!({"ttl_ms": 60000})).await;
    c.expect(
        429,
        "POST",
        PERMITS,
        "/v1/semaphores/s/permits",
        json!({"timeout_ms": 0}),
    )
    .await;
    c.expect(
        400,
        "POST",
        PERMITS,
        "/v1/semaphores/s/permits",
        json!({"permits": 0}),
    )
    .await;
    c.expect(
        404,
        "POST",
        PERMITS,
        "/v1/semaphores/nope/permits",
        json!({}),
    )
    .await;
    c.expect(
        409,
        "POST",
        PERMITS,
        "/v1/semaphores/s/permits",
        json!({"capacity": 5}),
    )
    .await;
    let path = format!("/v1/permits/{kept}/keepalive");
    c.expect(200, "POST", KEEPALIVE, &path, Value::Null).await;
    c.expect(
        404,
        "POST",
        KEEPALIVE,
        "/v1/permits/nope/keepalive",
        Value::Null,
    )
    .await;
    // Shrink: 4 permits, 2 taken and shrunk to 1, 2 more kept to lose.
    let body = json!({"permits": 2, "capacity": 4, "ttl_ms": 60000});
    let shrunk = acquire(c, "t", body.clone()).await;
    let path = format!("/v1/permits/{shrunk}/shrink");
    c.expect(200, "POST", SHRINK, &path, json!({"permits": 1}))
        .await;
    c.expect(400, "POST", SHRINK, &path, json!({"permits": 0}))
        .await;
    c.expect(
        404,
        "POST",
        SHRINK,
        "/v1/permits/nope/shrink",
        json!({"permits": 1}),
    )
    .await;
    let to_shrink = acquire(c, "t", body).await;
    let path = format!("/v1/permits/{shrunk}");
    c.expect(400, "DELETE", PERMIT, &path, json!({"outcome": "bogus"}))
        .await;
    c.expect(204, "DELETE", PERMIT, &path, Value::Null).await;
    c.expect(404, "DELETE", PERMIT, &path, Value::Null).await;
    (kept, to_shrink)
}

const QUOTA: &str = "/v1/ratelimits/{name}";
const CHECK: &str = "/v1/ratelimits/{name}/check";
const PREVIEW: &str = "/v1/ratelimits/{name}/preview";
const WAIT: &str = "/v1/ratelimits/{name}/wait";
const KEY: &str = "/v1/ratelimits/{name}/keys/{key}";
const NO_KEY: &str = "/v1/ratelimits/{name}/keys/";

/// Rate limits, the store up.
async fn rate_limits(c: &mut Contract) {
    let quota = json!({"limit": 2, "period": "1h"});
    c.expect(200, "PUT", QUOTA, "/v1/ratelimits/r", quota.clone())
        .await;
    c.expect(400, "PUT", QUOTA, "/v1/ratelimits/r", json!({"limit": -1}))
        .await;
    c.expect(200, "GET", "/v1/ratelimits", "/v1/ratelimits", Value::Null)
        .await;
    c.expect(200, "GET", QUOTA, "/v1/ratelimits/r", Value::Null)
        .await;
    c.expect(404, "GET", QUOTA, "/v1/ratelimits/nope", Value::Null)
        .await;
    c.expect(400, "GET", QUOTA, "/v1/ratelimits/a%20b", Value::Null)
        .await;
    let check = "/v1/ratelimits/r/check";
    c.expect(200, "POST", CHECK, check, json!({"key": "k"}))
        .await;
    c.expect(200, "POST", CHECK, check, json!({"key": "k"}))
        .await;
    c.expect(429, "POST", CHECK, check, json!({"key": "k"}))
        .await;
    c.expect(400, "POST", CHECK, check, json!({"key": ""}))
        .await;
    c.expect(
        404,
        "POST",
        CHECK,
        "/v1/ratelimits/nope/check",
        json!({"key": "k"}),
    )
    .await;
    let preview = "/v1/ratelimits/r/preview";
    c.expect(
        200,
        "POST",
        PREVIEW,
        preview,
        json!({"limit": 5, "period": "1h"}),
    )
    .await;
    c.expect(400, "POST", PREVIEW, preview, json!({"limit": "x"}))
        .await;
    c.expect(404, "POST", PREVIEW, "/v1/ratelimits/nope/preview", quota)
        .await;
    let wait = "/v1/ratelimits/r/wait";
    c.expect(
        429,
        "POST",
        WAIT,
        wait,
        json!({"key": "k", "timeout_ms": 0}),
    )
    .await;
    c.expect(200, "POST", WAIT, wait, json!({"key": "k2"}))
        .await;
    c.expect(
        400,
        "POST",
        WAIT,
        wait,
        json!({"key": "k", "timeout_ms": -1}),
    )
    .await;
    c.expect(
        404,
        "POST",
        WAIT,
        "/v1/ratelimits/nope/wait",
        json!({"key": "k"}),
    )
    .await;
    let key = "/v1/ratelimits/r/keys/a%2Fb";
    c.expect(200, "GET", KEY, key, Value::Null).await;
    c.expect(204, "DELETE", KEY, key, Value::Null).await;
    c.expect(404, "GET", KEY, "/v1/ratelimits/nope/keys/k", Value::Null)
        .await;
    c.expect(
        404,
        "DELETE",
        KEY,
        "/v1/ratelimits/nope/keys/k",
        Value::Null,
    )
    .await;
    c.expect(400, "GET", NO_KEY, "/v1/ratelimits/r/keys/", Value::Null)
        .await;
    c.expect(400, "DELETE", NO_KEY, "/v1/ratelimits/r/keys/", Value::Null)
        .await;
}

const RESERVE: &str = "/v1/ratelimits/{name}/reservations";
const SETTLE: &str = "/v1/ratelimits/{name}/reservations/{id}/settle";
const RESERVATION: &str = "/v1/ratelimits/{name}/reservations/{id}";
const CHARGE: &str = "/v1/ratelimits/{name}/charge";
const REFUND: &str = "/v1/ratelimits/{name}/refund";
const BALANCE: &str = "/v1/ratelimits/{name}/balances/{key}";
const NO_BALANCE_KEY: &str = "/v1/ratelimits/{name}/balances/";

async fn reserve(c: &mut Contract, body: Value) -> String {
    let r = c
        .expect(201, "POST", RESERVE, "/v1/ratelimits/c/reservations", body)
        .await;
    r["id"].as_str().unwrap().to_string()
}

/// Reservations, charges, refunds and balances, the store up. Returns two open reservations
/// (to settle and to keep while the store is down).
async fn costs(c: &mut Contract) -> (String, String) {
    let quota = json!({"limit": 10, "period": "1h"});
    c.expect(200, "PUT", QUOTA, "/v1/ratelimits/c", quota).await;
    let settled = reserve(c, json!({"key": "a", "estimate": 2})).await;
    let path = format!("/v1/ratelimits/c/reservations/{settled}/settle");
    c.expect(400, "POST", SETTLE, &path, json!({})).await;
    c.expect(200, "POST", SETTLE, &path, json!({"actual": 1}))
        .await;
    c.expect(409, "POST", SETTLE, &path, json!({"actual": 1}))
        .await;
    let unknown = "/v1/ratelimits/c/reservations/nope/settle";
    c.expect(404, "POST", SETTLE, unknown, json!({"actual": 1}))
        .await;
    let kept = reserve(c, json!({"key": "a", "estimate": 1})).await;
    let path = format!("/v1/ratelimits/c/reservations/{kept}");
    c.expect(200, "DELETE", RESERVATION, &path, Value::Null)
        .await;
    c.expect(409, "DELETE", RESERVATION, &path, Value::Null)
        .await;
    let unknown = "/v1/ratelimits/c/reservations/nope";
    c.expect(404, "DELETE", RESERVATION, unknown, Value::Null)
        .await;
    // Past their time limit (1 ms): 410.
    let brief = json!({"key": "b", "estimate": 1, "settle_within_ms": 1});
    let (late_settle, late_keep) = (reserve(c, brief.clone()).await, reserve(c, brief).await);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let path = format!("/v1/ratelimits/c/reservations/{late_settle}/settle");
    c.expect(410, "POST", SETTLE, &path, json!({"actual": 1}))
        .await;
    let path = format!("/v1/ratelimits/c/reservations/{late_keep}");
    c.expect(410, "DELETE", RESERVATION, &path, Value::Null)
        .await;
    let reserve_path = "/v1/ratelimits/c/reservations";
    c.expect(400, "POST", RESERVE, reserve_path, json!({"key": "a"}))
        .await;
    let nope = "/v1/ratelimits/nope/reservations";
    c.expect(
        404,
        "POST",
        RESERVE,
        nope,
        json!({"key": "a", "estimate": 1}),
    )
    .await;
    reserve(c, json!({"key": "z", "estimate": 10})).await;
    c.expect(
        429,
        "POST",
        RESERVE,
        reserve_path,
        json!({"key": "z", "estimate": 10}),
    )
    .await;
    for (template, verb, field) in [(CHARGE, "charge", "cost"), (REFUND, "refund", "amount")] {
        let path = format!("/v1/ratelimits/c/{verb}");
        c.expect(200, "POST", template, &path, json!({"key": "a", field: 1}))
            .await;
        c.expect(400, "POST", template, &path, json!({"key": "a"}))
            .await;
        let nope = format!("/v1/ratelimits/nope/{verb}");
        c.expect(404, "POST", template, &nope, json!({"key": "a", field: 1}))
            .await;
    }
    c.expect(
        200,
        "GET",
        BALANCE,
        "/v1/ratelimits/c/balances/a",
        Value::Null,
    )
    .await;
    c.expect(
        404,
        "GET",
        BALANCE,
        "/v1/ratelimits/nope/balances/a",
        Value::Null,
    )
    .await;
    c.expect(
        400,
        "GET",
        NO_BALANCE_KEY,
        "/v1/ratelimits/c/balances/",
        Value::Null,
    )
    .await;
    let open = json!({"key": "o", "estimate": 1, "settle_within_ms": 600000});
    (reserve(c, open.clone()).await, reserve(c, open).await)
}

/// The probes, this document and the web view.
async fn probes_and_view(c: &mut Contract) {
    for path in ["/metrics", "/healthz", "/readyz", "/openapi.json"] {
        c.expect(200, "GET", path, path, Value::Null).await;
    }
    for path in [
        "/ui",
        "/ui/",
        "/ui/app.js",
        "/ui/app.css",
        "/ui/session",
        "/v1/live",
        "/v1/live/events",
    ] {
        c.expect(200, "GET", path, path, Value::Null).await;
    }
    c.expect(
        200,
        "POST",
        "/ui/login",
        "/ui/login",
        json!({"token": TOKEN}),
    )
    .await;
    c.expect(
        401,
        "POST",
        "/ui/login",
        "/ui/login",
        json!({"token": "wrong"}),
    )
    .await;
    let (s, p) = c
        .call(
            "POST",
            "/ui/login",
            "/ui/login",
            Body::Raw(b"not json".to_vec()),
        )
        .await;
    assert_eq!(s, 400, "{p}");
    c.expect(204, "POST", "/ui/logout", "/ui/logout", Value::Null)
        .await;
}

/// The store killed: every route that reads or writes it answers 503 (a limit this sidecar
/// never opened, the reservations taken before), and the permits held are lost (410).
async fn store_down(c: &mut Contract, permits: (String, String), reservations: (String, String)) {
    let calls: [(&str, &str, String, Value); 19] = [
        (
            "GET",
            "/v1/semaphores",
            "/v1/semaphores".into(),
            Value::Null,
        ),
        ("GET", SEM, "/v1/semaphores/ghost".into(), Value::Null),
        (
            "PUT",
            SEM,
            "/v1/semaphores/ghost".into(),
            json!({"capacity": 1}),
        ),
        (
            "POST",
            PERMITS,
            "/v1/semaphores/ghost/permits".into(),
            json!({"capacity": 1, "timeout_ms": 0}),
        ),
        (
            "GET",
            "/v1/ratelimits",
            "/v1/ratelimits".into(),
            Value::Null,
        ),
        ("GET", QUOTA, "/v1/ratelimits/ghost".into(), Value::Null),
        (
            "PUT",
            QUOTA,
            "/v1/ratelimits/ghost".into(),
            json!({"limit": 1, "period": "1s"}),
        ),
        (
            "POST",
            CHECK,
            "/v1/ratelimits/ghost/check".into(),
            json!({"key": "k"}),
        ),
        (
            "POST",
            PREVIEW,
            "/v1/ratelimits/ghost/preview".into(),
            json!({"limit": 1, "period": "1s"}),
        ),
        (
            "POST",
            WAIT,
            "/v1/ratelimits/ghost/wait".into(),
            json!({"key": "k", "timeout_ms": 0}),
        ),
        (
            "GET",
            KEY,
            "/v1/ratelimits/ghost/keys/k".into(),
            Value::Null,
        ),
        (
            "DELETE",
            KEY,
            "/v1/ratelimits/ghost/keys/k".into(),
            Value::Null,
        ),
        (
            "POST",
            RESERVE,
            "/v1/ratelimits/ghost/reservations".into(),
            json!({"key": "k", "estimate": 1}),
        ),
        (
            "POST",
            SETTLE,
            format!("/v1/ratelimits/c/reservations/{}/settle", reservations.0),
            json!({"actual": 1}),
        ),
        (
            "DELETE",
            RESERVATION,
            format!("/v1/ratelimits/c/reservations/{}", reservations.1),
            Value::Null,
        ),
        (
            "POST",
            CHARGE,
            "/v1/ratelimits/ghost/charge".into(),
            json!({"key": "k", "cost": 1}),
        ),
        (
            "POST",
            REFUND,
            "/v1/ratelimits/ghost/refund".into(),
            json!({"key": "k", "amount": 1}),
        ),
        (
            "GET",
            BALANCE,
            "/v1/ratelimits/ghost/balances/k".into(),
            Value::Null,
        ),
        ("GET", "/readyz", "/readyz".into(), Value::Null),
    ];
    for (method, template, path, body) in calls {
        c.expect(503, method, template, &path, body).await;
    }
    let (keepalive, shrink) = (
        format!("/v1/permits/{}/keepalive", permits.0),
        format!("/v1/permits/{}/shrink", permits.1),
    );
    for (template, path, body) in [
        (KEEPALIVE, keepalive, Value::Null),
        (SHRINK, shrink, json!({"permits": 1})),
    ] {
        let mut status = 0;
        for _ in 0..100 {
            let (s, _) = c.call("POST", template, &path, body_of(&body)).await;
            status = s;
            if s == 410 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert_eq!(status, 410, "POST {path} within 20 s of the store's death");
    }
}

fn body_of(v: &Value) -> Body {
    if v.is_null() {
        Body::None
    } else {
        Body::Json(v.clone())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_answers_as_its_document_says() {
    let started = std::time::Instant::now();
    let mut cluster = EtcdCluster::single();
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, format!("{TOKEN}\n")).unwrap();
    let sc = Sidecar::start(&[
        "--store",
        &cluster.url("openapi"),
        "--token-file",
        token.to_str().unwrap(),
        "--session-ttl",
        "2s",
        "--request-timeout",
        "1s",
        "--rate-store-timeout",
        "1s",
        "--rate-store-down",
        "fail_closed",
    ])
    .await;
    let mut c = Contract::new(&sc.url).await;
    shared_answers(&mut c).await;
    let permits = semaphores(&mut c).await;
    rate_limits(&mut c).await;
    let reservations = costs(&mut c).await;
    probes_and_view(&mut c).await;
    cluster.kill(0);
    store_down(&mut c, permits, reservations).await;
    let unseen = c.unseen();
    assert!(
        unseen.is_empty(),
        "answers the document lists that no request of this test got (drive them, or drop \
         them from the handler's #[utoipa::path] if the route cannot give them):\n{}",
        unseen.join("\n")
    );
    println!(
        "{} operations, {} answers checked, in {:.1} s",
        c.operations().len(),
        c.seen.len(),
        started.elapsed().as_secs_f64()
    );
}
