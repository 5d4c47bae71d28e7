//! Smoke tests of the ZooKeeper test harness and the fault proxy: if these fail, every
//! ZooKeeper test is suspect.
//!
//! - a standalone server starts, says `standalone`, and serves create/get/delete;
//! - a 3-member ensemble has one leader, elects a new one after the leader is killed, and takes
//!   the old one back on restart;
//! - the proxy copies bytes exactly, and its blackhole / reset / delay switches do to a
//!   zookeeper-client session what they promise.
//!
//! Timings are printed (`cargo test --test zk_harness_smoke -- --nocapture`) for the record.

mod support;

use std::time::{Duration, Instant};

use zookeeper_client::{Acls, CreateMode, SessionState};

use support::{
    count_children, delete_recursive, expire_session, wait_state, zk_connect, ZkCluster, ZkMode,
};

fn persistent() -> zookeeper_client::CreateOptions<'static> {
    CreateMode::Persistent.with_acls(Acls::anyone_all())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_node_serves_create_get_delete() {
    let t = Instant::now();
    let zk = ZkCluster::single();
    eprintln!("1-node start: {:?}", t.elapsed());
    assert!(
        zk.srvr(0).contains("Mode: standalone"),
        "srvr: {}",
        zk.srvr(0)
    );
    assert_eq!(zk.mode(0), Some(ZkMode::Standalone));
    assert_eq!(zk.leader(), Some(0));
    let port = zk.client_ports()[0];
    assert_eq!(zk.connect_string(), format!("127.0.0.1:{port}"));
    assert_eq!(zk.url("/a/b"), format!("zk://127.0.0.1:{port}/a/b"));
    assert_eq!(zk.url(""), format!("zk://127.0.0.1:{port}"));

    let client = zk_connect(&zk.connect_string()).await;
    client
        .create("/smoke", b"hello", &persistent())
        .await
        .unwrap();
    let (data, _) = client.get_data("/smoke").await.unwrap();
    assert_eq!(data, b"hello");
    for i in 0..3 {
        client
            .create(&format!("/smoke/c{i}"), b"", &persistent())
            .await
            .unwrap();
    }
    client
        .create("/smoke/c0/deep", b"", &persistent())
        .await
        .unwrap();
    assert_eq!(count_children(&zk.connect_string(), "/smoke").await, 3);
    assert_eq!(count_children(&zk.connect_string(), "/missing").await, 0);
    client.delete("/smoke/c2", None).await.unwrap();
    assert_eq!(count_children(&zk.connect_string(), "/smoke").await, 2);
    delete_recursive(&zk.connect_string(), "/smoke").await;
    delete_recursive(&zk.connect_string(), "/smoke").await; // idempotent
    assert!(client.check_stat("/smoke").await.unwrap().is_none());

    // A session taken over and closed by `expire_session` ends for its owner too.
    let victim = zk_connect(&zk.connect_string()).await;
    let mut states = victim.state_watcher();
    victim
        .create(
            "/eph",
            b"",
            &CreateMode::Ephemeral.with_acls(Acls::anyone_all()),
        )
        .await
        .unwrap();
    expire_session(&zk.connect_string(), victim.session()).await;
    assert!(client.check_stat("/eph").await.unwrap().is_none());
    let got = wait_state(
        &mut states,
        |s| s == SessionState::Expired,
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(got, Some(SessionState::Expired));
}
