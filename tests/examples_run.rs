//! Every example runs and does what it says, against memory:// (no servers): the Rust examples
//! as built by `cargo build --examples`, and `sidecar_client.py` against a real
//! `clusterlimit serve`.

use crate::binary;

use binary::{output, Sidecar};
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::Duration;
use tokio::process::Command;

/// Builds the example binaries (a no-op when they are fresh) and returns name → path.
///
/// `cargo test` builds examples only as test harnesses, so their `main` needs this build. Cargo
/// holds no lock while tests run. The same features as this test crate's keep the library's
/// build shared (a different feature set would build it again).
fn examples() -> &'static HashMap<String, PathBuf> {
    static BUILT: OnceLock<HashMap<String, PathBuf>> = OnceLock::new();
    BUILT.get_or_init(|| {
        let mut features = Vec::new();
        if cfg!(feature = "default") {
            features.push("default");
        }
        if cfg!(feature = "cli") {
            features.push("cli");
        }
        if cfg!(feature = "tower") {
            features.push("tower");
        }
        if cfg!(feature = "axum") {
            features.push("axum");
        }
        if cfg!(feature = "testing") {
            features.push("testing");
        }
        let mut cargo = std::process::Command::new(env!("CARGO"));
        // Without the variables cargo sets for this test's process (CARGO_MANIFEST_DIR,
        // CARGO_PKG_*, …): ring's build script reruns when one of them changes, and with them
        // set here this build would compile ring and everything above it again, and so would
        // the next `cargo test` (about two minutes each on two cores).
        for (var, _) in std::env::vars_os() {
            let var = var.to_string_lossy();
            if var.starts_with("CARGO_PKG_")
                || var.starts_with("CARGO_MANIFEST_")
                || var.starts_with("CARGO_BIN_")
                || [
                    "CARGO_CRATE_NAME",
                    "CARGO_PRIMARY_PACKAGE",
                    "CARGO_TARGET_TMPDIR",
                ]
                .contains(&var.as_ref())
                || var == "OUT_DIR"
            {
                cargo.env_remove(var.as_ref());
            }
        }
        let out = cargo
            .args([
                "build",
                "--examples",
                "--message-format=json-render-diagnostics",
            ])
            .args(["--no-default-features", "--features", &features.join(",")])
            .arg("--manifest-path")
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
            .stderr(Stdio::inherit())
            .output()
            .expect("run cargo build --examples");
        assert!(out.status.success(), "cargo build --examples failed");
        let mut built = HashMap::new();
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let is_example = msg["target"]["kind"]
                .as_array()
                .is_some_and(|k| k.iter().any(|k| k == "example"));
            if let (true, Some(exe)) = (is_example, msg["executable"].as_str()) {
                let name = msg["target"]["name"].as_str().unwrap_or_default();
                built.insert(name.to_string(), PathBuf::from(exe));
            }
        }
        built
    })
}

/// Runs an example on memory:// (no `$CLUSTERLIMIT_STORE`) within 60 s; returns its stdout.
async fn run_example(name: &str, args: &[&str]) -> String {
    let exe = examples()
        .get(name)
        .unwrap_or_else(|| panic!("example {name} was not built"));
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .env_remove("CLUSTERLIMIT_STORE")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let out = output(cmd, Duration::from_secs(60)).await;
    assert_eq!(
        out.code,
        Some(0),
        "example {name} failed\nstdout:\n{}\nstderr:\n{}",
        out.stdout,
        out.stderr
    );
    out.stdout
}

#[tokio::test]
async fn quickstart_takes_turns() {
    let out = run_example("quickstart", &[]).await;
    for who in ["worker-a", "worker-b"] {
        assert_eq!(
            out.matches(&format!("{who} holds the permit")).count(),
            3,
            "{out}"
        );
    }
}

#[tokio::test]
async fn distributed_job_stops_on_loss_and_fences_stale_writes() {
    let out = run_example("distributed_job", &[]).await;
    assert!(out.contains("permit lost during chunk"), "{out}");
    assert!(out.contains("late write with token 1 refused"), "{out}");
    assert!(
        out.contains("all 6 chunks exported once, in order"),
        "{out}"
    );
}

#[tokio::test]
async fn axum_service_sheds_load_with_503_and_retry_after() {
    let out = run_example("axum_service", &["--demo"]).await;
    assert!(out.contains("503, Retry-After: 1"), "{out}");
    assert!(out.contains("at most 2 ran at once (cap 2)"), "{out}");
    assert!(out.contains("search: 429, Retry-After: "), "{out}");
    assert!(out.contains("RateLimit: \"search-api\";r=0;t="), "{out}");
    assert!(
        out.contains("search: served 3, limited 2 with 429"),
        "{out}"
    );
}

/// `python3`, or a panic that says how to get it (the client needs nothing else).
fn python3() -> Command {
    let found = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "python3 not found: install it (Debian: apt-get install python3)"
    );
    Command::new("python3")
}

/// `python3 examples/sidecar_client.py --url URL ARGS` within 30 s: (exit code, stderr).
async fn sidecar_client(url: &str, args: &[&str]) -> (Option<i32>, String) {
    let mut cmd = python3();
    cmd.arg(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/sidecar_client.py"
    ))
    .args(["--url", url])
    .args(args)
    .env("SIDECAR", url)
    .stdin(Stdio::null())
    .kill_on_drop(true);
    let out = output(cmd, Duration::from_secs(30)).await;
    (out.code, out.stderr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecar_client_keeps_alive_and_passes_the_exit_code() {
    let sc = Sidecar::start(&["--store", "memory://py-client"]).await;
    // 1.5 s of work on a 1 s client TTL: only keepalives keep the permit.
    let (code, err) = sidecar_client(
        &sc.url,
        &[
            "--semaphore",
            "py",
            "--capacity",
            "1",
            "--ttl-ms",
            "1000",
            "--",
            "sh",
            "-c",
            "test -n \"$CLUSTERLIMIT_FENCING_TOKEN\" && sleep 1.5 && exit 3",
        ],
    )
    .await;
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("fencing token 1"), "{err}");

    // And the permit was released at the end: the next client gets it at once.
    let (code, err) = sidecar_client(
        &sc.url,
        &["--semaphore", "py", "--timeout-ms", "0", "--", "true"],
    )
    .await;
    assert_eq!(code, Some(0), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecar_client_stops_the_command_when_the_permit_is_gone() {
    let sc = Sidecar::start(&["--store", "memory://py-client-lost"]).await;
    // The command deletes its own permit behind the client's back; the next keepalive finds
    // it gone, the command gets SIGTERM and the client exits 76.
    let delete_own_permit = "import os, time, urllib.request as u; \
        u.urlopen(u.Request(os.environ['SIDECAR'] + '/v1/permits/' + os.environ['CLUSTERLIMIT_PERMIT_ID'], method='DELETE')); \
        time.sleep(20)";
    let started = std::time::Instant::now();
    let (code, err) = sidecar_client(
        &sc.url,
        &[
            "--semaphore",
            "py",
            "--capacity",
            "1",
            "--ttl-ms",
            "1000",
            "--",
            "python3",
            "-c",
            delete_own_permit,
        ],
    )
    .await;
    assert_eq!(code, Some(76), "{err}");
    assert!(err.contains("permit lost"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecar_client_exit_codes_for_timeout_usage_and_unreachable() {
    let sc = Sidecar::start(&["--store", "memory://py-client-codes"]).await;
    let holder = python3()
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/sidecar_client.py"
        ))
        .args([
            "--url",
            &sc.url,
            "--semaphore",
            "py",
            "--capacity",
            "1",
            "--",
            "sleep",
            "5",
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start python3");
    let mut busy = false;
    for _ in 0..100 {
        let st: serde_json::Value = reqwest::get(format!("{}/v1/semaphores/py", sc.url))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if st["used"] == 1 {
            busy = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(busy, "the holder never got its permit");
    let (code, err) = sidecar_client(
        &sc.url,
        &["--semaphore", "py", "--timeout-ms", "200", "--", "true"],
    )
    .await;
    assert_eq!(code, Some(75), "{err}");
    assert!(err.contains("retry after 1"), "{err}");
    // SIGTERM, as a user's Ctrl-C or an orchestrator would: the client passes it to its
    // command and exits with it (a SIGKILL would leave its `sleep` behind).
    stop_client(holder).await;

    let (code, err) = sidecar_client(&sc.url, &["--semaphore", "absent", "--", "true"]).await;
    assert_eq!(code, Some(64), "{err}");
    assert!(err.contains("does not exist"), "{err}");
    let (code, _) = sidecar_client(&sc.url, &["--semaphore", "py"]).await;
    assert_eq!(code, Some(64), "no command is a usage error");

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (code, err) = sidecar_client(
        &format!("http://127.0.0.1:{port}"),
        &["--semaphore", "py", "--", "true"],
    )
    .await;
    assert_eq!(code, Some(69), "{err}");
}

/// Stops a running `sidecar_client.py` with SIGTERM and waits (at most 10 s) for it to exit.
async fn stop_client(mut client: tokio::process::Child) {
    let pid = client.id().expect("the client is running");
    binary::signal(pid, "TERM");
    tokio::time::timeout(Duration::from_secs(10), client.wait())
        .await
        .expect("the client exits within 10 s of SIGTERM")
        .expect("wait for the client");
}

/// A long-running example (a server): killed when dropped.
struct Served {
    url: String,
    _child: tokio::process::Child,
}

impl Served {
    /// Starts example `name` with `args` and waits (at most 30 s) for its first line, which
    /// names the address it listens on (`… on http://ADDR …`).
    async fn start(name: &str, args: &[&str]) -> Served {
        use tokio::io::{AsyncBufReadExt, BufReader};
        let exe = examples()
            .get(name)
            .unwrap_or_else(|| panic!("example {name} was not built"));
        let mut child = Command::new(exe)
            .args(args)
            .env_remove("CLUSTERLIMIT_STORE")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("start example {name}: {e}"));
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let line = binary::within("the example's first line", Duration::from_secs(30), async {
            lines.next_line().await.expect("read the example's stdout")
        })
        .await
        .unwrap_or_else(|| panic!("example {name} exited before listening"));
        let url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no address in {line:?}"))
            .trim_end_matches([',', ')'])
            .to_string();
        // Keep reading its stdout so that it never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Served { url, _child: child }
    }
}

/// Budget of the gateway tests: 20,000 tokens per tenant per 3 s window.
const LLM_BUDGET: u64 = 20_000;
const LLM_WINDOW: &str = "3";

/// Two gateway replicas on one real etcd in front of the fake LLM, 8 callers over 2 tenants:
/// the tokens the LLM served per tenant in each window stay within the budget plus one call
/// (`max_tokens`), and the budget is used (demand is several times over it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llm_gateway_replicas_keep_each_tenant_within_its_token_budget() {
    let etcd = crate::support::EtcdCluster::single();
    let store = etcd.url("llmgw");
    let budget = LLM_BUDGET.to_string();
    let llm = Served::start(
        "llm_gateway",
        &[
            "--fake-llm",
            "--listen",
            "127.0.0.1:0",
            "--window",
            LLM_WINDOW,
        ],
    )
    .await;
    let mut gateways = Vec::new();
    for _ in 0..2 {
        let args = [
            "--store",
            &store,
            "--upstream",
            &llm.url,
            "--listen",
            "127.0.0.1:0",
            "--budget",
            &budget,
            "--window",
            LLM_WINDOW,
        ];
        gateways.push(Served::start("llm_gateway", &args).await);
    }
    let targets = format!("{},{}", gateways[0].url, gateways[1].url);
    let usage_url = format!("{}/usage", llm.url);
    let out = run_example(
        "llm_gateway",
        &[
            "--load",
            &targets,
            "--tenants",
            "acme,globex",
            "--callers",
            "8",
            "--seconds",
            "10",
            "--max-tokens",
            "1000",
            "--usage",
            &usage_url,
            "--budget",
            &budget,
            "--window",
            LLM_WINDOW,
        ],
    )
    .await;
    assert!(out.contains("answered 429"), "{out}");
    assert!(!out.contains("OVER BUDGET"), "{out}");

    let usage: serde_json::Value = reqwest::get(&usage_url)
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for tenant in ["acme", "globex"] {
        let windows = usage["tenants"][tenant]
            .as_object()
            .expect("a tenant served");
        let tokens: Vec<u64> = windows.values().map(|t| t.as_u64().unwrap()).collect();
        assert!(tokens.len() >= 3, "{tenant}: {tokens:?}");
        for t in &tokens {
            assert!(
                *t <= LLM_BUDGET + 1000,
                "{tenant} over budget + one call: {tokens:?}"
            );
        }
        // The windows wholly inside the run: the budget was used, not wasted on reservations.
        for t in &tokens[1..tokens.len() - 1] {
            assert!(
                *t >= LLM_BUDGET / 2,
                "{tenant} used little of its budget: {tokens:?}"
            );
        }
    }
}

/// A test upstream for the gateway's error paths, answering by the request's `prompt`:
/// "fail" → 500, "silent" → 200 without usage, anything else → 200 with usage = max_tokens.
async fn odd_upstream() -> (String, tokio::task::JoinHandle<()>) {
    use axum::routing::post;
    async fn answer(body: axum::body::Bytes) -> (axum::http::StatusCode, String) {
        let req: serde_json::Value = serde_json::from_slice(&body).unwrap();
        match req["prompt"].as_str() {
            Some("fail") => (axum::http::StatusCode::INTERNAL_SERVER_ERROR, "boom".into()),
            Some("silent") => (axum::http::StatusCode::OK, "{}".into()),
            _ => {
                let n = req["max_tokens"].as_u64().unwrap();
                let body = serde_json::json!({"usage": {"total_tokens": n}});
                (axum::http::StatusCode::OK, body.to_string())
            }
        }
    }
    let app = axum::Router::new().route("/v1/completions", post(answer));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    (
        url,
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() }),
    )
}

/// A gateway's arguments: a budget of 1,000 tokens per tenant per minute.
fn gateway_args(store: &str, upstream: &str) -> Vec<String> {
    let args = [
        "--store",
        store,
        "--upstream",
        upstream,
        "--listen",
        "127.0.0.1:0",
    ];
    let budget = ["--budget", "1000"];
    args.iter().chain(&budget).map(|a| a.to_string()).collect()
}

/// POSTs `body` as tenant `tenant` (none: no header); the status and the body as JSON.
async fn gateway_call(
    gw: &str,
    tenant: Option<&str>,
    body: &str,
) -> (u16, serde_json::Value, Option<String>) {
    let mut req = reqwest::Client::new()
        .post(format!("{gw}/v1/completions"))
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(t) = tenant {
        req = req.header("x-tenant", t);
    }
    let res = req.send().await.unwrap();
    let status = res.status().as_u16();
    let retry = res
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    let text = res.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::Null),
        retry,
    )
}

/// Bad requests get 400 naming the field; an upstream's error gives the tokens back, a reply
/// without usage keeps them charged; an unreachable upstream is a 502 that gives them back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llm_gateway_settles_upstream_errors_as_documented() {
    let (upstream, _server) = odd_upstream().await;
    let args = gateway_args("memory://llmgw-errors", &upstream);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let gw = Served::start("llm_gateway", &args).await;
    let url = gw.url.as_str();

    let (status, body, _) = gateway_call(url, None, r#"{"max_tokens": 10}"#).await;
    assert_eq!(
        (status, body["field"].as_str()),
        (400, Some("x-tenant")),
        "{body}"
    );
    let (status, body, _) = gateway_call(url, Some("t"), r#"{"prompt": "x"}"#).await;
    assert_eq!(
        (status, body["field"].as_str()),
        (400, Some("max_tokens")),
        "{body}"
    );
    let (status, body, _) = gateway_call(url, Some("t"), "not json").await;
    assert_eq!(status, 400, "{body}");
    let (status, body, _) = gateway_call(url, Some("t"), r#"{"max_tokens": 5000}"#).await;
    assert_eq!(
        (status, body["field"].as_str()),
        (400, Some("max_tokens")),
        "{body}"
    );

    // An upstream error, three times the whole budget over: each is given back.
    for _ in 0..3 {
        let (status, _, _) =
            gateway_call(url, Some("t"), r#"{"prompt": "fail", "max_tokens": 1000}"#).await;
        assert_eq!(status, 500);
    }
    // A reply without usage: 502, and the reservation (the whole budget) stays charged.
    let (status, body, _) = gateway_call(
        url,
        Some("t"),
        r#"{"prompt": "silent", "max_tokens": 1000}"#,
    )
    .await;
    assert_eq!(status, 502, "{body}");
    let (status, body, retry) = gateway_call(url, Some("t"), r#"{"max_tokens": 1}"#).await;
    assert_eq!(status, 429, "{body}");
    assert!(
        retry.is_some_and(|s| s.parse::<u64>().unwrap() >= 1),
        "{body}"
    );
    assert!(
        body["detail"].as_str().unwrap().contains("tenant t"),
        "{body}"
    );
    // Another tenant is untouched, and a used-up reply is settled at its usage.
    let (status, body, _) = gateway_call(url, Some("u"), r#"{"max_tokens": 600}"#).await;
    assert_eq!(
        (status, body["usage"]["total_tokens"].as_u64()),
        (200, Some(600))
    );

    // Nothing listening upstream: 502, and the tokens come back.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let args = gateway_args("memory://llmgw-down", &format!("http://{closed}"));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let down = Served::start("llm_gateway", &args).await;
    for _ in 0..3 {
        let (status, body, _) = gateway_call(&down.url, Some("t"), r#"{"max_tokens": 1000}"#).await;
        assert_eq!(status, 502, "{body}");
    }
}

/// The store down mid-run: the gateway answers 503 (the budget cannot be checked), within the
/// Limiter's own store timeouts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llm_gateway_answers_503_when_the_store_is_down() {
    let mut etcd = crate::support::EtcdCluster::single();
    let (upstream, _server) = odd_upstream().await;
    let args = gateway_args(&etcd.url("llmgw-down"), &upstream);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let gw = Served::start("llm_gateway", &args).await;
    let (status, body, _) = gateway_call(&gw.url, Some("t"), r#"{"max_tokens": 10}"#).await;
    assert_eq!(status, 200, "{body}");
    etcd.kill(0);
    let (status, body, _) = binary::within(
        "the gateway's answer with etcd down",
        Duration::from_secs(60),
        gateway_call(&gw.url, Some("t"), r#"{"max_tokens": 10}"#),
    )
    .await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body["detail"].as_str().unwrap().contains("retry later"),
        "{body}"
    );
}

/// An upstream whose replies stop mid-body: the status line and headers of a 200 promising
/// 100 bytes, 8 of them, then the connection closed. At most 10 connections.
async fn cut_off_upstream() -> (String, tokio::task::JoinHandle<()>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        for _ in 0..10 {
            let Ok((mut conn, _)) = listener.accept().await else {
                return;
            };
            let mut request = [0u8; 4096];
            let _ = conn.read(&mut request).await;
            let head =
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n";
            let _ = conn
                .write_all(format!("{head}{{\"usage\"").as_bytes())
                .await;
            let _ = conn.shutdown().await;
        }
    });
    (url, server)
}

/// A reply cut off mid-body: 502, and the call stays charged at its max_tokens (the call may
/// have run to its end).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llm_gateway_keeps_the_reservation_of_a_reply_cut_off() {
    let (upstream, _server) = cut_off_upstream().await;
    let args = gateway_args("memory://llmgw-cut-off", &upstream);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let gw = Served::start("llm_gateway", &args).await;
    let (status, body, _) = gateway_call(&gw.url, Some("t"), r#"{"max_tokens": 1000}"#).await;
    assert_eq!(status, 502, "{body}");
    assert!(
        body["detail"].as_str().unwrap().contains("cut off"),
        "{body}"
    );
    let (status, body, _) = gateway_call(&gw.url, Some("t"), r#"{"max_tokens": 1}"#).await;
    assert_eq!(status, 429, "the whole budget stays charged: {body}");
}
