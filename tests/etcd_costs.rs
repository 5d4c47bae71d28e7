//! Request costs on a real etcd, from the Limiters' own counters: what an acquire and a release
//! cost, that a release costs the same however many clients wait (no herd), and that an
//! acquire decided from the Limiter's view reads nothing, however long the queue; and that
//! `RateStore::write_each` carries many keys' writes, applying or conflicting each, in one Txn.

use crate::support;

use clusterlimit::backend::etcd::{EtcdBackend, EtcdConfig};
use clusterlimit::backend::{Backend, KeyOutcome, KeyWrite};
use clusterlimit::{Limiter, Quota, RequestStats};
use std::time::Duration;
use support::{eventually, queue_waiters, EtcdCluster};
use tokio::time::timeout;

fn total(limiters: &[Limiter]) -> RequestStats {
    limiters.iter().map(Limiter::stats).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_with_many_waiters_costs_one_request_in_total() {
    const WAITERS: usize = 20;
    let cluster = EtcdCluster::single();
    let url = cluster.url("costs");
    let holder = Limiter::connect(&url).await.unwrap();
    let sem = holder.semaphore("s", 1).await.unwrap();
    let permit = sem.acquire().await.unwrap();

    let (limiters, mut waits) = queue_waiters(&url, &sem, WAITERS).await;
    // Let every waiter's watch get created before counting.
    tokio::time::sleep(Duration::from_millis(200)).await;

    let mut all = limiters.clone();
    all.push(holder.clone());
    let before = total(&all);
    permit.release().await.unwrap();
    // Exactly one waiter is granted; give the others time to (not) react.
    let mut granted = None;
    for (i, w) in waits.iter_mut().enumerate() {
        if let Ok(r) = timeout(Duration::from_millis(300), &mut *w).await {
            granted = Some((i, r.unwrap()));
            break;
        }
    }
    let (i, (p, waiter_before)) = granted.expect("a waiter was granted after the release");
    let p = p.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let cost = total(&all).since(&before);
    println!("release with {WAITERS} waiters: {cost:?} across all clients (excluding keepalives)");
    assert_eq!(
        cost.total(),
        1,
        "one delete in total, nobody re-reads: {cost:?}"
    );
    assert_eq!(cost.delete, 1);

    // The granted waiter's whole acquire: one Txn to enqueue plus one watch for the semaphore.
    let waiter_cost = limiters[i].stats().since(&waiter_before);
    println!("contended acquire (first wait on this semaphore): {waiter_cost:?}");
    assert_eq!(
        (waiter_cost.txn, waiter_cost.watch, waiter_cost.range),
        (1, 1, 0)
    );

    p.release().await.unwrap();
    for w in waits {
        w.abort();
    }
    for l in all {
        l.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_contended_wait_reuses_the_watch() {
    let cluster = EtcdCluster::single();
    let url = cluster.url("costs2");
    let a = Limiter::connect(&url).await.unwrap();
    let b = Limiter::connect(&url).await.unwrap();
    let sa = a.semaphore("s", 1).await.unwrap();
    let sb = b.semaphore("s", 1).await.unwrap();
    for round in 0..3 {
        let held = sa.acquire().await.unwrap();
        let before = b.stats();
        let sb2 = sb.clone();
        let wait = tokio::spawn(async move { sb2.acquire().await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        held.release().await.unwrap();
        let p = timeout(Duration::from_secs(5), wait)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let cost = b.stats().since(&before);
        // The first wait's enqueue is the put-if-absent Txn with its read; later ones, with
        // the view that wait set up, a plain put.
        let expected_watches = u64::from(round == 0);
        assert_eq!(
            (cost.txn + cost.put, cost.watch, cost.range),
            (1, expected_watches, 0),
            "round {round}: {cost:?}"
        );
        p.release().await.unwrap();
    }
    a.close().await.unwrap();
    b.close().await.unwrap();
}

/// One uncontended acquire+release of `sem`: what it cost `limiter`, as (txn, put, range,
/// watch, delete, grants decided from the view).
async fn pair_cost(
    limiter: &Limiter,
    sem: &clusterlimit::Semaphore,
) -> (u64, u64, u64, u64, u64, u64) {
    let before = limiter.stats();
    sem.acquire().await.unwrap().release().await.unwrap();
    let c = limiter.stats().since(&before);
    (c.txn, c.put, c.range, c.watch, c.delete, c.view_decisions)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_with_a_view_is_one_put_that_reads_nothing() {
    const HELD: u32 = 50;
    let cluster = EtcdCluster::single();
    let url = cluster.url("costs3");
    let l = Limiter::connect(&url).await.unwrap();
    let sem = l.semaphore("s", HELD + 1).await.unwrap();
    // The first acquire reads the semaphore in its Txn; the second also sets up the view.
    assert_eq!(
        pair_cost(&l, &sem).await,
        (1, 0, 0, 0, 1, 0),
        "first acquire"
    );
    assert_eq!(
        pair_cost(&l, &sem).await,
        (1, 0, 0, 1, 1, 0),
        "second acquire"
    );
    // From then on (once the watch is up): one put that reads nothing, the grant decided from
    // the view (a view that lags would make it read).
    let from_view = (0, 1, 0, 0, 1, 1);
    eventually(
        "acquire decided from the view",
        Duration::from_secs(10),
        || async { pair_cost(&l, &sem).await == from_view },
    )
    .await;

    // The same behind HELD entries of another Limiter.
    let other = Limiter::connect(&url).await.unwrap();
    let os = other.semaphore("s", HELD + 1).await.unwrap();
    let mut held = Vec::new();
    for _ in 0..HELD {
        held.push(os.acquire().await.unwrap());
    }
    eventually(
        "acquire behind 50 entries decided from the view",
        Duration::from_secs(10),
        || async { pair_cost(&l, &sem).await == from_view },
    )
    .await;
    // A refused try_acquire: one put, no read, one delete of its entry.
    let full = os.acquire().await.unwrap();
    let before = l.stats();
    assert!(matches!(
        sem.try_acquire().await,
        Err(clusterlimit::Error::NoPermits)
    ));
    let c = l.stats().since(&before);
    println!("refused try_acquire decided from the view: {c:?}");
    assert_eq!((c.txn, c.put, c.watch), (0, 1, 0), "{c:?}");
    assert_eq!(
        c.range + c.view_decisions,
        1,
        "the view or a read decided: {c:?}"
    );
    drop(full);
    drop(held);
    other.close().await.unwrap();
    l.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_each_of_many_keys_is_one_txn() {
    const N: usize = 64;
    let cluster = EtcdCluster::single();
    let b = EtcdBackend::connect(
        EtcdConfig::new(cluster.endpoints(), "costs-each")
            .session_ttl(Duration::from_secs(30))
            .request_timeout(Duration::from_secs(2)),
    )
    .await
    .unwrap();
    let store = b.rate_store().expect("etcd keeps rate limits");
    let quota = Quota::per_minute(60).encode();
    let qv = store.ensure_limit("a", Some(&quota)).await.unwrap().version;
    let qv_b = store.ensure_limit("b", Some(&quota)).await.unwrap().version;
    // One expiry for all: one lease bucket, granted by the first call.
    let expires_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        + 60_000_000_000;
    let write = |limit: &str, qv: u64, key: usize, expected: Option<u64>| KeyWrite {
        limit: limit.into(),
        quota_version: qv,
        key: format!("k{key}"),
        expected,
        value: format!("{limit}/{key}").into_bytes(),
        expires_at,
    };
    // N absent keys over two limits.
    let first: Vec<KeyWrite> = (0..N)
        .map(|i| {
            if i % 2 == 0 {
                write("a", qv, i, None)
            } else {
                write("b", qv_b, i, None)
            }
        })
        .collect();
    let before = b.stats();
    let got = store.write_each(&first).await;
    let cost = b.stats().since(&before);
    println!("write_each of {N} absent keys (first, with its lease grant): {cost:?}");
    assert_eq!((cost.txn, cost.total()), (1, 1), "{cost:?}");
    let versions: Vec<u64> = got
        .iter()
        .map(|o| match o {
            Ok(KeyOutcome::Written(v)) => *v,
            other => panic!("an absent key's create: {other:?}"),
        })
        .collect();

    // Again, each against its version, every third one wrong: still one Txn, no read; the
    // wrong ones conflict alone, their current state in the same reply.
    let again: Vec<KeyWrite> = first
        .iter()
        .zip(&versions)
        .enumerate()
        .map(|(i, (w, v))| KeyWrite {
            expected: Some(if i % 3 == 0 { v + 1_000_000 } else { *v }),
            ..w.clone()
        })
        .collect();
    let before = b.stats();
    let got = store.write_each(&again).await;
    let cost = b.stats().since(&before);
    println!("write_each of {N} writes, a third of them conflicting: {cost:?}");
    assert_eq!((cost.txn, cost.total()), (1, 1), "{cost:?}");
    for (i, o) in got.iter().enumerate() {
        match (i % 3 == 0, o) {
            (true, Ok(KeyOutcome::Conflict(c))) => {
                assert_eq!(c.key.as_ref().map(|k| k.version), Some(versions[i]));
            }
            (false, Ok(KeyOutcome::Written(v))) => assert!(*v > versions[i]),
            other => panic!("write {i}: {other:?}"),
        }
    }
}
