//! What the real `clusterlimit` binary says to people: `run`'s line when it waits, the
//! warning on a `memory://` store, `--log` presets, and a table of bad inputs whose messages
//! must carry no Rust type names or debug dumps. Against a real etcd where a store is needed.

use crate::binary;
use crate::support;

use binary::{cmd, eventually, output, Out};
use clusterlimit::{AcquireOptions, Limiter};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::EtcdCluster;
use tokio::io::{AsyncBufReadExt, BufReader};

const LIMIT: Duration = Duration::from_secs(30);
const WAITING: &str = "clusterlimit: waiting for a permit on w:";

/// Asserts exit 0, showing stderr when not.
fn ok(out: &Out) {
    assert_eq!(out.code, Some(0), "{}", out.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_says_once_when_it_waits() {
    let cluster = EtcdCluster::single();
    let url = cluster.url("msg-wait");
    // Granted at once: nothing said.
    let out = output(
        cmd(&[
            "run",
            "--store",
            &url,
            "--semaphore",
            "w",
            "--capacity",
            "1",
            "--",
            "true",
        ]),
        LIMIT,
    )
    .await;
    ok(&out);
    assert_eq!(out.stderr, "", "a permit granted at once is silent");

    let limiter = Limiter::connect(&url).await.unwrap();
    let sem = limiter.open_semaphore("w").await.unwrap();
    let held = sem
        .acquire_with(AcquireOptions::new().owner("holder/1"))
        .await
        .unwrap();
    // Waits: one line on stderr naming the holders and the other waiters, then runs when the
    // permit comes back.
    let mut c = cmd(&["run", "--store", &url, "--semaphore", "w", "--", "true"]);
    c.stderr(Stdio::piped()).stdout(Stdio::null());
    let mut child = c.spawn().unwrap();
    let stderr = Arc::new(Mutex::new(String::new()));
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let seen = stderr.clone();
    let reader = tokio::spawn(async move {
        while let Ok(Some(l)) = lines.next_line().await {
            seen.lock().unwrap().push_str(&format!("{l}\n"));
        }
    });
    let line = eventually("the waiting line", LIMIT, || {
        let text = stderr.lock().unwrap().clone();
        async move { text.contains(WAITING).then_some(text) }
    })
    .await;
    assert_eq!(
        line.trim(),
        "clusterlimit: waiting for a permit on w: 1 holder (1 of 1 permits used), \
         0 other requests waiting"
    );
    held.release().await.unwrap();
    let status = binary::within("run to finish", LIMIT, child.wait())
        .await
        .unwrap();
    reader.await.unwrap();
    assert!(status.success());
    assert_eq!(
        stderr.lock().unwrap().matches(WAITING).count(),
        1,
        "said once"
    );

    // --quiet: nothing but the failure.
    let _held = sem.acquire().await.unwrap();
    let out = output(
        cmd(&[
            "run",
            "-q",
            "--store",
            &url,
            "--semaphore",
            "w",
            "--timeout",
            "1s",
            "--",
            "true",
        ]),
        LIMIT,
    )
    .await;
    assert_eq!(out.code, Some(75), "{}", out.stderr);
    assert_eq!(
        out.stderr.trim(),
        "clusterlimit: timed out after 1s waiting for 1 permit(s) of semaphore \"w\""
    );
    limiter.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_is_said_to_be_private_to_the_process() {
    // Three processes with a limit of 1 all pass: each has its own store, and each is told.
    for _ in 0..3 {
        let out = output(
            cmd(&[
                "rate",
                "check",
                "--store",
                "memory://x",
                "r",
                "k",
                "--limit",
                "1",
                "--per",
                "1m",
            ]),
            LIMIT,
        )
        .await;
        ok(&out);
        assert!(out.stdout.starts_with("admitted"), "{}", out.stdout);
        assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
        assert!(
            out.stderr.contains("memory://x lives only in this process")
                && out.stderr.contains("use etcd:// or zk://"),
            "{}",
            out.stderr
        );
    }
    for args in [
        &["status", "--store", "memory://x"][..],
        &["set-capacity", "--store", "memory://x", "s", "2"],
        &[
            "run",
            "--store",
            "memory://x",
            "--semaphore",
            "s",
            "--capacity",
            "1",
            "--",
            "true",
        ],
    ] {
        let out = output(cmd(args), LIMIT).await;
        ok(&out);
        assert!(
            out.stderr.contains("lives only in this process"),
            "{args:?}: {}",
            out.stderr
        );
    }
    let out = output(
        cmd(&[
            "run",
            "-q",
            "--store",
            "memory://x",
            "--semaphore",
            "s",
            "--capacity",
            "1",
            "--",
            "true",
        ]),
        LIMIT,
    )
    .await;
    ok(&out);
    assert_eq!(out.stderr, "", "--quiet");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_presets_leave_the_transport_crates_quiet() {
    let cluster = EtcdCluster::single();
    let url = cluster.url("msg-log");
    let run = [
        "run",
        "--store",
        &url,
        "--semaphore",
        "l",
        "--capacity",
        "1",
        "--",
        "true",
    ];
    let from_flag = output(cmd(&[&["--log", "debug"][..], &run].concat()), LIMIT).await;
    let mut c = cmd(&run);
    c.env("CLUSTERLIMIT_LOG", "debug");
    let from_env = output(c, LIMIT).await;
    for out in [from_flag, from_env] {
        ok(&out);
        assert!(
            out.stderr
                .contains("DEBUG clusterlimit::cli::run: acquired"),
            "{}",
            out.stderr
        );
        for transport in ["h2::", "hyper", "tonic", "tower::", "etcd_client"] {
            assert!(
                !out.stderr.contains(transport),
                "{transport}: {}",
                out.stderr
            );
        }
    }
    // RUST_LOG wins over --log.
    let mut c = cmd(&[&["--log", "debug"][..], &run].concat());
    c.env("RUST_LOG", "clusterlimit=off");
    let out = output(c, LIMIT).await;
    ok(&out);
    assert!(!out.stderr.contains("DEBUG"), "{}", out.stderr);
    // Without --log, a one-shot command logs nothing when all goes well.
    let out = output(cmd(&run), LIMIT).await;
    ok(&out);
    assert_eq!(out.stderr, "");
    let out = output(cmd(&["--log", "loud", "status", "--store", &url]), LIMIT).await;
    assert_eq!(out.code, Some(64), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("possible values: error, warn, info, debug, trace"),
        "{}",
        out.stderr
    );
}

/// What no message may contain: Rust type names and debug dumps.
const NOT_FOR_HUMANS: &[&str] = &[
    "Error(",
    "Some(",
    "None",
    "{ kind:",
    "::",
    "struct ",
    "i64",
    "u32",
    "u64",
    "Option<",
    "Duration",
    "InvalidArgument",
    "NotFound",
    "years",
    "months",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_messages_are_for_humans() {
    let cluster = EtcdCluster::single();
    let url = cluster.url("msg-bad");
    let e = url.as_str();
    let ok = output(
        cmd(&[
            "rate",
            "set-quota",
            "--store",
            e,
            "r",
            "--limit",
            "1",
            "--per",
            "400d",
        ]),
        LIMIT,
    )
    .await;
    assert_eq!(ok.code, Some(0), "{}", ok.stderr);
    let cases: Vec<(Vec<&str>, i32, &str)> = vec![
        (
            vec!["status", "--store", "etcd://host:1:99"],
            64,
            "\"host:1:99\" is not HOST:PORT",
        ),
        (
            vec!["status", "--store", "etcd://h:65536"],
            64,
            "not a number from 1 to 65535",
        ),
        (
            vec!["status", "--store", "etcd://[::1:2379"],
            64,
            "closed by ']'",
        ),
        (
            vec!["status", "--store", "zk://:2181"],
            64,
            "no host before the port",
        ),
        (
            vec!["status", "--store", "zk://h:1,,h:2"],
            64,
            "is not HOST:PORT",
        ),
        (
            vec!["rate", "status", "--store", "etcd://host:1:99"],
            64,
            "is not HOST:PORT",
        ),
        (
            vec!["serve", "--check-config", "--store", "etcd://host:1:99"],
            64,
            "is not HOST:PORT",
        ),
        (
            vec!["status", "--store", "consul://h:1"],
            64,
            "unknown scheme",
        ),
        (vec!["status", "--store", "nourl"], 64, "has no scheme"),
        (vec!["status", "--store", e, "bad/name"], 64, "bad/name"),
        (vec!["status", "--store", e, "nosuch"], 1, "nosuch"),
        (
            vec!["run", "--store", e, "--semaphore", "nosuch", "--", "true"],
            64,
            "--capacity",
        ),
        (
            vec![
                "run",
                "--store",
                e,
                "--session-ttl",
                "1s",
                "--semaphore",
                "s",
                "--",
                "true",
            ],
            64,
            "at least 2s",
        ),
        (
            vec![
                "run",
                "--store",
                e,
                "--semaphore",
                "s",
                "--timeout",
                "soon",
                "--",
                "true",
            ],
            64,
            "--timeout",
        ),
        (vec!["set-capacity", "--store", e, "s", "0"], 64, "<N>"),
        (
            vec!["rate", "check", "--store", e, "r", "k", "--cost", "2"],
            64,
            "1 per 400d",
        ),
        (
            vec![
                "rate", "check", "--store", e, "new", "k", "--limit", "1", "--per", "1ns",
            ],
            64,
            "from 1ms to 400d, got 1ns",
        ),
        (
            vec![
                "rate",
                "check",
                "--store",
                e,
                "new",
                "k",
                "--limit",
                "1",
                "--per",
                "1s",
                "--burst",
                "99999999999999999999",
            ],
            64,
            "--burst",
        ),
        (
            vec!["rate", "set-quota", "--store", e, "r", "--per", "5000000d"],
            64,
            "got 5000000d",
        ),
        (
            vec!["rate", "set-quota", "--store", e, "new"],
            64,
            "give the quota fields",
        ),
        (
            vec!["rate", "set-quota", "--store", e, "new", "--limit", "2"],
            64,
            "creating it needs --limit N and --per DUR",
        ),
        (
            vec!["rate", "status", "--store", e, "nosuch", "k"],
            1,
            "rate set-quota nosuch --limit N --per DUR",
        ),
        (
            vec!["rate", "reset", "--store", e, "nosuch", "k"],
            1,
            "rate set-quota nosuch --limit N --per DUR",
        ),
        (vec!["--log", "loud", "status", "--store", e], 64, "--log"),
        (
            vec!["run", "--store", e, "--semaphore", "", "--", "true"],
            64,
            "for '--semaphore <NAME>': name must be 1-128 characters, got 0",
        ),
        (
            vec![
                "run",
                "--store",
                e,
                "--semaphore",
                "s",
                "--timeout",
                "0",
                "--",
                "true",
            ],
            64,
            "a timeout of 0 is not allowed: give how long to wait for the permits",
        ),
        (
            vec!["status", "--store", e, "--request-timeout", "0"],
            64,
            "a timeout of 0 is not allowed: give how long to wait for the store",
        ),
        (
            vec!["status", "--store", "etcd://h:1/p;zk://h:2/r"],
            64,
            "cluster 2 (zk://h:2/r) is a ZooKeeper store but cluster 1 is an etcd store; \
             every cluster of a sharded store must be of one kind",
        ),
        // Whole numbers: the flag, its range and what was typed; never clap's `-- -3` tip.
        (
            vec![
                "run",
                "--store",
                e,
                "--semaphore",
                "s",
                "--capacity",
                "-3",
                "--",
                "true",
            ],
            64,
            "--capacity must be a whole number from 1 to 1000000, got -3",
        ),
        (
            vec![
                "run",
                "--store",
                e,
                "--semaphore",
                "s",
                "--capacity",
                "99999999999999999999",
                "--",
                "true",
            ],
            64,
            "--capacity must be a whole number from 1 to 1000000, got 99999999999999999999",
        ),
        (
            vec!["set-capacity", "--store", e, "s", "-3"],
            64,
            "<N> must be a whole number from 1 to 1000000, got -3",
        ),
        (
            vec!["rate", "check", "--store", e, "r", "k", "--cost", "-1"],
            64,
            "--cost must be a whole number from 1 to 1000000000, got -1",
        ),
        (
            vec![
                "rate",
                "set-quota",
                "--store",
                e,
                "new",
                "--limit",
                "10/sec",
            ],
            64,
            "give the period with --per, e.g. --limit 10 --per 1s",
        ),
        (
            vec![
                "rate",
                "set-quota",
                "--store",
                e,
                "r",
                "--cold-factor",
                "-2",
            ],
            64,
            "--cold-factor must be a whole number from 2 to 10, got -2",
        ),
    ];
    for (args, code, want) in cases {
        let out = output(cmd(&args), LIMIT).await;
        let all = format!("{}{}", out.stdout, out.stderr);
        assert_eq!(out.code, Some(code), "{args:?}: {all}");
        assert!(out.stderr.contains(want), "{args:?}: {want:?} in {all}");
        assert!(!all.contains("-- -"), "{args:?}: clap's tip in {all}");
        // (Unless the input itself holds it, as an IPv6 address holds `::`.)
        for bad in NOT_FOR_HUMANS
            .iter()
            .filter(|b| !args.iter().any(|a| a.contains(*b)))
        {
            assert!(!all.contains(bad), "{args:?}: {bad:?} in {all}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_level_help_starts_a_new_user() {
    let out = output(cmd(&["--help"]), LIMIT).await;
    ok(&out);
    for want in [
        "permits and rate limits",
        "Examples:",
        "clusterlimit run --semaphore backups --capacity 2 -- ./backup.sh",
        "clusterlimit rate wait deploys ci --limit 10 --per 1m",
        "CLUSTERLIMIT_STORE",
        "etcd://HOST:PORT[,HOST:PORT…][/PREFIX]",
        "zk://HOST:PORT",
        "URL;URL[;URL…]",
        "Exit codes:",
    ] {
        assert!(out.stdout.contains(want), "{want:?} in {}", out.stdout);
    }
    // The examples are commands the binary accepts (up to the store it is given).
    let out = output(
        cmd(&[
            "rate",
            "wait",
            "--store",
            "memory://",
            "deploys",
            "ci",
            "--limit",
            "10",
            "--per",
            "1m",
        ]),
        LIMIT,
    )
    .await;
    ok(&out);
}
