//! Costs known afterwards over the sidecar's HTTP API (issue 42): reservations settled lower
//! (a refund), higher (debt) or equal, kept, expired and refused when the table is full;
//! charges, refunds and balances; every bad field a 400 naming it; debt shared by two
//! sidecars on one etcd. `clusterlimit serve` as a real process on real stores.

use crate::binary;
use crate::support;

use binary::{eventually, metrics, sample, Sidecar};
use reqwest::{Client, Method, Response, StatusCode};
use serde_json::{json, Value};
use std::time::Duration;
use support::EtcdCluster;

fn client() -> Client {
    binary::http_client()
}

async fn send(c: &Client, method: Method, url: &str, body: Option<Value>) -> Response {
    let mut r = c.request(method, url);
    if let Some(b) = body {
        r = r.json(&b);
    }
    r.send().await.unwrap()
}

async fn json_of(r: Response) -> (StatusCode, Value) {
    let s = r.status();
    (s, r.json().await.unwrap_or(Value::Null))
}

async fn post(c: &Client, base: &str, path: &str, body: Value) -> (StatusCode, Value) {
    let url = format!("{base}/v1/ratelimits/{path}");
    json_of(send(c, Method::POST, &url, Some(body)).await).await
}

async fn put_quota(c: &Client, base: &str, name: &str, quota: Value) {
    let url = format!("{base}/v1/ratelimits/{name}");
    let (s, q) = json_of(send(c, Method::PUT, &url, Some(quota)).await).await;
    assert_eq!(s, StatusCode::OK, "{q}");
}

/// `POST …/reservations`: the answer, expected admitted (201) with an id.
async fn reserve(c: &Client, base: &str, name: &str, body: Value) -> Value {
    let (s, r) = post(c, base, &format!("{name}/reservations"), body).await;
    assert_eq!(s, StatusCode::CREATED, "{r}");
    assert!(r["id"].is_string(), "{r}");
    r
}

async fn settle(
    c: &Client,
    base: &str,
    name: &str,
    id: &Value,
    body: Value,
) -> (StatusCode, Value) {
    let id = id.as_str().unwrap();
    post(c, base, &format!("{name}/reservations/{id}/settle"), body).await
}

async fn balance(c: &Client, base: &str, name: &str, key: &str) -> Value {
    let url = format!("{base}/v1/ratelimits/{name}/balances/{key}");
    let (s, b) = json_of(send(c, Method::GET, &url, None).await).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    b
}

/// A problem's status, code and field.
fn problem(s: StatusCode, p: &Value) -> (u16, String, String) {
    let text = |v: &Value| v.as_str().unwrap_or("").to_string();
    (s.as_u16(), text(&p["code"]), text(&p["field"]))
}

/// Settled lower, equal, higher; the debt denies checks and reservations with Retry-After;
/// 409, 404, DELETE; charges, refunds, balances; metrics.
async fn settle_every_way(base: &str) {
    let c = client();
    // 100 per hour: one unit comes back every 36 s, so nothing moves during the test.
    put_quota(&c, base, "tok", json!({"limit": 100, "period": "1h"})).await;
    let r = reserve(&c, base, "tok", json!({"key": "k", "estimate": 40})).await;
    assert_eq!(
        (
            &r["allowed"],
            &r["estimate"],
            &r["remaining"],
            &r["settle_within_ms"]
        ),
        (&json!(true), &json!(40), &json!(60), &json!(600_000)),
        "{r}"
    );
    assert!(r["reset_after_ms"].as_u64().unwrap() > 0, "{r}");
    // Lower: the 30 not used come back.
    let (s, b) = settle(&c, base, "tok", &r["id"], json!({"actual": 10})).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(
        (&b["remaining"], &b["debt"], &b["limit"]),
        (&json!(90), &json!(0), &json!(100)),
        "{b}"
    );
    assert_eq!(b["retry_after_ms"], Value::Null, "{b}");
    // Twice: 409.
    let (s, p) = settle(&c, base, "tok", &r["id"], json!({"actual": 10})).await;
    assert_eq!(
        problem(s, &p),
        (409, "already_settled".into(), String::new()),
        "{p}"
    );
    // Equal: nothing moves.
    let r = reserve(&c, base, "tok", json!({"key": "k", "estimate": 50})).await;
    let (s, b) = settle(&c, base, "tok", &r["id"], json!({"actual": 50})).await;
    assert_eq!(
        (s, &b["remaining"], &b["debt"]),
        (StatusCode::OK, &json!(40), &json!(0)),
        "{b}"
    );
    // Kept (DELETE): settled at the estimate, then a settle is a 409.
    let r = reserve(&c, base, "tok", json!({"key": "k", "estimate": 5})).await;
    let url = format!(
        "{base}/v1/ratelimits/tok/reservations/{}",
        r["id"].as_str().unwrap()
    );
    let (s, b) = json_of(send(&c, Method::DELETE, &url, None).await).await;
    assert_eq!((s, &b["remaining"]), (StatusCode::OK, &json!(35)), "{b}");
    let (s, p) = settle(&c, base, "tok", &r["id"], json!({"actual": 1})).await;
    assert_eq!(s, StatusCode::CONFLICT, "{p}");
    // Higher: the 30 beyond what was left become debt.
    let r = reserve(&c, base, "tok", json!({"key": "k", "estimate": 35})).await;
    assert_eq!(r["remaining"], 0, "{r}");
    let (s, b) = settle(&c, base, "tok", &r["id"], json!({"actual": 65})).await;
    assert_eq!(
        (s, &b["remaining"], &b["debt"]),
        (StatusCode::OK, &json!(0), &json!(30)),
        "{b}"
    );
    assert!(b["retry_after_ms"].as_u64().unwrap() > 29 * 36_000, "{b}");
    // The next check is a 429 with Retry-After counting the debt; so is a reservation, even
    // of 0 (nothing taken, no id).
    let url = format!("{base}/v1/ratelimits/tok/check");
    let resp = send(&c, Method::POST, &url, Some(json!({"key": "k"}))).await;
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    let secs: u64 = resp.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(secs > 29 * 36, "Retry-After {secs}");
    for estimate in [0, 3] {
        let url = format!("{base}/v1/ratelimits/tok/reservations");
        let resp = send(
            &c,
            Method::POST,
            &url,
            Some(json!({"key": "k", "estimate": estimate})),
        )
        .await;
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(resp.headers()["content-type"], "application/problem+json");
        assert!(resp.headers().contains_key("retry-after"));
        let p: Value = resp.json().await.unwrap();
        assert_eq!(
            (&p["allowed"], &p["estimate"], &p["code"]),
            (&json!(false), &json!(estimate), &json!("rate_limited")),
            "{p}"
        );
        assert!(
            p.get("id").is_none() && p["retry_after_ms"].as_u64().unwrap() > 0,
            "{p}"
        );
    }
    assert_eq!(balance(&c, base, "tok", "k").await["debt"], 30);
    // Unknown ids: 404, also an id of another limit.
    let other = reserve(&c, base, "tok", json!({"key": "k2", "estimate": 1})).await;
    put_quota(&c, base, "other", json!({"limit": 5, "period": "1h"})).await;
    for (name, id) in [
        ("tok", json!("0123456789abcdef")),
        ("other", other["id"].clone()),
    ] {
        let (s, p) = settle(&c, base, name, &id, json!({"actual": 1})).await;
        assert_eq!(
            problem(s, &p),
            (404, "not_found".into(), String::new()),
            "{p}"
        );
    }
    let (s, _) = settle(&c, base, "tok", &other["id"], json!({"actual": 1})).await;
    assert_eq!(s, StatusCode::OK);
    // Charges and refunds on a key of their own.
    let (s, b) = post(&c, base, "tok/charge", json!({"key": "c/d", "cost": 150})).await;
    assert_eq!(
        (s, &b["remaining"], &b["debt"], &b["key"]),
        (StatusCode::OK, &json!(0), &json!(50), &json!("c/d")),
        "{b}"
    );
    assert_eq!(balance(&c, base, "tok", "c/d").await["debt"], 50);
    let (s, b) = post(
        &c,
        base,
        "tok/refund",
        json!({"key": "c/d", "amount": 1000}),
    )
    .await;
    assert_eq!(
        (s, &b["remaining"], &b["debt"]),
        (StatusCode::OK, &json!(100), &json!(0)),
        "{b}"
    );
    // Counted in /metrics.
    let m = metrics(&c, base).await;
    for (line, want) in [
        (
            "clusterlimit_rate_reservations_total{limit=\"tok\",outcome=\"admitted\"}",
            5.0,
        ),
        (
            "clusterlimit_rate_reservations_total{limit=\"tok\",outcome=\"denied\"}",
            2.0,
        ),
        (
            "clusterlimit_rate_reservations_ended_total{limit=\"tok\",outcome=\"settled\"}",
            4.0,
        ),
        (
            "clusterlimit_rate_reservations_ended_total{limit=\"tok\",outcome=\"kept\"}",
            1.0,
        ),
        (
            "clusterlimit_rate_adjusted_units_total{limit=\"tok\",outcome=\"settle_refunded\"}",
            30.0,
        ),
        (
            "clusterlimit_rate_adjusted_units_total{limit=\"tok\",outcome=\"settle_charged\"}",
            30.0,
        ),
        (
            "clusterlimit_rate_adjusted_units_total{limit=\"tok\",outcome=\"charged\"}",
            150.0,
        ),
        (
            "clusterlimit_rate_adjusted_units_total{limit=\"tok\",outcome=\"refunded\"}",
            1000.0,
        ),
        ("clusterlimit_rate_reservations_open ", 0.0),
    ] {
        assert_eq!(sample(&m, line), Some(want), "{line}\n{m}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settle_every_way_on_memory() {
    let sc = Sidecar::start(&["--store", "memory://settle-ways"]).await;
    settle_every_way(&sc.url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settle_every_way_on_etcd() {
    let cluster = EtcdCluster::single();
    let sc = Sidecar::start(&["--store", &cluster.url("settle-ways")]).await;
    settle_every_way(&sc.url).await;
}

/// Every bad field of every route: a 400 naming it; nothing taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_fields_are_400s_naming_them() {
    let sc = Sidecar::start(&["--store", "memory://settle-bad"]).await;
    let (c, base) = (client(), sc.url.as_str());
    put_quota(
        &c,
        base,
        "tok",
        json!({"limit": 100, "period": "1h", "reserves": {"batch": 10}}),
    )
    .await;
    let reserve_cases = [
        (json!({"estimate": 1}), "key"),
        (json!({"key": "", "estimate": 1}), "key"),
        (json!({"key": "k"}), "estimate"),
        (json!({"key": "k", "estimate": -1}), "estimate"),
        (json!({"key": "k", "estimate": 1.5}), "estimate"),
        (json!({"key": "k", "estimate": "ten"}), "estimate"),
        (json!({"key": "k", "estimate": 101}), "estimate"),
        (json!({"key": "k", "estimate": 1, "class": "nope"}), "class"),
        (
            json!({"key": "k", "estimate": 95, "class": "batch"}),
            "class",
        ),
        (json!({"key": "k", "estimate": 1, "flow": ""}), "flow"),
        (
            json!({"key": "k", "estimate": 1, "timeout_ms": 0}),
            "timeout_ms",
        ),
        (
            json!({"key": "k", "estimate": 1, "timeout_ms": 3_600_001}),
            "timeout_ms",
        ),
        (
            json!({"key": "k", "estimate": 1, "settle_within_ms": 0}),
            "settle_within_ms",
        ),
        (
            json!({"key": "k", "estimate": 1, "settle_within_ms": 3_600_001}),
            "settle_within_ms",
        ),
        (json!({"key": "k", "estimate": 1, "cost": 1}), "cost"),
    ];
    for (body, field) in reserve_cases {
        let (s, p) = post(&c, base, "tok/reservations", body.clone()).await;
        assert_eq!(
            problem(s, &p),
            (400, "invalid_field".into(), field.into()),
            "{body}: {p}"
        );
    }
    // On a quota of 100 per second (10 ms a unit), so that a debt of a billion units fits
    // GCRA's clock (on 100 per hour it would not: see the notes of issue 42).
    put_quota(&c, base, "fast", json!({"limit": 100, "period": "1s"})).await;
    let r = reserve(&c, base, "fast", json!({"key": "k", "estimate": 41})).await;
    let settle_cases = [
        json!({}),
        json!({"actual": -1}),
        json!({"actual": 2.5}),
        json!({"actual": "x"}),
        json!({"actual": 1_000_000_042_i64}),
    ];
    for body in settle_cases {
        let (s, p) = settle(&c, base, "fast", &r["id"], body.clone()).await;
        assert_eq!(
            problem(s, &p),
            (400, "invalid_field".into(), "actual".into()),
            "{body}: {p}"
        );
    }
    // The bad settles left it open: the most allowed settles it, a billion units of debt
    // (less what the key had left and what time paid off meanwhile).
    let (s, b) = settle(
        &c,
        base,
        "fast",
        &r["id"],
        json!({"actual": 1_000_000_041_i64}),
    )
    .await;
    let debt = b["debt"].as_u64().unwrap();
    assert_eq!(s, StatusCode::OK, "{b}");
    assert!((999_999_000..=1_000_000_000).contains(&debt), "{b}");
    for (route, body, field) in [
        ("charge", json!({"key": "k"}), "cost"),
        ("charge", json!({"key": "k", "cost": -5}), "cost"),
        (
            "charge",
            json!({"key": "k", "cost": 1_000_000_001_i64}),
            "cost",
        ),
        ("charge", json!({"cost": 1}), "key"),
        ("refund", json!({"key": "k", "amount": 0.5}), "amount"),
        ("refund", json!({"key": "k", "cost": 1}), "cost"),
    ] {
        let (s, p) = post(&c, base, &format!("tok/{route}"), body.clone()).await;
        assert_eq!(
            problem(s, &p),
            (400, "invalid_field".into(), field.into()),
            "{route} {body}: {p}"
        );
    }
    let url = format!("{base}/v1/ratelimits/tok/balances/");
    let (s, p) = json_of(send(&c, Method::GET, &url, None).await).await;
    assert_eq!(
        problem(s, &p),
        (400, "invalid_field".into(), "key".into()),
        "{p}"
    );
    // An absent limit: 404 on every route.
    for path in ["absent/reservations", "absent/charge", "absent/refund"] {
        let (s, p) = post(
            &c,
            base,
            path,
            json!({"key": "k", "estimate": 1, "cost": 1, "amount": 1}),
        )
        .await;
        assert!(
            s == StatusCode::NOT_FOUND || s == StatusCode::BAD_REQUEST,
            "{path}: {p}"
        );
    }
    let (s, p) = post(&c, base, "absent/charge", json!({"key": "k", "cost": 1})).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{p}");
}

/// A client that vanishes: its reservations settle at their estimates when their time limit
/// passes, the table forgets them (open gauge back to 0), and a late settle is a 410.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vanished_clients_reservations_expire() {
    let sc = Sidecar::start(&["--store", "memory://settle-expire"]).await;
    let (c, base) = (client(), sc.url.as_str());
    put_quota(&c, base, "tok", json!({"limit": 100, "period": "1h"})).await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let r = reserve(
            &c,
            base,
            "tok",
            json!({"key": "k", "estimate": 10, "settle_within_ms": 400}),
        )
        .await;
        assert_eq!(r["settle_within_ms"], 400);
        ids.push(r["id"].clone());
    }
    let open = |m: &str| sample(m, "clusterlimit_rate_reservations_open ");
    assert_eq!(open(&metrics(&c, base).await), Some(3.0));
    eventually(
        "the expired reservations forgotten",
        Duration::from_secs(10),
        || async { (open(&metrics(&c, base).await) == Some(0.0)).then_some(()) },
    )
    .await;
    let (s, p) = settle(&c, base, "tok", &ids[0], json!({"actual": 1})).await;
    assert_eq!(
        problem(s, &p),
        (410, "reservation_expired".into(), String::new()),
        "{p}"
    );
    assert!(
        p["detail"].as_str().unwrap().contains("charge any extra"),
        "{p}"
    );
    let url = format!(
        "{base}/v1/ratelimits/tok/reservations/{}",
        ids[1].as_str().unwrap()
    );
    let (s, _) = json_of(send(&c, Method::DELETE, &url, None).await).await;
    assert_eq!(s, StatusCode::GONE);
    // Settled at their estimates: 30 stay taken.
    assert_eq!(balance(&c, base, "tok", "k").await["remaining"], 70);
    let m = metrics(&c, base).await;
    assert_eq!(
        sample(
            &m,
            "clusterlimit_rate_reservations_ended_total{limit=\"tok\",outcome=\"expired\"}"
        ),
        Some(3.0),
        "{m}"
    );
}

/// Past `--max-reservations`: 503 saying so, nothing taken; a settle makes room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_table_answers_503_and_takes_nothing() {
    let sc = Sidecar::start(&["--store", "memory://settle-cap", "--max-reservations", "2"]).await;
    let (c, base) = (client(), sc.url.as_str());
    put_quota(&c, base, "tok", json!({"limit": 100, "period": "1h"})).await;
    let a = reserve(&c, base, "tok", json!({"key": "k", "estimate": 10})).await;
    reserve(&c, base, "tok", json!({"key": "k", "estimate": 10})).await;
    let url = format!("{base}/v1/ratelimits/tok/reservations");
    let resp = send(
        &c,
        Method::POST,
        &url,
        Some(json!({"key": "k", "estimate": 10})),
    )
    .await;
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(resp.headers().contains_key("retry-after"));
    let p: Value = resp.json().await.unwrap();
    assert_eq!(p["code"], "too_many_reservations", "{p}");
    assert!(
        p["detail"].as_str().unwrap().contains("nothing was taken"),
        "{p}"
    );
    assert_eq!(balance(&c, base, "tok", "k").await["remaining"], 80);
    let (s, _) = settle(&c, base, "tok", &a["id"], json!({"actual": 10})).await;
    assert_eq!(s, StatusCode::OK);
    reserve(&c, base, "tok", json!({"key": "k", "estimate": 10})).await;
}

/// Two sidecars on one etcd: a debt made through one denies through the other, and both
/// see the same balance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sidecars_on_one_etcd_share_the_debt() {
    let cluster = EtcdCluster::single();
    let url = cluster.url("settle-two");
    let a = Sidecar::start(&["--store", &url]).await;
    let b = Sidecar::start(&["--store", &url]).await;
    let c = client();
    put_quota(&c, &a.url, "tok", json!({"limit": 100, "period": "1h"})).await;
    let r = reserve(&c, &a.url, "tok", json!({"key": "k", "estimate": 10})).await;
    let (s, bal) = settle(&c, &a.url, "tok", &r["id"], json!({"actual": 160})).await;
    assert_eq!((s, &bal["debt"]), (StatusCode::OK, &json!(60)), "{bal}");
    let check = format!("{}/v1/ratelimits/tok/check", b.url);
    let resp = send(&c, Method::POST, &check, Some(json!({"key": "k"}))).await;
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(balance(&c, &b.url, "tok", "k").await["debt"], 60);
    let (s, bal) = post(&c, &b.url, "tok/charge", json!({"key": "k", "cost": 10})).await;
    assert_eq!((s, &bal["debt"]), (StatusCode::OK, &json!(70)), "{bal}");
    // A's balance reads the store once its cached state of the key is a second old.
    eventually("A to see B's charge", Duration::from_secs(5), || async {
        (balance(&c, &a.url, "tok", "k").await["debt"] == 70).then_some(())
    })
    .await;
}

/// A settle whose client hangs up mid-request is still applied: etcd paused, so the settle
/// waits for the store; the request written on a raw connection that is closed while it
/// waits; etcd resumed; the settle lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settle_whose_client_hangs_up_is_applied() {
    use tokio::io::AsyncWriteExt;
    let mut cluster = EtcdCluster::single();
    let url = cluster.url("settle-hangup");
    let sc = Sidecar::start(&["--store", &url, "--rate-store-timeout", "20s"]).await;
    let (c, base) = (client(), sc.url.as_str());
    put_quota(&c, base, "tok", json!({"limit": 100, "period": "1h"})).await;
    let r = reserve(&c, base, "tok", json!({"key": "k", "estimate": 40})).await;
    let id = r["id"].as_str().unwrap();
    let body = r#"{"actual":10}"#;
    let request = format!(
        "POST /v1/ratelimits/tok/reservations/{id}/settle HTTP/1.1\r\nhost: x\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    cluster.pause(0);
    let addr = base.trim_start_matches("http://");
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    conn.write_all(request.as_bytes()).await.unwrap();
    // The sidecar has read it and is waiting for the store when the client goes.
    tokio::time::sleep(Duration::from_millis(500)).await;
    drop(conn);
    tokio::time::sleep(Duration::from_millis(200)).await;
    cluster.resume(0);
    eventually("the settle applied", Duration::from_secs(15), || async {
        (balance(&c, base, "tok", "k").await["remaining"] == 90).then_some(())
    })
    .await;
    let (s, p) = settle(&c, base, "tok", &r["id"], json!({"actual": 10})).await;
    assert_eq!(s, StatusCode::CONFLICT, "{p}");
}

/// `max_reservations` out of range, in the config file or as the flag: exit 64 naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_max_reservations_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    for n in ["0", "-3", "1000001"] {
        let path = dir.path().join("serve.toml");
        let text = format!("store = \"memory://x\"\nmax_reservations = {n}\n");
        std::fs::write(&path, text).unwrap();
        let out = binary::check_config(&path).await;
        assert_eq!(out.code, Some(64), "{n}: {}", out.stderr);
        assert!(
            out.stderr
                .contains("max_reservations must be from 1 to 1000000"),
            "{n}: {}",
            out.stderr
        );
        let flag = binary::cmd(&[
            "serve",
            "--check-config",
            "--store",
            "memory://x",
            "--max-reservations",
            n,
        ]);
        let out = binary::output(flag, Duration::from_secs(20)).await;
        assert_eq!(out.code, Some(64), "--max-reservations {n}: {}", out.stderr);
        assert!(
            out.stderr.contains("--max-reservations"),
            "{n}: {}",
            out.stderr
        );
    }
}
