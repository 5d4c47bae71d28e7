//! `clusterlimit run` as a real process, against real etcd (and memory:// where no store
//! sharing is needed): mutual exclusion across processes, exit codes, signals, lost permits.

use crate::binary;
use crate::support;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twelve_processes_never_exceed_capacity_three_on_redis() {
    let redis = tokio::task::spawn_blocking(support::redis::RedisServer::start)
        .await
        .unwrap();
    twelve_processes_never_exceed_capacity_three(&redis.url("twelve")).await;
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
async fn timeout_exits_75_saying_it_waited() {
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
    // The line saying it waits (once), then the one saying it gave up.
    let lines: Vec<&str> = out.stderr.trim().lines().collect();
    assert_eq!(lines.len(), 2, "not two lines: {:?}", out.stderr);
    assert!(
        lines[0].starts_with("clusterlimit: waiting for a permit on t: 1 holder"),
        "{}",
        out.stderr
    );
    assert!(lines[1].contains("timed out after 1s"), "{}", out.stderr);
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

/// Whether process `pid` is still running: a zombie (dead, its parent has not reaped it yet)
/// is not, nor is a pid with no /proc entry.
fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // "PID (COMM) STATE ...": COMM may hold anything, so the state follows the last ')'.
        Ok(stat) => match stat.rsplit_once(')') {
            Some((_, rest)) => !matches!(rest.trim_start().chars().next(), Some('Z' | 'X')),
            None => true,
        },
        Err(_) => false,
    }
}

/// The pid a test command wrote to `file`, once it has.
async fn pid_in(file: &std::path::Path) -> u32 {
    eventually(
        "the command to write its pid",
        Duration::from_secs(20),
        || async {
            std::fs::read_to_string(file)
                .ok()
                .and_then(|s| s.trim().parse::<u32>().ok())
        },
    )
    .await
}

/// A shell command that writes to `out` whether process `pid` runs (as `running` tells).
fn record_whether_running(pid: u32, out: &std::path::Path) -> String {
    format!(
        r#"state=$(sed 's/.*) //' /proc/{pid}/stat 2>/dev/null | cut -c1)
case "$state" in ""|Z|X) echo gone;; *) echo running;; esac > '{}'"#,
        out.display()
    )
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkilled_run_takes_its_command_along_before_the_permit_returns() {
    let cluster = EtcdCluster::single();
    let url = cluster.url("pdeath");
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("first.pid");
    let grandchild_pid = dir.path().join("grandchild.pid");
    let result = dir.path().join("second.result");
    let _orphan = PidFileGuard(&pidfile);
    let _orphan2 = PidFileGuard(&grandchild_pid);
    let ttl = Duration::from_secs(2);
    let run = |script: &str| {
        cmd(&[
            "run",
            "--store",
            &url,
            "--semaphore",
            "p",
            "--capacity",
            "1",
            "--session-ttl",
            "2s",
            "--",
            "sh",
            "-c",
            script,
        ])
    };
    // The command, and a process it starts (the kernel's parent-death signal reaches only
    // run's direct child: run's supervisor must end the rest of the group).
    let mut first = run(&format!(
        "sleep 60 & echo $! > '{}'; echo $$ > '{}'; exec sleep 60",
        grandchild_pid.display(),
        pidfile.display()
    ))
    .spawn()
    .unwrap();
    let pid = pid_in(&pidfile).await;
    let grandchild = pid_in(&grandchild_pid).await;
    assert!(running(pid), "the first command is not running");
    assert!(
        running(grandchild),
        "the first command's child is not running"
    );
    // The second waits in the queue; its command records whether the first still runs when
    // it gets the permit.
    let second_script = record_whether_running(pid, &result);
    let mut second = run(&second_script).spawn().unwrap();
    let limiter = Limiter::connect(&url).await.unwrap();
    let sem = limiter.open_semaphore("p").await.unwrap();
    eventually("the second run queued", Duration::from_secs(20), || async {
        let st = sem.status().await.ok()?;
        (st.used == 1 && st.waiting == 1).then_some(())
    })
    .await;

    first.kill().await.unwrap(); // SIGKILL: `run` can do nothing about it
    let killed = Instant::now();
    // The session, kept alive every TTL/3, cannot end sooner than 2/3 of the TTL after the
    // kill: the command must be gone well before.
    for _ in 0..1000 {
        if !(running(pid) || running(grandchild)) || killed.elapsed() > ttl {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let gone_after = killed.elapsed();
    assert!(
        !running(pid),
        "the command still runs {gone_after:?} after SIGKILL of run"
    );
    assert!(
        !running(grandchild),
        "the command's child still runs {gone_after:?} after SIGKILL of run"
    );
    assert!(
        gone_after < ttl / 2,
        "the command went only {gone_after:?} after SIGKILL of run (session TTL {ttl:?})"
    );

    let st = within("the second run", Duration::from_secs(20), second.wait())
        .await
        .unwrap();
    assert_eq!(st.code(), Some(0), "second run: {st:?}");
    assert!(
        killed.elapsed() >= ttl / 3,
        "the second run got the permit {:?} after the kill: the session cannot have ended",
        killed.elapsed()
    );
    assert_eq!(
        std::fs::read_to_string(&result).unwrap().trim(),
        "gone",
        "the second command started while the first still ran"
    );
}

#[tokio::test]
async fn sigterm_to_run_ends_the_commands_whole_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let child_pid = dir.path().join("child.pid");
    let grandchild_pid = dir.path().join("grandchild.pid");
    let _orphan = PidFileGuard(&grandchild_pid);
    // The grandchild ignores SIGTERM (so only the group's SIGKILL after --grace ends it); the
    // child exits 0 on SIGTERM, leaving it behind.
    let script = format!(
        "(trap '' TERM; exec sleep 60) & echo $! > '{}'; echo $$ > '{}'; \
         trap 'exit 0' TERM; while :; do sleep 0.05; done",
        grandchild_pid.display(),
        child_pid.display()
    );
    let mut run = cmd(&[
        "run",
        "--store",
        "memory://group",
        "--semaphore",
        "g",
        "--capacity",
        "1",
        "--grace",
        "1s",
        "--",
        "sh",
        "-c",
        &script,
    ])
    .spawn()
    .unwrap();
    let grandchild = pid_in(&grandchild_pid).await;
    let child = pid_in(&child_pid).await;
    assert!(running(grandchild) && running(child));
    signal(run.id().unwrap(), "TERM");
    let sent = Instant::now();
    let st = within(
        "run to exit after SIGTERM",
        Duration::from_secs(15),
        run.wait(),
    )
    .await
    .unwrap();
    // The child's own code: it exited on the forwarded SIGTERM.
    assert_eq!(st.code(), Some(0), "{st:?}");
    assert!(!running(child), "the child outlived run");
    assert!(
        !running(grandchild),
        "the grandchild (ignoring SIGTERM) outlived run"
    );
    assert!(
        sent.elapsed() >= Duration::from_millis(900),
        "run exited {:?} after SIGTERM: before --grace, so the grandchild got no SIGKILL from it",
        sent.elapsed()
    );
}

#[tokio::test]
async fn a_background_process_left_by_the_command_ends_with_run() {
    let dir = tempfile::tempdir().unwrap();
    let bg_pid = dir.path().join("bg.pid");
    let _orphan = PidFileGuard(&bg_pid);
    let script = format!("sleep 60 & echo $! > '{}'; exit 3", bg_pid.display());
    // Not `output`: the background process would hold its pipes open.
    let mut run = cmd(&[
        "run",
        "--store",
        "memory://left",
        "--semaphore",
        "l",
        "--capacity",
        "1",
        "--",
        "sh",
        "-c",
        &script,
    ])
    .spawn()
    .unwrap();
    let st = within("run to exit", Duration::from_secs(20), run.wait())
        .await
        .unwrap();
    assert_eq!(st.code(), Some(3), "{st:?}");
    let bg = pid_in(&bg_pid).await;
    assert!(!running(bg), "the background process outlived run");
}

/// `run`'s supervisor (`clusterlimit __supervise PARENT -- CMD`) does not start CMD once its
/// parent is no longer PARENT: `run` died between the fork and the parent-death signal.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn the_supervisor_does_not_start_the_command_for_a_dead_run() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let script = format!("touch '{}'", marker.display());
    // Our pid as PARENT: the supervisor's parent is the test process, so it starts CMD.
    let me = std::process::id().to_string();
    let out = output(
        cmd(&["__supervise", &me, "--", "sh", "-c", &script]),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert!(marker.exists(), "CMD did not run under its live parent");
    std::fs::remove_file(&marker).unwrap();
    // Pid 1 as PARENT: as if `run` had died and the supervisor were handed to init.
    let out = output(
        cmd(&["__supervise", "1", "--", "sh", "-c", &script]),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(out.code, Some(70), "stderr: {}", out.stderr);
    assert!(!marker.exists(), "CMD ran although its run was gone");
    // Not for people: a usage error that points to `run`.
    let out = output(cmd(&["__supervise"]), Duration::from_secs(20)).await;
    assert_eq!(out.code, Some(64));
    assert!(out.stderr.contains("clusterlimit run"), "{}", out.stderr);
}
