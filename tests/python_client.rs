//! The Python client (clients/python) run through its own pytest suite against this build's
//! `clusterlimit` binary: the suite starts a real etcd and real sidecars itself (its fixtures
//! are in clients/python/tests/conftest.py). Then `mypy --strict` on the package.
//!
//! The venv (`target/python-client-venv`: pinned pytest, httpx, mypy and the package installed
//! editable) is made by `scripts/test --install-deps`; `$CLUSTERLIMIT_PYCLIENT_PYTHON` points
//! elsewhere.

use crate::binary;

use binary::{output, Out, BIN};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The whole pytest suite: about a minute on a loaded 2-core machine.
const SUITE_LIMIT: Duration = Duration::from_secs(400);

fn package_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/python")
}

/// `$CLUSTERLIMIT_PYCLIENT_PYTHON`, else the venv's Python. Panics with the install command
/// when missing: the test never skips.
fn python() -> PathBuf {
    let path = match std::env::var_os("CLUSTERLIMIT_PYCLIENT_PYTHON") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => Path::new(env!("CARGO_TARGET_TMPDIR"))
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("target"))
            .join("python-client-venv/bin/python"),
    };
    if !path.is_file() {
        panic!(
            "the Python client's venv not found at {} (override with \
             $CLUSTERLIMIT_PYCLIENT_PYTHON): run `scripts/test --install-deps`, which installs \
             pytest, httpx, mypy and clients/python into target/python-client-venv",
            path.display()
        );
    }
    path
}

/// Runs `python ARGS` in clients/python, printing its output (nextest shows it on failure).
async fn run(args: &[&str], limit: Duration) -> Out {
    let mut c = tokio::process::Command::new(python());
    c.args(args)
        .current_dir(package_dir())
        .env("CLUSTERLIMIT_BIN", BIN)
        .env_remove("CLUSTERLIMIT_STORE")
        .env_remove("RUST_LOG")
        .kill_on_drop(true);
    let out = output(c, limit).await;
    println!("{}", out.stdout);
    eprintln!("{}", out.stderr);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pytest_suite_passes_against_the_real_sidecar() {
    let args = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"];
    let out = run(&args, SUITE_LIMIT).await;
    assert_eq!(
        out.code,
        Some(0),
        "the Python client's pytest suite failed (output above)"
    );
    assert!(out.stdout.contains(" passed"), "{}", out.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn package_type_checks_with_mypy_strict() {
    // The config (`[tool.mypy]` in pyproject.toml) names the package; no cache left behind.
    let args = ["-m", "mypy", "--strict", "--cache-dir", "/dev/null"];
    let out = run(&args, Duration::from_secs(180)).await;
    assert_eq!(
        out.code,
        Some(0),
        "mypy --strict found errors (output above)"
    );
}
