//! Per-member semaphores in the binary, as real processes against real etcd: `run
//! --per-member` makes each run a member while its command runs (the capacity follows
//! 1 → 3 → 2 → 1 members), `status NAME` prints the members and the controller's count (as
//! text and JSON), and bad flags are refused with exit 64 and the reason.

use crate::binary;
use crate::support;

use binary::{cmd, output, signal, within};
use clusterlimit::{Limiter, PerMember, Semaphore};
use serde_json::Value;
use std::process::Stdio;
use std::time::{Duration, Instant};
use support::EtcdCluster;

/// The session TTL of every member: the shortest, so a count comes every 667 ms.
const TTL: &str = "2s";
/// Bound on the capacity following a member's start or exit: a process start, a session TTL
/// and a margin.
const FOLLOWS: Duration = Duration::from_secs(8);
const LIMIT: Duration = Duration::from_secs(20);

/// Polls until `sem` counts `members` and its stored capacity is `capacity`.
async fn wait_members(sem: &Semaphore, members: usize, capacity: u32) {
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < FOLLOWS {
        let st = sem.per_member_status().await;
        let cap = sem.status().await.map(|s| s.capacity);
        if let (Ok(Some(st)), Ok(cap)) = (&st, &cap) {
            if st.members == members && *cap == capacity && st.capacity == Some(capacity) {
                return;
            }
        }
        last = format!("{st:?}, capacity {cap:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{members} members, capacity {capacity}: not within {FOLLOWS:?}; last {last}");
}

/// `run --per-member 2` of `sleep SECS` in the store at `url`, started in the background.
fn member(url: &str, secs: &str) -> tokio::process::Child {
    let mut c = cmd(&[
        "run",
        "-q",
        "--store",
        url,
        "--semaphore",
        "db",
        "--per-member",
        "2",
        "--max",
        "50",
        "--session-ttl",
        TTL,
        "--owner",
        &format!("run-{secs}"),
        "--",
        "sleep",
        secs,
    ]);
    c.stdout(Stdio::null()).stderr(Stdio::piped());
    c.spawn().expect("spawn clusterlimit run")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_per_member_counts_each_run_as_a_member() {
    let cluster = EtcdCluster::single();
    let url = cluster.url("per-member-run");
    let limiter = Limiter::builder(&url)
        .owner("test")
        .session_ttl(Duration::from_secs(2))
        .connect()
        .await
        .unwrap();
    let sem = limiter
        .per_member_semaphore("db", PerMember::new(2.0).max(50))
        .await
        .unwrap();
    wait_members(&sem, 1, 2).await;

    let stopped = member(&url, "30");
    let mut finishing = member(&url, "9");
    wait_members(&sem, 3, 6).await;

    let text = output(cmd(&["status", "--store", &url, "db"]), LIMIT).await;
    assert_eq!(text.code, Some(0), "{}", text.stderr);
    assert!(
        text.stdout
            .contains("  per-member: 3 live members; controller ")
            && text.stdout.contains(" counted 3, capacity 6"),
        "{}",
        text.stdout
    );
    let json = output(cmd(&["status", "--store", &url, "db", "--json"]), LIMIT).await;
    let v: Value = serde_json::from_str(&json.stdout).expect("status --json");
    assert_eq!(v["capacity"], 6, "{v}");
    assert_eq!(
        (&v["per_member"]["members"], &v["per_member"]["capacity"]),
        (&Value::from(3), &Value::from(6)),
        "{v}"
    );

    // SIGTERM: the run stops its command, closes, and is no member any more at once.
    signal(stopped.id().expect("pid of run"), "TERM");
    let out = within("the stopped run", LIMIT, stopped.wait_with_output())
        .await
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(143),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_members(&sem, 2, 4).await;

    // The other's command ends: it leaves too.
    let st = within("the finishing run", LIMIT, finishing.wait())
        .await
        .unwrap();
    assert_eq!(st.code(), Some(0));
    wait_members(&sem, 1, 2).await;
    let _ = limiter.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_per_member_refuses_bad_flags() {
    let cases: [(&[&str], &str); 5] = [
        (&["--per-member", "0"], "above 0"),
        (&["--per-member", "lots"], "above 0"),
        (&["--per-member", "2", "--capacity", "3"], "--capacity"),
        (&["--per-member", "2", "--adaptive", "aimd"], "--adaptive"),
        (
            &["--per-member", "2", "--min", "5", "--max", "4"],
            "min must be between 1 and max (4)",
        ),
    ];
    for (flags, says) in cases {
        let mut args = vec!["run", "--store", "memory://", "--semaphore", "db"];
        args.extend_from_slice(flags);
        args.extend_from_slice(&["--", "true"]);
        let out = output(cmd(&args), LIMIT).await;
        assert_eq!(out.code, Some(64), "{flags:?}: {}", out.stderr);
        assert!(out.stderr.contains(says), "{flags:?}: {}", out.stderr);
    }
    let out = output(
        cmd(&[
            "run",
            "--store",
            "memory://",
            "--semaphore",
            "db",
            "--max",
            "4",
            "--",
            "true",
        ]),
        LIMIT,
    )
    .await;
    assert_eq!(out.code, Some(64), "--max alone: {}", out.stderr);
    assert!(
        out.stderr.contains("--per-member") || out.stderr.contains("--adaptive"),
        "{}",
        out.stderr
    );
}

/// A `run` on ZooKeeper that exits ends its session on the server before it goes: the member
/// it was is gone at once, not a session timeout (10 s here) later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_exits_leaves_zookeeper_at_once() {
    let cluster = support::ZkCluster::single();
    let url = cluster.url("/per-member-exit");
    let limiter = Limiter::builder(&url)
        .owner("test")
        .session_ttl(Duration::from_secs(10))
        .connect()
        .await
        .unwrap();
    let sem = limiter
        .per_member_semaphore("db", PerMember::new(2.0).max(50))
        .await
        .unwrap();
    let mut run = cmd(&[
        "run",
        "-q",
        "--store",
        &url,
        "--semaphore",
        "db",
        "--per-member",
        "2",
        "--max",
        "50",
        "--session-ttl",
        "10s",
        "--owner",
        "brief",
        "--",
        "sleep",
        "2",
    ]);
    run.stdout(Stdio::null()).stderr(Stdio::piped());
    let run = run.spawn().expect("spawn clusterlimit run");
    let members = || async { sem.per_member_status().await.unwrap().map(|s| s.members) };
    let joined = Instant::now();
    while members().await != Some(2) {
        assert!(
            joined.elapsed() < FOLLOWS,
            "the run never counted as a member"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let out = within("the run", LIMIT, run.wait_with_output())
        .await
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let exited = Instant::now();
    let mut seen = Vec::new();
    while exited.elapsed() < Duration::from_secs(3) {
        seen.push(members().await);
        if seen.last() == Some(&Some(1)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        seen.last(),
        Some(&Some(1)),
        "live members after the run exited: {seen:?}"
    );
    let _ = limiter.close().await;
}
