//! `clusterlimit run` as a real process, against real etcd (and memory:// where no store
//! sharing is needed): mutual exclusion across processes, exit codes, signals, lost permits.

mod binary;
mod support;

use binary::{cmd, eventually, output, signal, within, PidFileGuard};
use clusterlimit::Limiter;
use std::collections::HashSet;
use std::process::Stdio;
use std::time::{Duration, Instant};
use support::EtcdCluster;
use tokio::io::{AsyncBufReadExt, BufReader};

/// Holders in `sem` right now, read through the library.
async fn used(limiter: &Limiter, sem: &str) -> u32 {
    match limiter.open_semaphore(sem).await {
        Ok(s) => s.status().await.map(|st| st.used).unwrap_or(0),
        Err(_) => 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twelve_processes_never_exceed_capacity_three_on_etcd() {
    let cluster = EtcdCluster::single();
    twelve_processes_never_exceed_capacity_three(&cluster.url("twelve")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twelve_processes_never_exceed_capacity_three_on_zookeeper() {
    let zk = support::ZkCluster::single();
    twelve_processes_never_exceed_capacity_three(&zk.url("twelve")).await;
}

/// 12 `run` processes on one semaphore of capacity 3 in the store at `url` (any backend).
async fn twelve_processes_never_exceed_capacity_three(url: &str) {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record");
    let lock = dir.path().join("lock");
    // Each child appends enter/exit under flock, so the record is a total order of events.
    let script = r#"flock "$LOCK" sh -c 'echo "enter $CLUSTERLIMIT_FENCING_TOKEN" >> "$REC"'
sleep 0.3
flock "$LOCK" sh -c 'echo "exit $CLUSTERLIMIT_FENCING_TOKEN" >> "$REC"'"#;
    let mut children = Vec::new();
    for i in 0..12 {
        let owner = format!("proc-{i}");
        let mut c = cmd(&[
            "run",
            "--store",
            url,
            "--semaphore",
            "twelve",
            "--capacity",
            "3",
            "--timeout",
            "60s",
            "--owner",
            &owner,
            "--",
            "sh",
            "-c",
            script,
        ]);
        c.env("LOCK", &lock).env("REC", &record);
        children.push(c.spawn().expect("spawn run"));
    }
    for mut c in children {
        let st = within("a run process to finish", Duration::from_secs(90), c.wait())
            .await
            .unwrap();
        assert_eq!(st.code(), Some(0), "run exited with {st:?}");
    }
    let text = std::fs::read_to_string(&record).unwrap();
    let (mut inside, mut max, mut enters, mut exits) = (0i32, 0i32, HashSet::new(), 0);
    for line in text.lines() {
        match line.split_once(' ') {
            Some(("enter", token)) => {
                inside += 1;
                max = max.max(inside);
                assert!(
                    enters.insert(token.to_string()),
                    "token {token} granted twice"
                );
            }
            Some(("exit", _)) => {
                inside -= 1;
                exits += 1;
            }
            _ => panic!("bad record line {line:?}"),
        }
        assert!(inside <= 3, "more than 3 inside at once:\n{text}");
    }
    assert_eq!((enters.len(), exits), (12, 12), "not all finished:\n{text}");
    assert!(
        max >= 2,
        "never any concurrency (max {max}): the test proves little"
    );
}

#[tokio::test]
async fn exit_codes_and_environment_pass_through() {
    let run = |store: &str, script: &str| {
        cmd(&[
            "run",
            "--store",
            store,
            "--semaphore",
            "s",
            "--capacity",
            "2",
            "--permits",
            "2",
            "--",
            "sh",
            "-c",
            script,
        ])
    };
    let limit = Duration::from_secs(20);
    let out = output(
        run("memory://t", "env | grep ^CLUSTERLIMIT_ | sort; exit 7"),
        limit,
    )
    .await;
    assert_eq!(out.code, Some(7), "stderr: {}", out.stderr);
    assert!(
        out.stdout.contains("CLUSTERLIMIT_SEMAPHORE=s\n"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("CLUSTERLIMIT_PERMITS=2\n"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("CLUSTERLIMIT_FENCING_TOKEN="),
        "{}",
        out.stdout
    );
    let out = output(run("memory://t", "kill -9 $$"), limit).await;
    assert_eq!(out.code, Some(128 + 9), "died by SIGKILL: {}", out.stderr);
    let out = output(run("memory://t", "exit 0"), limit).await;
    assert_eq!(out.code, Some(0));
    // The store defaults to $CLUSTERLIMIT_STORE.
    let mut c = cmd(&["run", "--semaphore", "s", "--capacity", "1", "--", "true"]);
    c.env("CLUSTERLIMIT_STORE", "memory://env");
    assert_eq!(output(c, limit).await.code, Some(0));
    let out = output(
        cmd(&[
            "run",
            "--store",
            "memory://t",
            "--semaphore",
            "s",
            "--capacity",
            "1",
            "--",
            "/nonexistent/cmd",
        ]),
        limit,
    )
    .await;
    assert_eq!(out.code, Some(127), "{}", out.stderr);
}

#[tokio::test]
async fn bad_arguments_exit_64_with_usage() {
    let limit = Duration::from_secs(20);
    let cases: &[&[&str]] = &[
        &["run", "--semaphore", "s", "--", "true"], // no --store, no $CLUSTERLIMIT_STORE
        &["run", "--store", "memory://", "--semaphore", "s", "true"], // CMD without --
        &[
            "run",
            "--store",
            "memory://",
            "--semaphore",
            "s",
            "--permits",
            "0",
            "--",
            "true",
        ],
        &[
            "run",
            "--store",
            "memory://",
            "--semaphore",
            "s",
            "--timeout",
            "soon",
            "--",
            "true",
        ],
        &[
            "run",
            "--store",
            "memory://",
            "--semaphore",
            "s",
            "--bogus",
            "--",
            "true",
        ],
        &[
            "run",
            "--store",
            "memory://",
            "--semaphore",
            "bad name",
            "--capacity",
            "1",
            "--",
            "true",
        ],
        &[
            "run",
            "--store",
            "memory://",
            "--semaphore",
            "s",
            "--capacity",
            "1",
            "--session-ttl",
            "1s",
            "--",
            "true",
        ],
        &[
            "run",
            "--store",
            "nosuch://x",
            "--semaphore",
            "s",
            "--",
            "true",
        ],
        &["status"],
        &["set-capacity", "--store", "memory://", "s", "0"],
        &["frobnicate"],
    ];
    for args in cases {
        let out = output(cmd(args), limit).await;
        assert_eq!(out.code, Some(64), "{args:?}: stderr {}", out.stderr);
        assert!(
            out.stderr.contains("Usage:"),
            "{args:?}: no usage in {}",
            out.stderr
        );
    }
    // An absent semaphore without --capacity names the flag.
    let out = output(
        cmd(&[
            "run",
            "--store",
            "memory://",
            "--semaphore",
            "absent",
            "--",
            "true",
        ]),
        limit,
    )
    .await;
    assert_eq!(out.code, Some(64));
    assert!(out.stderr.contains("--capacity"), "{}", out.stderr);
    // --help documents the exit codes and exits 0.
    let out = output(cmd(&["run", "--help"]), limit).await;
    assert_eq!(out.code, Some(0));
    for code in ["64", "75", "76", "128+N"] {
        assert!(out.stdout.contains(code), "--help lacks exit code {code}");
    }
}

#[tokio::test]
async fn signals_are_forwarded_and_the_childs_code_returned() {
    for (sig, code) in [("TERM", 42), ("HUP", 43), ("INT", 44)] {
        let script = format!("trap 'exit {code}' {sig}; echo ready; while :; do sleep 0.05; done");
        let mut c = cmd(&[
            "run",
            "--store",
            "memory://sig",
            "--semaphore",
            "s",
            "--capacity",
            "1",
            "--",
            "sh",
            "-c",
            &script,
        ]);
        c.stdout(Stdio::piped());
        let mut child = c.spawn().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = within("child ready", Duration::from_secs(20), lines.next_line())
            .await
            .unwrap();
        assert_eq!(line.as_deref(), Some("ready"));
        signal(child.id().unwrap(), sig);
        let st = within(
            "run to exit after a signal",
            Duration::from_secs(10),
            child.wait(),
        )
        .await
        .unwrap();
        assert_eq!(st.code(), Some(code), "SIG{sig}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_exits_75_with_one_line() {
    let cluster = EtcdCluster::single();
    let url = cluster.url("timeout");
    let limiter = Limiter::connect(&url).await.unwrap();
    let _holder = cmd(&[
        "run",
        "--store",
        &url,
        "--semaphore",
        "t",
        "--capacity",
        "1",
        "--",
        "sleep",
        "60",
    ])
    .spawn()
    .unwrap();
    eventually("holder holds", Duration::from_secs(20), || async {
        (used(&limiter, "t").await == 1).then_some(())
    })
    .await;
    let started = Instant::now();
    let out = output(
        cmd(&[
            "run",
            "--store",
            &url,
            "--semaphore",
            "t",
            "--timeout",
            "1s",
            "--",
            "true",
        ]),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(out.code, Some(75), "stderr: {}", out.stderr);
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(
        out.stderr.trim().lines().count(),
        1,
        "not one line: {:?}",
        out.stderr
    );
    assert!(out.stderr.contains("timed out"), "{}", out.stderr);
    // The timed-out request left nothing behind: the holder alone is there.
    let st = limiter
        .open_semaphore("t")
        .await
        .unwrap()
        .status()
        .await
        .unwrap();
    assert_eq!((st.used, st.waiting), (1, 0));

    // SIGTERM while waiting: exit 128+15 and the queue entry is gone.
    let mut waiter = cmd(&["run", "--store", &url, "--semaphore", "t", "--", "true"])
        .spawn()
        .unwrap();
    let sem = limiter.open_semaphore("t").await.unwrap();
    eventually("waiter queued", Duration::from_secs(20), || async {
        (sem.status().await.unwrap().waiting == 1).then_some(())
    })
    .await;
    signal(waiter.id().unwrap(), "TERM");
    let st = within(
        "waiting run exits on SIGTERM",
        Duration::from_secs(10),
        waiter.wait(),
    )
    .await
    .unwrap();
    assert_eq!(st.code(), Some(128 + 15));
    let st = sem.status().await.unwrap();
    assert_eq!((st.used, st.waiting), (1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkilled_run_frees_its_permit_within_ttl() {
    let cluster = EtcdCluster::single();
    let url = cluster.url("sigkill");
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("child.pid");
    let _orphan = PidFileGuard(&pidfile);
    let script = format!("echo $$ > {}; exec sleep 60", pidfile.display());
    let mut run = cmd(&[
        "run",
        "--store",
        &url,
        "--semaphore",
        "k",
        "--capacity",
        "1",
        "--session-ttl",
        "2s",
        "--",
        "sh",
        "-c",
        &script,
    ])
    .spawn()
    .unwrap();
    let limiter = Limiter::connect(&url).await.unwrap();
    eventually("run holds", Duration::from_secs(20), || async {
        (used(&limiter, "k").await == 1).then_some(())
    })
    .await;
    run.kill().await.unwrap(); // SIGKILL: no release, no session close
    let killed = Instant::now();
    let sem = limiter.open_semaphore("k").await.unwrap();
    let ttl = Duration::from_secs(2);
    let permit = sem
        .acquire_timeout(ttl + Duration::from_secs(2))
        .await
        .expect("permit back within TTL + 2 s");
    assert!(killed.elapsed() <= ttl + Duration::from_secs(2));
    permit.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoked_session_terminates_child_and_exits_76() {
    let cluster = EtcdCluster::single();
    let url = cluster.url("lost");
    let dir = tempfile::tempdir().unwrap();
    let polite = dir.path().join("polite");
    let stubborn = dir.path().join("stubborn");
    let stubborn_pid = dir.path().join("stubborn.pid");
    let _orphan = PidFileGuard(&stubborn_pid);
    // One child exits on SIGTERM; the other ignores it and must be SIGKILLed after --grace.
    let polite_script = format!(
        "trap 'echo TERM >> {0}; exit 0' TERM; echo started >> {0}; while :; do sleep 0.05; done",
        polite.display()
    );
    let stubborn_script = format!(
        "trap '' TERM; echo $$ > {1}; echo started >> {0}; while :; do sleep 0.05; done",
        stubborn.display(),
        stubborn_pid.display()
    );
    let spawn = |sem: &str, script: &str| {
        cmd(&[
            "run",
            "--store",
            &url,
            "--semaphore",
            sem,
            "--capacity",
            "1",
            "--session-ttl",
            "2s",
            "--grace",
            "1s",
            "--",
            "sh",
            "-c",
            script,
        ])
        .spawn()
        .unwrap()
    };
    let mut a = spawn("polite", &polite_script);
    let mut b = spawn("stubborn", &stubborn_script);
    for f in [&polite, &stubborn] {
        eventually("child started", Duration::from_secs(20), || async {
            std::fs::read_to_string(f)
                .ok()
                .filter(|s| s.contains("started"))
        })
        .await;
    }
    let revoked = Instant::now();
    support::revoke_all_leases(&cluster.endpoints()).await;
    let st = within("polite run exits", Duration::from_secs(15), a.wait())
        .await
        .unwrap();
    assert_eq!(st.code(), Some(76));
    assert!(
        std::fs::read_to_string(&polite).unwrap().contains("TERM"),
        "child got no SIGTERM"
    );
    let st = within("stubborn run exits", Duration::from_secs(15), b.wait())
        .await
        .unwrap();
    assert_eq!(st.code(), Some(76));
    assert!(
        revoked.elapsed() >= Duration::from_secs(1),
        "SIGKILL came before --grace"
    );
}
