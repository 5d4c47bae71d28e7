//! `clusterlimit::tower::ClusterConcurrencyLimitLayer` against real etcd (memory:// only for
//! option checks that need no store): the cluster-wide cap across replicas, the deadline and
//! store-down fallbacks, and what dropping a request leaves behind.

use crate::support;

use clusterlimit::tower::{ClusterConcurrencyLimitLayer, Fallback, LimitError};
use clusterlimit::{Error, Limiter, Semaphore, StoreDownPolicy};
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use support::{eventually, EtcdCluster, FaultProxy};
use tokio::time::{timeout, Instant};
use tower::{service_fn, Layer, Service, ServiceExt};

/// Counts the requests inside the inner service: now, the most at once, and every call.
#[derive(Clone, Default)]
struct InFlight {
    now: Arc<AtomicUsize>,
    max: Arc<AtomicUsize>,
    calls: Arc<AtomicUsize>,
}

/// Leaves the count when the request ends, however it ends (completed or dropped).
struct Inside(Arc<AtomicUsize>);

impl Drop for Inside {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl InFlight {
    fn enter(&self) -> Inside {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.max.fetch_max(now, Ordering::SeqCst);
        Inside(self.now.clone())
    }

    fn now(&self) -> usize {
        self.now.load(Ordering::SeqCst)
    }

    fn max(&self) -> usize {
        self.max.load(Ordering::SeqCst)
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// An inner service that stays inside for `hold`, then echoes the request.
    fn service(
        &self,
        hold: Duration,
    ) -> impl Service<u32, Response = u32, Error = Infallible, Future: Send> + Clone + Send {
        let gauge = self.clone();
        service_fn(move |req: u32| {
            let inside = gauge.enter();
            async move {
                tokio::time::sleep(hold).await;
                drop(inside);
                Ok(req)
            }
        })
    }
}

/// Runs one request through a clone of `svc` (poll_ready, then call), bounded in time.
async fn call<S>(svc: &S, req: u32) -> Result<u32, LimitError<Infallible>>
where
    S: Service<u32, Response = u32, Error = LimitError<Infallible>> + Clone,
{
    timeout(Duration::from_secs(60), svc.clone().oneshot(req))
        .await
        .expect("a request through the layer took over 60 s")
}

async fn used(sem: &Semaphore) -> u32 {
    sem.status().await.unwrap().used
}

/// A one-permit semaphore on `url` held by another Limiter: every request through a layer on it
/// has to wait.
async fn held_elsewhere(url: &str) -> (Limiter, clusterlimit::Permit) {
    let other = Limiter::builder(url)
        .owner("holder")
        .connect()
        .await
        .unwrap();
    let sem = other.semaphore("api", 1).await.unwrap();
    let permit = sem.acquire().await.unwrap();
    (other, permit)
}

/// The set-up of the tests on a full semaphore: "api" (capacity 1) on `url` held by another
/// Limiter, and this replica's own Limiter and handle on it.
struct FullApi {
    other: Limiter,
    held: clusterlimit::Permit,
    limiter: Limiter,
    sem: Semaphore,
}

async fn full_api(url: &str) -> FullApi {
    let (other, held) = held_elsewhere(url).await;
    let limiter = Limiter::connect(url).await.unwrap();
    let sem = limiter.semaphore("api", 1).await.unwrap();
    FullApi {
        other,
        held,
        limiter,
        sem,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_never_exceed_the_cluster_cap() {
    const CAP: u32 = 3;
    const REPLICAS: u32 = 3;
    const PER_REPLICA: u32 = 12;
    let cluster = EtcdCluster::single();
    let url = cluster.url("tower-cap");
    let gauge = InFlight::default();
    let mut replicas = Vec::new();
    for r in 0..REPLICAS {
        // One Limiter per replica: separate store sessions, as separate servers have.
        let limiter = Limiter::builder(&url)
            .owner(format!("replica-{r}"))
            .connect()
            .await
            .unwrap();
        let sem = limiter.semaphore("api", CAP).await.unwrap();
        let layer = ClusterConcurrencyLimitLayer::builder(sem)
            .acquire_timeout(Duration::from_secs(50))
            .build()
            .unwrap();
        replicas.push((
            limiter,
            layer.layer(gauge.service(Duration::from_millis(50))),
        ));
    }
    let mut requests = Vec::new();
    for (r, (_, svc)) in replicas.iter().enumerate() {
        for i in 0..PER_REPLICA {
            let svc = svc.clone();
            requests.push(tokio::spawn(
                async move { call(&svc, r as u32 * 100 + i).await },
            ));
        }
    }
    for req in requests {
        req.await.unwrap().expect("every request is served");
    }
    assert_eq!(gauge.calls(), (REPLICAS * PER_REPLICA) as usize);
    assert!(
        gauge.max() <= CAP as usize,
        "{} requests ran at once across the replicas; the cap is {CAP}",
        gauge.max()
    );
    assert_eq!(
        gauge.max(),
        CAP as usize,
        "the cap was never reached: the requests did not run concurrently"
    );
    let sem = replicas[0].0.semaphore("api", CAP).await.unwrap();
    eventually("every permit released", Duration::from_secs(10), || async {
        used(&sem).await == 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_semaphore_rejects_after_the_deadline_and_leaves_no_waiter() {
    let cluster = EtcdCluster::single();
    let url = cluster.url("tower-timeout");
    let FullApi {
        other: _other,
        held,
        limiter: _limiter,
        sem,
    } = full_api(&url).await;
    let gauge = InFlight::default();
    let svc = ClusterConcurrencyLimitLayer::builder(sem.clone())
        .acquire_timeout(Duration::from_millis(300))
        .retry_after(Duration::from_secs(2))
        .build()
        .unwrap()
        .layer(gauge.service(Duration::ZERO));

    let t = Instant::now();
    let err = call(&svc, 1).await.unwrap_err();
    let took = t.elapsed();
    match &err {
        LimitError::Timeout {
            semaphore, waited, ..
        } => {
            assert_eq!(semaphore, "api");
            assert_eq!(*waited, Duration::from_millis(300));
        }
        other => panic!("expected Timeout, got {other:?}"),
    }
    assert_eq!(err.retry_after(), Some(Duration::from_secs(2)));
    assert!(err.is_rejected());
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_millis(1300),
        "rejected after {took:?}"
    );
    assert_eq!(gauge.calls(), 0, "a rejected request must not run");
    let st = sem.status().await.unwrap();
    assert_eq!(
        (st.used, st.waiting),
        (1, 0),
        "the timed-out request left its queue entry"
    );

    // A timeout is not a store failure: once the permit is free, the next request is served.
    held.release().await.unwrap();
    assert_eq!(call(&svc, 2).await.unwrap(), 2);
    assert_eq!(gauge.calls(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_semaphore_fails_open_without_taking_a_permit() {
    let cluster = EtcdCluster::single();
    let url = cluster.url("tower-open");
    let FullApi {
        other: _other,
        held: _held,
        limiter: _limiter,
        sem,
    } = full_api(&url).await;
    let gauge = InFlight::default();
    let svc = ClusterConcurrencyLimitLayer::builder(sem.clone())
        .acquire_timeout(Duration::from_millis(200))
        .on_timeout(Fallback::FailOpen)
        .build()
        .unwrap()
        .layer(gauge.service(Duration::ZERO));

    assert_eq!(call(&svc, 7).await.unwrap(), 7);
    assert_eq!(gauge.calls(), 1, "fail-open runs the request");
    let st = sem.status().await.unwrap();
    assert_eq!((st.used, st.waiting), (1, 0), "only the holder's permit");
    assert_eq!(st.holders.len(), 1);
    assert_eq!(st.holders[0].owner, "holder");
}

/// A Limiter that notices a dead store quickly.
async fn quick_limiter(url: &str) -> Limiter {
    Limiter::builder(url)
        .request_timeout(Duration::from_secs(1))
        .session_ttl(Duration::from_secs(2))
        .connect()
        .await
        .unwrap()
}

/// Calls until one is answered (either way) within 100 ms, i.e. without waiting on the store:
/// the breaker is open. Bounded: SLOW_OPEN_AFTER plus 10 s of slack.
async fn until_breaker_opens<S>(svc: &S)
where
    S: Service<u32, Response = u32, Error = LimitError<Infallible>> + Clone,
{
    let give_up =
        Instant::now() + clusterlimit::ClusterBreaker::SLOW_OPEN_AFTER + Duration::from_secs(10);
    for i in 0..100 {
        let t = Instant::now();
        let _ = call(svc, 1000 + i).await;
        if t.elapsed() < Duration::from_millis(100) {
            return;
        }
        assert!(Instant::now() < give_up, "the breaker never opened");
    }
    panic!("the breaker did not open in 100 requests");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_store_rejects_then_answers_at_once_and_recovers() {
    let mut cluster = EtcdCluster::single();
    let url = cluster.url("tower-down");
    let limiter = quick_limiter(&url).await;
    let sem = limiter.semaphore("api", 2).await.unwrap();
    let gauge = InFlight::default();
    let svc = ClusterConcurrencyLimitLayer::builder(sem)
        .acquire_timeout(Duration::from_millis(500))
        .store_retry_interval(Duration::from_secs(1))
        .build()
        .unwrap()
        .layer(gauge.service(Duration::ZERO));
    assert_eq!(call(&svc, 1).await.unwrap(), 1, "served while etcd runs");

    cluster.kill(0);
    let t = Instant::now();
    let err = call(&svc, 2).await.unwrap_err();
    assert!(
        matches!(err, LimitError::StoreUnavailable { .. }),
        "expected StoreUnavailable, got {err:?}"
    );
    assert_eq!(err.retry_after(), Some(Duration::from_secs(1)));
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "the first request learned of the dead store only after {:?}",
        t.elapsed()
    );
    // A dead store is silence, not an error: the breaker opens once the silence lasted
    // SLOW_OPEN_AFTER; until then each request waits its acquire timeout.
    until_breaker_opens(&svc).await;
    // Known down: the next requests do not wait for the store.
    for i in 0..5 {
        let t = Instant::now();
        let err = call(&svc, 10 + i).await.unwrap_err();
        assert!(
            matches!(err, LimitError::StoreUnavailable { .. }),
            "{err:?}"
        );
        assert!(
            t.elapsed() < Duration::from_millis(200),
            "took {:?}",
            t.elapsed()
        );
    }
    assert_eq!(gauge.calls(), 1, "no request ran without a permit");

    cluster.restart(0);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match call(&svc, 99).await {
            Ok(99) => break,
            Ok(other) => panic!("echo returned {other}"),
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "not served within 30 s of the restart: {e}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    assert_eq!(gauge.calls(), 2);
}

/// One store-down vocabulary for the permit and rate layers: the concurrency layer takes a
/// `StoreDownPolicy` (or its own `Fallback`), and refuses a local share, which only a rate
/// limit can apply, before any request.
#[tokio::test]
async fn a_local_store_down_policy_is_refused_by_the_concurrency_layer() {
    let limiter = Limiter::connect("memory://tower-local-policy")
        .await
        .unwrap();
    let sem = limiter.semaphore("api", 2).await.unwrap();
    let err = ClusterConcurrencyLimitLayer::builder(sem.clone())
        .on_store_error(StoreDownPolicy::Local { replicas: 3 })
        .build()
        .err();
    let Some(Error::InvalidArgument(why)) = err else {
        panic!("expected InvalidArgument, got {err:?}");
    };
    assert!(
        why.contains("local:3") && why.contains("fail_open or fail_closed"),
        "{why}"
    );
    for policy in [StoreDownPolicy::FailOpen, StoreDownPolicy::FailClosed] {
        assert!(ClusterConcurrencyLimitLayer::builder(sem.clone())
            .on_store_error(policy)
            .build()
            .is_ok());
    }
    assert!(ClusterConcurrencyLimitLayer::builder(sem)
        .on_store_error(Fallback::Reject)
        .build()
        .is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_store_fails_open_and_serves_every_request() {
    let mut cluster = EtcdCluster::single();
    let url = cluster.url("tower-down-open");
    let limiter = quick_limiter(&url).await;
    let sem = limiter.semaphore("api", 1).await.unwrap();
    let gauge = InFlight::default();
    let svc = ClusterConcurrencyLimitLayer::builder(sem)
        .acquire_timeout(Duration::from_millis(500))
        .on_store_error(StoreDownPolicy::FailOpen)
        .build()
        .unwrap()
        .layer(gauge.service(Duration::ZERO));

    cluster.kill(0);
    let t = Instant::now();
    assert_eq!(call(&svc, 1).await.unwrap(), 1);
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "took {:?}",
        t.elapsed()
    );
    let before = gauge.calls();
    until_breaker_opens(&svc).await;
    let t = Instant::now();
    for i in 0..10 {
        assert_eq!(call(&svc, i).await.unwrap(), i);
    }
    let warm_up = gauge.calls() - before - 10;
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "10 fail-open requests took {:?}: each waited for the dead store",
        t.elapsed()
    );
    assert_eq!(gauge.calls(), 11 + warm_up, "every request ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_store_counts_as_down_not_as_full() {
    let cluster = EtcdCluster::single();
    let proxy = FaultProxy::start(cluster.endpoints()[0].as_str());
    let url = format!("etcd://{}/tower-hung", proxy.connect_string());
    let limiter = quick_limiter(&url).await;
    let sem = limiter.semaphore("api", 1).await.unwrap();
    let gauge = InFlight::default();
    let svc = ClusterConcurrencyLimitLayer::builder(sem)
        .acquire_timeout(Duration::from_millis(300))
        .build()
        .unwrap()
        .layer(gauge.service(Duration::ZERO));
    assert_eq!(call(&svc, 1).await.unwrap(), 1);

    // Partition: nothing gets through and nothing answers, so the acquire's own deadline
    // passes; the store is still told apart from a full semaphore.
    proxy.blackhole();
    let t = Instant::now();
    let err = call(&svc, 2).await.unwrap_err();
    assert!(
        matches!(err, LimitError::StoreUnavailable { .. }),
        "expected StoreUnavailable, got {err:?}"
    );
    assert!(
        t.elapsed() < Duration::from_millis(300) + Duration::from_secs(2),
        "took {:?}",
        t.elapsed()
    );
    assert_eq!(gauge.calls(), 1);
}

/// An inner service that never answers: the request stays inside until it is dropped.
fn stuck(
    gauge: &InFlight,
) -> impl Service<u32, Response = u32, Error = Infallible, Future: Send> + Clone + Send {
    let gauge = gauge.clone();
    service_fn(move |_req: u32| {
        let inside = gauge.enter();
        async move {
            let _inside = inside;
            std::future::pending::<()>().await;
            Ok(0)
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_request_releases_its_permit() {
    let cluster = EtcdCluster::single();
    let url = cluster.url("tower-drop");
    let limiter = Limiter::connect(&url).await.unwrap();
    let sem = limiter.semaphore("api", 1).await.unwrap();
    let gauge = InFlight::default();
    let svc = ClusterConcurrencyLimitLayer::builder(sem.clone())
        .wait_forever()
        .build()
        .unwrap()
        .layer(stuck(&gauge));

    let running = tokio::spawn({
        let svc = svc.clone();
        async move { svc.oneshot(1).await }
    });
    eventually("the request runs", Duration::from_secs(10), || async {
        gauge.now() == 1
    })
    .await;
    assert_eq!(used(&sem).await, 1, "the running request holds the permit");

    running.abort(); // the client hung up: the response future is dropped
    let _ = running.await;
    assert_eq!(gauge.now(), 0);
    eventually("the permit released", Duration::from_secs(10), || async {
        used(&sem).await == 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_waiting_request_leaves_the_queue() {
    let cluster = EtcdCluster::single();
    let url = cluster.url("tower-drop-wait");
    let FullApi {
        other,
        held,
        limiter: _limiter,
        sem,
    } = full_api(&url).await;
    let gauge = InFlight::default();
    let svc = ClusterConcurrencyLimitLayer::builder(sem.clone())
        .wait_forever()
        .build()
        .unwrap()
        .layer(gauge.service(Duration::ZERO));

    let waiting = tokio::spawn({
        let svc = svc.clone();
        async move { svc.oneshot(1).await }
    });
    eventually("the request queues", Duration::from_secs(10), || async {
        sem.status().await.unwrap().waiting == 1
    })
    .await;
    waiting.abort();
    let _ = waiting.await;
    eventually(
        "the queue entry removed",
        Duration::from_secs(10),
        || async { sem.status().await.unwrap().waiting == 0 },
    )
    .await;

    // Nobody is left in line: the permit goes straight to the next asker once free.
    held.release().await.unwrap();
    let next = other.semaphore("api", 1).await.unwrap();
    let permit = next.try_acquire().await.expect("no stale waiter ahead");
    permit.release().await.unwrap();
    assert_eq!(gauge.calls(), 0, "the dropped request never ran");
}

/// An inner service that is not ready until `open` is set.
#[derive(Clone)]
struct Gate {
    open: Arc<AtomicBool>,
}

impl Service<u32> for Gate {
    type Response = u32;
    type Error = Infallible;
    type Future = std::future::Ready<Result<u32, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        if self.open.load(Ordering::SeqCst) {
            Poll::Ready(Ok(()))
        } else {
            cx.waker().wake_by_ref(); // poll again soon (a test stand-in for a real wakeup)
            Poll::Pending
        }
    }

    fn call(&mut self, req: u32) -> Self::Future {
        std::future::ready(Ok(req))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_ready_inner_service_holds_no_permit() {
    let cluster = EtcdCluster::single();
    let url = cluster.url("tower-ready");
    let limiter = Limiter::connect(&url).await.unwrap();
    let sem = limiter.semaphore("api", 1).await.unwrap();
    let open = Arc::new(AtomicBool::new(false));
    let mut svc = ClusterConcurrencyLimitLayer::new(sem.clone()).layer(Gate { open: open.clone() });

    assert!(
        timeout(Duration::from_millis(300), svc.ready())
            .await
            .is_err(),
        "the layer is ready while its inner service is not"
    );
    let st = sem.status().await.unwrap();
    assert_eq!(
        (st.used, st.waiting),
        (0, 0),
        "a not-ready replica took a permit"
    );

    open.store(true, Ordering::SeqCst);
    let reply = svc.ready().await.unwrap().call(5).await.unwrap();
    assert_eq!(reply, 5);
}

#[tokio::test]
async fn weight_per_request_counts_against_the_capacity() {
    let limiter = Limiter::connect("memory://tower-weight").await.unwrap();
    let sem = limiter.semaphore("api", 4).await.unwrap();
    let gauge = InFlight::default();
    let svc = ClusterConcurrencyLimitLayer::builder(sem)
        .permits_per_request(2)
        .acquire_timeout(Duration::from_secs(30))
        .build()
        .unwrap()
        .layer(gauge.service(Duration::from_millis(20)));
    let all: Vec<_> = (0..8).map(|i| call(&svc, i)).collect();
    for r in futures::future::join_all(all).await {
        r.unwrap();
    }
    assert_eq!(
        gauge.max(),
        2,
        "capacity 4 at weight 2 is 2 requests at once"
    );
}

#[tokio::test]
async fn bad_options_are_invalid_argument() {
    let limiter = Limiter::connect("memory://tower-options").await.unwrap();
    let sem = limiter.semaphore("api", 4).await.unwrap();
    let build_err = |b: clusterlimit::tower::ClusterConcurrencyLimitLayerBuilder| match b.build() {
        Err(Error::InvalidArgument(why)) => why,
        other => panic!("expected InvalidArgument, got {other:?}"),
    };
    let builder = || ClusterConcurrencyLimitLayer::builder(sem.clone());
    assert!(build_err(builder().permits_per_request(0)).contains("permits"));
    assert!(build_err(builder().acquire_timeout(Duration::ZERO)).contains("acquire timeout"));
    assert!(build_err(builder().store_retry_interval(Duration::ZERO)).contains("retry interval"));
    assert!(build_err(builder().retry_after(Duration::ZERO)).contains("retry-after"));

    // A weight above the capacity is known only to the store: every request says why, and no
    // fallback hides it.
    let gauge = InFlight::default();
    let svc = builder()
        .permits_per_request(5)
        .on_timeout(Fallback::FailOpen)
        .on_store_error(Fallback::FailOpen)
        .build()
        .unwrap()
        .layer(gauge.service(Duration::ZERO));
    match call(&svc, 1).await {
        Err(LimitError::Limiter(Error::InvalidArgument(why))) => {
            assert!(why.contains('5') && why.contains('4'), "{why}")
        }
        other => panic!("expected Limiter(InvalidArgument), got {other:?}"),
    }
    assert_eq!(gauge.calls(), 0);
}

#[tokio::test]
async fn closed_limiter_is_an_error_even_when_failing_open() {
    let limiter = Limiter::connect("memory://tower-closed").await.unwrap();
    let sem = limiter.semaphore("api", 1).await.unwrap();
    let gauge = InFlight::default();
    let svc = ClusterConcurrencyLimitLayer::builder(sem)
        .on_timeout(Fallback::FailOpen)
        .on_store_error(Fallback::FailOpen)
        .build()
        .unwrap()
        .layer(gauge.service(Duration::ZERO));
    limiter.close().await.unwrap();
    let err = call(&svc, 1).await.unwrap_err();
    assert!(matches!(err, LimitError::Limiter(Error::Closed)), "{err:?}");
    assert_eq!(err.retry_after(), None);
    assert_eq!(gauge.calls(), 0);
}

#[tokio::test]
async fn session_lost_while_waiting_is_a_store_failure() {
    let store = "tower-lost";
    let limiter = Limiter::connect(&format!("memory://{store}"))
        .await
        .unwrap();
    let sem = limiter.semaphore("api", 1).await.unwrap();
    // Held in the same session as the wait, so ending it cannot grant the wait first.
    let _held = sem.acquire().await.unwrap();
    let gauge = InFlight::default();
    let svc = ClusterConcurrencyLimitLayer::builder(sem.clone())
        .wait_forever()
        .build()
        .unwrap()
        .layer(gauge.service(Duration::ZERO));
    let waiting = tokio::spawn({
        let svc = svc.clone();
        async move { svc.oneshot(1).await }
    });
    eventually("the request queues", Duration::from_secs(10), || async {
        sem.status().await.unwrap().waiting == 1
    })
    .await;
    clusterlimit::backend::memory::expire_sessions(store);
    let err = timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the wait ends with its session")
        .unwrap()
        .unwrap_err();
    match err {
        LimitError::StoreUnavailable { source, .. } => {
            assert!(matches!(source, Error::SessionLost), "{source:?}")
        }
        other => panic!("expected StoreUnavailable, got {other:?}"),
    }
    assert_eq!(gauge.calls(), 0);
}

#[tokio::test]
async fn inner_errors_pass_through_unchanged() {
    let limiter = Limiter::connect("memory://tower-inner").await.unwrap();
    let sem = limiter.semaphore("api", 1).await.unwrap();
    let svc = ClusterConcurrencyLimitLayer::new(sem.clone()).layer(service_fn(|_: u32| async {
        Err::<u32, _>(std::io::Error::other("backend said no"))
    }));
    let err = svc.oneshot(1).await.unwrap_err();
    assert!(!err.is_rejected());
    match &err {
        LimitError::Service(e) => assert_eq!(e.to_string(), "backend said no"),
        other => panic!("expected Service, got {other:?}"),
    }
    assert_eq!(err.to_string(), "backend said no");
    // The permit is released (in the background) when the call ends, error or not.
    eventually("the permit released", Duration::from_secs(10), || async {
        used(&sem).await == 0
    })
    .await;
}

/// The names before 0.2.0 still build a working service (for one release, with a deprecation
/// warning: see `src/tower/concurrency/deprecated.rs`, whose doctests fail to compile under
/// `deny(deprecated)`).
#[tokio::test]
#[allow(deprecated)]
async fn old_names_still_build_a_service() {
    use clusterlimit::tower::{
        GlobalConcurrencyLimit, GlobalConcurrencyLimitLayer, GlobalConcurrencyLimitLayerBuilder,
    };
    let limiter = Limiter::connect("memory://tower-old-names").await.unwrap();
    let sem = limiter.semaphore("api", 1).await.unwrap();
    let builder: GlobalConcurrencyLimitLayerBuilder = GlobalConcurrencyLimitLayer::builder(sem);
    let layer: GlobalConcurrencyLimitLayer = builder.build().unwrap();
    let svc: GlobalConcurrencyLimit<_> =
        layer.layer(service_fn(
            |x: u32| async move { Ok::<_, Infallible>(x + 1) },
        ));
    // The same type as the new name: the alias is no wrapper.
    let svc: clusterlimit::tower::ClusterConcurrencyLimit<_> = svc;
    assert_eq!(svc.oneshot(41).await.unwrap(), 42);
    assert_eq!(layer.semaphore(), "api");
}

/// With an adaptive semaphore, each request reports its outcome: the default classifier counts
/// inner errors as drops, so a failing dependency brings the shared capacity down (AIMD), and
/// a custom classifier decides what a response means (here a "503" answer is a drop, a dropped
/// request says nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adaptive_semaphore_learns_from_request_outcomes() {
    use clusterlimit::adaptive::{Adaptive, Outcome};
    let cluster = EtcdCluster::single();
    let url = cluster.url("tower-adaptive");
    let limiter = Limiter::connect(&url).await.unwrap();
    let config = Adaptive::aimd()
        .min(2)
        .max(40)
        .initial(20)
        .window(Duration::from_millis(200));
    let sem = limiter.adaptive_semaphore("deps", config).await.unwrap();

    // Default classifier: errors are drops.
    let failing =
        ClusterConcurrencyLimitLayer::new(sem.clone()).layer(service_fn(|_: u32| async {
            Err::<u32, _>(std::io::Error::other("dependency overloaded"))
        }));
    eventually(
        "the capacity falls below 20",
        Duration::from_secs(10),
        || {
            let (svc, sem) = (failing.clone(), sem.clone());
            async move {
                for i in 0..5 {
                    let _ = svc.clone().oneshot(i).await;
                }
                sem.status().await.is_ok_and(|s| s.capacity < 20)
            }
        },
    )
    .await;
    let st = sem.adaptive_status().await.unwrap().unwrap();
    let last = st.last.unwrap();
    assert!(
        last.dropped > 0 && last.reason.contains("dropped"),
        "{last:?}"
    );

    // A classifier over the response: "503" answers are drops, others successes.
    let dropped_503 = Arc::new(AtomicUsize::new(0));
    let seen = dropped_503.clone();
    let layer = ClusterConcurrencyLimitLayer::new(sem.clone()).classify(
        move |r: &Result<&'static str, Infallible>, latency: Duration| match r {
            Ok("503") => {
                seen.fetch_add(1, Ordering::SeqCst);
                Outcome::Dropped
            }
            _ => Outcome::Success(latency),
        },
    );
    let svc = layer.layer(service_fn(|req: u32| async move {
        Ok::<_, Infallible>(if req.is_multiple_of(2) { "503" } else { "200" })
    }));
    for i in 0..4 {
        assert!(svc.clone().oneshot(i).await.is_ok());
    }
    assert_eq!(dropped_503.load(Ordering::SeqCst), 2);
    let _ = limiter.close().await;
}
