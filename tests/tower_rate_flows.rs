//! `ClusterRateLimitLayer::flows` on real etcd: requests checked as the flow a closure names,
//! on a quota with fair flows, in reject and wait mode and by the store-down answers; a bad
//! flow name answered 400 on `flow` (or the error), never run.

use crate::support;

use axum::http::{Request, Response, StatusCode};
use clusterlimit::tower::{ClusterRateLimitLayer, HttpResponses, RateLimitError, RateLimitInfo};
use clusterlimit::{Algorithm, DecisionSource, Limiter, Quota, RateLimit, StoreDownPolicy};
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

/// A request on key `key` of flow `flow` (its `x-flow` header) costing `cost`.
fn keyed(key: &str, flow: &str, cost: u64) -> Req {
    Request::builder()
        .uri("/")
        .header("x-key", key)
        .header("x-flow", flow)
        .header("x-cost", cost.to_string())
        .body(String::new())
        .unwrap()
}

/// [`keyed`] on the key `all`.
fn request(flow: &str, cost: u64) -> Req {
    keyed("all", flow, cost)
}

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

fn flow_of(req: &Req) -> Option<String> {
    header(req, "x-flow")
}

type Fns<T> = fn(&Req) -> T;
type FlowLayer = ClusterRateLimitLayer<
    Fns<String>,
    Fns<u64>,
    HttpResponses,
    clusterlimit::tower::NoClass,
    Fns<Option<String>>,
>;

/// The layer on `rl`: the key from `x-key`, the flow from `x-flow`, the cost from `x-cost`.
fn layer(rl: &RateLimit) -> FlowLayer {
    ClusterRateLimitLayer::new(rl.clone(), key_of as Fns<String>)
        .cost(cost_of as Fns<u64>)
        .flows(flow_of as Fns<Option<String>>)
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

/// A 400 problem naming `flow`, whose detail holds `needle`.
fn assert_bad_flow(res: &Res, needle: &str) {
    assert_eq!(res.status(), StatusCode::BAD_REQUEST, "{}", res.body());
    let body: serde_json::Value = serde_json::from_str(res.body()).unwrap();
    assert_eq!(body["field"], "flow", "{body}");
    assert!(body["detail"].as_str().unwrap().contains(needle), "{body}");
}

/// 10 a year on a fixed window, shared by flow.
fn quota() -> Quota {
    Quota::new(10, Duration::from_secs(365 * 86_400))
        .algorithm(Algorithm::FixedWindow)
        .fair_flows()
}

async fn on_etcd(prefix: &str) -> (EtcdCluster, Limiter, RateLimit) {
    let cluster = EtcdCluster::single();
    let limiter = Limiter::builder(&cluster.url(prefix))
        .request_timeout(Duration::from_secs(1))
        .session_ttl(Duration::from_secs(2))
        .connect()
        .await
        .unwrap();
    let rl = limiter.rate_limit("api", quota()).await.unwrap();
    (cluster, limiter, rl)
}

/// Big takes 8, small asks 5 (denied, counted), big must leave small its 2; `status` of each
/// of the four requests through `reject` then `then` (reject mode, or wait mode).
async fn fair_sequence<S>(reject: &S, then: &S, source: DecisionSource)
where
    S: Service<Req, Response = Res, Error = Infallible> + Clone,
{
    let res = send(reject, request("big", 8)).await;
    assert_eq!(res.status(), StatusCode::OK, "{}", res.body());
    assert_eq!(info(&res).source, source);
    let res = send(reject, request("small", 5)).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    let res = send(then, request("big", 1)).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS, "small's due");
    let res = send(then, request("small", 2)).await;
    assert_eq!(res.status(), StatusCode::OK, "{}", res.body());
    assert_eq!(info(&res).source, source);
}

/// Reject and wait mode: a flow that asked is kept its share from the others; bad flow names
/// are 400s on `flow`, never run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_flow_keeps_its_share_and_a_bad_flow_is_a_400() {
    let (_cluster, _limiter, rl) = on_etcd("tower-flows").await;
    let calls = Arc::new(AtomicUsize::new(0));
    let reject = layer(&rl).layer(ok_service(calls.clone()));
    let wait = layer(&rl)
        .wait_up_to(Duration::from_secs(1))
        .layer(ok_service(calls.clone()));
    let t = Instant::now();
    fair_sequence(&reject, &wait, DecisionSource::Store).await;
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "a denial a year away is answered at once: {:?}",
        t.elapsed()
    );
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    for (svc, bad) in [(&reject, ""), (&wait, "tab\there")] {
        let res = send(svc, request(bad, 1)).await;
        assert_bad_flow(&res, "flow name");
    }
    let long = "x".repeat(129);
    assert_bad_flow(&send(&reject, request(&long, 1)).await, "1-128 bytes");
    assert_eq!(calls.load(Ordering::SeqCst), 2, "bad requests never run");
}

/// The store-down answers take the flow: fail open admits whatever the flow, a local share
/// keeps fair flows among this process's requests; a service that is not HTTP gets
/// `InvalidRequest` on `flow`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_down_answers_and_errors_take_the_flow() {
    let (mut cluster, _limiter, rl) = on_etcd("tower-flows-down").await;
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
    // local share of `all` stays whole); bounded: 40 requests, 20 s.
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
            let res = send(svc, keyed("warm", "w", 1)).await;
            assert_ne!(info(&res).source, DecisionSource::Store);
        }
    }
    let res = send(&open, request("big", 10)).await;
    assert_eq!(res.status(), StatusCode::OK, "{}", res.body());
    assert_eq!(info(&res).source, DecisionSource::FailOpen);
    assert_bad_flow(&send(&open, request("", 1)).await, "flow name");

    // The local share (the whole quota, one replica) keeps fair flows.
    fair_sequence(&local, &local, DecisionSource::Local).await;

    // Not HTTP: the error names the flow.
    let svc = ClusterRateLimitLayer::new(rl.clone(), |_: &&'static str| "t1".to_string())
        .flows(|f: &&'static str| *f)
        .reject_as_error()
        .layer(service_fn(|_: &str| async { Ok::<_, std::io::Error>(()) }));
    match svc.oneshot("a\u{7}b").await {
        Err(RateLimitError::InvalidRequest { field, source }) => {
            assert_eq!(field, "flow");
            assert!(source.to_string().contains("control character"), "{source}");
        }
        other => panic!("{other:?}"),
    }
}
