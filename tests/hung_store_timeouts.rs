//! Timeouts mean what they say against a SIGSTOPped store: `acquire_timeout(d)` and the tower
//! layer's deadline answer within d + 100 ms whether the store hangs before the enqueue or
//! during the wait; the removal of the timed-out entry goes on in the background and lands once
//! the store answers again, leaving nothing in the queue.

mod support;

use clusterlimit::tower::{ClusterConcurrencyLimitLayer, LimitError};
use clusterlimit::{Error, Limiter, Semaphore};
use std::convert::Infallible;
use std::time::Duration;
use support::{EtcdCluster, ZkCluster};
use tokio::time::{timeout, Instant};
use tower::{service_fn, Layer, ServiceExt};

/// What the issue promises: an answer within the deadline plus this.
const OVERRUN: Duration = Duration::from_millis(100);
const D: Duration = Duration::from_millis(500);

/// A single-member store that can be SIGSTOPped.
trait Pausable {
    fn pause(&mut self);
    fn resume(&mut self);
    fn url(&self, namespace: &str) -> String;
}

impl Pausable for EtcdCluster {
    fn pause(&mut self) {
        EtcdCluster::pause(self, 0)
    }
    fn resume(&mut self) {
        EtcdCluster::resume(self, 0)
    }
    fn url(&self, namespace: &str) -> String {
        EtcdCluster::url(self, namespace)
    }
}

impl Pausable for ZkCluster {
    fn pause(&mut self) {
        ZkCluster::pause(self, 0)
    }
    fn resume(&mut self) {
        ZkCluster::resume(self, 0)
    }
    fn url(&self, namespace: &str) -> String {
        ZkCluster::url(self, &format!("/{namespace}"))
    }
}

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
