//! Smoke test of the etcd test harness itself: if this fails, every etcd test is suspect.

use crate::support;

use std::time::{Duration, Instant};

use etcd_client::PutOptions;
use support::{connect, count_keys, revoke_all_leases, EtcdCluster};

/// Puts `key` through `endpoints`, retrying while the cluster elects a new leader.
/// Bounded: at most 100 attempts and 15 s.
///
/// Each attempt gets 500 ms: a write forwarded to a leader that just died is lost without an
/// error and would otherwise wait for the whole request timeout.
async fn put_with_retry(endpoints: &[String], key: &str, value: &str) {
    let mut client = connect(endpoints).await;
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut last_err = String::from("no attempt made");
    for _ in 0..100 {
        let attempt = client.put(key, value, None);
        match tokio::time::timeout(Duration::from_millis(500), attempt).await {
            Ok(Ok(_)) => return,
            Ok(Err(e)) => last_err = e.to_string(),
            Err(_) => last_err = "attempt timed out after 500 ms".to_owned(),
        }
        if Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("put {key} via {endpoints:?} kept failing: {last_err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_member_serves_kv_and_leases() {
    let etcd = EtcdCluster::single();
    let eps = etcd.endpoints();
    assert_eq!(eps.len(), 1);
    assert!(eps[0].starts_with("127.0.0.1:"), "{eps:?}");
    assert_eq!(etcd.url("/sem"), format!("etcd://{}/sem", eps[0]));
    assert!(etcd.pid(0).is_some());
    assert!(etcd.is_healthy(0));

    let mut client = connect(&eps).await;
    client.put("smoke/a", "1", None).await.expect("put a");
    let resp = client.get("smoke/a", None).await.expect("get a");
    assert_eq!(resp.kvs().len(), 1);
    assert_eq!(resp.kvs()[0].value(), b"1");

    let lease = client.lease_grant(30, None).await.expect("lease grant");
    client
        .put(
            "smoke/b",
            "2",
            Some(PutOptions::new().with_lease(lease.id())),
        )
        .await
        .expect("put b with lease");
    client.put("other/c", "3", None).await.expect("put c");
    assert_eq!(count_keys(&eps, "smoke/").await, 2);
    assert_eq!(count_keys(&eps, "other/").await, 1);
    assert_eq!(count_keys(&eps, "nothing/").await, 0);

    // Losing the lease deletes exactly the keys attached to it.
    revoke_all_leases(&eps).await;
    assert_eq!(count_keys(&eps, "smoke/").await, 1);
    let leases = client.leases().await.expect("lease list");
    assert!(leases.leases().is_empty(), "leases left: {leases:?}");
    // Nothing to revoke is fine too.
    revoke_all_leases(&eps).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_survive_a_kill_and_restart() {
    let mut etcd = EtcdCluster::start(3);
    let eps = etcd.endpoints();
    assert_eq!(eps.len(), 3);
    let mut unique = eps.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 3, "endpoints must differ: {eps:?}");
    assert_eq!(etcd.url("p"), format!("etcd://{}/p", eps.join(",")));
    let pids: Vec<u32> = (0..3).map(|i| etcd.pid(i).expect("running")).collect();

    put_with_retry(&eps, "smoke3/before", "x").await;

    etcd.kill(0);
    assert_eq!(etcd.pid(0), None);
    assert!(!etcd.is_healthy(0));
    let survivors = eps[1..].to_vec();
    put_with_retry(&survivors, "smoke3/during", "y").await;
    assert_eq!(count_keys(&survivors, "smoke3/").await, 2);

    etcd.restart(0);
    let new_pid = etcd.pid(0).expect("restarted");
    assert_ne!(new_pid, pids[0]);
    for i in 0..3 {
        assert!(etcd.is_healthy(i), "member {i} not healthy after restart");
    }
    // The restarted member kept its data and caught up (linearizable read through it alone).
    let only_restarted = eps[..1].to_vec();
    assert_eq!(count_keys(&only_restarted, "smoke3/").await, 2);
    put_with_retry(&only_restarted, "smoke3/after", "z").await;
    assert_eq!(count_keys(&eps, "smoke3/").await, 3);

    // Drop kills and reaps every member.
    let all_pids = [new_pid, pids[1], pids[2]];
    drop(etcd);
    for pid in all_pids {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "etcd pid {pid} still exists after drop"
        );
    }
}
