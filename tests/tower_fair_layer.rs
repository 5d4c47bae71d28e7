//! `ClusterConcurrencyLimitLayer::flows` on a fair semaphore (memory://, the store that keeps
//! them today): each request acquires in the flow and class its closure names, so a busy flow
//! does not starve another; a tag the semaphore refuses is a setup error naming why.

use clusterlimit::fair::{Classes, FairTag};
use clusterlimit::tower::{ClusterConcurrencyLimitLayer, LimitError};
use clusterlimit::{Error, Limiter, Semaphore};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::{timeout, Instant};
use tower::{service_fn, Layer, Service, ServiceExt};

/// A request: its tenant's letter (`'a'`: the flow `tenant-a`) and its number within the flow.
type Req = (char, u32);

/// The flow of a request.
fn tenant(req: &Req) -> FairTag {
    FairTag::new(format!("tenant-{}", req.0))
}

const LIMIT: Duration = Duration::from_secs(20);

/// An inner service that logs each request as it enters, then holds it until the test opens
/// the gate for one more request (`gate.add_permits(1)`).
#[derive(Clone)]
struct Gated {
    entered: Arc<Mutex<Vec<Req>>>,
    gate: Arc<tokio::sync::Semaphore>,
}

impl Gated {
    fn new() -> Gated {
        Gated {
            entered: Arc::default(),
            gate: Arc::new(tokio::sync::Semaphore::new(0)),
        }
    }

    fn service(
        &self,
    ) -> impl Service<Req, Response = Req, Error = Infallible, Future: Send> + Clone + Send {
        let me = self.clone();
        service_fn(move |req: Req| {
            me.entered.lock().unwrap().push(req);
            let gate = me.gate.clone();
            async move {
                gate.acquire().await.expect("gate open").forget();
                Ok(req)
            }
        })
    }

    fn entered(&self) -> Vec<Req> {
        self.entered.lock().unwrap().clone()
    }

    /// Waits until `n` requests have entered the inner service.
    async fn until_entered(&self, n: usize) {
        let deadline = Instant::now() + LIMIT;
        while self.entered.lock().unwrap().len() < n {
            assert!(
                Instant::now() < deadline,
                "{n} requests did not enter within {LIMIT:?}: {:?}",
                self.entered()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// Waits until the semaphore's holders and waiters number `n` together.
async fn until_queued(sem: &Semaphore, n: usize) {
    let deadline = Instant::now() + LIMIT;
    loop {
        let st = sem.status().await.unwrap();
        if st.holders.len() + st.waiting == n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{n} requests were not queued within {LIMIT:?}: {st:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Sends `req` through a clone of `svc` in a task of its own, once the semaphore has seen
/// the `before` requests sent earlier (so tokens follow the sending order).
async fn send<S>(svc: &S, sem: &Semaphore, req: Req, before: usize) -> JoinHandle<Req>
where
    S: Service<Req, Response = Req, Error = LimitError<Infallible>> + Clone + Send + 'static,
    S::Future: Send,
{
    let call = svc.clone().oneshot(req);
    let task = tokio::spawn(async move {
        timeout(Duration::from_secs(60), call)
            .await
            .expect("a request through the layer took over 60 s")
            .expect("the request was served")
    });
    until_queued(sem, before + 1).await;
    task
}

/// Tenant A sends six requests (two run, four wait), then tenant B sends one; one request of
/// A ends. Who enters next, on a semaphore of capacity 2?
async fn next_after_a_busy_flow(name: &str, tagged: bool) -> (Vec<Req>, Semaphore) {
    let limiter = Limiter::connect(&format!("memory://tower-fair-{name}"))
        .await
        .unwrap();
    let sem = limiter
        .fair_semaphore("api", 2, Classes::single())
        .await
        .unwrap();
    let gated = Gated::new();
    let layer = ClusterConcurrencyLimitLayer::builder(sem.clone())
        .wait_forever()
        .build()
        .unwrap();
    let inner = gated.service();
    let svc = if tagged {
        layer.flows(tenant).layer(inner).boxed_clone()
    } else {
        layer.layer(inner).boxed_clone()
    };
    let mut tasks = Vec::new();
    for i in 0..6 {
        tasks.push(send(&svc, &sem, ('a', i), tasks.len()).await);
    }
    gated.until_entered(2).await;
    tasks.push(send(&svc, &sem, ('b', 0), tasks.len()).await);
    assert_eq!(sem.status().await.unwrap().waiting, 5);
    gated.gate.add_permits(1);
    gated.until_entered(3).await;
    let third = gated.entered();
    // Everyone else through, one at a time.
    gated.gate.add_permits(tasks.len());
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(gated.entered().len(), 7);
    (third, sem)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_flow_cannot_starve_another() {
    let (entered, sem) = next_after_a_busy_flow("flows", true).await;
    assert_eq!(
        entered[2],
        ('b', 0),
        "B's one request goes at the first release, ahead of A's four waiting: {entered:?}"
    );
    // Permits are released in the background once a response is complete.
    until_queued(&sem, 0).await;

    // The same queue without `flows`: one flow, first come first served, B after all of A.
    let (entered, _) = next_after_a_busy_flow("no-flows", false).await;
    assert_eq!(entered[2], ('a', 2), "{entered:?}");
}

#[tokio::test]
async fn the_closure_names_flow_class_and_weight_in_status() {
    let limiter = Limiter::connect("memory://tower-fair-status")
        .await
        .unwrap();
    let classes: Classes = "interactive=50%,batch".parse().unwrap();
    let sem = limiter.fair_semaphore("api", 4, classes).await.unwrap();
    let gated = Gated::new();
    let svc = ClusterConcurrencyLimitLayer::new(sem.clone())
        .flows(|req: &Req| {
            let tag = tenant(req).weight(2);
            if req.1 == 0 {
                tag.class("batch")
            } else {
                tag
            }
        })
        .layer(gated.service());
    let t = send(&svc, &sem, ('a', 0), 0).await;
    gated.until_entered(1).await;
    let st = sem.status().await.unwrap();
    assert_eq!(st.holders[0].flow.as_deref(), Some("tenant-a"));
    assert_eq!(st.holders[0].class.as_deref(), Some("batch"));
    let batch = &st.classes[1];
    assert_eq!((batch.name.as_str(), batch.held), ("batch", 1), "{st:?}");
    assert_eq!(st.classes[0].held, 0, "{st:?}");
    gated.gate.add_permits(1);
    assert_eq!(t.await.unwrap(), ('a', 0));
}

#[tokio::test]
async fn a_tag_the_semaphore_refuses_is_a_setup_error() {
    let limiter = Limiter::connect("memory://tower-fair-bad").await.unwrap();
    let fair = limiter
        .fair_semaphore("fair", 2, "critical=1,batch".parse().unwrap())
        .await
        .unwrap();
    let plain = limiter.semaphore("plain", 2).await.unwrap();
    let gated = Gated::new();
    gated.gate.add_permits(100);
    let refused = |sem: Semaphore, tag: FairTag| {
        let svc = ClusterConcurrencyLimitLayer::new(sem)
            .flows(move |_: &Req| tag.clone())
            .layer(gated.service());
        async move {
            match timeout(LIMIT, svc.oneshot(('x', 0))).await.unwrap() {
                Err(LimitError::Limiter(Error::InvalidArgument(why))) => why,
                other => panic!("expected a setup error, got {other:?}"),
            }
        }
    };
    let why = refused(fair.clone(), FairTag::new("")).await;
    assert!(why.contains("flow name must be 1-128 bytes"), "{why}");
    let why = refused(fair.clone(), FairTag::new("a").class("gold")).await;
    assert!(why.contains("gold"), "{why}");
    let why = refused(fair.clone(), FairTag::new("a").weight(0)).await;
    assert!(why.contains("weight"), "{why}");
    let why = refused(plain, FairTag::new("a")).await;
    assert!(why.contains("fair"), "{why}");
    assert!(gated.entered().is_empty(), "no refused request ran");
    let st = fair.status().await.unwrap();
    assert_eq!((st.used, st.waiting), (0, 0), "{st:?}");
}
