//! Request costs on a real ZooKeeper, from the Limiters' own counters: an uncontended acquire is
//! one request (the create), a release one delete, a contended acquire one create and no read,
//! and a release costs the same however many clients wait (no herd, nobody re-reads).

use crate::support;

use clusterlimit::{Limiter, RequestStats};
use std::time::Duration;
use support::{queue_waiters, ZkCluster};
use tokio::time::timeout;

fn total(limiters: &[Limiter]) -> RequestStats {
    limiters.iter().map(Limiter::stats).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncontended_acquire_and_release_cost_one_request_each() {
    let zk = ZkCluster::single();
    let l = Limiter::connect(&zk.url("/costs")).await.unwrap();
    let sem = l.semaphore("s", 2).await.unwrap();
    for round in 0..5 {
        let before = l.stats();
        let p = sem.acquire().await.unwrap();
        let cost = l.stats().since(&before);
        assert_eq!((cost.put, cost.total()), (1, 1), "round {round}: {cost:?}");
        let before = l.stats();
        p.release().await.unwrap();
        let cost = l.stats().since(&before);
        assert_eq!(
            (cost.delete, cost.total()),
            (1, 1),
            "round {round}: {cost:?}"
        );
    }
    l.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_with_50_waiters_costs_one_request_in_total() {
    const WAITERS: usize = 50;
    let zk = ZkCluster::single();
    let url = zk.url("/costs");
    let holder = Limiter::connect(&url).await.unwrap();
    let sem = holder.semaphore("s", 1).await.unwrap();
    let permit = sem.acquire().await.unwrap();

    let (limiters, mut waits) = queue_waiters(&url, &sem, WAITERS).await;
    let mut all = limiters.clone();
    all.push(holder.clone());
    let before = total(&all);
    permit.release().await.unwrap();
    // Exactly one waiter is granted (the first in line); the others must not react.
    let (p, waiter_before) = timeout(Duration::from_secs(5), &mut waits[0])
        .await
        .expect("the first waiter is granted after the release")
        .unwrap();
    let p = p.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    for (i, w) in waits.iter().enumerate().skip(1) {
        assert!(!w.is_finished(), "waiter {i} finished with capacity 1 held");
    }
    let cost = total(&all).since(&before);
    println!("release with {WAITERS} waiters: {cost:?} across all clients (excluding probes)");
    assert_eq!(
        (cost.delete, cost.total()),
        (1, 1),
        "one delete in total, nobody re-reads: {cost:?}"
    );

    // The granted waiter's whole acquire: one create, no read, no new watch.
    let waiter_cost = limiters[0].stats().since(&waiter_before);
    println!("contended acquire: {waiter_cost:?}");
    assert_eq!(
        (waiter_cost.put, waiter_cost.total()),
        (1, 1),
        "{waiter_cost:?}"
    );

    p.release().await.unwrap();
    for w in waits {
        w.abort();
    }
    for l in all {
        l.close().await.unwrap();
    }
}
