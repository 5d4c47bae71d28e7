//! Adaptive semaphores in the binary, as real processes against real etcd: the sidecar's
//! `[adaptive.<name>]` tables (accepted, refused with exit 64), the release route's outcome
//! body, drops through two sidecars lowering the capacity with its reason in `GET` and
//! `/metrics`, `status NAME` printing the adaptive state, and `run --adaptive` reporting the
//! command's exit as a success, a drop or nothing.

use crate::binary;
use crate::support;

use binary::{cmd, http_client as client, metrics, output, sample, within, Sidecar};
use clusterlimit::adaptive::{Adaptive, CapacityDecision};
use clusterlimit::{Limiter, Semaphore};
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use support::EtcdCluster;

/// The window every case uses: short, so a step comes within a fraction of a second.
const WINDOW: Duration = Duration::from_millis(200);
/// Bound on anything that takes a few windows.
const FEW_WINDOWS: Duration = Duration::from_secs(10);

/// An AIMD semaphore `db` with a 200 ms window, as a sidecar config.
const AIMD_DB: &str =
    "[adaptive.db]\nalgorithm = \"aimd\"\nmin = 2\nmax = 20\ninitial = 10\nwindow = \"200ms\"\n";

fn write_config(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

async fn acquire(c: &Client, base: &str, sem: &str) -> String {
    let r = c
        .post(format!("{base}/v1/semaphores/{sem}/permits"))
        .json(&json!({"timeout_ms": 10000}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED, "acquire on {sem}");
    let v: Value = r.json().await.unwrap();
    v["id"].as_str().unwrap().to_string()
}

/// DELETE with `body` (raw text; empty: no body); the status and the problem's field.
async fn release(c: &Client, base: &str, id: &str, body: &str) -> (StatusCode, Option<String>) {
    let mut req = c.delete(format!("{base}/v1/permits/{id}"));
    if !body.is_empty() {
        req = req
            .header("content-type", "application/json")
            .body(body.to_string());
    }
    let r = req.send().await.unwrap();
    let status = r.status();
    let v: Value = r.json().await.unwrap_or(Value::Null);
    (status, v["field"].as_str().map(str::to_string))
}

/// One call on `db` through the sidecar at `base`, released as dropped.
async fn drop_one(c: &Client, base: &str) {
    let id = acquire(c, base, "db").await;
    let said = r#"{"outcome":"dropped"}"#;
    assert_eq!(release(c, base, &id, said).await.0, StatusCode::NO_CONTENT);
}

async fn get(c: &Client, base: &str, sem: &str) -> Value {
    c.get(format!("{base}/v1/semaphores/{sem}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Polls `GET /v1/semaphores/{sem}` until `pred` holds on its `adaptive.last`; returns it.
async fn wait_step(
    c: &Client,
    base: &str,
    sem: &str,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let start = Instant::now();
    let mut last = Value::Null;
    while start.elapsed() < FEW_WINDOWS {
        last = get(c, base, sem).await;
        if pred(&last["adaptive"]["last"]) {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{what}: not within {FEW_WINDOWS:?}; last status: {last}");
}

/// `serve --check-config` on `text`: its exit code and stdout + stderr.
async fn check_config(dir: &Path, text: &str) -> (Option<i32>, String) {
    let out = binary::check_config(&write_config(dir, "check.toml", text)).await;
    (out.code, format!("{}{}", out.stdout, out.stderr))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecar_config_accepts_and_refuses_adaptive_tables() {
    let dir = tempfile::tempdir().unwrap();
    let (code, text) = check_config(dir.path(), AIMD_DB).await;
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("db (aimd, 2..20, window 200ms)"), "{text}");

    let refused = [
        (
            "[adaptive.db]\nmin = 5\nmax = 4\n",
            "adaptive.db: adaptive max must be between min (5)",
        ),
        (
            "[adaptive.db]\nalgorithm = \"vegas\"\n",
            "adaptive.db: algorithm must be \"gradient\" or \"aimd\", got \"vegas\"",
        ),
        (
            "[adaptive.db]\nwindow = \"10ms\"\n",
            "adaptive.db: adaptive window",
        ),
        (
            "[adaptive.db]\nwindow = \"soon\"\n",
            "adaptive.db: window = \"soon\"",
        ),
        (
            "[adaptive.db]\nmax_step = 2.0\n",
            "adaptive.db: adaptive max_step",
        ),
        ("[adaptive.db]\nmaximum = 3\n", "unknown field `maximum`"),
        (
            "[[semaphores]]\nname = \"db\"\ncapacity = 3\n[adaptive.db]\n",
            "adaptive.db: \"db\" is also declared in [[semaphores]]",
        ),
    ];
    for (config, message) in refused {
        let (code, text) = check_config(dir.path(), config).await;
        assert_eq!(code, Some(64), "{config} → {text}");
        assert!(
            text.contains(message),
            "{config}: expected {message:?} in {text}"
        );
        assert!(text.contains("check.toml"), "the file is named: {text}");
    }
    // Refused at start too, before anything is served.
    let path = write_config(dir.path(), "bad.toml", "[adaptive.db]\nmin = 0\n");
    let out = output(
        cmd(&[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--config",
            path.to_str().unwrap(),
        ]),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(out.code, Some(64), "{}", out.stderr);
    assert!(
        out.stderr.contains("adaptive.db: adaptive min"),
        "{}",
        out.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_reports_each_body_form_and_refuses_bad_ones() {
    let cluster = EtcdCluster::single();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "sidecar.toml", AIMD_DB);
    let url = cluster.url("release-bodies");
    let sc = Sidecar::start(&["--store", &url, "--config", config.to_str().unwrap()]).await;
    let (c, base) = (client(), sc.url.clone());

    // Success with its latency: the step's median is that latency's bucket (within √2).
    let id = acquire(&c, &base, "db").await;
    let said = r#"{"outcome":"success","latency_ms":40}"#;
    assert_eq!(
        release(&c, &base, &id, said).await.0,
        StatusCode::NO_CONTENT
    );
    let st = wait_step(&c, &base, "db", "a step with the 40 ms success", |d| {
        d["ok"].as_u64() >= Some(1)
    })
    .await;
    let p50 = st["adaptive"]["last"]["p50_ms"].as_f64().unwrap();
    assert!(
        (25.0..80.0).contains(&p50),
        "p50 {p50} ms for one 40 ms success: {st}"
    );
    // Existing fields stay as they were.
    assert_eq!(st["name"], "db");
    assert_eq!(st["used"], 0);
    assert_eq!(
        st["capacity"].as_u64(),
        st["adaptive"]["last"]["to"].as_u64()
    );

    // Success without a latency: the time the permit was held.
    let id = acquire(&c, &base, "db").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let said = r#"{"outcome":"success"}"#;
    assert_eq!(
        release(&c, &base, &id, said).await.0,
        StatusCode::NO_CONTENT
    );
    wait_step(&c, &base, "db", "a step with the 300 ms hold", |d| {
        d["ok"].as_u64() >= Some(1) && d["p50_ms"].as_f64() >= Some(150.0)
    })
    .await;

    // A drop.
    drop_one(&c, &base).await;
    let st = wait_step(&c, &base, "db", "a step with the drop", |d| {
        d["dropped"].as_u64() >= Some(1)
    })
    .await;
    assert!(
        st["adaptive"]["last"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("dropped")),
        "{st}"
    );

    // Bad bodies: 400 naming the field, and the permit still held.
    let id = acquire(&c, &base, "db").await;
    for (body, field) in [
        (r#"{"outcome":"ok"}"#, "outcome"),
        (r#"{"outcome":7}"#, "outcome"),
        (r#"{"outcome":"success","latency_ms":-1}"#, "latency_ms"),
        (r#"{"outcome":"success","latency_ms":"fast"}"#, "latency_ms"),
        (r#"{"outcome":"dropped","latency_ms":3}"#, "latency_ms"),
        (r#"{"result":"success"}"#, "result"),
    ] {
        let (status, named) = release(&c, &base, &id, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(named.as_deref(), Some(field), "{body}");
    }
    let (status, named) = release(&c, &base, &id, "{\"outcome\":").await;
    assert_eq!(
        (status, named),
        (StatusCode::BAD_REQUEST, None),
        "malformed JSON"
    );
    assert_eq!(get(&c, &base, "db").await["used"], 1, "nothing released");

    // Ignore, and no body: released, nothing counted (the windows still show the permits
    // held).
    assert_eq!(
        release(&c, &base, &id, r#"{"outcome":"ignore"}"#).await.0,
        StatusCode::NO_CONTENT
    );
    let id = acquire(&c, &base, "db").await;
    assert_eq!(release(&c, &base, &id, "").await.0, StatusCode::NO_CONTENT);
    let released = Instant::now();
    let mut steps = BTreeMap::new();
    while released.elapsed() < WINDOW * 4 {
        let st = get(&c, &base, "db").await;
        let d = &st["adaptive"]["last"];
        if let Some(at) = d["at_unix_ms"].as_u64() {
            steps.insert(at, d.clone());
        }
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    let after: Vec<&Value> = steps.values().skip(1).collect();
    assert!(!after.is_empty(), "steps seen: {steps:?}");
    for d in &after {
        assert_eq!(
            (d["ok"].as_u64(), d["dropped"].as_u64()),
            (Some(0), Some(0)),
            "{d}"
        );
    }
    assert_eq!(get(&c, &base, "db").await["used"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drops_through_two_sidecars_lower_the_capacity_with_its_reason() {
    let cluster = EtcdCluster::single();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "sidecar.toml", AIMD_DB);
    let url = cluster.url("two-sidecars");
    let config = config.to_str().unwrap();
    let a = Sidecar::start(&["--store", &url, "--config", config, "--owner", "side-a"]).await;
    let b = Sidecar::start(&["--store", &url, "--config", config, "--owner", "side-b"]).await;
    let c = client();

    // Drops through both until a lowering step is shown and a scrape has counted one.
    let changes_down =
        "clusterlimit_adaptive_capacity_changes_total{semaphore=\"db\",direction=\"down\"}";
    let start = Instant::now();
    let mut lowering: Option<Value> = None;
    let mut counted = 0.0;
    while start.elapsed() < FEW_WINDOWS && (lowering.is_none() || counted < 1.0) {
        for base in [&a.url, &b.url] {
            drop_one(&c, base).await;
        }
        let st = get(&c, &b.url, "db").await;
        let d = &st["adaptive"]["last"];
        if d["to"].as_u64() < d["from"].as_u64()
            && d["reason"].as_str().is_some_and(|r| r.contains("dropped"))
        {
            lowering = Some(st.clone());
        }
        counted = sample(&metrics(&c, &a.url).await, changes_down).unwrap_or(0.0);
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    let st = lowering.expect("drops through both sidecars should show a lowering step");
    assert!(counted >= 1.0, "a scrape should count a lowering step");
    let adaptive = &st["adaptive"];
    assert_eq!(adaptive["reporters"], 2, "{st}");
    assert!(st["capacity"].as_u64() < Some(10), "{st}");
    let controller = adaptive["last"]["controller"].as_str().unwrap_or("");
    assert!(controller == "side-a" || controller == "side-b", "{st}");
    for key in [
        "ok",
        "dropped",
        "p50_ms",
        "peak_in_flight",
        "baseline_ms",
        "at_unix_ms",
    ] {
        assert!(adaptive["last"].get(key).is_some(), "{key} in {st}");
    }

    // /metrics: the stored capacity and the newest step's inputs.
    let text = metrics(&c, &a.url).await;
    let stored = get(&c, &a.url, "db").await["capacity"].as_f64().unwrap();
    let metric = |name: &str| sample(&text, &format!("{name}{{semaphore=\"db\"}}"));
    let capacity_metric = metric("clusterlimit_adaptive_capacity").unwrap_or(-1.0);
    assert!((2.0..10.0).contains(&capacity_metric), "{text}");
    assert!(
        stored <= capacity_metric,
        "capacity only falls here: {stored} vs {text}"
    );
    assert_eq!(
        metric("clusterlimit_adaptive_reporters"),
        Some(2.0),
        "{text}"
    );
    for name in [
        "clusterlimit_adaptive_drop_ratio",
        "clusterlimit_adaptive_latency_p50_seconds",
        "clusterlimit_adaptive_baseline_seconds",
    ] {
        assert!(metric(name).is_some(), "{name} in {text}");
    }
    assert!(sample(&text, changes_down) >= Some(1.0), "{text}");

    // `status NAME` prints the adaptive lines; `--json` has the object.
    let out = output(
        cmd(&["status", "--store", &url, "db"]),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout.contains("  adaptive: capacity "),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("  controller side-"), "{}", out.stdout);
    assert!(out.stdout.contains("2 reporters"), "{}", out.stdout);
    let out = output(
        cmd(&["status", "--store", &url, "db", "--json"]),
        Duration::from_secs(20),
    )
    .await;
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["name"], "db");
    assert_eq!(v["adaptive"]["reporters"], 2, "{v}");
    assert!(v["adaptive"]["last"]["reason"].is_string(), "{v}");
    // A semaphore that does not adapt shows no adaptive state.
    let out = output(
        cmd(&["set-capacity", "--store", &url, "plain", "2"]),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let plain = get(&c, &a.url, "plain").await;
    assert!(plain.get("adaptive").is_none(), "{plain}");
    let out = output(
        cmd(&["status", "--store", &url, "plain"]),
        Duration::from_secs(20),
    )
    .await;
    assert!(!out.stdout.contains("adaptive"), "{}", out.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sidecar_on_zookeeper_serves_adaptive_and_plain_semaphores() {
    let zk = support::ZkCluster::single();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "sidecar.toml", AIMD_DB);
    let url = zk.url("sidecar-adaptive");
    let sc = Sidecar::start(&["--store", &url, "--config", config.to_str().unwrap()]).await;
    let (c, base) = (client(), sc.url.clone());
    drop_one(&c, &base).await;
    let st = wait_step(&c, &base, "db", "a step with the drop", |d| {
        d["dropped"].as_u64() >= Some(1)
    })
    .await;
    assert_eq!(st["adaptive"]["reporters"], 1, "{st}");
    // A semaphore nobody adapts: its status as before, no adaptive object, in GET and status.
    let r = c
        .put(format!("{base}/v1/semaphores/plain"))
        .json(&json!({"capacity": 2}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let plain = get(&c, &base, "plain").await;
    assert_eq!(plain["capacity"], 2, "{plain}");
    assert!(plain.get("adaptive").is_none(), "{plain}");
    let out = output(
        cmd(&["status", "--store", &url, "plain", "--json"]),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert!(v.get("adaptive").is_none(), "{v}");
    let out = output(
        cmd(&["status", "--store", &url, "db"]),
        Duration::from_secs(20),
    )
    .await;
    assert!(
        out.stdout.contains("  adaptive: capacity "),
        "{}",
        out.stdout
    );
}

/// Every step `sem`'s controller took while `work` ran and for four windows after, by window.
async fn steps_during(
    sem: &Semaphore,
    work: impl std::future::Future<Output = binary::Out>,
) -> (binary::Out, BTreeMap<u64, CapacityDecision>) {
    let mut steps = BTreeMap::new();
    let mut work = std::pin::pin!(work);
    let mut done: Option<(binary::Out, Instant)> = None;
    // 40 ms a turn: at most 40 s (`work` gives up after 30).
    for _ in 0..1000 {
        let tick = tokio::time::sleep(Duration::from_millis(40));
        if done.is_none() {
            tokio::select! {
                out = &mut work => done = Some((out, Instant::now())),
                () = tick => {}
            }
        } else {
            tick.await;
        }
        let read = tokio::time::timeout(Duration::from_secs(2), sem.adaptive_status()).await;
        if let Ok(Ok(Some(st))) = read {
            if let Some(d) = st.last {
                steps.insert(d.window, d);
            }
        }
        if done
            .as_ref()
            .is_some_and(|(_, at)| at.elapsed() > WINDOW * 4)
        {
            break;
        }
    }
    match done {
        Some((out, _)) => (out, steps),
        None => panic!("`run` did not finish"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_reports_the_commands_exit_as_its_outcome_on_etcd() {
    let cluster = EtcdCluster::single();
    run_reports_the_commands_exit_as_its_outcome(&cluster.url("run-outcomes")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_reports_the_commands_exit_as_its_outcome_on_zookeeper() {
    let zk = support::ZkCluster::single();
    run_reports_the_commands_exit_as_its_outcome(&zk.url("run-outcomes")).await;
}

/// `run --adaptive` in the store at `url`: exit 0, 75, a SIGKILL and exit 3 seen by the
/// controller (the test's Limiter) as a success of the command's time, drops, and nothing.
async fn run_reports_the_commands_exit_as_its_outcome(url: &str) {
    let url = url.to_string();
    // The test's own Limiter opens the semaphore first: it holds the controller seat, so its
    // steps show what every `run` reported.
    let limiter = Limiter::builder(&url)
        .owner("test-controller")
        .connect()
        .await
        .unwrap();
    let config = Adaptive::aimd().min(1).max(10).initial(5).window(WINDOW);
    let sem = limiter.adaptive_semaphore("jobs", config).await.unwrap();
    let start = Instant::now();
    loop {
        let st = sem.adaptive_status().await.ok().flatten();
        if st
            .and_then(|s| s.last)
            .is_some_and(|d| d.controller == "test-controller")
        {
            break;
        }
        assert!(
            start.elapsed() < FEW_WINDOWS,
            "the test's Limiter never stepped"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // (script, exit code, what the steps must show)
    let cases: [(&str, i32, &str); 4] = [
        ("sleep 0.3; exit 0", 0, "success"),
        ("sleep 0.3; exit 75", 75, "dropped"),
        ("sleep 0.3; kill -9 $$", 137, "dropped"),
        ("sleep 0.3; exit 3", 3, "ignore"),
    ];
    for (script, code, expect) in cases {
        let run = cmd(&[
            "run",
            "-q",
            "--store",
            &url,
            "--semaphore",
            "jobs",
            "--adaptive",
            "aimd",
            "--min",
            "1",
            "--max",
            "10",
            "--initial",
            "5",
            "--window",
            "200ms",
            "--",
            "sh",
            "-c",
            script,
        ]);
        let (out, steps) = steps_during(&sem, output(run, Duration::from_secs(30))).await;
        assert_eq!(out.code, Some(code), "{script}: {}", out.stderr);
        let ok: u64 = steps.values().map(|d| d.ok).sum();
        let dropped: u64 = steps.values().map(|d| d.dropped).sum();
        let seen = steps
            .values()
            .any(|d| d.reporters == 2 && d.peak_in_flight >= 1);
        assert!(
            seen,
            "{script}: no step saw the run holding a permit: {steps:?}"
        );
        match expect {
            "success" => {
                assert_eq!((ok, dropped), (1, 0), "{script}: {steps:?}");
                let p50 = steps.values().find_map(|d| d.p50_us).unwrap_or(0);
                assert!(
                    p50 >= 200_000,
                    "{script}: the command's time, 0.3 s: {steps:?}"
                );
            }
            "dropped" => assert_eq!((ok, dropped), (0, 1), "{script}: {steps:?}"),
            _ => assert_eq!((ok, dropped), (0, 0), "{script}: {steps:?}"),
        }
    }
    let _ = within("close", Duration::from_secs(5), limiter.close()).await;
}
