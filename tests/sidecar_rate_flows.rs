//! Fair flows over the real `clusterlimit serve` (on etcd): `"fair_flows"` in a quota body
//! (kept by a `PUT` unless given, shown by `GET`), `"flow"` in `/check` and `/wait` bodies, and
//! `[[rate_limits]]` declaring `fair_flows` (`--check-config` naming the field at fault).

use crate::binary;
use crate::support;

use binary::{check_config, http_client, Sidecar};
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};
use support::EtcdCluster;

async fn send(req: reqwest::RequestBuilder) -> (StatusCode, Value) {
    let r = req.send().await.unwrap();
    let s = r.status();
    (s, r.json().await.unwrap_or(Value::Null))
}

async fn post(c: &Client, base: &str, path: &str, body: Value) -> (StatusCode, Value) {
    let req = c.post(format!("{base}/v1/ratelimits/{path}")).json(&body);
    send(req).await
}

async fn put(c: &Client, base: &str, name: &str, quota: Value) -> (StatusCode, Value) {
    let req = c.put(format!("{base}/v1/ratelimits/{name}")).json(&quota);
    send(req).await
}

async fn get(c: &Client, base: &str, name: &str) -> Value {
    let (s, q) = send(c.get(format!("{base}/v1/ratelimits/{name}"))).await;
    assert_eq!(s, StatusCode::OK, "{q}");
    q
}

/// A 400 problem naming `field`, whose detail holds `needle`.
fn assert_bad(answer: &(StatusCode, Value), field: &str, needle: &str) {
    let (s, p) = answer;
    assert_eq!(*s, StatusCode::BAD_REQUEST, "{p}");
    assert_eq!(p["field"], field, "{p}");
    assert!(
        p["detail"].as_str().unwrap().contains(needle),
        "{needle} in {p}"
    );
}

/// A quota with `"fair_flows": true` over PUT; checks and waits with a `flow`: a flow that
/// asked is kept its share from the others. A PUT changing only the limit keeps fair flows
/// (and reserves); `false` removes them; bad flow names and a warm-up are 400s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_flows_over_put_check_and_wait() {
    let cluster = EtcdCluster::single();
    let sc = Sidecar::start(&["--store", &cluster.url("rate-flows")]).await;
    let (c, base) = (http_client(), sc.url.as_str());
    let quota = json!({"limit": 10, "period": "365d", "algorithm": "fixed_window",
        "fair_flows": true, "reserves": {"batch": 0}});
    let (s, q) = put(&c, base, "api", quota).await;
    assert_eq!((s, &q["fair_flows"]), (StatusCode::OK, &json!(true)), "{q}");
    assert_eq!(get(&c, base, "api").await["fair_flows"], json!(true));

    let check = |flow: &str, cost: u64| json!({"key": "k", "flow": flow, "cost": cost});
    let (s, d) = post(&c, base, "api/check", check("a", 8)).await;
    assert_eq!(s, StatusCode::OK, "{d}");
    // b asks 5 with 2 left: denied, and counted; a must leave b those 2.
    let (s, d) = post(&c, base, "api/check", check("b", 5)).await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS, "{d}");
    let (s, d) = post(&c, base, "api/check", check("a", 1)).await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS, "a keeps b's share: {d}");

    // A PUT changing only the limit keeps fair flows and reserves.
    let only_limit = json!({"limit": 11, "period": "365d", "algorithm": "fixed_window"});
    let (s, q) = put(&c, base, "api", only_limit).await;
    assert_eq!(s, StatusCode::OK, "{q}");
    let q = get(&c, base, "api").await;
    assert_eq!(
        (&q["limit"], &q["fair_flows"], &q["reserves"]),
        (&json!(11), &json!(true), &json!({"batch": 0})),
        "{q}"
    );
    // b's wait takes 2 of its share at once.
    let wait = json!({"key": "k", "flow": "b", "cost": 2, "timeout_ms": 5000});
    let (s, d) = post(&c, base, "api/wait", wait).await;
    assert_eq!(s, StatusCode::OK, "{d}");

    // A warm-up with the reserves kept: a 400 on reserves; without them, on the fair flows kept.
    let warm = json!({"limit": 10, "period": "365d", "warmup": "200d"});
    assert_bad(
        &put(&c, base, "api", warm).await,
        "reserves",
        "without a warm-up",
    );
    let warm = json!({"limit": 10, "period": "365d", "warmup": "200d", "reserves": {}});
    assert_bad(
        &put(&c, base, "api", warm).await,
        "fair_flows",
        "without a warm-up",
    );
    // Bad flow names: 400 on flow, on check and on wait.
    for bad in ["", "tab\there", &"x".repeat(129)] {
        let body = json!({"key": "k", "flow": bad});
        assert_bad(
            &post(&c, base, "api/check", body.clone()).await,
            "flow",
            "flow name",
        );
        assert_bad(&post(&c, base, "api/wait", body).await, "flow", "flow name");
    }

    // `false` removes them: flows are ignored, the key's last unit goes to anyone.
    let off =
        json!({"limit": 11, "period": "365d", "algorithm": "fixed_window", "fair_flows": false});
    let (s, q) = put(&c, base, "api", off).await;
    assert_eq!(s, StatusCode::OK, "{q}");
    assert!(get(&c, base, "api").await.get("fair_flows").is_none());
    let (s, d) = post(&c, base, "api/check", check("a", 1)).await;
    assert_eq!(s, StatusCode::OK, "{d}");
}

/// `[[rate_limits]]` with `fair_flows = true`: created with them (GET shows them), shown by
/// `--check-config`; with a warm-up refused naming the entry's field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declared_rate_limits_take_fair_flows() {
    let cluster = EtcdCluster::single();
    let url = cluster.url("rate-config-flows");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    let entry = "[[rate_limits]]\nname = \"jobs\"\nlimit = 100\nperiod = \"1m\"\n";
    std::fs::write(
        &path,
        format!("store = \"{url}\"\n\n{entry}fair_flows = true\n"),
    )
    .unwrap();
    let out = check_config(&path).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout
            .contains("jobs (100 per 60s (gcra, burst 100, fair flows))"),
        "{}",
        out.stdout
    );
    let sc = Sidecar::start(&["--config", path.to_str().unwrap()]).await;
    let (c, base) = (http_client(), sc.url.as_str());
    assert_eq!(get(&c, base, "jobs").await["fair_flows"], json!(true));
    let (s, d) = post(&c, base, "jobs/check", json!({"key": "k", "flow": "t"})).await;
    assert_eq!((s, &d["remaining"]), (StatusCode::OK, &json!(99)), "{d}");
    drop(sc);

    std::fs::write(
        &path,
        format!("{entry}warmup = \"1h\"\nfair_flows = true\n"),
    )
    .unwrap();
    let out = check_config(&path).await;
    assert_eq!(out.code, Some(64), "{}", out.stderr);
    assert!(
        out.stderr.contains("rate_limits[0].fair_flows"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("without a warm-up"), "{}", out.stderr);
    // Not a boolean: TOML's own error, naming the key.
    std::fs::write(&path, format!("{entry}fair_flows = \"yes\"\n")).unwrap();
    let out = check_config(&path).await;
    assert_eq!(out.code, Some(64), "{}", out.stderr);
    assert!(out.stderr.contains("fair_flows"), "{}", out.stderr);
}
