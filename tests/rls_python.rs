//! The sidecar's rate limit service (RLS v3) checked field by field by a client we did not
//! write: Python's grpcio with the Envoy stubs of PyPI's xds-protos (tests/rls_python/).

use crate::binary;
use crate::support;

use binary::{output, within, Sidecar};
use std::path::Path;
use std::time::Duration;
use support::envoy::rls_python;
use support::process::free_ports;

/// Starts `serve` with the RLS on a free port and waits until that port accepts connections.
async fn sidecar_with_rls(store: &str, config: &Path) -> (Sidecar, String) {
    let grpc = format!("127.0.0.1:{}", free_ports(1)[0]);
    let config = config.to_str().expect("UTF-8 path");
    let sidecar = Sidecar::start(&[
        "--store",
        store,
        "--grpc-listen",
        &grpc,
        "--rls-config",
        config,
        // The default 50 ms would count a stall of a loaded CI machine as the store down.
        "--rls-store-timeout",
        "1s",
    ])
    .await;
    within("the RLS port to accept", Duration::from_secs(20), async {
        for _ in 0..400 {
            if tokio::net::TcpStream::connect(&grpc).await.is_ok() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("nothing listens on {grpc}")
    })
    .await;
    (sidecar, grpc)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_grpc_client_sees_envoyproxy_answers() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/rls_python");
    let (_sidecar, grpc) =
        sidecar_with_rls("memory://rls-python", &dir.join("ratelimit.yaml")).await;
    let mut python = tokio::process::Command::new(rls_python());
    python
        .arg(dir.join("check_rls.py"))
        .arg(&grpc)
        .kill_on_drop(true);
    let out = output(python, Duration::from_secs(180)).await;
    println!("{}", out.stdout);
    eprintln!("{}", out.stderr);
    assert_eq!(
        out.code,
        Some(0),
        "check_rls.py failed:\n{}\n{}",
        out.stdout,
        out.stderr
    );
    assert!(out.stdout.contains("cases passed"), "{}", out.stdout);
}
