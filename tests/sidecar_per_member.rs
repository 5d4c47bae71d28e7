//! Per-member semaphores in the sidecar, as real processes against real etcd: the config's
//! `[per_member.<name>]` tables (accepted, described, refused with exit 64 and the reason),
//! and each sidecar counted as one member (`GET /v1/semaphores/{name}`'s `"per_member"`
//! object and the stored capacity follow two sidecars, then one after the other is killed).

use crate::binary;
use crate::support;

use binary::{cmd, http_client, output, within, Sidecar};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use support::EtcdCluster;

const LIMIT: Duration = Duration::from_secs(20);
/// Bound on the capacity following a sidecar's start or death: its session TTL (2 s), a count
/// and a margin.
const FOLLOWS: Duration = Duration::from_secs(8);

fn write_config(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// `serve --check-config` on `text`: its exit code and stdout + stderr.
async fn check_config(dir: &Path, text: &str) -> (Option<i32>, String) {
    let out = binary::check_config(&write_config(dir, "check.toml", text)).await;
    (out.code, format!("{}{}", out.stdout, out.stderr))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecar_config_accepts_and_refuses_per_member_tables() {
    let dir = tempfile::tempdir().unwrap();
    let (code, text) =
        check_config(dir.path(), "[per_member.db]\nper_member = 2.5\nmax = 40\n").await;
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("per_member   db (2.5 per member, 1..40)"),
        "{text}"
    );

    let refused = [
        (
            "[per_member.db]\nmin = 2\n",
            "per_member.db: per_member = X (permits per live member) is required",
        ),
        (
            "[per_member.db]\nper_member = 0\n",
            "per_member.db: permits per member must be a number above 0",
        ),
        (
            "[per_member.db]\nper_member = 2\nmin = 5\nmax = 4\n",
            "per_member.db: per-member min must be between 1 and max (4)",
        ),
        (
            "[per_member.db]\nper_member = 2\nmaximum = 3\n",
            "unknown field `maximum`",
        ),
        (
            "[[semaphores]]\nname = \"db\"\ncapacity = 3\n[per_member.db]\nper_member = 2\n",
            "per_member.db: \"db\" is also declared",
        ),
        (
            "[adaptive.db]\n[per_member.db]\nper_member = 2\n",
            "per_member.db: \"db\" is also declared",
        ),
    ];
    for (config, message) in refused {
        let (code, text) = check_config(dir.path(), config).await;
        assert_eq!(code, Some(64), "{config} → {text}");
        assert!(
            text.contains(message),
            "{config}: expected {message:?} in {text}"
        );
    }
}

/// Polls `GET /v1/semaphores/db` on `base` until it shows `members` and `capacity`.
async fn wait_members(base: &str, members: u64, capacity: u64) -> Value {
    let c = http_client();
    let start = Instant::now();
    let mut last = Value::Null;
    while start.elapsed() < FOLLOWS {
        let r = c.get(format!("{base}/v1/semaphores/db")).send().await;
        if let Ok(r) = r {
            last = r.json().await.unwrap_or(Value::Null);
            let pm = &last["per_member"];
            if last["capacity"] == capacity
                && pm["members"] == members
                && pm["capacity"] == capacity
            {
                return last;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{members} members, capacity {capacity}: not within {FOLLOWS:?}; last {last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_sidecar_is_one_member() {
    let cluster = EtcdCluster::single();
    let url = cluster.url("per-member-sidecars");
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        "serve.toml",
        &format!(
            "store = \"{url}\"\nsession_ttl = \"2s\"\n[per_member.db]\nper_member = 3\nmax = 100\n"
        ),
    );
    let config = config.to_str().unwrap();
    let a = Sidecar::start(&["--config", config, "--owner", "sidecar-a"]).await;
    wait_members(&a.url, 1, 3).await;
    let mut b = Sidecar::start(&["--config", config, "--owner", "sidecar-b"]).await;
    let v = wait_members(&a.url, 2, 6).await;
    let controller = v["per_member"]["controller"].as_str().unwrap_or_default();
    assert!(
        controller == "sidecar-a" || controller == "sidecar-b",
        "{v}"
    );

    // SIGKILL: no close; its session expires within the TTL and it is counted no more.
    b.child.start_kill().expect("kill sidecar b");
    within("sidecar b to die", LIMIT, b.child.wait())
        .await
        .unwrap();
    wait_members(&a.url, 1, 3).await;

    let status = output(cmd(&["status", "--store", &url, "db"]), LIMIT).await;
    assert!(
        status
            .stdout
            .contains("per-member: 1 live member; controller sidecar-a counted 1, capacity 3"),
        "{}",
        status.stdout
    );
}
