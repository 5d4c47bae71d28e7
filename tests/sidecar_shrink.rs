//! `POST /v1/permits/{id}/shrink` on the real `clusterlimit serve` over real etcd: the weight
//! freed goes to a long-polling waiter, the fencing token stays, every bad input is a 400
//! naming `permits`, an unknown permit 404, a lost one 410.

use crate::binary;
use crate::support;

use binary::{eventually, http_client as client, metrics, sample, within, Sidecar};
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};
use std::time::Duration;
use support::EtcdCluster;

const PROMPT: Duration = Duration::from_secs(10);

async fn post(c: &Client, url: String, body: Value) -> (StatusCode, Value) {
    let r = c.post(url).json(&body).send().await.unwrap();
    let status = r.status();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn shrink(c: &Client, base: &str, id: &str, body: Value) -> (StatusCode, Value) {
    post(c, format!("{base}/v1/permits/{id}/shrink"), body).await
}

async fn status(c: &Client, base: &str, sem: &str) -> Value {
    let url = format!("{base}/v1/semaphores/{sem}");
    c.get(url).send().await.unwrap().json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shrink_grants_the_waiter_and_refuses_bad_input() {
    let cluster = EtcdCluster::single();
    let sc = Sidecar::start(&["--store", &cluster.url("shrink")]).await;
    let (c, base) = (client(), sc.url.clone());
    let acquire = format!("{base}/v1/semaphores/tokens/permits");
    let (s, held) = post(&c, acquire.clone(), json!({"permits": 8, "capacity": 10})).await;
    assert_eq!(s, StatusCode::CREATED, "{held}");
    let id = held["id"].as_str().unwrap().to_string();
    let waiter = {
        let (c, url) = (c.clone(), acquire.clone());
        tokio::spawn(async move { post(&c, url, json!({"permits": 5, "timeout_ms": 30000})).await })
    };
    eventually("waiter queued", PROMPT, || async {
        (status(&c, &base, "tokens").await["waiting"] == 1).then_some(())
    })
    .await;
    for bad in [
        json!({}),
        json!({"permits": 0}),
        json!({"permits": -1}),
        json!({"permits": 9}),
        json!({"permits": "5"}),
    ] {
        let (s, p) = shrink(&c, &base, &id, bad.clone()).await;
        assert_eq!(
            (s, p["field"].clone()),
            (StatusCode::BAD_REQUEST, json!("permits")),
            "{bad}: {p}"
        );
    }
    assert_eq!(
        status(&c, &base, "tokens").await["used"],
        8,
        "a bad shrink changed the weight"
    );
    let (s, p) = shrink(&c, &base, &id, json!({"permits": 5})).await;
    assert_eq!((s, p), (StatusCode::OK, json!({"id": id, "permits": 5})));
    let (s, granted) = within("waiter granted", PROMPT, waiter).await.unwrap();
    assert_eq!(s, StatusCode::CREATED, "{granted}");
    let st = status(&c, &base, "tokens").await;
    assert_eq!(
        (st["used"].clone(), st["waiting"].clone()),
        (json!(10), json!(0))
    );
    assert_eq!(st["holders"][0]["fencing_token"], held["fencing_token"]);
    assert_eq!(st["holders"][0]["permits"], 5);
    let m = metrics(&c, &base).await;
    assert_eq!(
        sample(&m, "clusterlimit_permits_held{semaphore=\"tokens\"}"),
        Some(10.0)
    );
    let (s, p) = shrink(&c, &base, "0123", json!({"permits": 1})).await;
    assert_eq!(
        (s, p["code"].clone()),
        (StatusCode::NOT_FOUND, json!("not_found")),
        "{p}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shrink_of_a_lost_permit_is_410() {
    let mut cluster = EtcdCluster::single();
    let sc = Sidecar::start(&["--store", &cluster.url("lost"), "--session-ttl", "2s"]).await;
    let (c, base) = (client(), sc.url.clone());
    let url = format!("{base}/v1/semaphores/l/permits");
    let (s, held) = post(
        &c,
        url,
        json!({"permits": 4, "capacity": 4, "ttl_ms": 60000}),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{held}");
    let id = held["id"].as_str().unwrap().to_string();
    cluster.kill(0);
    eventually("shrink answers 410", Duration::from_secs(20), || async {
        let (s, p) = shrink(&c, &base, &id, json!({"permits": 2})).await;
        (s == StatusCode::GONE).then_some(p)
    })
    .await;
}
