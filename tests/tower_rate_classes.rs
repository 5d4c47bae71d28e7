//! `ClusterRateLimitLayer::classes` on real etcd: requests checked as the priority class a
//! closure names, in reject and wait mode and by the store-down answers; a class the quota
//! lacks, or a cost the class can never take, answered 400 on `class` (or the error), never a
//! panic.

use crate::support;

use axum::http::{Request, Response, StatusCode};
use clusterlimit::tower::{ClusterRateLimitLayer, HttpResponses, RateLimitError, RateLimitInfo};
use clusterlimit::{DecisionSource, Limiter, Quota, RateLimit, StoreDownPolicy};
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::EtcdCluster;
use tokio::time::{timeout, Instant};
use tower::{service_fn, Layer, Service, ServiceExt};

type Req = Request<String>;
type Res = Response<String>;

/// An inner HTTP service answering 200, counting its calls.
fn ok_service(
    calls: Arc<AtomicUsize>,
) -> impl Service<Req, Response = Res, Error = Infallible, Future: Send> + Clone + Send {
    service_fn(move |_req: Req| {
        calls.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, Infallible>(Response::new("ok".to_string())) }
    })
}

/// A request of tenant `t1` whose `x-class` header (if any) names its class and `x-cost` its
/// cost.
fn request(class: Option<&str>, cost: u64) -> Req {
    keyed("t1", class, cost)
}

/// [`request`] of tenant `key`.
fn keyed(key: &str, class: Option<&str>, cost: u64) -> Req {
    let mut b = Request::builder()
        .uri("/")
        .header("x-key", key)
        .header("x-cost", cost.to_string());
    if let Some(c) = class {
        b = b.header("x-class", c);
    }
    b.body(String::new()).unwrap()
}

/// The value of header `name`, if any.
fn header(req: &Req, name: &str) -> Option<String> {
    req.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

fn key_of(req: &Req) -> String {
    header(req, "x-key").unwrap_or_default()
}

fn cost_of(req: &Req) -> u64 {
    header(req, "x-cost")
        .and_then(|c| c.parse().ok())
        .unwrap_or(1)
}

fn class_of(req: &Req) -> Option<String> {
    header(req, "x-class")
}

type Fns<T> = fn(&Req) -> T;
type ClassLayer = ClusterRateLimitLayer<Fns<String>, Fns<u64>, HttpResponses, Fns<Option<String>>>;

/// The layer on `rl`: the key from `x-key`, the class from `x-class`, the cost from `x-cost`.
fn layer(rl: &RateLimit) -> ClassLayer {
    ClusterRateLimitLayer::new(rl.clone(), key_of as Fns<String>)
        .cost(cost_of as Fns<u64>)
        .classes(class_of as Fns<Option<String>>)
}

/// One request through a clone of `svc`, bounded in time.
async fn send<S>(svc: &S, req: Req) -> Res
where
    S: Service<Req, Response = Res, Error = Infallible> + Clone,
{
    timeout(Duration::from_secs(60), svc.clone().oneshot(req))
        .await
        .expect("a request through the rate layer took over 60 s")
        .unwrap()
}

fn info(res: &Res) -> RateLimitInfo {
    res.extensions()
        .get::<RateLimitInfo>()
        .cloned()
        .unwrap_or_else(|| panic!("no RateLimitInfo on {res:?}"))
}

/// A 400 problem naming `class`, whose detail holds `needle`.
fn assert_bad_class(res: &Res, needle: &str) {
    assert_eq!(res.status(), StatusCode::BAD_REQUEST, "{}", res.body());
    let body: serde_json::Value = serde_json::from_str(res.body()).unwrap();
    assert_eq!(body["field"], "class", "{body}");
    assert!(body["detail"].as_str().unwrap().contains(needle), "{body}");
}

/// A quota of 3 per minute where batch leaves 2 (batch takes 1 of a full bucket).
fn quota() -> Quota {
    Quota::per_minute(3).reserve("batch", 2)
}

async fn on_etcd(prefix: &str, quota: Quota) -> (EtcdCluster, Limiter, RateLimit) {
    let cluster = EtcdCluster::single();
    let limiter = Limiter::builder(&cluster.url(prefix))
        .request_timeout(Duration::from_secs(1))
        .session_ttl(Duration::from_secs(2))
        .connect()
        .await
        .unwrap();
    let rl = limiter.rate_limit("api", quota).await.unwrap();
    (cluster, limiter, rl)
}

/// Reject mode: the class stops at its reserve, a request without one takes it; unknown
/// classes and costs the class can never take are 400s on `class`, never run nor counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_class_stops_at_its_reserve_and_a_bad_class_is_a_400() {
    let (_cluster, _limiter, rl) = on_etcd("tower-classes", quota()).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = layer(&rl).layer(ok_service(calls.clone()));

    let res = send(&svc, request(Some("batch"), 1)).await;
    assert_eq!(res.status(), StatusCode::OK, "{}", res.body());
    assert_eq!(
        info(&res).decision.remaining,
        0,
        "what batch may still take"
    );
    let res = send(&svc, request(Some("batch"), 1)).await;
    assert_eq!(
        res.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        res.body()
    );
    assert!(res.headers().contains_key("retry-after"));

    assert_bad_class(&send(&svc, request(Some("bulk"), 1)).await, "bulk");
    assert_bad_class(&send(&svc, request(Some("batch"), 2)).await, "batch");
    assert_bad_class(&send(&svc, request(Some("a b"), 1)).await, "a b");
    assert_eq!(calls.load(Ordering::SeqCst), 1, "only the admitted one ran");

    // The bad ones counted nothing: the reserve is whole for a request without a class.
    let res = send(&svc, request(None, 2)).await;
    assert_eq!(res.status(), StatusCode::OK, "{}", res.body());
    assert_eq!(rl.check_n("t1", 0).await.unwrap().remaining, 0);
}

/// Wait mode waits as the class: a batch request waits for its reserve to come back (20 s
/// away: past a 200 ms wait, rejected at once with nothing consumed) while one without a
/// class passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_mode_waits_as_the_class() {
    // 3 per 3 s (one per second), burst 3; batch leaves 2.
    let (_cluster, _limiter, rl) = on_etcd(
        "tower-classes-wait",
        Quota::new(3, Duration::from_secs(3)).reserve("batch", 2),
    )
    .await;
    let svc = layer(&rl)
        .wait_up_to(Duration::from_secs(5))
        .layer(ok_service(Arc::default()));
    let short = layer(&rl)
        .wait_up_to(Duration::from_millis(200))
        .layer(ok_service(Arc::default()));
    assert_eq!(send(&svc, request(Some("batch"), 1)).await.status(), 200);
    // Batch must wait about a second for its reserve to refill: past 200 ms, at once.
    let t = Instant::now();
    let res = send(&short, request(Some("batch"), 1)).await;
    assert_eq!(
        res.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        res.body()
    );
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );
    let t = Instant::now();
    let res = send(&svc, request(Some("batch"), 1)).await;
    assert_eq!(res.status(), StatusCode::OK, "{}", res.body());
    println!("a batch request waited {:?} for its reserve", t.elapsed());
    assert!(
        t.elapsed() >= Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );
    // No class: the reserve is taken at once.
    let t = Instant::now();
    assert_eq!(send(&svc, request(None, 2)).await.status(), 200);
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );
    // A bad class in wait mode is the same 400, at once.
    assert_bad_class(&send(&svc, request(Some("bulk"), 1)).await, "bulk");
}

/// The store-down answers take the class: fail open admits it (its reserve held back in the
/// decision), a local share keeps the class's share of its reserve; a service that is not
/// HTTP gets `InvalidRequest` on `class`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_down_answers_and_errors_take_the_class() {
    let (mut cluster, _limiter, rl) = on_etcd("tower-classes-down", quota()).await;
    let down = |policy| {
        layer(&rl)
            .store_down(policy)
            .store_timeout(Duration::from_millis(300))
            .store_retry_interval(Duration::from_secs(5))
    };
    let (open_layer, local_layer) = (
        down(StoreDownPolicy::FailOpen),
        down(StoreDownPolicy::Local { replicas: 1 }),
    );
    let open = open_layer.layer(ok_service(Arc::default()));
    let local = local_layer.layer(ok_service(Arc::default()));
    cluster.kill(0);
    // Until each breaker opens, a request waits its store timeout (on another key, so the
    // local share of `t1` stays whole); bounded: 40 requests, 20 s.
    for (svc, l) in [(&open, &open_layer), (&local, &local_layer)] {
        let deadline = Instant::now() + Duration::from_secs(20);
        for i in 0.. {
            if l.guard().store_down() {
                break;
            }
            assert!(
                i < 40 && Instant::now() < deadline,
                "the breaker did not open"
            );
            let res = send(svc, keyed("warm", None, 1)).await;
            assert_ne!(info(&res).source, DecisionSource::Store);
        }
    }
    let res = send(&open, request(Some("batch"), 1)).await;
    assert_eq!(res.status(), StatusCode::OK, "{}", res.body());
    let i = info(&res);
    assert_eq!(
        (i.source, i.decision.remaining),
        (DecisionSource::FailOpen, 1)
    );
    assert_bad_class(&send(&open, request(Some("bulk"), 1)).await, "bulk");

    // The local share (the whole quota, one replica): batch takes 1, then leaves the 2.
    let res = send(&local, request(Some("batch"), 1)).await;
    assert_eq!(res.status(), StatusCode::OK, "{}", res.body());
    assert_eq!(info(&res).source, DecisionSource::Local);
    let res = send(&local, request(Some("batch"), 1)).await;
    assert_eq!(
        res.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        res.body()
    );
    assert_eq!(info(&res).source, DecisionSource::Local);
    let res = send(&local, request(None, 2)).await;
    assert_eq!(
        res.status(),
        StatusCode::OK,
        "the reserve stays for the rest"
    );

    // Not HTTP: the error names the class.
    let svc = ClusterRateLimitLayer::new(rl.clone(), |_: &&'static str| "t1".to_string())
        .classes(|c: &&'static str| *c)
        .reject_as_error()
        .layer(service_fn(|_: &str| async { Ok::<_, std::io::Error>(()) }));
    match svc.oneshot("bulk").await {
        Err(RateLimitError::InvalidRequest { field, source }) => {
            assert_eq!(field, "class");
            assert!(source.to_string().contains("bulk"), "{source}");
        }
        other => panic!("{other:?}"),
    }
}
