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
