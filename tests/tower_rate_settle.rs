//! `ClusterRateLimitLayer::settle` on real stores (memory:// and etcd; the lower/higher cases
//! on Redis too): each request reserves its estimate and is settled at the cost its response
//! reports. A lower cost gives the difference back on the key, a higher one runs it into debt
//! (the next request refused); an error, a dropped request and a response that does not say
//! settle as `OnNoResponse` says (the estimate kept by default); a denied reservation is a 429
//! that runs nothing; a settlement that fails is counted; a store-down answer settles nothing.

use crate::support;

use axum::http::{Request, Response, StatusCode};
use clusterlimit::tower::{
    ClusterRateLimitLayer, HttpResponses, NoClass, NoRateFlow, NoResponse, OnNoResponse,
    RateLimitError,
};
use clusterlimit::{Algorithm, Limiter, Quota, RateLimit, StoreDownPolicy};
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::redis::RedisServer;
use support::EtcdCluster;
use tokio::sync::Notify;
use tokio::time::{sleep, timeout, Instant};
use tower::{service_fn, Layer, Service, ServiceExt};

type Req = Request<String>;
type Res = Response<String>;

/// The key's quota: 100 an hour, so the refill (one per 36 s) does not blur the numbers.
fn quota() -> Quota {
    Quota::new(100, Duration::from_secs(3600))
}

/// The value of request header `name` as a number, if any.
fn number(req: &Req, name: &str) -> Option<u64> {
    req.headers().get(name)?.to_str().ok()?.parse().ok()
}

/// The upstream: answers with its usage in `x-usage` (the request's `x-use`; none without
/// it), fails with an I/O error given `x-fail`, never answers given `x-hang` (after saying
/// it was called).
fn upstream(
    calls: Arc<AtomicUsize>,
    called: Arc<Notify>,
) -> impl Service<Req, Response = Res, Error = io::Error, Future: Send> + Clone + Send {
    service_fn(move |req: Req| {
        calls.fetch_add(1, Ordering::SeqCst);
        called.notify_one();
        let usage = number(&req, "x-use");
        let fail = req.headers().contains_key("x-fail");
        let hang = req.headers().contains_key("x-hang");
        async move {
            if hang {
                std::future::pending::<()>().await;
            }
            if fail {
                return Err(io::Error::new(
                    io::ErrorKind::ConnectionRefused,
                    "upstream down",
                ));
            }
            let mut res = Response::new("ok".to_string());
            if let Some(n) = usage {
                res.headers_mut().insert("x-usage", n.into());
            }
            Ok(res)
        }
    })
}

/// A request of tenant `key` estimated at `estimate`, with extra headers.
fn request(key: &str, estimate: u64, extra: &[(&str, &str)]) -> Req {
    let mut b = Request::builder()
        .uri("/")
        .header("x-key", key)
        .header("x-estimate", estimate.to_string());
    for (name, value) in extra {
        b = b.header(*name, *value);
    }
    b.body(String::new()).unwrap()
}

fn key_of(req: &Req) -> String {
    req.headers()["x-key"].to_str().unwrap().to_string()
}

fn estimate_of(req: &Req) -> u64 {
    number(req, "x-estimate").unwrap_or(1)
}

fn usage_of(res: &Res) -> Option<u64> {
    res.headers().get("x-usage")?.to_str().ok()?.parse().ok()
}

/// The layer of these tests: key, estimate and real cost read by plain functions.
type SettleLayer = ClusterRateLimitLayer<
    fn(&Req) -> String,
    fn(&Req) -> u64,
    HttpResponses,
    NoClass,
    NoRateFlow,
    fn(&Res) -> Option<u64>,
>;

/// The layer under test on `rl`: estimate from `x-estimate`, settled from `x-usage`.
fn layer(rl: &RateLimit) -> SettleLayer {
    ClusterRateLimitLayer::new(rl.clone(), key_of as fn(&Req) -> String)
        .cost(estimate_of as fn(&Req) -> u64)
        .settle(usage_of as fn(&Res) -> Option<u64>)
}

/// One request through a clone of `svc`, bounded in time.
async fn send<S>(svc: &S, req: Req) -> Result<Res, io::Error>
where
    S: Service<Req, Response = Res, Error = io::Error> + Clone,
{
    timeout(Duration::from_secs(30), svc.clone().oneshot(req))
        .await
        .expect("a request through the rate layer took over 30 s")
}

/// Waits (bounded: 10 s) until `done()` settlements have finished, settled or failed.
async fn settled(stats: impl Fn() -> clusterlimit::tower::SettleStats, done: u64) {
    let start = Instant::now();
    for _ in 0..1_000 {
        let s = stats();
        if s.settled + s.failed >= done {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "settlements: {s:?}"
        );
        sleep(Duration::from_millis(10)).await;
    }
    panic!("settlements still short of {done}: {:?}", stats());
}

/// What keeps the stores and their Limiters alive through a test.
type Keep = (EtcdCluster, Vec<Limiter>);

/// The stores every case runs on: memory:// and a fresh etcd.
async fn stores(test: &str) -> (Vec<(String, RateLimit)>, Keep) {
    let cluster = EtcdCluster::single();
    let (mut out, mut limiters) = (Vec::new(), Vec::new());
    for url in [format!("memory://{test}"), cluster.url(test)] {
        let limiter = Limiter::connect(&url).await.unwrap();
        out.push((url, limiter.rate_limit("tokens", quota()).await.unwrap()));
        limiters.push(limiter);
    }
    (out, (cluster, limiters))
}

/// The key's remaining, asserted within one unit of `expected`: above it, the refill while the
/// test runs; below it, a refund gives back what of the reservation still lies ahead counted
/// from before its check (a reservation's units held the key from its decision at the latest,
/// and the wait mode stamps it at the wait's start), so a settle loses up to the check's
/// latency of time, a part of a unit.
async fn assert_remaining(rl: &RateLimit, key: &str, expected: u64, store: &str) {
    let b = rl.balance(key).await.unwrap();
    assert!(
        (expected.saturating_sub(1)..=expected + 1).contains(&b.remaining) && b.debt == 0,
        "{store}: {key} expected {expected} left, has {b:?}"
    );
}

/// Lower than the estimate: the difference comes back; equal: nothing moves; the same on
/// GCRA (memory://, etcd, Redis) and a fixed window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lower_cost_gives_the_difference_back() {
    let (mut rls, _etcd) = stores("settle-lower").await;
    let redis = RedisServer::start();
    let on_redis = Limiter::connect(&redis.url("settle-lower")).await.unwrap();
    rls.push((
        redis.url(""),
        on_redis.rate_limit("tokens", quota()).await.unwrap(),
    ));
    let window = Quota::new(100, Duration::from_secs(3600)).algorithm(Algorithm::FixedWindow);
    let windowed = Limiter::connect("memory://settle-lower-window")
        .await
        .unwrap();
    rls.push((
        "fixed window".into(),
        windowed.rate_limit("w", window).await.unwrap(),
    ));
    for (store, rl) in &rls {
        let calls = Arc::new(AtomicUsize::new(0));
        let layer = layer(rl);
        let svc = layer.layer(upstream(calls.clone(), Arc::default()));
        let res = send(&svc, request("t1", 40, &[("x-use", "10")]))
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK, "{store}: {}", res.body());
        settled(|| layer.settle_stats(), 1).await;
        assert_remaining(rl, "t1", 90, store).await;
        let res = send(&svc, request("t1", 30, &[("x-use", "30")]))
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK, "{store}");
        settled(|| layer.settle_stats(), 2).await;
        assert_remaining(rl, "t1", 60, store).await;
        assert_eq!(layer.settle_stats().failed, 0, "{store}");
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }
}

/// Higher than the estimate: the rest is charged into debt, and the next request is refused
/// with a 429 and a `Retry-After` that counts the debt (never running it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_higher_cost_runs_the_key_into_debt() {
    let (rls, _etcd) = stores("settle-higher").await;
    for (store, rl) in &rls {
        let calls = Arc::new(AtomicUsize::new(0));
        let layer = layer(rl);
        let svc = layer.layer(upstream(calls.clone(), Arc::default()));
        let res = send(&svc, request("t1", 10, &[("x-use", "150")]))
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK, "{store}: {}", res.body());
        settled(|| layer.settle_stats(), 1).await;
        let b = rl.balance("t1").await.unwrap();
        assert!((49..=50).contains(&b.debt), "{store}: {b:?}");
        let res = send(&svc, request("t1", 1, &[("x-use", "1")]))
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS, "{store}");
        let retry: u64 = res.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        // 50 owed and 1 asked, at 36 s each.
        assert!(retry >= 49 * 36, "{store}: Retry-After {retry}");
        assert_eq!(
            calls.load(Ordering::SeqCst),
            1,
            "{store}: the refused one never ran"
        );
    }
}

/// The inner service fails: the estimate stays taken by default; `RefundAll` gives it all
/// back; a classifier settles at what it says, seeing the service's own error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_settles_as_the_policy_says() {
    let (rls, _etcd) = stores("settle-error").await;
    let seen = Arc::new(AtomicUsize::new(0));
    let seen_in = seen.clone();
    let half = OnNoResponse::classify(move |why, estimate| {
        let refused = why.error::<io::Error>().map(io::Error::kind);
        assert_eq!(refused, Some(io::ErrorKind::ConnectionRefused));
        seen_in.fetch_add(1, Ordering::SeqCst);
        estimate / 2
    });
    let policies = [
        (None, 60),
        (Some(OnNoResponse::KeepEstimate), 60),
        (Some(OnNoResponse::RefundAll), 100),
        (Some(half), 80),
    ];
    for (store, rl) in &rls {
        for (i, (policy, expected)) in policies.iter().enumerate() {
            let mut layer = layer(rl);
            if let Some(p) = policy {
                layer = layer.on_no_response(p.clone());
            }
            let svc = layer.layer(upstream(Arc::default(), Arc::default()));
            let key = format!("t{i}");
            let e = send(&svc, request(&key, 40, &[("x-fail", "1")]))
                .await
                .unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused, "{store}");
            settled(|| layer.settle_stats(), 1).await;
            assert_remaining(rl, &key, *expected, store).await;
        }
    }
    assert_eq!(seen.load(Ordering::SeqCst), rls.len());
}

/// The same for services that are not HTTP: the inner error comes back as
/// `RateLimitError::Service` and settles as the policy says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_as_error_settles_as_the_policy_says() {
    let limiter = Limiter::connect("memory://settle-as-error").await.unwrap();
    let rl = limiter.rate_limit("tokens", quota()).await.unwrap();
    let layer = layer(&rl)
        .reject_as_error()
        .on_no_response(OnNoResponse::RefundAll);
    let svc = layer.layer(upstream(Arc::default(), Arc::default()));
    let e = svc
        .oneshot(request("t1", 40, &[("x-fail", "1")]))
        .await
        .unwrap_err();
    assert!(
        matches!(e, RateLimitError::Service(ref e) if e.kind() == io::ErrorKind::ConnectionRefused),
        "{e:?}"
    );
    settled(|| layer.settle_stats(), 1).await;
    assert_remaining(&rl, "t1", 100, "memory").await;
}

/// The response future dropped while the inner service works on it: settled on drop, as the
/// policy says for a cancelled request (the classifier told it is cancelled).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_request_settles_as_the_policy_says() {
    let (rls, _etcd) = stores("settle-cancel").await;
    let cancelled = OnNoResponse::classify(|why, _| match why {
        NoResponse::Cancelled => 5,
        _ => panic!("not a cancellation: {why:?}"),
    });
    let policies = [
        (OnNoResponse::KeepEstimate, 60),
        (OnNoResponse::RefundAll, 100),
        (cancelled, 95),
    ];
    for (store, rl) in &rls {
        for (i, (policy, expected)) in policies.iter().enumerate() {
            let layer = layer(rl).on_no_response(policy.clone());
            let called = Arc::new(Notify::new());
            let svc = layer.layer(upstream(Arc::default(), called.clone()));
            let key = format!("t{i}");
            let call = tokio::spawn(svc.oneshot(request(&key, 40, &[("x-hang", "1")])));
            timeout(Duration::from_secs(10), called.notified())
                .await
                .expect("the upstream was not called within 10 s");
            call.abort();
            assert!(call.await.unwrap_err().is_cancelled());
            settled(|| layer.settle_stats(), 1).await;
            assert_remaining(rl, &key, *expected, store).await;
        }
    }
}

/// A response that does not report its cost keeps the estimate (counted as settled).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_without_its_cost_keeps_the_estimate() {
    let (rls, _etcd) = stores("settle-no-usage").await;
    for (store, rl) in &rls {
        let layer = layer(rl).on_no_response(OnNoResponse::RefundAll);
        let svc = layer.layer(upstream(Arc::default(), Arc::default()));
        let res = send(&svc, request("t1", 40, &[])).await.unwrap();
        assert_eq!(res.status(), StatusCode::OK, "{store}");
        assert_eq!(layer.settle_stats().settled, 1, "{store}: kept at once");
        assert_remaining(rl, "t1", 60, store).await;
    }
}

/// A denied reservation is a 429 that runs nothing and settles nothing; an estimate of 0 is
/// a peek (admitted while the key is not in debt), charged afterwards, in both modes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_reservation_is_a_429_and_an_estimate_of_0_a_peek() {
    let (rls, _etcd) = stores("settle-denied").await;
    for (store, rl) in &rls {
        let calls = Arc::new(AtomicUsize::new(0));
        let layer = layer(rl).wait_up_to(Duration::from_millis(100));
        let svc = layer.layer(upstream(calls.clone(), Arc::default()));
        let res = send(&svc, request("t1", 80, &[("x-use", "80")]))
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK, "{store}");
        let res = send(&svc, request("t1", 80, &[("x-use", "1")]))
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS, "{store}");
        assert!(res.headers().contains_key("retry-after"), "{store}");
        assert_eq!(
            calls.load(Ordering::SeqCst),
            1,
            "{store}: the denied one never ran"
        );
        assert_eq!(layer.settle_stats().settled, 1, "{store}");

        // Estimate 0: admitted (20 left), charged 30 (10 owed), then refused.
        let res = send(&svc, request("t1", 0, &[("x-use", "30")]))
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK, "{store}: {}", res.body());
        settled(|| layer.settle_stats(), 2).await;
        let b = rl.balance("t1").await.unwrap();
        assert!((9..=10).contains(&b.debt), "{store}: {b:?}");
        let res = send(&svc, request("t1", 0, &[("x-use", "30")]))
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS, "{store}");
        assert_eq!(calls.load(Ordering::SeqCst), 2, "{store}");
    }
}

/// The library's log lines at warn and above, captured once per test process (nextest runs
/// each test in its own process; under `cargo test` the first test to ask installs it).
fn warnings() -> Arc<std::sync::Mutex<Vec<u8>>> {
    static LOGS: std::sync::OnceLock<Arc<std::sync::Mutex<Vec<u8>>>> = std::sync::OnceLock::new();
    LOGS.get_or_init(|| {
        let buffer = Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = buffer.clone();
        let _ = tracing_subscriber::fmt()
            .with_env_filter("clusterlimit=warn")
            .with_ansi(false)
            .with_target(false)
            .with_writer(move || LogSink(sink.clone()))
            .try_init();
        buffer
    })
    .clone()
}

struct LogSink(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for LogSink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A settlement the store refuses (a cost above the most one charge may move a key by) is
/// counted as failed, logged in words (which limit, which key, what it leaves behind), and
/// leaves the estimate taken; the response is not held back by it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_settlement_is_counted_and_logged_and_keeps_the_estimate() {
    let logs = warnings();
    let (rls, _etcd) = stores("settle-failed").await;
    let huge = (clusterlimit::MAX_CHARGE + 100).to_string();
    for (store, rl) in &rls {
        let layer = layer(rl);
        let svc = layer.layer(upstream(Arc::default(), Arc::default()));
        let res = send(&svc, request("t1", 40, &[("x-use", &huge)]))
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK, "{store}");
        settled(|| layer.settle_stats(), 1).await;
        assert_eq!(layer.settle_stats().failed, 1, "{store}");
        assert_remaining(rl, "t1", 60, store).await;
    }
    let text = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
    let lines: Vec<&str> = text.lines().filter(|l| l.contains("settling")).collect();
    assert_eq!(lines.len(), 2, "one warning per failure:\n{text}");
    for line in lines {
        for words in [
            "WARN",
            "limit=\"tokens\"",
            "key=\"t1\"",
            "estimate=40",
            "is not charged",
        ] {
            assert!(line.contains(words), "{words:?} missing from:\n{line}");
        }
        for dump in ["Error(", "Some(", "::", "{ "] {
            assert!(!line.contains(dump), "a debug dump ({dump:?}) in:\n{line}");
        }
    }
}

/// With etcd killed, fail open runs the request uncounted and settles nothing (the store
/// took nothing to settle); nothing panics or hangs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_down_answer_settles_nothing() {
    let mut cluster = EtcdCluster::single();
    let limiter = Limiter::builder(&cluster.url("settle-down"))
        .request_timeout(Duration::from_secs(1))
        .session_ttl(Duration::from_secs(2))
        .connect()
        .await
        .unwrap();
    let rl = limiter.rate_limit("tokens", quota()).await.unwrap();
    let layer = layer(&rl)
        .store_down(StoreDownPolicy::FailOpen)
        .store_timeout(Duration::from_millis(300));
    let svc = layer.layer(upstream(Arc::default(), Arc::default()));
    cluster.kill(0);
    let res = send(&svc, request("t1", 40, &[("x-use", "10")]))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK, "{}", res.body());
    sleep(Duration::from_millis(200)).await;
    assert_eq!(layer.settle_stats(), Default::default());
}

/// The response does not wait for its settlement: with etcd hung (SIGSTOP) while the inner
/// service runs, the response still comes back at once; the settlement lands once etcd
/// answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_response_does_not_wait_for_the_settlement() {
    let cluster = Arc::new(std::sync::Mutex::new(EtcdCluster::single()));
    let url = cluster.lock().unwrap().url("settle-latency");
    let limiter = Limiter::builder(&url)
        .request_timeout(Duration::from_secs(10))
        .connect()
        .await
        .unwrap();
    let rl = limiter.rate_limit("tokens", quota()).await.unwrap();
    let layer = layer(&rl);
    let hang = cluster.clone();
    let svc = layer.layer(service_fn(move |_req: Req| {
        hang.lock().unwrap().pause(0);
        let mut res = Response::new("ok".to_string());
        res.headers_mut().insert("x-usage", 10.into());
        async { Ok::<_, io::Error>(res) }
    }));
    let started = Instant::now();
    let res = send(&svc, request("t1", 40, &[])).await.unwrap();
    let took = started.elapsed();
    assert_eq!(res.status(), StatusCode::OK);
    assert!(
        took < Duration::from_millis(500),
        "the response took {took:?}"
    );
    sleep(Duration::from_millis(200)).await;
    assert_eq!(
        layer.settle_stats().settled,
        0,
        "etcd is hung: not settled yet"
    );
    cluster.lock().unwrap().resume(0);
    settled(|| layer.settle_stats(), 1).await;
    assert_eq!(layer.settle_stats().failed, 0);
    assert_remaining(&rl, "t1", 90, "etcd").await;
    eprintln!("response with etcd hung after admission: {took:?}");
}

/// What settling costs the caller on etcd: response latency of a settled request (estimate
/// 2, real cost 1: a store write each) beside a plain check of 1, 60 requests each, one
/// after another (printed; bounded loosely).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settling_adds_no_latency_beside_a_check() {
    let (_keep, rl) = {
        let cluster = EtcdCluster::single();
        let limiter = Limiter::connect(&cluster.url("settle-cost")).await.unwrap();
        let rl = limiter
            .rate_limit("tokens", Quota::new(1_000, Duration::from_secs(3600)))
            .await
            .unwrap();
        ((cluster, limiter), rl)
    };
    let settling = layer(&rl);
    let plain = ClusterRateLimitLayer::new(rl.clone(), key_of as fn(&Req) -> String);
    let up = || upstream(Arc::default(), Arc::default());
    let (settled_svc, plain_svc) = (settling.layer(up()), plain.layer(up()));
    let mut times = [Vec::new(), Vec::new()];
    for i in 0..60 {
        let started = Instant::now();
        let res = send(&settled_svc, request("a", 2, &[("x-use", "1")]))
            .await
            .unwrap();
        times[0].push(started.elapsed());
        assert_eq!(res.status(), StatusCode::OK, "request {i}");
        let started = Instant::now();
        let res = send(&plain_svc, request("b", 1, &[])).await.unwrap();
        times[1].push(started.elapsed());
        assert_eq!(res.status(), StatusCode::OK, "request {i}");
    }
    settled(|| settling.settle_stats(), 60).await;
    assert_eq!(settling.settle_stats().failed, 0);
    assert_remaining(&rl, "a", 940, "etcd").await;
    let [mut s, mut p] = times;
    s.sort();
    p.sort();
    let (sp50, pp50) = (s[30], p[30]);
    eprintln!(
        "etcd, 60 sequential requests: settled p50 {sp50:?} p99 {:?}; plain check p50 {pp50:?} p99 {:?}",
        s[59], p[59]
    );
    assert!(
        sp50 < pp50 * 3 + Duration::from_millis(20),
        "settled p50 {sp50:?}, plain {pp50:?}"
    );
}

/// An inner service whose first `poll_ready` succeeds and every later one fails.
#[derive(Clone)]
struct ReadyOnce(Arc<AtomicUsize>);

impl Service<Req> for ReadyOnce {
    type Response = Res;
    type Error = io::Error;
    type Future = std::future::Ready<Result<Res, io::Error>>;

    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<io::Result<()>> {
        std::task::Poll::Ready(match self.0.fetch_add(1, Ordering::SeqCst) {
            0 => Ok(()),
            _ => Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "upstream pool closed",
            )),
        })
    }

    fn call(&mut self, _: Req) -> Self::Future {
        std::future::ready(Ok(Response::new("ok".to_string())))
    }
}

/// Wait mode polls a fresh clone ready once admitted: when that fails, the request got no
/// response and settles as the policy says (here: all given back), with the service's error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_that_fails_to_get_ready_settles_as_the_policy_says() {
    let (rls, _etcd) = stores("settle-unready").await;
    for (store, rl) in &rls {
        let layer = layer(rl)
            .wait_up_to(Duration::from_millis(100))
            .on_no_response(OnNoResponse::classify(|why, _| {
                assert_eq!(
                    why.error::<io::Error>().map(io::Error::kind),
                    Some(io::ErrorKind::BrokenPipe)
                );
                0
            }));
        let svc = layer.layer(ReadyOnce(Arc::default()));
        let e = send(&svc, request("t1", 40, &[])).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::BrokenPipe, "{store}");
        settled(|| layer.settle_stats(), 1).await;
        assert_remaining(rl, "t1", 100, store).await;
    }
}
