//! `Limiter::store_members`: what a status page and `clusterlimit top` show of the store's
//! servers, from real 3-member etcd and ZooKeeper clusters (and memory://, a sharded store).

use crate::support;

use clusterlimit::Limiter;
use support::{EtcdCluster, ZkCluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_lists_its_members_and_marks_the_one_leader() {
    let etcd = EtcdCluster::start(3);
    let limiter = Limiter::connect(&etcd.url("/members"))
        .await
        .expect("connect");
    let members = limiter.store_members().await.expect("members");
    assert_eq!(members.len(), 3, "{members:?}");
    assert_eq!(
        members.iter().filter(|m| m.role == "leader").count(),
        1,
        "{members:?}"
    );
    assert_eq!(
        members.iter().filter(|m| m.role == "follower").count(),
        2,
        "{members:?}"
    );
    let mut addresses: Vec<String> = members
        .iter()
        .map(|m| m.address.trim_start_matches("http://").to_string())
        .collect();
    let mut endpoints = etcd.endpoints();
    addresses.sort();
    endpoints.sort();
    assert_eq!(addresses, endpoints);
    limiter.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_lists_its_ensemble_from_the_configuration() {
    let zk = ZkCluster::start(3);
    let limiter = Limiter::connect(&zk.url("/members"))
        .await
        .expect("connect");
    let members = limiter.store_members().await.expect("members");
    let names: Vec<&str> = members.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["server.1", "server.2", "server.3"], "{members:?}");
    for (i, m) in members.iter().enumerate() {
        assert_eq!(m.role, "participant", "{m:?}");
        // The test ensemble sets `clientPort` apart: the configuration names the peer host.
        assert_eq!(m.address, zk.client_addr(i).ip().to_string(), "{m:?}");
    }
    limiter.close().await.expect("close");
}

#[tokio::test]
async fn memory_and_sharded_stores_say_what_they_are() {
    let memory = Limiter::connect("memory://members-a")
        .await
        .expect("connect");
    let m = memory.store_members().await.expect("members");
    assert_eq!(m.len(), 1);
    assert_eq!(m[0].role, "embedded");
    let sharded = Limiter::connect("memory://members-b?shard=one;memory://members-c?shard=two")
        .await
        .expect("connect");
    let names: Vec<String> = sharded
        .store_members()
        .await
        .expect("members")
        .into_iter()
        .map(|m| m.name)
        .collect();
    assert_eq!(
        names,
        [
            "memory://members-b?shard=one/memory",
            "memory://members-c?shard=two/memory"
        ]
    );
    memory.close().await.expect("close");
    assert!(matches!(
        memory.store_members().await,
        Err(clusterlimit::Error::Closed)
    ));
}
