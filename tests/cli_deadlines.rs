//! Deadlines are deadlines on the real binary: every CLI command and sidecar route ends within
//! its timeout + 100 ms (connect included) against a SIGSTOPped etcd or ZooKeeper, and a refused
//! port or an unknown host is reported at once, in words. The process's own start-up (measured
//! in the same run with `--version`) is added to the bound: it is not the command's wait.

use crate::binary;
use crate::support;

use binary::{cmd, output, Out, Sidecar};
use std::time::Duration;
use support::{EtcdCluster, Pausable, ZkCluster};
use tokio::time::Instant;

/// What the issue promises on top of a timeout.
const OVERRUN: Duration = Duration::from_millis(100);
/// The timeouts given to the commands.
const D: Duration = Duration::from_secs(1);
const LIMIT: Duration = Duration::from_secs(30);

/// How long the binary takes to start and exit doing nothing (the slowest of three).
async fn startup() -> Duration {
    let mut slowest = Duration::ZERO;
    for _ in 0..3 {
        let t = Instant::now();
        let out = output(cmd(&["--version"]), LIMIT).await;
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        slowest = slowest.max(t.elapsed());
    }
    slowest
}

/// Runs `args`; returns its output and how long it took.
async fn timed(args: &[&str]) -> (Out, Duration) {
    let t = Instant::now();
    let out = output(cmd(args), LIMIT).await;
    (out, t.elapsed())
}

/// Asserts a human message: no Rust type names or debug dumps.
fn assert_human(text: &str) {
    for dump in ["tonic", "Error(", "Some(", "{ kind", "::", "Os {"] {
        assert!(!text.contains(dump), "{dump:?} in {text:?}");
    }
}

/// Every command against a store that accepts connections and never answers.
async fn commands_keep_to_their_timeouts(mut store: impl Pausable) {
    let url = &store.url("deadlines");
    let start = startup().await;
    // Created while the store answers, so that `run` and `rate wait` have something to wait on.
    let out = output(cmd(&["set-capacity", "--store", url, "s", "1"]), LIMIT).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    store.pause();
    let d = "1s";
    let cases: [&[&str]; 6] = [
        &["status", "--store", url, "--connect-timeout", d],
        &[
            "set-capacity",
            "--store",
            url,
            "s",
            "2",
            "--connect-timeout",
            d,
        ],
        &[
            "rate",
            "check",
            "--store",
            url,
            "r",
            "k",
            "--limit",
            "5",
            "--per",
            "1s",
            "--connect-timeout",
            d,
        ],
        &[
            "rate",
            "status",
            "--store",
            url,
            "r",
            "--connect-timeout",
            d,
        ],
        // --timeout covers the connect too (the connect timeout, 5 s by default, is longer).
        &[
            "run",
            "--store",
            url,
            "--semaphore",
            "s",
            "--timeout",
            d,
            "--",
            "true",
        ],
        &[
            "rate",
            "wait",
            "--store",
            url,
            "r",
            "k",
            "--limit",
            "5",
            "--per",
            "1s",
            "--timeout",
            d,
        ],
    ];
    for args in cases {
        let (out, took) = timed(args).await;
        println!(
            "{}: exit {:?} after {took:?}: {}",
            args[..2].join(" "),
            out.code,
            out.stderr.trim()
        );
        assert_eq!(out.code, Some(69), "{args:?}: {}", out.stderr);
        assert!(
            out.stderr.contains("did not answer within"),
            "{args:?}: {}",
            out.stderr
        );
        assert_human(&out.stderr);
        assert!(
            took < D + OVERRUN + start,
            "{args:?} took {took:?} (start-up {start:?})"
        );
    }
    store.resume();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_commands_keep_to_their_timeouts_against_a_stopped_store() {
    commands_keep_to_their_timeouts(EtcdCluster::single()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zk_commands_keep_to_their_timeouts_against_a_stopped_store() {
    commands_keep_to_their_timeouts(ZkCluster::single()).await;
}

/// A loopback port nothing listens on.
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_ports_and_unknown_hosts_fail_at_once_in_words() {
    let start = startup().await;
    let port = closed_port();
    let cases = [
        (
            format!("etcd://127.0.0.1:{port}/x"),
            "nothing listens at 127.0.0.1:",
        ),
        (
            format!("zk://127.0.0.1:{port}/x"),
            "nothing listens at 127.0.0.1:",
        ),
        (
            "etcd://nonexistent.invalid:2379/x".to_string(),
            "unknown host nonexistent.invalid:2379",
        ),
        (
            "zk://nonexistent.invalid:2181/x".to_string(),
            "unknown host nonexistent.invalid:2181",
        ),
    ];
    for (url, says) in &cases {
        for args in [
            &["status", "--store", url.as_str()][..],
            &["run", "--store", url, "--semaphore", "s", "--", "true"],
        ] {
            let (out, took) = timed(args).await;
            println!(
                "{url} {}: exit {:?} after {took:?}: {}",
                args[0],
                out.code,
                out.stderr.trim()
            );
            assert_eq!(out.code, Some(69), "{args:?}: {}", out.stderr);
            assert!(out.stderr.contains(says), "{args:?}: {}", out.stderr);
            assert_human(&out.stderr);
            // "Well under a second": the probe's own bound is 300 ms.
            assert!(
                took < Duration::from_millis(500) + start,
                "{args:?} took {took:?}"
            );
        }
    }
}

/// POSTs `body` (JSON) or GETs `path`: status, JSON body and how long it took.
async fn call(
    sidecar: &Sidecar,
    path: &str,
    body: Option<&str>,
) -> (u16, serde_json::Value, Duration) {
    let client = reqwest::Client::new();
    let url = format!("{}{path}", sidecar.url);
    let req = match body {
        Some(b) => client
            .post(url)
            .header("content-type", "application/json")
            .body(b.to_string()),
        None => client.get(url),
    };
    let t = Instant::now();
    let resp = tokio::time::timeout(LIMIT, req.send())
        .await
        .expect("bounded")
        .unwrap();
    let took = t.elapsed();
    let status = resp.status().as_u16();
    let json = resp.json().await.unwrap_or(serde_json::Value::Null);
    (status, json, took)
}

/// The sidecar's routes on a store that stops answering after start.
async fn sidecar_routes_keep_to_their_timeouts(mut store: impl Pausable) {
    let url = &store.url("sidecar-deadlines");
    let sidecar = Sidecar::start(&["--store", url, "--request-timeout", "1s"]).await;
    let (status, body, _) = call(
        &sidecar,
        "/v1/semaphores/held/permits",
        Some(r#"{"capacity":1}"#),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    store.pause();
    let half = Duration::from_millis(500);
    let cases: [(&str, Option<&str>, Duration); 5] = [
        // timeout_ms on a semaphore the sidecar has not opened yet.
        (
            "/v1/semaphores/unopened/permits",
            Some(r#"{"timeout_ms":500}"#),
            half,
        ),
        // ... and on one it has (its enqueue is never answered).
        (
            "/v1/semaphores/held/permits",
            Some(r#"{"timeout_ms":500}"#),
            half,
        ),
        // No wait: the request timeout bounds it.
        (
            "/v1/semaphores/held/permits",
            Some(r#"{"timeout_ms":0}"#),
            D,
        ),
        ("/v1/semaphores/held", None, D),
        ("/v1/semaphores", None, D),
    ];
    for (path, body, bound) in cases {
        let (status, json, took) = call(&sidecar, path, body).await;
        println!("{path} {body:?}: {status} after {took:?}: {json}");
        assert_eq!(status, 503, "{path}: {json}");
        assert_eq!(json["code"], "store_unavailable", "{path}: {json}");
        assert_human(json["detail"].as_str().unwrap_or_default());
        assert!(took < bound + OVERRUN, "{path} {body:?} took {took:?}");
    }
    store.resume();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_sidecar_routes_keep_to_their_timeouts_against_a_stopped_store() {
    sidecar_routes_keep_to_their_timeouts(EtcdCluster::single()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zk_sidecar_routes_keep_to_their_timeouts_against_a_stopped_store() {
    sidecar_routes_keep_to_their_timeouts(ZkCluster::single()).await;
}
