//! Rate limits over the sidecar's HTTP API: `clusterlimit serve` as a real process, on memory://,
//! real etcd and real ZooKeeper.

use crate::binary;
use crate::support;

use binary::{eventually, within, Sidecar};
use clusterlimit::{Limiter, Quota};
use reqwest::{Client, Method, Response, StatusCode};
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use support::{EtcdCluster, ZkCluster};

fn client() -> Client {
    Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// `/`, spaces and non-ASCII: a key as a client may have it.
const ODD_KEY: &str = "tenant/42 ünïcødé key";

/// The key as a path segment: percent-encoded, `/` kept (it is part of the `{*key}` tail).
fn key_path(key: &str) -> String {
    let mut out = String::new();
    for b in key.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                out.push(char::from(b))
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
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

async fn put_quota(c: &Client, base: &str, name: &str, quota: Value) -> (StatusCode, Value) {
    json_of(
        send(
            c,
            Method::PUT,
            &format!("{base}/v1/ratelimits/{name}"),
            Some(quota),
        )
        .await,
    )
    .await
}

async fn get_quota(c: &Client, base: &str, name: &str) -> (StatusCode, Value) {
    let url = format!("{base}/v1/ratelimits/{name}");
    json_of(send(c, Method::GET, &url, None).await).await
}

async fn check(c: &Client, base: &str, name: &str, body: Value) -> Response {
    send(
        c,
        Method::POST,
        &format!("{base}/v1/ratelimits/{name}/check"),
        Some(body),
    )
    .await
}

async fn peek(c: &Client, base: &str, name: &str, key: &str) -> (StatusCode, Value) {
    let url = format!("{base}/v1/ratelimits/{name}/keys/{}", key_path(key));
    json_of(send(c, Method::GET, &url, None).await).await
}

fn header(r: &Response, name: &str) -> Option<String> {
    r.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_string())
}

/// Every route on one store: quotas, checks with their fields, a 429, peek, reset, wait admitted
/// and wait timed out (nothing consumed), odd keys, metrics.
async fn every_route(base: &str, store: &str) {
    let c = client();
    let (s, q) = put_quota(&c, base, "api", json!({"limit": 3, "period": "1m"})).await;
    assert_eq!(s, StatusCode::OK, "{q}");
    assert_eq!(
        q,
        json!({"name": "api", "limit": 3, "period": "1m", "period_ms": 60000, "burst": 3,
               "algorithm": "gcra", "ban_ms": 0})
    );
    let (s, q) =
        json_of(send(&c, Method::GET, &format!("{base}/v1/ratelimits/api"), None).await).await;
    assert_eq!((s, q["limit"].clone()), (StatusCode::OK, json!(3)));

    // A warm-up: in the quota's JSON, and a cold key takes 3 of its burst of 10 at once.
    let warm = json!({"limit": 60, "period": "1m", "burst": 10, "warmup": "10m"});
    let (s, q) = put_quota(&c, base, "warm", warm).await;
    assert_eq!(s, StatusCode::OK, "{q}");
    assert_eq!(
        q,
        json!({"name": "warm", "limit": 60, "period": "1m", "period_ms": 60000, "burst": 10,
               "algorithm": "gcra", "ban_ms": 0, "warmup": "10m", "warmup_ms": 600000,
               "cold_factor": 3})
    );
    let (_, q) = get_quota(&c, base, "warm").await;
    assert_eq!(q["warmup_ms"], 600_000, "{q}");
    for status in [
        StatusCode::OK,
        StatusCode::OK,
        StatusCode::OK,
        StatusCode::TOO_MANY_REQUESTS,
    ] {
        let r = check(&c, base, "warm", json!({"key": "k"})).await;
        assert_eq!(r.status(), status);
    }
    let (s, q) = put_quota(
        &c,
        base,
        "warm",
        json!({"limit": 60, "period": "1m", "warmup_ms": 120000, "cold_factor": 5}),
    )
    .await;
    assert_eq!(
        (s, &q["warmup"], &q["cold_factor"]),
        (StatusCode::OK, &json!("2m"), &json!(5)),
        "{q}"
    );

    // Admitted at cost 1, then 2 (the rest), then a 429.
    let r = check(&c, base, "api", json!({"key": ODD_KEY})).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        header(&r, "ratelimit-policy").as_deref(),
        Some("\"api\";q=3;w=60")
    );
    assert_eq!(header(&r, "ratelimit").as_deref(), Some("\"api\";r=2;t=20"));
    assert_eq!(header(&r, "x-ratelimit-limit"), None, "ietf is the default");
    let d: Value = r.json().await.unwrap();
    assert_eq!(
        (
            &d["allowed"],
            &d["limit"],
            &d["remaining"],
            &d["source"],
            &d["key"],
            &d["cost"]
        ),
        (
            &json!(true),
            &json!(3),
            &json!(2),
            &json!("store"),
            &json!(ODD_KEY),
            &json!(1)
        )
    );
    assert_eq!(d["retry_after_ms"], Value::Null);
    assert!(d["reset_after_ms"].as_u64().unwrap() > 19_000, "{d}");
    let r = check(&c, base, "api", json!({"key": ODD_KEY, "cost": 2})).await;
    assert_eq!(r.status(), StatusCode::OK);
    let r = check(&c, base, "api", json!({"key": ODD_KEY})).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        header(&r, "content-type").as_deref(),
        Some("application/problem+json")
    );
    let retry: u64 = header(&r, "retry-after").unwrap().parse().unwrap();
    assert!((1..=20).contains(&retry), "Retry-After {retry}");
    assert_eq!(
        header(&r, "ratelimit").unwrap(),
        format!("\"api\";r=0;t={retry}")
    );
    let p: Value = r.json().await.unwrap();
    assert_eq!(
        (
            &p["status"],
            &p["code"],
            &p["name"],
            &p["key"],
            &p["allowed"],
            &p["remaining"]
        ),
        (
            &json!(429),
            &json!("rate_limited"),
            &json!("api"),
            &json!(ODD_KEY),
            &json!(false),
            &json!(0)
        )
    );
    assert!(p["retry_after_ms"].as_u64().unwrap() > 0, "{p}");
    assert!(p["detail"].as_str().unwrap().contains("api"), "{p}");

    // Peek by path (percent-decoded, `/` kept): nothing consumed, always 200.
    let (s, d) = peek(&c, base, "api", ODD_KEY).await;
    assert_eq!(s, StatusCode::OK, "{d}");
    assert_eq!(
        (&d["allowed"], &d["remaining"], &d["cost"]),
        (&json!(false), &json!(0), &json!(0))
    );
    // Reset: full again.
    let url = format!("{base}/v1/ratelimits/api/keys/{}", key_path(ODD_KEY));
    assert_eq!(
        send(&c, Method::DELETE, &url, None).await.status(),
        StatusCode::NO_CONTENT
    );
    let (_, d) = peek(&c, base, "api", ODD_KEY).await;
    assert_eq!((&d["allowed"], &d["remaining"]), (&json!(true), &json!(3)));
    // Another key is untouched by all of that.
    let (_, d) = peek(&c, base, "api", "tenant").await;
    assert_eq!(d["remaining"], 3);

    // Wait: admitted after a pause (2 per 4 s: the third waits ~2 s). The peek just before shows
    // it must wait; how long it took is only printed.
    let (s, _) = put_quota(&c, base, "fast", json!({"limit": 2, "period_ms": 4000})).await;
    assert_eq!(s, StatusCode::OK);
    let wait_url = format!("{base}/v1/ratelimits/fast/wait");
    for _ in 0..2 {
        assert_eq!(
            check(&c, base, "fast", json!({"key": "w"})).await.status(),
            StatusCode::OK
        );
    }
    let (_, d) = peek(&c, base, "fast", "w").await;
    assert_eq!(d["allowed"], false, "{d}");
    let t = Instant::now();
    let r = send(
        &c,
        Method::POST,
        &wait_url,
        Some(json!({"key": "w", "timeout_ms": 10000})),
    )
    .await;
    let waited = t.elapsed();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(header(&r, "ratelimit").is_some());
    println!("wait admitted after {waited:?} (expected ~2 s)");
    // Wait timed out: 429 at once (the retry_after reaches past the deadline), nothing consumed.
    let (s, q) = put_quota(&c, base, "slow", json!({"limit": 1, "period": "1h"})).await;
    assert_eq!(s, StatusCode::OK, "{q}");
    assert_eq!(
        check(&c, base, "slow", json!({"key": "w"})).await.status(),
        StatusCode::OK
    );
    let (_, before) = peek(&c, base, "slow", "w").await;
    let r = send(
        &c,
        Method::POST,
        &format!("{base}/v1/ratelimits/slow/wait"),
        Some(json!({"key": "w", "timeout_ms": 300})),
    )
    .await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(header(&r, "retry-after").is_some());
    let p: Value = r.json().await.unwrap();
    assert_eq!(
        (&p["code"], &p["name"], &p["key"]),
        (&json!("rate_limited"), &json!("slow"), &json!("w"))
    );
    // Nothing consumed: a consumed hit would push the key's reset further out, while time only
    // brings it closer.
    let (_, after) = peek(&c, base, "slow", "w").await;
    assert_eq!(before["remaining"], after["remaining"]);
    let (b, a) = (
        before["reset_after_ms"].as_u64().unwrap(),
        after["reset_after_ms"].as_u64().unwrap(),
    );
    assert!(a <= b, "reset_after_ms {b} before the wait, {a} after");

    // PUT changes a quota; list shows every limit.
    let (s, q) = put_quota(
        &c,
        base,
        "api",
        json!({"limit": 5, "period": "1s", "algorithm": "sliding_window", "ban_ms": 2000}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{q}");
    assert_eq!(
        (&q["algorithm"], &q["burst"], &q["ban_ms"]),
        (&json!("sliding_window"), &json!(5), &json!(2000))
    );
    let (s, all) =
        json_of(send(&c, Method::GET, &format!("{base}/v1/ratelimits"), None).await).await;
    assert_eq!(s, StatusCode::OK);
    let names: Vec<_> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["name"].clone())
        .collect();
    assert_eq!(names, ["api", "fast", "slow", "warm"]);
    assert_eq!(all[3]["cold_factor"], 5);
    assert_eq!(all[0]["algorithm"], "sliding_window");

    // Unknown limit: 404 on every route that names one.
    for (m, path, body) in [
        (Method::GET, "/v1/ratelimits/nope", None),
        (
            Method::POST,
            "/v1/ratelimits/nope/check",
            Some(json!({"key": "k"})),
        ),
        (
            Method::POST,
            "/v1/ratelimits/nope/wait",
            Some(json!({"key": "k"})),
        ),
        (Method::GET, "/v1/ratelimits/nope/keys/k", None),
        (Method::DELETE, "/v1/ratelimits/nope/keys/k", None),
    ] {
        let (s, p) = json_of(send(&c, m.clone(), &format!("{base}{path}"), body).await).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{m} {path}: {p}");
        assert!(p["detail"].as_str().unwrap().contains("nope"), "{p}");
    }

    // What one admitted check costs over HTTP (client, sidecar and store), printed only.
    let (s, _) = put_quota(&c, base, "big", json!({"limit": 1_000_000, "period": "1s"})).await;
    assert_eq!(s, StatusCode::OK);
    let mut took = Vec::new();
    for i in 0..100 {
        let t = Instant::now();
        let r = check(&c, base, "big", json!({"key": format!("k{}", i % 10)})).await;
        took.push(t.elapsed());
        assert_eq!(r.status(), StatusCode::OK);
    }
    took.sort();
    println!(
        "HTTP check on {store}: p50 {:?}, p99 {:?} over 100 admitted checks",
        took[50], took[99]
    );

    let m = send(&c, Method::GET, &format!("{base}/metrics"), None)
        .await
        .text()
        .await
        .unwrap();
    for line in [
        "clusterlimit_rate_hits_total{domain=\"http\",limit=\"api\"}",
        "clusterlimit_rate_over_limit_total{domain=\"http\",limit=\"api\"} 1",
        "clusterlimit_rate_keys_cached{limit=\"api\"}",
        // A wait counts once, by its outcome, however many checks it took.
        "clusterlimit_rate_hits_total{domain=\"http\",limit=\"fast\"} 3",
        "clusterlimit_rate_hits_total{domain=\"http\",limit=\"slow\"} 2",
        "clusterlimit_rate_over_limit_total{domain=\"http\",limit=\"slow\"} 1",
    ] {
        assert!(m.contains(line), "{line} missing from\n{m}");
    }
    assert!(
        !m.contains("clusterlimit_rate_over_limit_total{domain=\"http\",limit=\"fast\"}"),
        "{m}"
    );
}

/// A quota's `reserves` set over PUT, and checks with a `class`: the class stops with its
/// reserve left, a check without one takes the reserve; an unknown class is a 400 on `class`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_class_stops_at_its_reserve() {
    let sc = Sidecar::start(&["--store", "memory://rate-classes"]).await;
    let (c, base) = (client(), sc.url.as_str());
    let quota = json!({"limit": 10, "period": "365d", "reserves": {"batch": 3}});
    let (s, q) = put_quota(&c, base, "jobs", quota).await;
    assert_eq!(
        (s, &q["reserves"]),
        (StatusCode::OK, &json!({"batch": 3})),
        "{q}"
    );
    let r = check(
        &c,
        base,
        "jobs",
        json!({"key": "k", "cost": 7, "class": "batch"}),
    )
    .await;
    let (s, d) = json_of(r).await;
    assert_eq!((s, &d["remaining"]), (StatusCode::OK, &json!(0)), "{d}");
    let r = check(&c, base, "jobs", json!({"key": "k", "class": "batch"})).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    let r = check(&c, base, "jobs", json!({"key": "k", "cost": 3})).await;
    assert_eq!(r.status(), StatusCode::OK, "no class takes the reserve");
    let r = check(&c, base, "jobs", json!({"key": "k", "class": "bulk"})).await;
    let (s, p) = json_of(r).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{p}");
    assert!(p.to_string().contains("class"), "{p}");
    let (s, p) = put_quota(
        &c,
        base,
        "bad",
        json!({"limit": 10, "period": "1m", "reserves": {"batch": 10}}),
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{p}");
    assert!(p.to_string().contains("reserves"), "{p}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_on_memory() {
    let sc = Sidecar::start(&["--store", "memory://rate-routes"]).await;
    every_route(&sc.url, "memory").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_on_etcd() {
    let cluster = EtcdCluster::single();
    let sc = Sidecar::start(&["--store", &cluster.url("rate-routes")]).await;
    every_route(&sc.url, "etcd").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_on_zookeeper() {
    let zk = ZkCluster::single();
    let sc = Sidecar::start(&["--store", &zk.url("/rate-routes")]).await;
    every_route(&sc.url, "zookeeper").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_on_redis() {
    let redis = tokio::task::spawn_blocking(support::redis::RedisServer::start)
        .await
        .unwrap();
    let sc = Sidecar::start(&["--store", &redis.url("rate-routes")]).await;
    every_route(&sc.url, "redis").await;
}

/// Two sidecars on one store, hammered at once: together never over the limit. fail_closed and
/// a long store timeout, so a slow write on a loaded machine is waited for (and a timed-out
/// one denies, uncounted) rather than admitted by the policy: every answer must come from the
/// store.
async fn two_sidecars_share_the_limit(url: &str) {
    let flags = [
        "--store",
        url,
        "--rate-store-down",
        "fail_closed",
        "--rate-store-timeout",
        "10s",
    ];
    let a = Sidecar::start(&flags).await;
    let b = Sidecar::start(&flags).await;
    let c = client();
    let (s, _) = put_quota(&c, &a.url, "shared", json!({"limit": 10, "period": "1h"})).await;
    assert_eq!(s, StatusCode::OK);
    let mut tasks = Vec::new();
    for i in 0..40 {
        let base = if i % 2 == 0 {
            a.url.clone()
        } else {
            b.url.clone()
        };
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            json_of(check(&c, &base, "shared", json!({"key": "k"})).await).await
        }));
    }
    let mut admitted = 0;
    for t in tasks {
        let (s, d) = within("check answered", Duration::from_secs(30), t)
            .await
            .unwrap();
        assert!(
            s == StatusCode::OK || s == StatusCode::TOO_MANY_REQUESTS,
            "{s}: {d}"
        );
        assert_eq!(d["source"], "store", "{d}");
        admitted += usize::from(s == StatusCode::OK);
    }
    println!("two sidecars, 40 concurrent checks of a limit of 10: {admitted} admitted");
    assert_eq!(admitted, 10, "exactly the limit, never over it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sidecars_on_one_etcd_never_go_over_the_limit() {
    let cluster = EtcdCluster::single();
    two_sidecars_share_the_limit(&cluster.url("rate-two")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sidecars_on_one_zookeeper_never_go_over_the_limit() {
    let zk = ZkCluster::single();
    two_sidecars_share_the_limit(&zk.url("/rate-two")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sidecars_share_the_limit_on_redis_cluster() {
    let cluster = tokio::task::spawn_blocking(|| support::redis::RedisCluster::start(3))
        .await
        .unwrap();
    two_sidecars_share_the_limit(&cluster.url("rate-two")).await;
}

/// A quota changed through sidecar A, seen by sidecar B which opened the limit before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quota_changed_on_another_sidecar() {
    let cluster = EtcdCluster::single();
    let url = cluster.url("rate-changed");
    let a = Sidecar::start(&["--store", &url]).await;
    let b = Sidecar::start(&["--store", &url]).await;
    let c = client();

    // Lowered: a cost the new burst can never pass is a 400 on `cost` (check and wait alike;
    // one limit each, so each is the first to meet the lowered quota), not a 429 whose
    // Retry-After overflows, nor a wait until its timeout.
    for route in ["check", "wait"] {
        let name = format!("low-{route}");
        let (s, q) = put_quota(&c, &a.url, &name, json!({"limit": 10, "period": "1h"})).await;
        assert_eq!(s, StatusCode::OK, "{q}");
        let r = check(&c, &b.url, &name, json!({"key": "k"})).await;
        assert_eq!(r.status(), StatusCode::OK, "B opens {name}");
        let (s, q) = put_quota(
            &c,
            &a.url,
            &name,
            json!({"limit": 10, "period": "1h", "burst": 2}),
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{q}");
        let mut body = json!({"key": "k", "cost": 8});
        if route == "wait" {
            body["timeout_ms"] = json!(20_000);
        }
        let t = Instant::now();
        let r = send(
            &c,
            Method::POST,
            &format!("{}/v1/ratelimits/{name}/{route}", b.url),
            Some(body),
        )
        .await;
        let took = t.elapsed();
        let (s, p) = json_of(r).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{route}: {p}");
        assert_eq!(p["field"], "cost", "{route}: {p}");
        assert!(
            p["detail"].as_str().unwrap().contains("never"),
            "{route}: {p}"
        );
        println!("{route} of a cost the lowered quota never admits: 400 after {took:?}");
        assert!(took < Duration::from_secs(15), "{route} waited {took:?}");
    }

    // Raised: B's GET, list and a cost only the new quota admits see it at once.
    let (s, q) = put_quota(&c, &a.url, "up", json!({"limit": 2, "period": "1h"})).await;
    assert_eq!(s, StatusCode::OK, "{q}");
    let r = check(&c, &b.url, "up", json!({"key": "k"})).await;
    assert_eq!(r.status(), StatusCode::OK, "B opens up");
    let (s, q) = put_quota(&c, &a.url, "up", json!({"limit": 20, "period": "1h"})).await;
    assert_eq!(s, StatusCode::OK, "{q}");
    let (s, q) = get_quota(&c, &b.url, "up").await;
    assert_eq!((s, &q["limit"]), (StatusCode::OK, &json!(20)), "{q}");
    let (s, all) =
        json_of(send(&c, Method::GET, &format!("{}/v1/ratelimits", b.url), None).await).await;
    assert_eq!(s, StatusCode::OK, "{all}");
    let up = all
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == "up")
        .unwrap();
    assert_eq!(up["limit"], 20, "{all}");
    let (s, q) = put_quota(&c, &a.url, "up2", json!({"limit": 2, "period": "1h"})).await;
    assert_eq!(s, StatusCode::OK, "{q}");
    let r = check(&c, &b.url, "up2", json!({"key": "k"})).await;
    assert_eq!(r.status(), StatusCode::OK, "B opens up2");
    let (s, q) = put_quota(&c, &a.url, "up2", json!({"limit": 20, "period": "1h"})).await;
    assert_eq!(s, StatusCode::OK, "{q}");
    let r = check(&c, &b.url, "up2", json!({"key": "k2", "cost": 15})).await;
    let (s, d) = json_of(r).await;
    assert_eq!((s, &d["remaining"]), (StatusCode::OK, &json!(5)), "{d}");
}

/// Each header mode, from the flag and from the config file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_modes() {
    let c = client();
    let dir = tempfile::tempdir().unwrap();
    for mode in ["ietf", "legacy", "both", "off"] {
        let path = dir.path().join(format!("{mode}.toml"));
        std::fs::write(
            &path,
            format!(
                "store = \"memory://h-{mode}\"\nrate_limit_headers = \"{mode}\"\n\n\
                 [[rate_limits]]\nname = \"api\"\nlimit = 1\nperiod = \"1m\"\n"
            ),
        )
        .unwrap();
        let from_file = Sidecar::start(&["--config", path.to_str().unwrap()]).await;
        let from_flag = Sidecar::start(&[
            "--config",
            path.to_str().unwrap(),
            "--rate-limit-headers",
            mode,
        ])
        .await;
        for sc in [&from_file, &from_flag] {
            for want in [StatusCode::OK, StatusCode::TOO_MANY_REQUESTS] {
                let r = check(&c, &sc.url, "api", json!({"key": "k"})).await;
                assert_eq!(r.status(), want, "{mode}");
                let ietf = header(&r, "ratelimit");
                let legacy = header(&r, "x-ratelimit-remaining");
                match mode {
                    "ietf" => assert!(ietf.is_some() && legacy.is_none()),
                    "legacy" => {
                        assert!(ietf.is_none() && legacy.as_deref() == Some("0"));
                        assert_eq!(header(&r, "x-ratelimit-limit").as_deref(), Some("1"));
                        assert!(header(&r, "x-ratelimit-reset").is_some());
                    }
                    "both" => assert!(ietf.is_some() && legacy.is_some()),
                    _ => assert!(ietf.is_none() && legacy.is_none()),
                }
                // A denial tells when to retry whatever the mode.
                assert_eq!(
                    header(&r, "retry-after").is_some(),
                    want == StatusCode::TOO_MANY_REQUESTS,
                    "{mode}"
                );
            }
        }
        let (_, d) = peek(&c, &from_file.url, "api", "k").await;
        assert_eq!(d["remaining"], 0, "peek answers too ({mode})");
    }
}

/// Every bad input: a 4xx problem naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_problem_naming_the_field() {
    /// A case answered 400 with a problem naming `field`.
    fn bad(
        m: Method,
        path: impl Into<String>,
        body: Value,
        field: &str,
    ) -> (Method, String, Value, StatusCode, &str) {
        (m, path.into(), body, StatusCode::BAD_REQUEST, field)
    }

    let sc = Sidecar::start(&["--store", "memory://rate-bad"]).await;
    let c = client();
    let base = &sc.url;
    let (s, _) = put_quota(
        &c,
        base,
        "api",
        json!({"limit": 5, "period": "1s", "burst": 2}),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let (s, _) = put_quota(
        &c,
        base,
        "win",
        json!({"limit": 5, "period": "1s", "algorithm": "fixed_window"}),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let long_key = "k".repeat(513);
    #[rustfmt::skip] // a table: one case a line
    let cases: Vec<(Method, String, Value, StatusCode, &str)> = vec![
        // Quotas.
        bad(Method::PUT, "/v1/ratelimits/q", json!({"period": "1s"}), "limit"),
        bad(Method::PUT, "/v1/ratelimits/q", json!({"limit": 0, "period": "1s"}), "limit"),
        bad(Method::PUT, "/v1/ratelimits/q", json!({"limit": -3, "period": "1s"}), "limit"),
        bad(Method::PUT, "/v1/ratelimits/q", json!({"limit": "x", "period": "1s"}), "limit"),
        bad(Method::PUT, "/v1/ratelimits/q", json!({"limit": 5}), "period"),
        bad(Method::PUT, "/v1/ratelimits/q", json!({"limit": 5, "period": "soon"}), "period"),
        bad(Method::PUT, "/v1/ratelimits/q", json!({"limit": 5, "period": "0s"}), "period"),
        bad(Method::PUT, "/v1/ratelimits/q", json!({"limit": 5, "period_ms": -1}), "period_ms"),
        bad(Method::PUT, "/v1/ratelimits/q", json!({"limit": 5, "period": "1s", "period_ms": 1000}), "period_ms"),
        bad(Method::PUT, "/v1/ratelimits/q", json!({"limit": 5, "period": "1s", "algorithm": "leaky"}), "algorithm"),
        bad(Method::PUT, "/v1/ratelimits/q", json!({"limit": 5, "period": "1s", "algorithm": "fixed_window", "burst": 2}), "burst"),
        bad(Method::PUT, "/v1/ratelimits/q", json!({"limit": 5, "period": "1s", "burst": 0}), "burst"),
        bad(Method::PUT, "/v1/ratelimits/q", json!({"limit": 5, "period": "1s", "ban": "never"}), "ban"),
        bad(Method::PUT, "/v1/ratelimits/q", json!({"limit": 5, "period": "1s", "warmup": "soon"}), "warmup"),
        bad(Method::PUT, "/v1/ratelimits/q", json!({"limit": 5, "period": "1s", "warmup": "100ms"}), "warmup"),
        bad(Method::PUT, "/v1/ratelimits/q", json!({"limit": 5, "period": "1s", "warmup": "1m", "warmup_ms": 60000}), "warmup_ms"),
        bad(Method::PUT, "/v1/ratelimits/q", json!({"limit": 5, "period": "1s", "warmup_ms": -1}), "warmup_ms"),
        bad(Method::PUT, "/v1/ratelimits/q", json!({"limit": 5, "period": "1s", "algorithm": "sliding_window", "warmup": "1m"}), "warmup"),
        bad(Method::PUT, "/v1/ratelimits/q", json!({"limit": 5, "period": "1s", "warmup": "1m", "cold_factor": 1}), "cold_factor"),
        bad(Method::PUT, "/v1/ratelimits/q", json!({"limit": 5, "period": "1s", "cold_factor": 4}), "cold_factor"),
        bad(Method::PUT, "/v1/ratelimits/q", json!({"limit": 5, "period": "1s", "extra": 1}), "extra"),
        bad(Method::PUT, "/v1/ratelimits/bad%20name", json!({"limit": 5, "period": "1s"}), "name"),
        // Checks.
        bad(Method::POST, "/v1/ratelimits/api/check", json!({}), "key"),
        bad(Method::POST, "/v1/ratelimits/api/check", json!({"key": ""}), "key"),
        bad(Method::POST, "/v1/ratelimits/api/check", json!({"key": long_key}), "key"),
        bad(Method::POST, "/v1/ratelimits/api/check", json!({"key": 7}), "key"),
        bad(Method::POST, "/v1/ratelimits/api/check", json!({"key": "k", "cost": 0}), "cost"),
        bad(Method::POST, "/v1/ratelimits/api/check", json!({"key": "k", "cost": -1}), "cost"),
        bad(Method::POST, "/v1/ratelimits/api/check", json!({"key": "k", "cost": 3}), "cost"),
        bad(Method::POST, "/v1/ratelimits/win/check", json!({"key": "k", "cost": 6}), "cost"),
        bad(Method::POST, "/v1/ratelimits/api/check", json!({"key": "k", "permits": 1}), "permits"),
        // Waits.
        bad(Method::POST, "/v1/ratelimits/api/wait", json!({"key": "k", "timeout_ms": -1}), "timeout_ms"),
        bad(Method::POST, "/v1/ratelimits/api/wait", json!({"key": "k", "timeout_ms": 3_600_001}), "timeout_ms"),
        bad(Method::POST, "/v1/ratelimits/api/wait", json!({"key": "k", "timeout_ms": "soon"}), "timeout_ms"),
        bad(Method::POST, "/v1/ratelimits/api/wait", json!({"key": "k", "cost": 0}), "cost"),
        bad(Method::POST, "/v1/ratelimits/api/wait", json!({"key": "k", "cost": 3, "timeout_ms": 1000}), "cost"),
        bad(Method::POST, "/v1/ratelimits/api/wait", json!({"key": ""}), "key"),
        // Keys in the path.
        bad(Method::GET, "/v1/ratelimits/api/keys/", Value::Null, "key"),
        bad(Method::DELETE, "/v1/ratelimits/api/keys/", Value::Null, "key"),
        bad(Method::GET, format!("/v1/ratelimits/api/keys/{long_key}"), Value::Null, "key"),
        bad(Method::GET, "/v1/ratelimits/api/keys/%FF", Value::Null, "key"),
        // A name that is not UTF-8: the same problem+json, naming `name`.
        bad(Method::GET, "/v1/ratelimits/%FF", Value::Null, "name"),
        bad(Method::PUT, "/v1/ratelimits/%FF", json!({"limit": 5, "period": "1s"}), "name"),
        bad(Method::POST, "/v1/ratelimits/%FF/check", json!({"key": "k"}), "name"),
        bad(Method::POST, "/v1/ratelimits/%FF/wait", json!({"key": "k"}), "name"),
        bad(Method::GET, "/v1/ratelimits/%FF/keys/k", Value::Null, "name"),
        bad(Method::DELETE, "/v1/ratelimits/%FF/keys/k", Value::Null, "name"),
    ];
    for (m, path, body, status, field) in cases {
        let body = (!body.is_null()).then_some(body);
        let r = send(&c, m.clone(), &format!("{base}{path}"), body.clone()).await;
        assert_eq!(
            header(&r, "content-type").as_deref(),
            Some("application/problem+json"),
            "{m} {path} {body:?}"
        );
        let (s, p) = json_of(r).await;
        assert_eq!(s, status, "{m} {path} {body:?}: {p}");
        assert_eq!(p["field"], field, "{m} {path} {body:?}: {p}");
    }
    // Nothing was consumed by any of them.
    let (_, d) = peek(&c, base, "api", "k").await;
    assert_eq!(d["remaining"], 2);
    // Malformed JSON is a problem too.
    let r = c
        .post(format!("{base}/v1/ratelimits/api/check"))
        .body("{\"key\":")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert_eq!(json_of(r).await.1["code"], "malformed_json");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_guards_the_rate_routes() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret-token\n").unwrap();
    let sc = Sidecar::start(&[
        "--store",
        "memory://rate-auth",
        "--token-file",
        token.to_str().unwrap(),
    ])
    .await;
    let c = client();
    let base = &sc.url;
    let authed = |m: Method, path: &str, body: Option<Value>| {
        let mut r = c
            .request(m, format!("{base}{path}"))
            .bearer_auth("s3cret-token");
        if let Some(b) = body {
            r = r.json(&b);
        }
        async move { r.send().await.unwrap().status() }
    };
    // With the token: a limit of 2, both taken (a wait and a check).
    let ok = [
        (
            Method::PUT,
            "/v1/ratelimits/api",
            Some(json!({"limit": 2, "period": "1h"})),
        ),
        (Method::GET, "/v1/ratelimits", None),
        (Method::GET, "/v1/ratelimits/api", None),
        (
            Method::POST,
            "/v1/ratelimits/api/wait",
            Some(json!({"key": "k", "timeout_ms": 0})),
        ),
        (
            Method::POST,
            "/v1/ratelimits/api/check",
            Some(json!({"key": "k"})),
        ),
        (Method::GET, "/v1/ratelimits/api/keys/k", None),
    ];
    for (m, path, body) in &ok {
        let s = authed(m.clone(), path, body.clone()).await;
        assert!(s.is_success(), "{m} {path}: {s}");
    }
    // Without it: 401 everywhere, and nothing changes (the quota, the key's state).
    let routes = [
        (Method::GET, "/v1/ratelimits", None),
        (
            Method::PUT,
            "/v1/ratelimits/api",
            Some(json!({"limit": 100, "period": "1s"})),
        ),
        (Method::GET, "/v1/ratelimits/api", None),
        (
            Method::POST,
            "/v1/ratelimits/api/check",
            Some(json!({"key": "k"})),
        ),
        (
            Method::POST,
            "/v1/ratelimits/api/wait",
            Some(json!({"key": "k", "timeout_ms": 0})),
        ),
        (Method::GET, "/v1/ratelimits/api/keys/k", None),
        (Method::DELETE, "/v1/ratelimits/api/keys/k", None),
    ];
    for (m, path, body) in &routes {
        let r = send(&c, m.clone(), &format!("{base}{path}"), body.clone()).await;
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{m} {path}");
    }
    let r = c
        .get(format!("{base}/v1/ratelimits/api/keys/k"))
        .bearer_auth("s3cret-token")
        .send()
        .await
        .unwrap();
    let d: Value = r.json().await.unwrap();
    assert_eq!(
        (&d["limit"], &d["remaining"]),
        (&json!(2), &json!(0)),
        "{d}"
    );
    let s = authed(Method::DELETE, "/v1/ratelimits/api/keys/k", None).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
}

/// The store dies: each policy answers, fast, and says where its answer came from.
async fn store_down_policies(url: &str, kill: impl FnOnce()) {
    let c = client();
    let policies = ["fail_open", "fail_closed", "local:2"];
    let mut sidecars = Vec::new();
    for p in policies {
        let sc = Sidecar::start(&[
            "--store",
            url,
            "--rate-store-down",
            p,
            "--rate-store-timeout",
            "300ms",
        ])
        .await;
        sidecars.push(sc);
    }
    let (s, _) = put_quota(
        &c,
        &sidecars[0].url,
        "api",
        json!({"limit": 4, "period": "1h"}),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    // Each sidecar opens the limit while the store is up.
    for sc in &sidecars {
        let r = check(&c, &sc.url, "api", json!({"key": "before"})).await;
        assert_eq!(r.status(), StatusCode::OK);
    }
    kill();
    for (policy, sc) in policies.iter().zip(&sidecars) {
        let t = Instant::now();
        let first = check(&c, &sc.url, "api", json!({"key": "k"})).await;
        let first_took = t.elapsed();
        let first_retry = header(&first, "retry-after");
        let (status, d) = json_of(first).await;
        let mut took = Vec::new();
        let mut admitted = 0;
        for _ in 0..20 {
            let t = Instant::now();
            let (s, d) = json_of(check(&c, &sc.url, "api", json!({"key": "k"})).await).await;
            took.push(t.elapsed());
            admitted += usize::from(s == StatusCode::OK);
            assert_ne!(d["source"], "store", "{policy}: {d}");
        }
        took.sort();
        println!(
            "store down, {policy}: first answer {first_took:?} ({status}, source {}), then p50 {:?} p99 {:?} over 20 checks, {admitted}/20 admitted",
            d["source"], took[10], took[19]
        );
        assert!(
            first_took < Duration::from_secs(5),
            "{policy}: {first_took:?}"
        );
        assert!(
            took[19] < Duration::from_secs(1),
            "{policy}: {:?}",
            took[19]
        );
        match *policy {
            "fail_open" => {
                assert_eq!(
                    (status, &d["source"]),
                    (StatusCode::OK, &json!("fail_open"))
                );
                assert_eq!(admitted, 20);
            }
            "fail_closed" => {
                // The store's fault, not the limit's: 503 (as the tower layer answers).
                assert_eq!(
                    (status, &d["source"], &d["code"]),
                    (
                        StatusCode::SERVICE_UNAVAILABLE,
                        &json!("fail_closed"),
                        &json!("store_unavailable")
                    ),
                    "{d}"
                );
                assert!(first_retry.is_some(), "Retry-After kept: {d}");
                assert_eq!(admitted, 0);
            }
            _ => {
                assert_eq!((status, &d["source"]), (StatusCode::OK, &json!("local")));
                // limit 4 over 2 replicas: 2 for this sidecar, the first check took one.
                assert_eq!(admitted, 1);
            }
        }
    }
    // A wait while the store is down: the policy answers it too, within its timeout.
    for (policy, sc) in policies.iter().zip(&sidecars) {
        let t = Instant::now();
        let r = send(
            &c,
            Method::POST,
            &format!("{}/v1/ratelimits/api/wait", sc.url),
            Some(json!({"key": "k", "timeout_ms": 1000})),
        )
        .await;
        let (s, d) = json_of(r).await;
        let took = t.elapsed();
        println!("store down, {policy}: wait answered {s} in {took:?}");
        let want = match *policy {
            "fail_open" => (StatusCode::OK, json!("fail_open"), Value::Null),
            "fail_closed" => (
                StatusCode::SERVICE_UNAVAILABLE,
                json!("fail_closed"),
                json!("store_unavailable"),
            ),
            // This sidecar's share (2) was used by the checks above.
            _ => (
                StatusCode::TOO_MANY_REQUESTS,
                json!("local"),
                json!("rate_limited"),
            ),
        };
        assert_eq!(
            (s, d["source"].clone(), d["code"].clone()),
            want,
            "{policy}: {d}"
        );
        assert!(took < Duration::from_secs(10), "{policy}: {took:?}");
    }
    // The routes that must ask the store (list, PUT, reset): 503 within the store timeout.
    for (m, path, body) in [
        (Method::GET, "/v1/ratelimits", None),
        (
            Method::PUT,
            "/v1/ratelimits/api",
            Some(json!({"limit": 9, "period": "1h"})),
        ),
        (Method::DELETE, "/v1/ratelimits/api/keys/k", None),
    ] {
        let t = Instant::now();
        let url = format!("{}{path}", sidecars[0].url);
        let (s, p) = json_of(send(&c, m.clone(), &url, body).await).await;
        let took = t.elapsed();
        println!("store down, {m} {path}: {s} in {took:?}");
        assert_eq!(
            (s, &p["code"]),
            (StatusCode::SERVICE_UNAVAILABLE, &json!("store_unavailable")),
            "{m} {path}: {p}"
        );
        assert!(took < Duration::from_secs(10), "{m} {path}: {took:?}");
    }
    // A limit this sidecar never opened: 503 at once, not a wait for the store.
    let t = Instant::now();
    let (s, p) = json_of(check(&c, &sidecars[0].url, "other", json!({"key": "k"})).await).await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "{p}");
    println!("store down, an unopened limit: 503 in {:?}", t.elapsed());
    let m = send(
        &c,
        Method::GET,
        &format!("{}/metrics", sidecars[0].url),
        None,
    )
    .await
    .text()
    .await
    .unwrap();
    // 21 checks and the wait.
    assert!(
        m.contains(
            "clusterlimit_rate_failure_mode_allowed_total{domain=\"http\",limit=\"api\"} 22"
        ),
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_killed_the_policy_answers_fast() {
    let mut cluster = EtcdCluster::single();
    let url = cluster.url("rate-down");
    store_down_policies(&url, || cluster.kill(0)).await;
}

/// A store that hangs (SIGSTOP) rather than refusing: `rate_store_timeout` bounds the wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_stopped_the_policy_answers_within_the_store_timeout() {
    let mut cluster = EtcdCluster::single();
    let url = cluster.url("rate-hung");
    store_down_policies(&url, || cluster.pause(0)).await;
    cluster.resume(0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_killed_the_policy_answers_fast() {
    let mut zk = ZkCluster::single();
    let url = zk.url("/rate-down");
    store_down_policies(&url, || zk.kill(0)).await;
}

/// `[[rate_limits]]`: created at start, checked by `--check-config`; a stored limit with another
/// quota keeps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_declares_rate_limits() {
    let cluster = EtcdCluster::single();
    let url = cluster.url("rate-config");
    let limiter = Limiter::connect(&url).await.unwrap();
    limiter
        .rate_limit("stored", Quota::per_minute(7))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(
        &path,
        format!(
            "store = \"{url}\"\nrate_store_down = \"local:3\"\nrate_store_timeout = \"250ms\"\n\n\
             [[rate_limits]]\nname = \"login\"\nlimit = 5\nperiod = \"1m\"\nalgorithm = \"fixed_window\"\nban = \"10m\"\n\n\
             [[rate_limits]]\nname = \"stored\"\nlimit = 9\nperiod = \"1m\"\n"
        ),
    )
    .unwrap();
    let config = path.to_str().unwrap();
    let out = binary::output(
        binary::cmd(&["serve", "--check-config", "--config", config]),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    for want in [
        "login (5 per 60s (fixed_window, ban 600s))",
        "local:3",
        "250ms",
        "rate_headers ietf",
    ] {
        assert!(out.stdout.contains(want), "{want} in\n{}", out.stdout);
    }
    let sc = Sidecar::start(&["--config", config]).await;
    let c = client();
    let (_, q) = get_quota(&c, &sc.url, "login").await;
    assert_eq!(
        (&q["limit"], &q["algorithm"], &q["ban_ms"]),
        (&json!(5), &json!("fixed_window"), &json!(600_000))
    );
    let (_, q) = get_quota(&c, &sc.url, "stored").await;
    assert_eq!(q["limit"], 7, "the stored quota is kept: {q}");

    for (text, field) in [
        ("[[rate_limits]]\nname = \"a\"\nlimit = 5\nperiod = \"1s\"\nalgorithm = \"fixed_window\"\nburst = 2\n", "rate_limits[0].burst"),
        ("[[rate_limits]]\nname = \"a\"\nlimit = 0\nperiod = \"1s\"\n", "rate_limits[0].limit"),
        ("[[rate_limits]]\nname = \"a\"\nlimit = 1\nperiod = \"x\"\n", "rate_limits[0].period"),
        ("[[rate_limits]]\nname = \"a\"\nlimit = 1\nperiod = \"1s\"\nalgorithm = \"leaky\"\n", "algorithm"),
        ("[[rate_limits]]\nname = \"a b\"\nlimit = 1\nperiod = \"1s\"\n", "rate_limits[0].name"),
        ("rate_store_down = \"sometimes\"\n", "rate_store_down"),
        ("rate_limit_headers = \"x\"\n", "rate_limit_headers"),
        ("rate_store_timeout = \"0s\"\n", "rate_store_timeout"),
    ] {
        std::fs::write(&path, text).unwrap();
        let out = binary::output(
            binary::cmd(&["serve", "--check-config", "--config", config]),
            Duration::from_secs(20),
        )
        .await;
        assert_eq!(out.code, Some(64), "{text}: {}", out.stderr);
        assert!(out.stderr.contains(field), "{field} in {}", out.stderr);
    }
    let out = binary::output(
        binary::cmd(&["serve", "--check-config", "--rate-store-down", "local:0"]),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(out.code, Some(64), "{}", out.stderr);
    assert!(out.stderr.contains("--rate-store-down"), "{}", out.stderr);
}

/// A wait in flight at shutdown answers 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_in_flight_answers_503_at_shutdown() {
    let mut sc = Sidecar::start(&["--store", "memory://rate-shutdown"]).await;
    let c = client();
    let (s, _) = put_quota(&c, &sc.url, "slow", json!({"limit": 1, "period": "20s"})).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        check(&c, &sc.url, "slow", json!({"key": "k"}))
            .await
            .status(),
        StatusCode::OK
    );
    let waiting = {
        let (c, base) = (c.clone(), sc.url.clone());
        tokio::spawn(async move {
            json_of(
                send(
                    &c,
                    Method::POST,
                    &format!("{base}/v1/ratelimits/slow/wait"),
                    Some(json!({"key": "k", "timeout_ms": 30000})),
                )
                .await,
            )
            .await
        })
    };
    // TERM once the wait is in flight (not before it reached the sidecar).
    eventually("the wait in flight", Duration::from_secs(20), || async {
        let m = send(&c, Method::GET, &format!("{}/metrics", sc.url), None)
            .await
            .text()
            .await
            .unwrap();
        m.contains("clusterlimit_rate_waits_in_flight{limit=\"slow\"} 1")
            .then_some(())
    })
    .await;
    binary::signal(sc.pid(), "TERM");
    let (s, p) = within("wait answered", Duration::from_secs(10), waiting)
        .await
        .unwrap();
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "{p}");
    assert_eq!(p["code"], "shutting_down");
    let st = within("sidecar exits", Duration::from_secs(10), sc.child.wait())
        .await
        .unwrap();
    assert_eq!(st.code(), Some(0));
}
