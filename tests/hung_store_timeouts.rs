//! Timeouts mean what they say against a SIGSTOPped store: `acquire_timeout(d)` and the tower
//! layer's deadline answer within d + 100 ms whether the store hangs before the enqueue or
//! during the wait (`silent_store_is_error` tells the first as a store error), and so does a
//! new Limiter's `connect_timeout(d)`; the removal of the timed-out entry goes on in the background and lands once
//! the store answers again, leaving nothing in the queue. `RateLimit::check_within` answers
//! `Timeout` within its budget + 100 ms against a SIGSTOPped etcd (one key, a joined check, and
//! many keys whose writes wait in the combiner), and the library's checks are exact once the
//! store is back.

use crate::support;

use clusterlimit::tower::{ClusterConcurrencyLimitLayer, LimitError};
use clusterlimit::{AcquireOptions, Error, Limiter, Quota, RateLimit, Semaphore};
use std::convert::Infallible;
use std::time::Duration;
use support::{EtcdCluster, Pausable, ZkCluster};
use tokio::time::{timeout, Instant};
use tower::{service_fn, Layer, ServiceExt};

/// What the issue promises: an answer within the deadline plus this.
const OVERRUN: Duration = Duration::from_millis(100);
const D: Duration = Duration::from_millis(500);

/// Times one timed acquire; it must fail with `Timeout` within `D + OVERRUN`.
async fn timed_out(sem: &Semaphore, what: &str) {
    let t = Instant::now();
    let r = timeout(Duration::from_secs(30), sem.acquire_timeout(D))
        .await
        .expect("bounded");
    let took = t.elapsed();
    println!("{what}: acquire_timeout({D:?}) answered {r:?} after {took:?}");
    assert!(matches!(r, Err(Error::Timeout)), "{what}: {r:?}");
    assert!(took < D + OVERRUN, "{what}: took {took:?}");
}

async fn acquire_timeout_holds(mut store: impl Pausable, namespace: &str) {
    // Default TTL and request timeout: the bounds a hung store would stretch.
    let limiter = Limiter::connect(&store.url(namespace)).await.unwrap();
    let sem = limiter.semaphore("s", 1).await.unwrap();
    let held = sem.acquire().await.unwrap();

    // The store hangs during the wait: the deadline passes, the removal does not answer.
    let waiter = {
        let sem = sem.clone();
        tokio::spawn(async move { timed_out(&sem, "hangs during the wait").await })
    };
    tokio::time::sleep(D / 2).await;
    store.pause();
    waiter.await.unwrap();

    // The store hangs before the enqueue: nothing answers at all.
    timed_out(&sem, "hung before the enqueue").await;

    // Asked to, the same call tells the silent store from a full semaphore, in the same bound.
    let t = Instant::now();
    let opts = AcquireOptions::new().timeout(D).silent_store_is_error();
    let r = timeout(Duration::from_secs(30), sem.acquire_with(opts))
        .await
        .expect("bounded");
    let took = t.elapsed();
    match &r {
        Err(Error::Store(e)) => assert!(e.to_string().contains("did not answer within"), "{e}"),
        other => panic!("silent_store_is_error on a hung store: {other:?}"),
    }
    assert!(took < D + OVERRUN, "silent_store_is_error took {took:?}");

    // The tower layer keeps to its deadline too, and tells the silent store from a full one.
    let svc = ClusterConcurrencyLimitLayer::builder(sem.clone())
        .acquire_timeout(D)
        .build()
        .unwrap()
        .layer(service_fn(|r: u32| async move { Ok::<_, Infallible>(r) }));
    let t = Instant::now();
    let r = svc.clone().oneshot(1).await;
    let took = t.elapsed();
    println!("tower layer on a hung store: {r:?} after {took:?}");
    assert!(
        matches!(r, Err(LimitError::StoreUnavailable { .. })),
        "{r:?}"
    );
    assert!(took < D + OVERRUN, "the tower layer took {took:?}");

    // A new Limiter's connect keeps to its connect timeout (reaching the store, the session).
    let t = Instant::now();
    let r = Limiter::builder(&store.url(namespace))
        .connect_timeout(D)
        .connect()
        .await;
    let took = t.elapsed();
    match &r {
        Err(Error::Store(e)) => assert!(e.to_string().contains("connect timeout"), "{e}"),
        other => panic!("connect to a hung store: {other:?}"),
    }
    assert!(took < D + OVERRUN, "connect took {took:?}");

    store.resume();
    // The removals went on in the background: once the store answers, they land.
    let end = Instant::now() + Duration::from_secs(20);
    let mut last = None;
    while Instant::now() < end {
        match sem.status().await {
            Ok(st) if st.waiting == 0 && limiter.stats().pending_removals == 0 => {
                last = None;
                break;
            }
            other => last = Some(format!("{other:?}, {:?}", limiter.stats())),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(last.is_none(), "entries left behind: {last:?}");
    assert!(!held.is_lost(), "a pause well inside the TTL loses nothing");
    held.release().await.unwrap();
    limiter.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_acquire_timeout_holds_against_a_stopped_store() {
    acquire_timeout_holds(EtcdCluster::single(), "hung-timeouts").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zk_acquire_timeout_holds_against_a_stopped_store() {
    acquire_timeout_holds(ZkCluster::single(), "hung-timeouts").await;
}

/// `check_within(key, 1, budget)`: must be `Timeout` within `budget + OVERRUN`.
async fn check_timed_out(rl: &RateLimit, key: &str, budget: Duration) -> Duration {
    let t = Instant::now();
    let r = timeout(Duration::from_secs(30), rl.check_within(key, 1, budget))
        .await
        .expect("bounded");
    let took = t.elapsed();
    assert!(
        matches!(r, Err(Error::Timeout)),
        "{key}: {r:?} after {took:?}"
    );
    assert!(took < budget + OVERRUN, "{key}: took {took:?}");
    took
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_check_within_holds_against_a_stopped_store() {
    const BURST: u64 = 5;
    let budget = Duration::from_millis(200);
    let mut store = EtcdCluster::single();
    let limiter = Limiter::connect(&store.url("hung-rate")).await.unwrap();
    // One token an hour: nothing refills during the test.
    let quota = Quota::per_day(24).burst(BURST);
    let rl = limiter.rate_limit("api", quota).await.unwrap();
    for remaining in [BURST - 1, BURST - 2] {
        let d = rl.check_within("k", 1, budget).await.unwrap();
        assert!(d.allowed && d.remaining == remaining, "{d:?}");
    }

    store.pause(0);
    // A check that must write, and another that joins its write.
    let joined = {
        let rl = rl.clone();
        tokio::spawn(async move { check_timed_out(&rl, "k", budget).await })
    };
    let took = check_timed_out(&rl, "k", budget).await;
    let took_joined = joined.await.unwrap();
    // Checks of many keys: two requests out, the rest queued in the combiner.
    let many: Vec<_> = (0..20)
        .map(|i| {
            let rl = rl.clone();
            tokio::spawn(async move { check_timed_out(&rl, &format!("m{i}"), budget).await })
        })
        .collect();
    let mut slowest = Duration::ZERO;
    for m in many {
        slowest = slowest.max(m.await.unwrap());
    }
    println!(
        "stopped etcd, check_within({budget:?}): Timeout after {took:?} (joined: {took_joined:?}); \
         20 keys at once: the slowest after {slowest:?}"
    );

    store.resume(0);
    // Once the store answers, the library's checks are exact. A timed-out check's write may
    // have landed after all (its cost consumed): "k" has 1 to 3 of its 5 left (2 admitted, 2
    // timed out: in one write together, or the second left out of the next batch as its
    // caller was gone), no more.
    let started = Instant::now();
    let mut first = None;
    while first.is_none() {
        match rl.check_within("after", 1, Duration::from_secs(2)).await {
            Ok(d) => first = Some(d),
            Err(e) => assert!(
                started.elapsed() < Duration::from_secs(20),
                "no answer 20 s after the store resumed: {e}"
            ),
        }
    }
    println!("first answer {:?} after the resume", started.elapsed());
    let first = first.unwrap();
    assert!(first.allowed && first.remaining == BURST - 1, "{first:?}");
    for remaining in (0..BURST - 1).rev() {
        let d = rl.check_n("after", 1).await.unwrap();
        assert!(d.allowed && d.remaining == remaining, "{d:?}");
    }
    assert!(!rl.check_n("after", 1).await.unwrap().allowed);

    // Another Limiter sees what this one sees: both read the store.
    let other = Limiter::connect(&store.url("hung-rate")).await.unwrap();
    let ro = other.open_rate_limit("api").await.unwrap();
    let left = ro.check_n("k", 0).await.unwrap().remaining;
    println!("k after the resume: {left} of {BURST} left (2 admitted before the stop)");
    assert!(
        (BURST - 4..=BURST - 2).contains(&left),
        "k: 2 admitted, 2 timed out: {left} left"
    );
    let mut admitted = 0;
    for _ in 0..BURST {
        admitted += u64::from(rl.check_n("k", 1).await.unwrap().allowed);
    }
    assert_eq!(admitted, left, "k admits exactly what the store had left");
    assert!(!ro.check_n("k", 1).await.unwrap().allowed);
    for i in 0..20 {
        let d = ro.check_n(&format!("m{i}"), 0).await.unwrap();
        assert!(
            d.remaining == BURST || d.remaining == BURST - 1,
            "m{i}: at most its timed-out check's cost: {d:?}"
        );
    }
    other.close().await.unwrap();
    limiter.close().await.unwrap();
}
