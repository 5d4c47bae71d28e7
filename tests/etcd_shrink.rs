//! What is etcd's own about `Permit::shrink_to` (the shared case is `testing::cases::shrink`):
//! an entry whose value is not ours is a store error that keeps the weight, an entry deleted
//! behind its holder is `SessionLost`, and a fair semaphore's shrink costs what a plain one does.

use crate::support;

use clusterlimit::{AcquireOptions, Error, Limiter};
use std::time::Duration;
use support::EtcdCluster;

/// The only queue entry of `prefix` (a semaphore's queue), read raw.
async fn only_entry(raw: &mut etcd_client::Client, prefix: &str) -> etcd_client::KeyValue {
    let opts = etcd_client::GetOptions::new().with_prefix();
    let got = raw.get(prefix, Some(opts)).await.unwrap();
    assert_eq!(got.kvs().len(), 1, "one entry in {prefix}");
    got.kvs()[0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shrink_of_an_unreadable_entry_keeps_the_weight() {
    let cluster = EtcdCluster::single();
    let limiter = Limiter::connect(&cluster.url("odd")).await.unwrap();
    let sem = limiter.semaphore("s", 4).await.unwrap();
    let mut permit = sem
        .acquire_with(AcquireOptions::new().permits(4))
        .await
        .unwrap();
    let mut raw = support::connect(&cluster.endpoints()).await;
    let entry = only_entry(&mut raw, "odd/s/s/q/").await;
    let lease = etcd_client::PutOptions::new().with_lease(entry.lease());
    raw.put(entry.key(), "not json", Some(lease)).await.unwrap();
    let err = permit.shrink_to(2).await.unwrap_err();
    assert!(matches!(err, Error::Store(_)), "{err:?}");
    assert!(err.to_string().contains("unreadable"), "{err}");
    assert_eq!(permit.permits(), 4);
    let after = only_entry(&mut raw, "odd/s/s/q/").await;
    assert_eq!(
        after.value(),
        b"not json",
        "the shrink wrote over a value not ours"
    );
    limiter.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shrink_of_a_deleted_entry_is_session_lost() {
    let cluster = EtcdCluster::single();
    let limiter = Limiter::connect(&cluster.url("gone")).await.unwrap();
    let sem = limiter.semaphore("s", 4).await.unwrap();
    let mut permit = sem
        .acquire_with(AcquireOptions::new().permits(4))
        .await
        .unwrap();
    let mut raw = support::connect(&cluster.endpoints()).await;
    let entry = only_entry(&mut raw, "gone/s/s/q/").await;
    raw.delete(entry.key(), None).await.unwrap();
    let result = tokio::time::timeout(Duration::from_secs(5), permit.shrink_to(2)).await;
    assert!(matches!(result, Ok(Err(Error::SessionLost))), "{result:?}");
    assert!(
        permit.is_lost(),
        "a permit whose entry is gone reports lost"
    );
    assert_eq!(permit.permits(), 4);
    limiter.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shrink_on_a_fair_semaphore_takes_a_read_and_a_write() {
    let cluster = EtcdCluster::single();
    let limiter = Limiter::connect(&cluster.url("fair")).await.unwrap();
    let classes = "critical=1,batch".parse().unwrap();
    let sem = limiter.fair_semaphore("s", 4, classes).await.unwrap();
    let mut permit = sem
        .acquire_with(AcquireOptions::new().permits(4))
        .await
        .unwrap();
    let before = limiter.stats();
    permit.shrink_to(2).await.unwrap();
    let sent = limiter.stats().since(&before);
    assert_eq!(sent.total(), 2, "one read, one compare-and-put: {sent:?}");
    assert_eq!((permit.permits(), sem.status().await.unwrap().used), (2, 2));
    limiter.close().await.unwrap();
}
