//! Priority classes over the real `clusterlimit serve` (on etcd): `/wait` as a class, a class
//! added by another client read afresh, the quota preview replaying each check as its class,
//! and `[[rate_limits]]` declaring reserves (`--check-config` naming the field at fault).

use crate::binary;
use crate::support;

use binary::{check_config, http_client, Sidecar};
use clusterlimit::{Limiter, Quota};
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use support::EtcdCluster;

async fn post(c: &Client, base: &str, path: &str, body: Value) -> (StatusCode, Value) {
    let r = c
        .post(format!("{base}/v1/ratelimits/{path}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let s = r.status();
    (s, r.json().await.unwrap_or(Value::Null))
}

async fn put(c: &Client, base: &str, name: &str, quota: Value) -> (StatusCode, Value) {
    let r = c
        .put(format!("{base}/v1/ratelimits/{name}"))
        .json(&quota)
        .send()
        .await
        .unwrap();
    let s = r.status();
    (s, r.json().await.unwrap_or(Value::Null))
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

/// `/wait` with a `class`: waits for the class's reserve to refill, a wait that may not wait
/// is denied with nothing consumed, the unclassed take the reserve; a class the cached quota
/// lacks (added through another client) is read afresh; unknown classes and costs the class
/// can never take are 400s on `class`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_as_a_class_waits_for_its_reserve() {
    let cluster = EtcdCluster::single();
    let url = cluster.url("rate-wait-class");
    let sc = Sidecar::start(&["--store", &url]).await;
    let (c, base) = (http_client(), sc.url.as_str());
    // One a second, burst 3, no classes yet: the sidecar caches this quota.
    let (s, q) = put(&c, base, "jobs", json!({"limit": 3, "period": "3s"})).await;
    assert_eq!(s, StatusCode::OK, "{q}");
    let (s, d) = post(&c, base, "jobs/check", json!({"key": "warm"})).await;
    assert_eq!(s, StatusCode::OK, "{d}");
    // Another client adds the class `batch` (leaving 2).
    let limiter = Limiter::connect(&url).await.unwrap();
    let rl = limiter.open_rate_limit("jobs").await.unwrap();
    rl.set_quota(Quota::new(3, Duration::from_secs(3)).reserve("batch", 2))
        .await
        .unwrap();

    let wait = |class: &str, cost: u64, timeout_ms: u64| json!({"key": "k", "class": class, "cost": cost, "timeout_ms": timeout_ms});
    let (s, d) = post(&c, base, "jobs/wait", wait("batch", 1, 2000)).await;
    assert_eq!((s, &d["remaining"]), (StatusCode::OK, &json!(0)), "{d}");
    let (s, d) = post(&c, base, "jobs/wait", wait("batch", 1, 0)).await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS, "{d}");
    assert!(
        d["detail"]
            .as_str()
            .unwrap()
            .contains("nothing was consumed"),
        "{d}"
    );
    let t = Instant::now();
    let (s, d) = post(&c, base, "jobs/wait", wait("batch", 1, 5000)).await;
    assert_eq!(s, StatusCode::OK, "{d}");
    println!(
        "a batch wait took {:?} for its reserve to refill",
        t.elapsed()
    );
    assert!(
        t.elapsed() >= Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );
    let (s, d) = post(&c, base, "jobs/check", json!({"key": "k", "cost": 2})).await;
    assert_eq!(s, StatusCode::OK, "no class takes the reserve: {d}");

    assert_bad(
        &post(&c, base, "jobs/wait", wait("bulk", 1, 0)).await,
        "class",
        "bulk",
    );
    assert_bad(
        &post(&c, base, "jobs/wait", wait("batch", 2, 0)).await,
        "class",
        "batch",
    );
    assert_bad(
        &post(&c, base, "jobs/wait", wait("a b", 1, 0)).await,
        "class",
        "a b",
    );
    let no_key = json!({"class": "batch"});
    assert_eq!(
        post(&c, base, "jobs/wait", no_key).await.0,
        StatusCode::BAD_REQUEST
    );
    let (s, _) = post(&c, base, "nope/wait", wait("batch", 1, 0)).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
}

/// The quota preview replays each recorded check as its class: a proposed quota without the
/// class would refuse every check of it, one with it changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_preview_replays_each_check_as_its_class() {
    let cluster = EtcdCluster::single();
    let sc = Sidecar::start(&["--store", &cluster.url("rate-preview-class")]).await;
    let (c, base) = (http_client(), sc.url.as_str());
    let quota = json!({"limit": 100, "period": "1m", "reserves": {"batch": 10}});
    assert_eq!(put(&c, base, "api", quota.clone()).await.0, StatusCode::OK);
    for i in 0..10 {
        let body = if i % 2 == 0 {
            json!({"key": "k", "class": "batch"})
        } else {
            json!({"key": "k"})
        };
        let (s, d) = post(&c, base, "api/check", body).await;
        assert_eq!(s, StatusCode::OK, "{d}");
    }
    let (s, d) = post(&c, base, "api/wait", json!({"key": "k", "class": "batch"})).await;
    assert_eq!(s, StatusCode::OK, "{d}");
    let (s, p) = post(
        &c,
        base,
        "api/preview",
        json!({"limit": 100, "period": "1m"}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{p}");
    let preview = &p["preview"];
    assert_eq!(
        (
            &preview["checks"],
            &preview["denied_current"],
            &preview["denied_proposed"]
        ),
        (&json!(11), &json!(0), &json!(6)),
        "the 6 batch checks have no class in the proposal: {p}"
    );
    let (s, p) = post(&c, base, "api/preview", quota).await;
    assert_eq!(
        (s, &p["preview"]["denied_proposed"]),
        (StatusCode::OK, &json!(0)),
        "{p}"
    );
}

/// `[[rate_limits]]` with `reserves`: created with them (GET shows them, a class check works),
/// shown by `--check-config`; a bad reserve refused naming the entry's field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declared_rate_limits_take_reserves() {
    let cluster = EtcdCluster::single();
    let url = cluster.url("rate-config-reserves");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    let entry = "[[rate_limits]]\nname = \"jobs\"\nlimit = 100\nperiod = \"1m\"\n";
    std::fs::write(
        &path,
        format!("store = \"{url}\"\n\n{entry}reserves = {{ batch = 20, critical = 0 }}\n"),
    )
    .unwrap();
    let out = check_config(&path).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout
            .contains("jobs (100 per 60s (gcra, burst 100, reserve batch 20, critical 0))"),
        "{}",
        out.stdout
    );
    let sc = Sidecar::start(&["--config", path.to_str().unwrap()]).await;
    let (c, base) = (http_client(), sc.url.as_str());
    let r = c
        .get(format!("{base}/v1/ratelimits/jobs"))
        .send()
        .await
        .unwrap();
    let q: Value = r.json().await.unwrap();
    assert_eq!(q["reserves"], json!({"batch": 20, "critical": 0}), "{q}");
    let batch = json!({"key": "k", "class": "batch", "cost": 80});
    let (s, d) = post(&c, base, "jobs/check", batch).await;
    assert_eq!((s, &d["remaining"]), (StatusCode::OK, &json!(0)), "{d}");
    drop(sc);

    for (reserves, needle) in [
        ("{ batch = 100 }", "batch"),
        (
            "{ batch = -1 }",
            "must be a whole number of 0 or more, got -1",
        ),
        ("{ \"a b\" = 1 }", "a b"),
        ("{ a = 1, b = 1, c = 1, d = 1, e = 1 }", "4"),
    ] {
        std::fs::write(&path, format!("{entry}reserves = {reserves}\n")).unwrap();
        let out = check_config(&path).await;
        assert_eq!(out.code, Some(64), "{reserves}: {}", out.stderr);
        assert!(
            out.stderr.contains("rate_limits[0].reserves"),
            "{}",
            out.stderr
        );
        assert!(out.stderr.contains(needle), "{needle} in {}", out.stderr);
    }
    // Not a table: TOML's own error, naming the key.
    std::fs::write(&path, format!("{entry}reserves = 20\n")).unwrap();
    let out = check_config(&path).await;
    assert_eq!(out.code, Some(64), "{}", out.stderr);
    assert!(out.stderr.contains("reserves"), "{}", out.stderr);
}
