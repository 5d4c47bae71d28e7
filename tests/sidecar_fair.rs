//! Fair semaphores through `clusterlimit serve`: one declared in the config with `classes`,
//! acquires naming `flow`, `class` and `weight`, the status with its classes and the holders'
//! flows, bad values as 400s naming the field (memory://).

use crate::binary;

use binary::{http_client as client, within, Sidecar};
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(20);

/// POSTs an acquire; returns status and JSON body.
async fn acquire(c: &Client, base: &str, sem: &str, body: Value) -> (StatusCode, Value) {
    let r = c
        .post(format!("{base}/v1/semaphores/{sem}/permits"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn status_of(c: &Client, base: &str, sem: &str) -> Value {
    let r = c.get(format!("{base}/v1/semaphores/{sem}")).send().await;
    r.unwrap().json().await.unwrap()
}

/// Polls the status of `sem` until `waiting` requests wait.
async fn until_waiting(c: &Client, base: &str, sem: &str, waiting: u64) -> Value {
    binary::eventually("the long-polls to queue", LIMIT, || async {
        let st = status_of(c, base, sem).await;
        (st["waiting"] == waiting).then_some(st)
    })
    .await
}

/// A config file declaring the fair semaphore `db` (capacity 2, `critical` guaranteed 1) and
/// the plain semaphore `plain`, with `extra` lines after them.
fn config(dir: &tempfile::TempDir, store: &str, classes: &str) -> PathBuf {
    let path = dir.path().join("clusterlimit.toml");
    std::fs::write(
        &path,
        format!(
            "store = \"{store}\"\n\n\
             [[semaphores]]\nname = \"db\"\ncapacity = 2\nclasses = \"{classes}\"\n\n\
             [[semaphores]]\nname = \"plain\"\ncapacity = 2\n"
        ),
    )
    .unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_semaphore_of_the_config_serves_flows_and_shows_classes() {
    let dir = tempfile::tempdir().unwrap();
    let path = config(&dir, "memory://fair", "critical=1,batch");
    let sc = Sidecar::start(&["--config", path.to_str().unwrap()]).await;
    let (c, base) = (client(), sc.url.as_str());

    // Tenant A takes both permits in the class batch (critical's idle permit is lent).
    let a_body = json!({"flow": "tenant-a", "class": "batch", "owner": "a", "ttl_ms": 60000});
    let mut held = Vec::new();
    for _ in 0..2 {
        let (s, p) = acquire(&c, base, "db", a_body.clone()).await;
        assert_eq!(s, StatusCode::CREATED, "{p}");
        held.push(p["id"].as_str().unwrap().to_string());
    }
    let st = status_of(&c, base, "db").await;
    assert_eq!(st["holders"][0]["flow"], "tenant-a", "{st}");
    assert_eq!(st["holders"][0]["class"], "batch", "{st}");
    assert_eq!(
        st["classes"],
        json!([
            {"name": "critical", "guaranteed": 1, "held": 0, "waiting": 0, "waiting_flows": []},
            {"name": "batch", "guaranteed": 0, "held": 2, "waiting": 0, "waiting_flows": []}
        ]),
        "{st}"
    );

    // Tenant A queues three more, then tenant B one (weight 2): B is next at the first release.
    let long_poll = |body: Value| {
        let (c, base) = (c.clone(), base.to_string());
        tokio::spawn(async move {
            let body = json!({"timeout_ms": 30000, "ttl_ms": 60000, "class": "batch"})
                .as_object()
                .unwrap()
                .clone()
                .into_iter()
                .chain(body.as_object().unwrap().clone())
                .collect::<serde_json::Map<_, _>>();
            acquire(&c, &base, "db", Value::Object(body)).await
        })
    };
    let mut a_waiting = Vec::new();
    for n in 1..=3 {
        a_waiting.push(long_poll(json!({"flow": "tenant-a"})));
        until_waiting(&c, base, "db", n).await;
    }
    let b = long_poll(json!({"flow": "tenant-b", "weight": 2}));
    let st = until_waiting(&c, base, "db", 4).await;
    assert_eq!(
        st["classes"][1]["waiting_flows"],
        json!(["tenant-a", "tenant-b"]),
        "{st}"
    );
    let r = c
        .delete(format!("{base}/v1/permits/{}", held.remove(0)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    let (s, granted) = within("tenant B's grant", LIMIT, b).await.unwrap();
    assert_eq!(s, StatusCode::CREATED, "{granted}");
    let st = status_of(&c, base, "db").await;
    assert_eq!(st["waiting"], 3, "A's three still wait: {st}");
    let flows: Vec<&str> = st["holders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["flow"].as_str().unwrap())
        .collect();
    assert_eq!(flows, ["tenant-a", "tenant-b"], "{st}");
    for t in &a_waiting {
        t.abort();
    }

    // The plain semaphore's status has no classes, its holders no flow.
    let (s, _) = acquire(&c, base, "plain", json!({})).await;
    assert_eq!(s, StatusCode::CREATED);
    let st = status_of(&c, base, "plain").await;
    assert!(st.get("classes").is_none(), "{st}");
    assert!(st["holders"][0].get("flow").is_none(), "{st}");
}

#[tokio::test]
async fn bad_flow_class_and_weight_are_400s_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = config(&dir, "memory://fair-bad", "critical=1,batch");
    let sc = Sidecar::start(&["--config", path.to_str().unwrap()]).await;
    let (c, base) = (client(), sc.url.as_str());
    let cases: Vec<(&str, Value, &str, &str)> =
        vec![
        ("db", json!({"flow": ""}), "flow", "flow name must be 1-128 bytes, got 0"),
        ("db", json!({"flow": "a\nb"}), "flow", "control character"),
        ("db", json!({"flow": 5}), "flow", "`flow` must be a string, got 5"),
        (
            "db",
            json!({"class": "gold"}),
            "class",
            "class \"gold\" is not one of semaphore \"db\"'s classes (critical=1,batch=0)",
        ),
        ("db", json!({"class": ""}), "class", "class name must be 1-128 bytes"),
        ("db", json!({"weight": 0}), "weight", "weight must be between 1 and 1000000, got 0"),
        (
            "db",
            json!({"weight": "x"}),
            "weight",
            "`weight` must be a whole number from 1 to 1000000, got the string \"x\"",
        ),
        (
            "plain",
            json!({"weight": 2}),
            "weight",
            "semaphore \"plain\" is a plain FIFO semaphore: flow, class and weight need a fair one",
        ),
        (
            "plain",
            json!({"flow": "a", "class": "batch"}),
            "flow",
            "declare it with `classes` under [[semaphores]]",
        ),
    ];
    for (sem, body, field, detail) in cases {
        let r = c
            .post(format!("{base}/v1/semaphores/{sem}/permits"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(
            r.headers()["content-type"],
            "application/problem+json",
            "{body}"
        );
        let p: Value = r.json().await.unwrap();
        assert_eq!(p["field"], field, "{body}: {p}");
        assert_eq!(p["code"], "invalid_field", "{body}: {p}");
        let said = p["detail"].as_str().unwrap();
        assert!(said.contains(detail), "{body}: {said}");
        assert!(!said.contains("Limiter::"), "{body}: {said}");
    }
    // Nothing was queued or held by the refused requests.
    for sem in ["db", "plain"] {
        let st = status_of(&c, base, sem).await;
        assert_eq!(
            (&st["used"], &st["waiting"]),
            (&json!(0), &json!(0)),
            "{st}"
        );
    }
}

#[tokio::test]
async fn check_config_shows_the_classes_and_refuses_a_table_that_does_not_fit() {
    let dir = tempfile::tempdir().unwrap();
    let out = binary::check_config(&config(&dir, "memory://", "critical=25%,batch")).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout
            .contains("db (capacity 2, fair: critical=25%,batch=0), plain (capacity 2)"),
        "{}",
        out.stdout
    );
    for (classes, why) in [
        (
            "a=2,b=1",
            "semaphores[0].classes: the classes' guaranteed shares need 3 permits (a 2 + b 1), more than the capacity 2",
        ),
        ("a=x", "semaphores[0].classes: share \"x\" is not a number of permits"),
        ("a,a", "semaphores[0].classes: "),
    ] {
        let out = binary::check_config(&config(&dir, "memory://", classes)).await;
        assert_eq!(out.code, Some(64), "{classes}: {}", out.stderr);
        assert!(out.stderr.contains(why), "{classes}: {}", out.stderr);
    }
}
