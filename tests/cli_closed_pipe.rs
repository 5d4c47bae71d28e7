//! Every command of the real binary that prints, with its stdout a pipe whose reader has
//! already gone (as `clusterlimit status | head -1` leaves it once `head` has its line): no
//! panic, no message, and the exit code the command would have had anyway. And stdout on a
//! full device (`> /dev/full`): one line on stderr and exit 74. Against a real etcd.

use crate::binary;
use crate::support;

use binary::{cmd, within};
use std::process::Stdio;
use std::time::Duration;
use support::EtcdCluster;

const LIMIT: Duration = Duration::from_secs(30);

/// What a panic prints, and the exit code of one.
const PANIC: &[&str] = &[
    "panicked",
    "Broken pipe",
    "failed printing",
    "RUST_BACKTRACE",
];
const PANIC_CODE: i32 = 101;

/// Runs `clusterlimit ARGS` with stdout `into`, returning the exit code and stderr.
async fn run_into(args: &[&str], into: Stdio) -> (Option<i32>, String) {
    let mut c = cmd(args);
    c.stdout(into).stderr(Stdio::piped());
    let child = c.spawn().expect("spawn clusterlimit");
    let out = within("clusterlimit to finish", LIMIT, child.wait_with_output())
        .await
        .expect("wait for clusterlimit");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A pipe whose read end is closed before the command starts: its first write fails with
/// EPIPE, however little it prints.
fn closed_pipe() -> Stdio {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    writer.into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_printing_command_stops_quietly_on_a_closed_pipe() {
    let cluster = EtcdCluster::single();
    let url = cluster.url("closed-pipe");
    let e = url.as_str();
    // Something to show: a semaphore with a holder's worth of rows, a rate limit, a denied key.
    for setup in [
        &["set-capacity", "--store", e, "s", "3"][..],
        &[
            "rate",
            "set-quota",
            "--store",
            e,
            "r",
            "--limit",
            "1",
            "--per",
            "1h",
        ],
        &["rate", "check", "--store", e, "r", "used"],
    ] {
        let (code, stderr) = run_into(setup, Stdio::null()).await;
        assert_eq!(code, Some(0), "{setup:?}: {stderr}");
    }
    // (arguments, the exit code the command has whether or not its output is read)
    let cases: &[(&[&str], i32)] = &[
        (&["--help"], 0),
        (&["--version"], 0),
        (&["status", "--help"], 0),
        (&["rate", "check", "--help"], 0),
        (&["status", "--store", e], 0),
        (&["status", "--store", e, "s"], 0),
        (&["status", "--store", e, "--json"], 0),
        (&["set-capacity", "--store", e, "s", "4"], 0),
        (&["rate", "status", "--store", e], 0),
        (&["rate", "status", "--store", e, "r"], 0),
        (&["rate", "status", "--store", e, "r", "k", "--json"], 0),
        (&["rate", "set-quota", "--store", e, "r", "--ban", "1s"], 0),
        (&["rate", "check", "--store", e, "r", "k"], 0),
        (&["rate", "check", "--store", e, "r", "k", "--json"], 75),
        (&["rate", "check", "--store", e, "r", "k"], 75),
        (&["rate", "wait", "--store", e, "r", "k2"], 0),
        (&["rate", "reset", "--store", e, "r", "k"], 0),
        (&["serve", "--check-config", "--store", e], 0),
        // A usage error printed on stderr, stdout untouched.
        (&["top", "--store", e], 64),
    ];
    for (args, want) in cases {
        let (code, stderr) = run_into(args, closed_pipe()).await;
        assert_ne!(code, Some(PANIC_CODE), "{args:?}: {stderr}");
        assert_eq!(code, Some(*want), "{args:?}: {stderr}");
        for p in PANIC {
            assert!(!stderr.contains(p), "{args:?}: {p:?} in {stderr}");
        }
        if *want == 0 {
            assert_eq!(stderr, "", "{args:?}: a closed reader is not an error");
        }
    }

    // Another output error is said once, and fails a command that otherwise succeeded.
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full");
    let (code, stderr) = run_into(&["status", "--store", e], full.into()).await;
    assert_eq!(code, Some(74), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("clusterlimit: cannot write to standard output (")
            && stderr.contains("the rest of the output is lost"),
        "{stderr}"
    );
}
