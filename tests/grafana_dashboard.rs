//! The Grafana dashboard in `deploy/grafana/clusterlimit.json` (issue 30, item 3) queries only
//! metrics a real sidecar exports, and shows every metric it exports: both read from a running
//! `clusterlimit serve`'s `/metrics` after permits and rate checks went through it, so a renamed
//! or new metric fails here, not on a dashboard nobody looks at until an outage. A metric
//! family appears in `/metrics` only once it has a series; the few that need a fault (a store
//! down, a lost session, an invalid rules reload) or RLS shadow rules are listed in
//! [`AFTER_A_FAULT`] and checked against the sidecar's source instead.

use crate::binary;

use binary::Sidecar;
use serde_json::{json, Value};
use std::collections::BTreeSet;

const DASHBOARD: &str = "deploy/grafana/clusterlimit.json";

/// Families that get a series only after a fault or with RLS shadow rules: each must still be
/// registered by the sidecar (its name appears, quoted, in `src/bin/clusterlimit/sidecar/`).
const AFTER_A_FAULT: &[&str] = &[
    "clusterlimit_permits_lost", // a store session ended behind a permit
    "clusterlimit_rate_failure_mode_allowed", // the store down, fail_open
    "clusterlimit_rate_store_down_denied", // the store down, fail_closed
    "clusterlimit_rate_shadow_mode", // an RLS rule in shadow mode
    "clusterlimit_rls_config_error", // an invalid RLS rules reload
    "clusterlimit_rls_config_reloads", // an RLS rules reload
];

/// The sidecar's sources, to find a family's registration.
fn sidecar_sources() -> String {
    let mut all = String::new();
    let mut dirs =
        vec![std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/bin/clusterlimit/sidecar")];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("read {}: {e}", d.display())) {
            let path = entry
                .unwrap_or_else(|e| panic!("list {}: {e}", d.display()))
                .path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|x| x == "rs") {
                all.push_str(&std::fs::read_to_string(&path).unwrap_or_default());
            }
        }
    }
    all
}

/// Permits and rate checks through the sidecar's HTTP API, so their metric families get
/// series: a held permit, a timed-out acquire, a permit that expired without keepalive, rate
/// checks admitted, near the limit, over it, answered from the cache, a rate wait, and
/// reservations, settlements, a charge and a refund.
async fn drive(base: &str) {
    let c = reqwest::Client::new();
    let post = |url: String, body: Value| {
        let c = c.clone();
        async move {
            c.post(url)
                .json(&body)
                .send()
                .await
                .unwrap_or_else(|e| panic!("POST: {e}"))
                .status()
                .as_u16()
        }
    };
    let permits = format!("{base}/v1/semaphores/dash/permits");
    assert_eq!(post(permits.clone(), json!({"capacity": 1})).await, 201);
    assert_eq!(post(permits.clone(), json!({"timeout_ms": 50})).await, 429);
    let other = format!("{base}/v1/semaphores/short/permits");
    assert_eq!(
        post(other, json!({"capacity": 1, "ttl_ms": 1000})).await,
        201
    );
    let put = c
        .put(format!("{base}/v1/ratelimits/dash"))
        .json(&json!({"limit": 5, "period": "1m"}))
        .send()
        .await
        .unwrap_or_else(|e| panic!("PUT quota: {e}"));
    assert!(put.status().is_success(), "PUT quota: {}", put.status());
    let check = format!("{base}/v1/ratelimits/dash/check");
    for _ in 0..8 {
        post(check.clone(), json!({"key": "k"})).await;
    }
    let wait = format!("{base}/v1/ratelimits/dash/wait");
    post(wait, json!({"key": "w", "timeout_ms": 100})).await;
    // Costs known afterwards: reservations admitted, denied, settled lower and kept; a charge
    // and a refund.
    let reservations = format!("{base}/v1/ratelimits/dash/reservations");
    for actual in [0, 1] {
        let r = c
            .post(&reservations)
            .json(&json!({"key": "r", "estimate": 1}))
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST reservation: {e}"));
        assert_eq!(r.status().as_u16(), 201, "reservation");
        let r: Value = r
            .json()
            .await
            .unwrap_or_else(|e| panic!("reservation: {e}"));
        let id = r["id"].as_str().unwrap_or_default();
        let settle = format!("{reservations}/{id}/settle");
        assert_eq!(post(settle, json!({"actual": actual})).await, 200);
    }
    assert_eq!(
        post(reservations, json!({"key": "k", "estimate": 1})).await,
        429
    );
    let charge = format!("{base}/v1/ratelimits/dash/charge");
    assert_eq!(post(charge, json!({"key": "r", "cost": 2})).await, 200);
    let refund = format!("{base}/v1/ratelimits/dash/refund");
    assert_eq!(post(refund, json!({"key": "r", "amount": 1})).await, 200);
    // The permit without keepalive expires (ttl 1 s; the sidecar's sweep runs every ~second):
    // wait until /metrics counts it, for at most 10 s.
    let metrics = format!("{base}/metrics");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    for _ in 0..100 {
        let page = c
            .get(&metrics)
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET /metrics: {e}"))
            .text()
            .await
            .unwrap_or_else(|e| panic!("read /metrics: {e}"));
        if page
            .lines()
            .any(|l| l.starts_with("clusterlimit_permits_expired"))
        {
            return;
        }
        if std::time::Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("the permit without keepalive was not counted as expired within 10 s");
}

/// Every `expr` of every target of every panel (rows included).
fn exprs(node: &Value, out: &mut Vec<String>) {
    match node {
        Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("expr", Value::String(e)) => out.push(e.clone()),
                    _ => exprs(v, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| exprs(v, out)),
        _ => {}
    }
}

/// The `clusterlimit_…` names in a PromQL expression, as the metric families they belong to
/// (a counter's `_total`, a histogram's `_bucket` / `_sum` / `_count` taken off).
fn families(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("clusterlimit_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let name = &tail[..end];
        let family = ["_total", "_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(name);
        out.push(family.to_string());
        rest = &tail[end..];
    }
    out
}

/// The metric families a `/metrics` page declares (`# TYPE name kind`).
fn exported(page: &str) -> BTreeSet<String> {
    page.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn the_dashboard_queries_what_the_sidecar_exports_and_all_of_it() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(DASHBOARD);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {DASHBOARD}: {e}"));
    let dashboard: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{DASHBOARD} is not JSON: {e}"));
    assert_eq!(dashboard["uid"], "clusterlimit");
    let mut all = Vec::new();
    exprs(&dashboard["panels"], &mut all);
    assert!(all.len() >= 20, "{DASHBOARD}: only {} queries", all.len());
    let queried: BTreeSet<String> = all.iter().flat_map(|e| families(e)).collect();

    let sidecar = Sidecar::start(&["--store", "memory://grafana"]).await;
    drive(&sidecar.url).await;
    let page = reqwest::get(format!("{}/metrics", sidecar.url))
        .await
        .unwrap_or_else(|e| panic!("GET /metrics: {e}"))
        .text()
        .await
        .unwrap_or_else(|e| panic!("read /metrics: {e}"));
    let mut exported = exported(&page);
    let sources = sidecar_sources();
    for name in AFTER_A_FAULT {
        assert!(
            sources.contains(&format!("\"{name}\"")),
            "{name} is listed as registered by the sidecar but src/bin/clusterlimit/sidecar/ does not name it"
        );
        exported.insert((*name).to_string());
    }
    assert!(
        exported.iter().any(|m| m.starts_with("clusterlimit_")),
        "no clusterlimit metric in /metrics:\n{page}"
    );

    let unknown: Vec<&String> = queried.difference(&exported).collect();
    assert!(
        unknown.is_empty(),
        "{DASHBOARD} queries metrics the sidecar does not export: {unknown:?}\nexported: {exported:?}"
    );
    let unshown: Vec<&String> = exported
        .iter()
        .filter(|m| m.starts_with("clusterlimit_"))
        .filter(|m| !queried.contains(*m))
        .collect();
    assert!(
        unshown.is_empty(),
        "the sidecar exports metrics {DASHBOARD} does not show: {unshown:?}"
    );
    // Every panel with queries reads the data source the dashboard lets its user pick.
    for panel in dashboard["panels"].as_array().into_iter().flatten() {
        if panel.get("targets").is_some() {
            assert_eq!(
                panel["datasource"]["uid"], "${datasource}",
                "panel {:?} reads a fixed data source",
                panel["title"]
            );
        }
    }
}

#[test]
fn metric_names_are_read_out_of_promql() {
    assert_eq!(
        families(
            "histogram_quantile(0.99, sum by (le) (rate(clusterlimit_acquire_duration_seconds_bucket{a=\"b\"}[5m]))) / clusterlimit_rate_hits_total"
        ),
        ["clusterlimit_acquire_duration_seconds", "clusterlimit_rate_hits"]
    );
    assert!(families("time()").is_empty());
}
