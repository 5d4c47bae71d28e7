//! `clusterlimit run --flow/--class/--weight` and `--classes` (a fair semaphore) as a real
//! process: on memory:// and on etcd (a second process's `status` sees the classes and the
//! holder's flow), bad values exiting 64 with the reason.

use crate::binary;
use crate::support;

use binary::{cmd, output};
use std::time::Duration;
use support::EtcdCluster;

const LIMIT: Duration = Duration::from_secs(20);

/// `run ARGS -- sh -c 'echo ran …'`.
async fn run(args: &[&str]) -> binary::Out {
    let mut all = vec!["run", "--quiet"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--", "sh", "-c", "echo ran $CLUSTERLIMIT_PERMITS"]);
    output(cmd(&all), LIMIT).await
}

#[tokio::test]
async fn run_holds_a_permit_of_a_fair_semaphore_in_its_flow_and_class() {
    let fair = [
        "--store",
        "memory://fair",
        "--semaphore",
        "db",
        "--capacity",
        "4",
        "--classes",
        "critical=25%,batch",
    ];
    for tag in [
        &["--flow", "tenant-a", "--class", "batch", "--weight", "2"][..],
        &["--flow", "tenant-b"],
        &["--class", "critical", "--permits", "4"],
        &[],
    ] {
        let out = run(&[&fair[..], tag].concat()).await;
        assert_eq!(out.code, Some(0), "{tag:?}: {}", out.stderr);
        let permits = if tag.contains(&"--permits") { 4 } else { 1 };
        assert_eq!(out.stdout.trim(), format!("ran {permits}"), "{tag:?}");
    }
}

#[tokio::test]
async fn bad_values_exit_64_with_the_reason() {
    let base = ["--store", "memory://fair-bad", "--semaphore", "db"];
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--capacity", "2", "--classes", "a=1,b", "--flow", ""],
            "invalid value '' for '--flow <FLOW>': a flow name must be 1-128 bytes, got 0",
        ),
        (
            vec!["--capacity", "2", "--classes", "a=1,b", "--class", "a\tb"],
            "contains a control character",
        ),
        (
            vec!["--capacity", "2", "--classes", "a=1,b", "--weight", "0"],
            "--weight must be a whole number from 1 to 1000000, got 0",
        ),
        (
            vec!["--capacity", "2", "--classes", "a=1,b", "--weight", "-1"],
            "--weight must be a whole number from 1 to 1000000, got -1",
        ),
        (
            vec!["--capacity", "2", "--classes", "a=x"],
            "share \"x\" is not a number of permits, a percent (25%) or a fraction (1/3)",
        ),
        (
            vec!["--capacity", "4", "--classes", "a=3,b=3"],
            "--classes a=3,b=3 with --capacity 4: the classes' guaranteed shares need 6 permits (a 3 + b 3), more than the capacity 4",
        ),
        (vec!["--classes", "a=1,b"], "--capacity"),
        (
            vec!["--capacity", "2", "--classes", "a=1,b", "--class", "gold"],
            "class \"gold\" is not one of semaphore \"db\"'s classes (a=1,b=0)",
        ),
        (
            vec!["--capacity", "2", "--flow", "tenant-a"],
            "semaphore \"db\" is a plain FIFO semaphore: --flow, --class and --weight need a fair one (create it with --classes and --capacity)",
        ),
        (
            vec!["--adaptive", "aimd", "--classes", "a=1,b"],
            "--classes",
        ),
    ];
    for (args, said) in cases {
        let out = run(&[&base[..], &args].concat()).await;
        assert_eq!(out.code, Some(64), "{args:?}: {}", out.stderr);
        assert!(out.stderr.contains(said), "{args:?}: {}", out.stderr);
        assert!(!out.stdout.contains("ran"), "{args:?}: the command ran");
        assert!(
            !out.stderr.contains("Limiter::"),
            "{args:?}: {}",
            out.stderr
        );
    }
}

/// On etcd, a run holding a permit of a fair semaphore in its flow and class is seen by
/// another process's `status`: the class line and the holder's flow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_keeps_a_fair_run_that_another_process_sees() {
    let cluster = EtcdCluster::single();
    let url = cluster.url("fair");
    let args = [
        "run",
        "--quiet",
        "--store",
        url.as_str(),
        "--semaphore",
        "db",
        "--capacity",
        "4",
        "--classes",
        "critical=25%,batch",
        "--flow",
        "tenant-a",
        "--class",
        "batch",
        "--",
        "sh",
        "-c",
    ];
    let status = format!("{} status --store {url} db", binary::BIN);
    let mut all: Vec<&str> = args.to_vec();
    all.push(&status);
    let out = output(cmd(&all), LIMIT).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout.contains("tenant-a"),
        "the holder's flow: {}",
        out.stdout
    );
    assert!(
        out.stdout.contains("class batch: guaranteed 0, held 1"),
        "the class line: {}",
        out.stdout
    );
}
