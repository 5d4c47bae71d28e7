//! Background removal keeps its promise on every store: an entry handed to it is removed, or
//! its session ends; nothing in between. The store is real (etcd, ZooKeeper, memory); only the
//! answer to a removal is refused, at the backend seam, since no real store can be made to
//! refuse deletes while it keeps the session alive.

use crate::support;

use async_trait::async_trait;
use clusterlimit::backend::etcd::{EtcdBackend, EtcdConfig};
use clusterlimit::backend::memory::MemoryBackend;
use clusterlimit::backend::zookeeper::{ZkBackend, ZkConfig};
use clusterlimit::backend::{Backend, Enqueued, EntryRequest, OrphanSink, WaitOutcome};
use clusterlimit::{Error, Limiter, LostSignal, RequestStats, Result, Status};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;
use support::{EtcdCluster, ZkCluster};
use tokio::time::{timeout, Instant};

const TTL: Duration = Duration::from_secs(2);

/// A real backend whose first `refusals` removals fail (`u64::MAX`: every one).
#[derive(Debug)]
struct RefusesRemovals {
    inner: Arc<dyn Backend>,
    refusals: AtomicU64,
    attempts: AtomicU64,
}

#[async_trait]
impl Backend for RefusesRemovals {
    async fn ensure_semaphore(&self, name: &str, capacity: Option<u32>) -> Result<u32> {
        self.inner.ensure_semaphore(name, capacity).await
    }
    async fn enqueue(&self, req: &EntryRequest) -> Result<Enqueued> {
        self.inner.enqueue(req).await
    }
    async fn wait_outcome(&self, req: &EntryRequest, enq: &Enqueued) -> Result<WaitOutcome> {
        self.inner.wait_outcome(req, enq).await
    }
    async fn remove(&self, name: &str, id: &str) -> Result<()> {
        self.attempts.fetch_add(1, Relaxed);
        let refused = self
            .refusals
            .fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1))
            .is_ok();
        if refused {
            return Err(Error::Store("removal refused by the test".into()));
        }
        self.inner.remove(name, id).await
    }
    async fn status(&self, name: &str) -> Result<Status> {
        self.inner.status(name).await
    }
    async fn set_capacity(&self, name: &str, capacity: u32) -> Result<()> {
        self.inner.set_capacity(name, capacity).await
    }
    async fn list(&self) -> Result<Vec<String>> {
        self.inner.list().await
    }
    fn stats(&self) -> RequestStats {
        self.inner.stats()
    }
    fn session_ttl(&self) -> Duration {
        self.inner.session_ttl()
    }
    async fn session_signal(&self) -> Option<LostSignal> {
        self.inner.session_signal().await
    }
    async fn end_session(&self, session: &LostSignal) {
        self.inner.end_session(session).await
    }
    fn set_orphan_sink(&self, sink: OrphanSink) {
        self.inner.set_orphan_sink(sink)
    }
    async fn close(&self) -> Result<()> {
        self.inner.close().await
    }
    fn shutdown(&self) {
        self.inner.shutdown()
    }
}

/// A store under test: its backend, and a way to count the entries it holds, read directly.
enum Store {
    Etcd(EtcdCluster),
    Zk(ZkCluster),
    Memory,
}

impl Store {
    async fn backend(&self, namespace: &str) -> Arc<dyn Backend> {
        match self {
            Store::Etcd(c) => Arc::new(
                EtcdBackend::connect(
                    EtcdConfig::new(c.endpoints(), namespace)
                        .session_ttl(TTL)
                        .request_timeout(Duration::from_secs(2)),
                )
                .await
                .unwrap(),
            ),
            Store::Zk(c) => Arc::new(
                ZkBackend::connect(
                    ZkConfig::new(vec![c.connect_string()], format!("/{namespace}"))
                        .session_timeout(TTL)
                        .request_timeout(Duration::from_secs(2)),
                )
                .await
                .unwrap(),
            ),
            Store::Memory => Arc::new(MemoryBackend::open(namespace)),
        }
    }

    /// Entries of semaphore `s` in the store, read without the library (memory: its status).
    /// Whether the store holds `n` entries within 5 s.
    async fn entries_reach(&self, namespace: &str, limiter: &Limiter, n: usize) -> bool {
        within(Duration::from_secs(5), async || {
            self.entries(namespace, limiter).await == n
        })
        .await
    }

    async fn entries(&self, namespace: &str, limiter: &Limiter) -> usize {
        match self {
            Store::Etcd(c) => {
                support::count_keys(&c.endpoints(), &format!("{namespace}/s/s/q/")).await as usize
            }
            Store::Zk(c) => {
                support::count_children(&c.connect_string(), &format!("/{namespace}/s/s")).await
            }
            Store::Memory => {
                let st = limiter.open_semaphore("s").await.unwrap().status().await;
                let st = st.unwrap();
                st.holders.len() + st.waiting
            }
        }
    }
}

async fn limiter_refusing(
    store: &Store,
    namespace: &str,
    refusals: u64,
) -> (Limiter, Arc<RefusesRemovals>) {
    let backend = Arc::new(RefusesRemovals {
        inner: store.backend(namespace).await,
        refusals: AtomicU64::new(refusals),
        attempts: AtomicU64::new(0),
    });
    let limiter = Limiter::from_backend(backend.clone(), "refuses-removals").unwrap();
    (limiter, backend)
}

/// Polls `f` every 20 ms for at most `limit`.
async fn within(limit: Duration, mut f: impl AsyncFnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if f().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    f().await
}

/// A dropped permit whose removal is refused forever: the releaser keeps trying for two TTLs,
/// then ends the session. The entry is gone from the store, the session's other permit reports
/// lost, and the Limiter goes on with a new session.
async fn removal_that_keeps_failing_ends_the_session(store: Store, namespace: &str) {
    let (limiter, backend) = limiter_refusing(&store, namespace, u64::MAX).await;
    let sem = limiter.semaphore("s", 3).await.unwrap();
    let kept = sem.acquire().await.unwrap();
    let dropped_at = Instant::now();
    drop(sem.acquire().await.unwrap());

    assert!(
        within(Duration::from_secs(2), async || limiter
            .stats()
            .pending_removals
            == 1)
        .await,
        "one pending removal: {:?}",
        limiter.stats()
    );
    assert_eq!(
        store.entries(namespace, &limiter).await,
        2,
        "both entries still stored"
    );

    timeout(TTL * 2 + Duration::from_secs(5), kept.lost())
        .await
        .expect("the session is ended once the removal stayed unconfirmed for two TTLs");
    let ended_after = dropped_at.elapsed();
    println!("{namespace}: session ended {ended_after:?} after the drop");
    assert!(
        ended_after >= TTL * 2 - Duration::from_millis(100),
        "the session was ended before two TTLs: {ended_after:?}"
    );
    let attempts = backend.attempts.load(Relaxed);
    assert!(
        attempts >= 5,
        "the removal was retried: {attempts} attempts"
    );

    assert!(
        store.entries_reach(namespace, &limiter, 0).await,
        "every entry of the ended session left the store"
    );
    // The releaser counts the end once the revoke is answered, just after the keys vanished.
    assert!(
        within(Duration::from_secs(5), async || {
            let stats = limiter.stats();
            (stats.pending_removals, stats.removal_session_ends) == (0, 1)
        })
        .await,
        "{:?}",
        limiter.stats()
    );

    // A new session serves new calls, and its permits are sound.
    let again = timeout(Duration::from_secs(5), sem.acquire())
        .await
        .unwrap()
        .unwrap();
    assert!(!again.is_lost());
    assert_eq!(store.entries(namespace, &limiter).await, 1);
    drop(kept);
    limiter.close().await.unwrap();
}

/// A removal refused three times is retried until it lands: the session lives on.
async fn removal_that_fails_for_a_while_lands(store: Store, namespace: &str) {
    let (limiter, backend) = limiter_refusing(&store, namespace, 3).await;
    let sem = limiter.semaphore("s", 3).await.unwrap();
    let kept = sem.acquire().await.unwrap();
    drop(sem.acquire().await.unwrap());
    assert!(
        store.entries_reach(namespace, &limiter, 1).await,
        "the dropped permit's entry was removed after the refusals"
    );
    assert_eq!(
        backend.attempts.load(Relaxed),
        4,
        "three refusals, then the removal"
    );
    assert!(
        within(Duration::from_secs(1), async || limiter
            .stats()
            .pending_removals
            == 0)
        .await,
        "{:?}",
        limiter.stats()
    );
    assert_eq!(limiter.stats().removal_session_ends, 0);
    assert!(!kept.is_lost(), "the session lives on");
    kept.release().await.unwrap();
    limiter.close().await.unwrap();
}

/// A timed-out acquire whose removal is refused still returns on time; its entry, which blocks
/// the queue, goes when the session is ended.
async fn timed_out_wait_with_refused_removal(store: Store, namespace: &str) {
    let (limiter, _) = limiter_refusing(&store, namespace, u64::MAX).await;
    let sem = limiter.semaphore("s", 1).await.unwrap();
    let held = sem.acquire().await.unwrap();
    let d = Duration::from_millis(300);
    let t = Instant::now();
    let r = sem.acquire_timeout(d).await;
    let took = t.elapsed();
    assert!(matches!(r, Err(Error::Timeout)), "{r:?}");
    assert!(
        took < d + Duration::from_millis(100),
        "acquire_timeout({d:?}) took {took:?}"
    );
    assert_eq!(
        store.entries(namespace, &limiter).await,
        2,
        "the waiter's entry is still there"
    );
    timeout(TTL * 2 + Duration::from_secs(5), held.lost())
        .await
        .expect("the session is ended");
    assert!(
        store.entries_reach(namespace, &limiter, 0).await,
        "no entry left"
    );
    limiter.close().await.unwrap();
}

/// One test per store for a case `async fn(Store, namespace)`: `case::etcd`, `case::zk`, ….
macro_rules! on_stores {
    ($case:ident, $namespace:literal: $($store:ident => $make:expr),+ $(,)?) => {
        mod $case {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $store() {
                    super::$case($make, $namespace).await;
                }
            )+
        }
    };
}

on_stores!(removal_that_keeps_failing_ends_the_session, "gone":
    etcd => Store::Etcd(EtcdCluster::single()),
    zk => Store::Zk(ZkCluster::single()),
);
on_stores!(removal_that_fails_for_a_while_lands, "lands":
    etcd => Store::Etcd(EtcdCluster::single()),
    zk => Store::Zk(ZkCluster::single()),
    memory => Store::Memory,
);
on_stores!(timed_out_wait_with_refused_removal, "waiter":
    etcd => Store::Etcd(EtcdCluster::single()),
    zk => Store::Zk(ZkCluster::single()),
);
