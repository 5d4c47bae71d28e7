//! `clusterlimit rate charge|refund NAME KEY N` as real processes: a cost known afterwards
//! charged into debt, the next check denied, units given back; bad N and keys refused.

use crate::binary;
use crate::support;

use binary::{cmd, output, Out};
use std::time::Duration;
use support::{EtcdCluster, ZkCluster};

const LIMIT: Duration = Duration::from_secs(30);

async fn rate(url: &str, args: &[&str]) -> Out {
    let mut all = vec!["rate", args[0], "--store", url];
    all.extend_from_slice(&args[1..]);
    output(cmd(&all), LIMIT).await
}

async fn rate_ok(url: &str, args: &[&str]) -> Out {
    let out = rate(url, args).await;
    assert_eq!(out.code, Some(0), "{args:?}: {}", out.stderr);
    out
}

fn json(out: &Out) -> serde_json::Value {
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", out.stdout))
}

/// Charge past what is left (debt, checks denied), refund, JSON, on one store.
async fn charge_and_refund(url: &str) {
    rate_ok(
        url,
        &["set-quota", "tokens", "--limit", "100", "--per", "1h"],
    )
    .await;
    // Charged within what is left: no debt.
    let out = rate_ok(url, &["charge", "tokens", "tenant a", "60"]).await;
    assert!(
        out.stdout
            .contains("charged: tokens \"tenant a\" (60), 40 of 100 left"),
        "{}",
        out.stdout
    );
    // Past it: 30 owed, and a check is denied (exit 75) until time pays the debt off.
    let out = rate_ok(url, &["charge", "tokens", "tenant a", "70", "--json"]).await;
    let b = json(&out);
    assert_eq!(
        (&b["remaining"], &b["debt"], &b["limit"]),
        (&0.into(), &30.into(), &100.into()),
        "{b}"
    );
    assert!(b["retry_after_ms"].as_u64().unwrap() > 29 * 36_000, "{b}");
    let out = rate(url, &["check", "tokens", "tenant a"]).await;
    assert_eq!(out.code, Some(75), "{}", out.stderr);
    let out = rate_ok(url, &["charge", "tokens", "tenant a", "0"]).await;
    assert!(
        out.stdout.contains("30 owed, admitted again in"),
        "{}",
        out.stdout
    );
    // Given back: the debt first, never past full.
    let out = rate_ok(url, &["refund", "tokens", "tenant a", "1000", "--json"]).await;
    let b = json(&out);
    assert_eq!(
        (&b["remaining"], &b["debt"]),
        (&100.into(), &0.into()),
        "{b}"
    );
    let out = rate_ok(url, &["refund", "tokens", "tenant a", "5"]).await;
    assert!(
        out.stdout
            .contains("refunded: tokens \"tenant a\" (5), 100 of 100 left"),
        "{}",
        out.stdout
    );
    rate_ok(url, &["check", "tokens", "tenant a"]).await;
    // An absent limit: exit 1, with how to create it.
    let out = rate(url, &["charge", "absent", "k", "1"]).await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains("rate set-quota absent"),
        "{}",
        out.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn charge_and_refund_on_etcd() {
    let cluster = EtcdCluster::single();
    charge_and_refund(&cluster.url("cli-charge")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn charge_and_refund_on_zookeeper() {
    let zk = ZkCluster::single();
    charge_and_refund(&zk.url("/cli-charge")).await;
}

/// Bad N or KEY: exit 64 with a clear message, before any store request (memory:// holds
/// nothing between processes, so these are its cases).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_numbers_and_keys_exit_64() {
    let url = "memory://cli-charge-bad";
    for (sub, n, says) in [
        (
            "charge",
            "-1",
            "<N> must be a whole number from 0 to 1000000000, got -1",
        ),
        (
            "charge",
            "1000000001",
            "<N> must be a whole number from 0 to 1000000000, got 1000000001",
        ),
        (
            "refund",
            "1.5",
            "<N> must be a whole number from 0 to 1000000000, got \"1.5\"",
        ),
        (
            "refund",
            "ten",
            "<N> must be a whole number from 0 to 1000000000, got \"ten\"",
        ),
    ] {
        let out = rate(url, &[sub, "tokens", "k", n]).await;
        assert_eq!(out.code, Some(64), "{sub} {n}: {}", out.stderr);
        assert!(out.stderr.contains(says), "{sub} {n}: {}", out.stderr);
    }
    let out = rate(url, &["charge", "tokens", "", "1"]).await;
    assert_eq!(out.code, Some(64), "{}", out.stderr);
    assert!(
        out.stderr.contains("KEY must be 1-512 bytes"),
        "{}",
        out.stderr
    );
    let out = rate(url, &["charge", "tokens", "k"]).await;
    assert_eq!(out.code, Some(64), "{}", out.stderr);
    let out = rate(url, &["charge", "tokens", "k", "1"]).await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
}
