//! `Limiter::set_capacity`: create or set a semaphore's capacity, as `clusterlimit set-capacity`
//! and the sidecar's `PUT /v1/semaphores/{name}` use it. On memory://, and on a real etcd for
//! clients that race to create the same semaphore.

use crate::support;

use clusterlimit::{CapacityChange, Error, Limiter};
use std::time::Duration;
use support::EtcdCluster;

const LIMIT: Duration = Duration::from_secs(20);

async fn capacity(limiter: &Limiter, name: &str) -> u32 {
    let sem = limiter.open_semaphore(name).await.unwrap();
    sem.status().await.unwrap().capacity
}

#[tokio::test]
async fn creates_then_sets_on_memory() {
    let limiter = Limiter::connect("memory://set-capacity-basic")
        .await
        .unwrap();

    let change = limiter.set_capacity("jobs", 3).await.unwrap();
    assert_eq!(change, CapacityChange::Created);
    assert_eq!(capacity(&limiter, "jobs").await, 3);

    let change = limiter.set_capacity("jobs", 5).await.unwrap();
    assert_eq!(change, CapacityChange::Set);
    assert_eq!(capacity(&limiter, "jobs").await, 5);

    // The same value again is a set, not an error and not a creation.
    let change = limiter.set_capacity("jobs", 5).await.unwrap();
    assert_eq!(change, CapacityChange::Set);
    assert_eq!(capacity(&limiter, "jobs").await, 5);
}

#[tokio::test]
async fn shrinking_keeps_holders_on_memory() {
    let limiter = Limiter::connect("memory://set-capacity-shrink")
        .await
        .unwrap();
    let sem = limiter.semaphore("jobs", 3).await.unwrap();
    let held = sem.acquire_many(3).await.unwrap();

    let change = limiter.set_capacity("jobs", 1).await.unwrap();
    assert_eq!(change, CapacityChange::Set);
    let status = sem.status().await.unwrap();
    assert_eq!((status.capacity, status.used), (1, 3));
    assert!(matches!(sem.try_acquire().await, Err(Error::NoPermits)));
    held.release().await.unwrap();
}

#[tokio::test]
async fn invalid_arguments_change_nothing() {
    let limiter = Limiter::connect("memory://set-capacity-invalid")
        .await
        .unwrap();
    limiter.semaphore("jobs", 2).await.unwrap();

    for (name, cap) in [("jobs", 0), ("absent", 0), ("", 1), ("bad name", 1)] {
        match limiter.set_capacity(name, cap).await {
            Err(Error::InvalidArgument(_)) => {}
            other => panic!("set_capacity({name:?}, {cap}): {other:?}"),
        }
    }
    assert_eq!(capacity(&limiter, "jobs").await, 2);
    assert_eq!(limiter.semaphores().await.unwrap(), ["jobs"]);

    limiter.close().await.unwrap();
    match limiter.set_capacity("jobs", 4).await {
        Err(Error::Closed) => {}
        other => panic!("after close: {other:?}"),
    }
}

/// Clients that find the semaphore absent at the same moment and create it with different
/// capacities: every call succeeds (the losers set theirs over the winner's), at least one
/// reports the creation, and the stored capacity is one of those given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_creates_all_succeed_on_etcd() {
    let cluster = EtcdCluster::single();
    let url = cluster.url("set-capacity-race");
    let mut limiters = Vec::new();
    for _ in 0..4 {
        limiters.push(Limiter::connect(&url).await.unwrap());
    }
    let calls = limiters
        .iter()
        .zip(1u32..)
        .map(|(l, cap)| async move { (cap, l.set_capacity("jobs", cap).await) });
    let results = tokio::time::timeout(LIMIT, futures::future::join_all(calls))
        .await
        .expect("set_capacity calls hung");
    let mut created = 0;
    for (cap, result) in &results {
        match result {
            Ok(CapacityChange::Created) => created += 1,
            Ok(CapacityChange::Set) => {}
            Ok(other) => panic!("set_capacity(jobs, {cap}): unexpected {other:?}"),
            Err(e) => panic!("set_capacity(jobs, {cap}): {e}"),
        }
    }
    assert!(created >= 1, "{results:?}");
    let stored = capacity(&limiters[0], "jobs").await;
    assert!((1..=4).contains(&stored), "stored capacity {stored}");
    for l in &limiters {
        l.close().await.unwrap();
    }
}
