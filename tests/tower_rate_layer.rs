//! `clusterlimit::tower::ClusterRateLimitLayer` on real etcd and ZooKeeper: 3 replicas (3
//! Limiters on one store, each with its own layer) never admit more than the quota and not far
//! less; the 429's headers and body; wait mode; the key helpers (a header, the peer IP through
//! a real axum server); requests without a key; services that are not HTTP; a killed etcd
//! answered by each store-down policy at once, and recovery.

use crate::support;

use axum::http::{HeaderMap, Request, Response, StatusCode};
use clusterlimit::rate::headers::HeaderNames;
use clusterlimit::tower::{
    key, ClusterRateLimitLayer, OnMissingKey, RateLimitError, RateLimitInfo,
};
use clusterlimit::{
    Algorithm, Decision, DecisionSource, Error, Limiter, Quota, RateLimit, StoreDownPolicy,
};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use support::{EtcdCluster, ZkCluster};
use tokio::time::{timeout, Instant};
use tower::{service_fn, Layer, Service, ServiceExt};

type Req = Request<String>;
type Res = Response<String>;

/// An inner HTTP service answering 200 "ok", counting its calls.
fn ok_service(
    calls: Arc<AtomicUsize>,
) -> impl Service<Req, Response = Res, Error = Infallible, Future: Send> + Clone + Send {
    service_fn(move |_req: Req| {
        calls.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, Infallible>(Response::new("ok".to_string())) }
    })
}

fn request(api_key: Option<&str>) -> Req {
    let mut b = Request::builder().uri("/");
    if let Some(k) = api_key {
        b = b.header("x-api-key", k);
    }
    b.body(String::new()).unwrap()
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

fn header<'a>(h: &'a HeaderMap, name: &str) -> &'a str {
    h.get(name)
        .unwrap_or_else(|| panic!("no {name} header in {h:?}"))
        .to_str()
        .unwrap()
}

/// The `t` of an IETF `RateLimit` field that starts with `prefix` (ending in `t=`).
fn field_t(field: &str, prefix: &str) -> u64 {
    field
        .strip_prefix(prefix)
        .unwrap_or_else(|| panic!("{field:?} does not start with {prefix:?}"))
        .parse()
        .unwrap_or_else(|_| panic!("{field:?}: no whole t"))
}

fn problem(res: &Res) -> serde_json::Value {
    assert_eq!(
        header(res.headers(), "content-type"),
        "application/problem+json"
    );
    serde_json::from_str(res.body()).unwrap()
}

fn info(res: &Res) -> RateLimitInfo {
    res.extensions()
        .get::<RateLimitInfo>()
        .cloned()
        .unwrap_or_else(|| panic!("no RateLimitInfo on {res:?}"))
}

/// The rate limit `name` with `quota` on `url`, through a Limiter that notices a dead store
/// quickly.
async fn quick_limit(url: &str, name: &str, quota: Quota) -> (Limiter, RateLimit) {
    let limiter = Limiter::builder(url)
        .request_timeout(Duration::from_secs(1))
        .session_ttl(Duration::from_secs(2))
        .connect()
        .await
        .unwrap();
    let rl = limiter.rate_limit(name, quota).await.unwrap();
    (limiter, rl)
}

/// Connects to `url` and creates (or opens) the rate limit `name` with `quota`. Keep the
/// Limiter alive (bind it, even as `_limiter`) while the RateLimit is used.
async fn limit(url: &str, name: &str, quota: Quota) -> (Limiter, RateLimit) {
    let limiter = Limiter::connect(url).await.unwrap();
    let rl = limiter.rate_limit(name, quota).await.unwrap();
    (limiter, rl)
}

/// A fresh single-node etcd (killed on drop) and the rate limit `name` with `quota` on it,
/// under `prefix`.
async fn on_etcd(prefix: &str, name: &str, quota: Quota) -> (EtcdCluster, Limiter, RateLimit) {
    let cluster = EtcdCluster::single();
    let (limiter, rl) = limit(&cluster.url(prefix), name, quota).await;
    (cluster, limiter, rl)
}

/// A layer on `rl` keyed by the `x-api-key` header, default options otherwise.
fn by_api_key(rl: &RateLimit) -> ClusterRateLimitLayer<key::Header> {
    ClusterRateLimitLayer::new(rl.clone(), key::header("x-api-key"))
}

/// A request with `api_key` (if any) that asks for `cost` in its `x-cost` header.
fn costing(api_key: Option<&str>, cost: &str) -> Req {
    let mut req = request(api_key);
    req.headers_mut().insert("x-cost", cost.parse().unwrap());
    req
}

/// The status of one request with `api_key` (if any) through `svc`.
async fn status<S>(svc: &S, api_key: Option<&str>) -> StatusCode
where
    S: Service<Req, Response = Res, Error = Infallible> + Clone,
{
    send(svc, request(api_key)).await.status()
}

/// The Retry-After of `res`, in whole seconds.
fn retry_after(res: &Res) -> u64 {
    header(res.headers(), "retry-after").parse().unwrap()
}

/// Asserts that `res` has a problem body whose detail contains `needle`; returns the body.
fn assert_detail(res: &Res, needle: &str) -> serde_json::Value {
    let body = problem(res);
    assert!(body["detail"].as_str().unwrap().contains(needle), "{body}");
    body
}

/// Asserts that the IETF `RateLimit` field of `res` says nothing remains.
fn assert_none_remaining(res: &Res) {
    assert!(
        header(res.headers(), "ratelimit").contains(";r=0;"),
        "{res:?}"
    );
}

/// Sends requests with `api_key` through `svc`, one per 200 ms, until `done` says an answer is
/// the one awaited (returned); fails after 30 s, naming `what`.
async fn until<S>(svc: &S, api_key: &str, what: &str, done: impl Fn(&Res) -> bool) -> Res
where
    S: Service<Req, Response = Res, Error = Infallible> + Clone,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let res = send(svc, request(Some(api_key))).await;
        if done(&res) {
            return res;
        }
        assert!(Instant::now() < deadline, "{what}: not within 30 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Peeks at what `key` has left (cost 0 consumes nothing).
async fn remaining(rl: &RateLimit, key: &str) -> u64 {
    rl.check_n(key, 0).await.unwrap().remaining
}

// ---------------------------------------------------------------------------------------------
// 3 replicas share the limit

/// One admitted request: when it was sent and when its response came (Unix time), and its
/// decision (made somewhere in between).
struct Admitted {
    sent: Duration,
    answered: Duration,
    decision: Decision,
}

/// What a hammering saw.
struct Hammered {
    admitted: Vec<Admitted>,
    denied: usize,
    took: Duration,
}

/// 3 replicas (each its own Limiter and layer on `url`) × 6 concurrent clients each, hammering
/// one key for `run` (bounded: 800 requests per client).
async fn hammer(url: &str, name: &str, quota: Quota, run: Duration) -> Hammered {
    let mut replicas = Vec::new();
    for i in 0..3 {
        let limiter = Limiter::builder(url)
            .owner(format!("replica-{i}"))
            .connect()
            .await
            .unwrap();
        let rl = limiter.rate_limit(name, quota).await.unwrap();
        // Fail-closed with a long store timeout: a slow store can only lower the count.
        let layer = by_api_key(&rl)
            .store_down(StoreDownPolicy::FailClosed)
            .store_timeout(Duration::from_secs(20));
        let svc = layer.layer(ok_service(Arc::default()));
        replicas.push((limiter, svc));
    }
    let admitted = Arc::new(Mutex::new(Vec::new()));
    let denied = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let stop = start + run;
    let mut tasks = Vec::new();
    for (_, svc) in &replicas {
        for _ in 0..6 {
            let (svc, admitted, denied) = (svc.clone(), admitted.clone(), denied.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..800 {
                    if Instant::now() >= stop {
                        break;
                    }
                    let sent = unix_now();
                    let res = send(&svc, request(Some("tenant-1"))).await;
                    match res.status() {
                        StatusCode::OK => {
                            assert!(res.headers().contains_key("ratelimit"), "{res:?}");
                            admitted.lock().unwrap().push(Admitted {
                                sent,
                                answered: unix_now(),
                                decision: info(&res).decision,
                            });
                        }
                        StatusCode::TOO_MANY_REQUESTS => {
                            assert!(retry_after(&res) >= 1, "{res:?}");
                            assert_none_remaining(&res);
                            assert_eq!(problem(&res)["code"], "rate_limited");
                            denied.fetch_add(1, Ordering::SeqCst);
                            // A real client backs off a little; keeps the store's load sane.
                            tokio::time::sleep(Duration::from_millis(5)).await;
                        }
                        other => panic!("unexpected {other}: {}", res.body()),
                    }
                }
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    let took = start.elapsed();
    for (limiter, _) in replicas {
        limiter.close().await.unwrap();
    }
    let admitted = std::mem::take(&mut *admitted.lock().unwrap());
    Hammered {
        admitted,
        denied: denied.load(Ordering::SeqCst),
        took,
    }
}

/// The GCRA bucket (30 at once, then 1 per 2 s), a sliding window (40 a minute) and fixed
/// windows (10 a second), each hammered by 3 replicas: admitted ≤ what the quota allows. How
/// close to the quota they get depends on the machine's throughput: printed, and only a loose
/// floor asserted (more than half), so a loaded CI machine does not fail it.
async fn three_replicas_share_the_limit(url: &str, store: &str) {
    let gcra = Quota::per_minute(30).burst(30);
    let h = hammer(url, "gcra", gcra, Duration::from_millis(2500)).await;
    let (ok, took) = (h.admitted.len() as u64, h.took);
    // The burst, plus what refilled meanwhile (one per 2 s), plus one for the boundary.
    let most = 30 + took.as_secs() / 2 + 1;
    println!(
        "{store} GCRA burst 30, 1/2 s: 3 replicas × 6 clients over {took:?}: admitted {ok} \
         (allowed at most {most}), denied {}",
        h.denied
    );
    assert!(ok <= most, "over the limit: {ok} > {most}");
    assert!(ok > 15, "far under the limit: {ok} of 30");
    assert!(h.denied > 0);

    let sliding = Quota::per_minute(40).algorithm(Algorithm::SlidingWindow);
    let h = hammer(url, "sliding", sliding, Duration::from_millis(2500)).await;
    let (ok, took) = (h.admitted.len() as u64, h.took);
    // At a window boundary the previous window's weight falls: ≤ 40 × elapsed / 60 more.
    let most = 40 + (40 * took.as_millis() as u64).div_ceil(60_000) + 1;
    println!(
        "{store} sliding window 40/min: 3 replicas × 6 clients over {took:?}: admitted {ok} \
         (allowed at most {most}), denied {}",
        h.denied
    );
    assert!(ok <= most, "over the limit: {ok} > {most}");
    assert!(ok > 20, "far under the limit: {ok} of 40");

    // Fixed windows of 1 s, aligned to the Unix epoch: an admission's window ends at the
    // decision's time plus its `reset_after`, a whole second. The decision was made between the
    // request's sending and its answer, so its window is known only when one whole second
    // falls in [sent + reset_after, answered + reset_after]; a slow answer spanning a boundary
    // is left out (counting fewer can never fake "over the limit").
    let fixed = Quota::per_second(10).algorithm(Algorithm::FixedWindow);
    let h = hammer(url, "fixed", fixed, Duration::from_millis(3500)).await;
    let mut per_window = std::collections::BTreeMap::<u64, u64>::new();
    let mut ambiguous = 0;
    for a in &h.admitted {
        match window_end(a) {
            Some(end) => *per_window.entry(end).or_default() += 1,
            None => ambiguous += 1,
        }
    }
    let counts: Vec<u64> = per_window.values().copied().collect();
    println!(
        "{store} fixed windows 10/s: 3 replicas × 6 clients over {:?}: admitted per window \
         {counts:?} (+ {ambiguous} whose window is not known: answered across a boundary), \
         denied {}",
        h.took, h.denied
    );
    assert!(
        counts.iter().all(|&n| n <= 10),
        "over the limit: {counts:?}"
    );
    // A run of 3.5 s spans at least 3 whole windows (30 admissions): more than half of that in
    // total is a floor any machine meets; per-window counts depend on throughput (printed).
    let total = h.admitted.len();
    assert!(total > 15, "far under: {total} admitted, {counts:?}");
}

fn unix_now() -> Duration {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap()
}

/// The fixed 1 s window (its end, in Unix seconds) an admission fell in, if only one whole
/// second lies in [sent + reset_after, answered + reset_after] (1 ms slack each side).
fn window_end(a: &Admitted) -> Option<u64> {
    let slack = Duration::from_millis(1);
    let lo = (a.sent + a.decision.reset_after).saturating_sub(slack);
    let hi = a.answered + a.decision.reset_after + slack;
    // Whole seconds s with lo <= s <= hi.
    let first = lo.as_secs() + u64::from(lo.subsec_nanos() > 0);
    let last = hi.as_secs();
    (first == last).then_some(first)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_never_go_over_the_limit_on_etcd() {
    let cluster = EtcdCluster::single();
    three_replicas_share_the_limit(&cluster.url("rate-layer-3"), "etcd").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_never_go_over_the_limit_on_zookeeper() {
    let cluster = ZkCluster::single();
    three_replicas_share_the_limit(&cluster.url("/rate-layer-3"), "ZooKeeper").await;
}

// ---------------------------------------------------------------------------------------------
// HTTP answers

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_has_retry_after_the_ratelimit_fields_and_a_problem_body() {
    let (_cluster, _limiter, rl) =
        on_etcd("rate-layer-429", "api", Quota::per_minute(2).burst(2)).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = by_api_key(&rl).layer(ok_service(calls.clone()));

    let first = send(&svc, request(Some("k1"))).await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(first.body(), "ok");
    let h = first.headers();
    assert_eq!(header(h, "ratelimit-policy"), r#""api";q=2;w=60"#);
    assert_eq!(header(h, "ratelimit"), r#""api";r=1;t=30"#);
    assert!(!h.contains_key("retry-after"));
    let i = info(&first);
    assert_eq!((i.limit.as_str(), i.source), ("api", DecisionSource::Store));
    assert!(i.decision.allowed);

    assert_eq!(status(&svc, Some("k1")).await, 200);
    let denied = send(&svc, request(Some("k1"))).await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    let h = denied.headers();
    // 30 s after the first admission, less the time the three requests took (printed; a
    // loaded machine may take over a second).
    let after = retry_after(&denied);
    println!(
        "429 Retry-After {after}, RateLimit {}",
        header(h, "ratelimit")
    );
    assert!((20..=30).contains(&after), "Retry-After {after}");
    assert!((20..=30).contains(&field_t(header(h, "ratelimit"), r#""api";r=0;t="#)));
    assert_eq!(header(h, "ratelimit-policy"), r#""api";q=2;w=60"#);
    let body = problem(&denied);
    println!("429 body: {body}");
    assert_eq!(body["status"], 429);
    assert_eq!(body["title"], "Too Many Requests");
    assert_eq!(body["code"], "rate_limited");
    assert_eq!(body["limit"], "api");
    assert!(body["detail"]
        .as_str()
        .unwrap()
        .contains(&format!("retry in {after} s")));
    assert!(
        !denied.body().contains("k1"),
        "the key (maybe a secret) is never echoed"
    );
    assert!(!info(&denied).decision.allowed);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "the denied request did not run"
    );
    // Another key has its own quota.
    assert_eq!(status(&svc, Some("k2")).await, 200);

    // Legacy names, and none at all (Retry-After stays).
    let legacy = by_api_key(&rl)
        .headers(HeaderNames::Legacy)
        .layer(ok_service(Arc::default()));
    let res = send(&legacy, request(Some("k1"))).await;
    assert_eq!(res.status(), 429);
    let h = res.headers();
    assert_eq!(
        (
            header(h, "x-ratelimit-limit"),
            header(h, "x-ratelimit-remaining")
        ),
        ("2", "0")
    );
    let reset: u64 = header(h, "x-ratelimit-reset").parse().unwrap();
    assert!((20..=30).contains(&reset), "X-RateLimit-Reset {reset}");
    assert!(!h.contains_key("ratelimit"));
    let off = by_api_key(&rl)
        .headers(None)
        .layer(ok_service(Arc::default()));
    let res = send(&off, request(Some("k1"))).await;
    assert_eq!(res.status(), 429);
    assert!(res.headers().contains_key("retry-after"));
    assert!(!res.headers().contains_key("ratelimit"));
    assert!(!res.headers().contains_key("x-ratelimit-limit"));
    let res = send(&off, request(Some("k3"))).await;
    assert_eq!(res.status(), 200);
    assert!(!res.headers().contains_key("ratelimit"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_keys_costs_and_a_closed_limiter_are_answered_not_panicked() {
    let (_cluster, limiter, rl) =
        on_etcd("rate-layer-bad", "api", Quota::per_minute(10).burst(5)).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = by_api_key(&rl)
        .cost(|req: &Req| {
            req.headers()
                .get("x-cost")
                .map_or(1, |v| v.to_str().unwrap().parse().unwrap())
        })
        .layer(ok_service(calls.clone()));

    // A key over 512 bytes: 400 naming the key.
    let long = "k".repeat(513);
    let res = send(&svc, request(Some(&long))).await;
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);
    let body = problem(&res);
    assert_eq!(
        (body["code"].as_str(), body["field"].as_str()),
        (Some("invalid_field"), Some("key"))
    );
    assert_detail(&res, "1-512 bytes");

    // A cost above the burst can never pass: 400 naming the cost.
    let res = send(&svc, costing(Some("k"), "6")).await;
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);
    assert_eq!(assert_detail(&res, "cost 6")["field"], "cost");

    // Cost 5 takes the whole burst; cost 0 is free (runs unchecked, no fields).
    assert_eq!(send(&svc, costing(Some("k"), "5")).await.status(), 200);
    assert_eq!(remaining(&rl, "k").await, 0);
    let res = send(&svc, costing(Some("k"), "0")).await;
    assert_eq!(res.status(), 200);
    assert!(!res.headers().contains_key("ratelimit"));
    // ... and needs no key.
    assert_eq!(send(&svc, costing(None, "0")).await.status(), 200);
    assert_eq!(calls.load(Ordering::SeqCst), 3);

    // A header name that is not one: every request has no key (400), never a panic.
    let bad_name = ClusterRateLimitLayer::new(rl.clone(), key::header("x bad"))
        .layer(ok_service(Arc::default()));
    let res = send(&bad_name, request(Some("k"))).await;
    assert_eq!(res.status(), 400);
    assert_detail(&res, "not a valid header name");

    // A closed Limiter is a setup mistake: 500, not a fallback.
    limiter.close().await.unwrap();
    let res = send(&svc, request(Some("k2"))).await;
    assert_eq!(res.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(assert_detail(&res, "closed")["code"], "limiter_error");
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

// ---------------------------------------------------------------------------------------------
// Keys

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_without_a_key_is_rejected_counted_under_a_default_or_let_through() {
    let (_cluster, _limiter, rl) = on_etcd("rate-layer-nokey", "api", Quota::per_minute(10)).await;
    let calls = Arc::new(AtomicUsize::new(0));

    let reject = by_api_key(&rl).layer(ok_service(calls.clone()));
    let res = send(&reject, request(None)).await;
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);
    let body = assert_detail(&res, "header x-api-key is missing");
    assert_eq!(body["code"], "missing_key");
    assert_eq!(body["field"], "key");
    let mut empty = request(None);
    empty
        .headers_mut()
        .insert("x-api-key", " ".parse().unwrap());
    assert_eq!(send(&reject, empty).await.status(), 400);
    assert_eq!(calls.load(Ordering::SeqCst), 0);

    let shared = by_api_key(&rl)
        .on_missing_key(OnMissingKey::UseKey("anonymous".into()))
        .layer(ok_service(calls.clone()));
    for _ in 0..3 {
        assert_eq!(status(&shared, None).await, 200);
    }
    assert_eq!(
        remaining(&rl, "anonymous").await,
        7,
        "counted under the default key"
    );

    let admit = by_api_key(&rl)
        .on_missing_key(OnMissingKey::Admit)
        .layer(ok_service(calls.clone()));
    let res = send(&admit, request(None)).await;
    assert_eq!(res.status(), 200);
    assert!(!res.headers().contains_key("ratelimit"));
    assert!(res.extensions().get::<RateLimitInfo>().is_none());
    assert_eq!(calls.load(Ordering::SeqCst), 4);

    // A closure key: `Result` errors are the reason; `Option` works as well.
    let by_tenant = ClusterRateLimitLayer::new(rl.clone(), |req: &Req| {
        req.uri()
            .path()
            .strip_prefix("/t/")
            .map(str::to_string)
            .ok_or("the path names no tenant")
    })
    .layer(ok_service(calls.clone()));
    let to = |path: &str| Request::builder().uri(path).body(String::new()).unwrap();
    assert_eq!(send(&by_tenant, to("/t/acme")).await.status(), 200);
    assert_eq!(remaining(&rl, "acme").await, 9);
    let res = send(&by_tenant, to("/other")).await;
    assert_eq!(res.status(), 400);
    assert_detail(&res, "the path names no tenant");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_ip_keys_through_a_real_axum_server() {
    let (_cluster, _limiter, rl) =
        on_etcd("rate-layer-ip", "per-ip", Quota::per_minute(2).burst(2)).await;
    let layer = ClusterRateLimitLayer::new(rl.clone(), key::peer_ip());
    let app = axum::Router::new()
        .route("/", axum::routing::get(|| async { "hello" }))
        .layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
    });
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let mut statuses = Vec::new();
    let mut last = None;
    for _ in 0..3 {
        let res = client.get(format!("http://{addr}/")).send().await.unwrap();
        statuses.push(res.status().as_u16());
        last = Some(res);
    }
    assert_eq!(statuses, [200, 200, 429]);
    let last = last.unwrap();
    // 30 s less the time the requests took (printed; over a second on a loaded machine).
    let (after, fields) = (
        last.headers()["retry-after"].to_str().unwrap(),
        last.headers()["ratelimit"].to_str().unwrap(),
    );
    println!("peer IP over the limit: Retry-After {after}, RateLimit {fields}");
    assert!(
        (20..=30).contains(&after.parse::<u64>().unwrap()),
        "{after}"
    );
    assert!((20..=30).contains(&field_t(fields, r#""per-ip";r=0;t="#)));
    assert_eq!(last.headers()["content-type"], "application/problem+json");
    // The key was the client's address.
    assert_eq!(remaining(&rl, "127.0.0.1").await, 0);
    server.abort();

    // Without ConnectInfo (plain `serve`), a `SocketAddr` extension works too, and with
    // neither the request has no key.
    let svc =
        ClusterRateLimitLayer::new(rl.clone(), key::peer_ip()).layer(ok_service(Arc::default()));
    let mut req = request(None);
    req.extensions_mut()
        .insert("[::ffff:10.9.8.7]:4000".parse::<SocketAddr>().unwrap());
    assert_eq!(send(&svc, req).await.status(), 200);
    assert_eq!(remaining(&rl, "10.9.8.7").await, 1, "IPv4-mapped as IPv4");
    let res = send(&svc, request(None)).await;
    assert_eq!(res.status(), 400);
    assert_detail(&res, "peer address is not known");

    // IPv6 peers count per /64 by default: a client rotating through its /64 shares one quota;
    // another /64 has its own. `ipv6_prefix(128)` counts each address alone.
    let from = |addr: &str| {
        let mut req = request(None);
        req.extensions_mut()
            .insert(addr.parse::<SocketAddr>().unwrap());
        req
    };
    let statuses = |svc| async move {
        let mut out = Vec::new();
        for addr in [
            "[2001:db8:7:1::1]:4000",
            "[2001:db8:7:1::2]:4000",
            "[2001:db8:7:1:ffff::3]:4000",
            "[2001:db8:7:2::1]:4000",
        ] {
            out.push(send(&svc, from(addr)).await.status().as_u16());
        }
        out
    };
    let per_64 =
        ClusterRateLimitLayer::new(rl.clone(), key::peer_ip()).layer(ok_service(Arc::default()));
    assert_eq!(statuses(per_64).await, [200, 200, 429, 200]);
    assert_eq!(remaining(&rl, "2001:db8:7:1::/64").await, 0);
    assert_eq!(remaining(&rl, "2001:db8:7:2::/64").await, 1);
    let per_128 = ClusterRateLimitLayer::new(rl.clone(), key::peer_ip().ipv6_prefix(128))
        .layer(ok_service(Arc::default()));
    assert_eq!(statuses(per_128).await, [200, 200, 200, 200]);
    assert_eq!(remaining(&rl, "2001:db8:7:1::1").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hashed_header_key_keeps_the_secret_out_of_the_store() {
    let (cluster, _limiter, rl) =
        on_etcd("rate-layer-hashed", "api", Quota::per_minute(2).burst(2)).await;
    let svc = ClusterRateLimitLayer::new(rl.clone(), key::header("x-api-key").hashed())
        .layer(ok_service(Arc::default()));
    let secret = "sk-live-4f9a0c77e1";
    let statuses = [
        status(&svc, Some(secret)).await,
        status(&svc, Some(secret)).await,
        status(&svc, Some(secret)).await,
        status(&svc, Some("another-secret")).await,
    ];
    // Equal values share one quota, other values have their own.
    assert_eq!(statuses, [200, 200, 429, 200]);
    // `printf %s sk-live-4f9a0c77e1 | sha256sum`
    let hashed = "sha256:6695fc3a76a1235184af9fde11a0a4e53d52f979096babc335413cd20681dbf5";
    assert_eq!(remaining(&rl, hashed).await, 0, "counted under the hash");
    let entries = support::etcd::list_entries(&cluster.endpoints(), "").await;
    println!(
        "etcd keys after hashed-key checks: {:?}",
        entries.iter().map(|(k, _)| k).collect::<Vec<_>>()
    );
    assert!(
        entries.iter().any(|(k, _)| k.contains("sha256:")),
        "{entries:?}"
    );
    assert!(
        entries
            .iter()
            .all(|(k, v)| !k.contains(secret) && !v.contains(secret)),
        "the secret reached the store: {entries:?}"
    );
    // The raw value was never counted.
    assert_eq!(remaining(&rl, secret).await, 2);
}

// ---------------------------------------------------------------------------------------------
// Wait mode

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_mode_admits_within_the_deadline_and_rejects_past_it_consuming_nothing() {
    // One request per 400 ms, none stored up.
    let (_cluster, limiter, rl) = on_etcd(
        "rate-layer-wait",
        "paced",
        Quota::new(5, Duration::from_secs(2)).burst(1),
    )
    .await;
    let calls = Arc::new(AtomicUsize::new(0));
    let waiting = by_api_key(&rl)
        .wait_up_to(Duration::from_secs(5))
        .layer(ok_service(calls.clone()));

    let t = Instant::now();
    let mut took = Vec::new();
    for _ in 0..4 {
        let res = send(&waiting, request(Some("w"))).await;
        assert_eq!(res.status(), 200, "{}", res.body());
        took.push(t.elapsed());
    }
    println!("wait mode, 1 per 400 ms: 4 requests admitted at {took:?}");
    // Paced, not refused: the 4th could not pass before 3 × 400 ms.
    assert!(took[3] >= Duration::from_millis(1150), "{took:?}");

    // Concurrent waiters on another key are paced too, all admitted.
    let t = Instant::now();
    let all = futures::future::join_all((0..3).map(|_| send(&waiting, request(Some("w2"))))).await;
    assert!(all.iter().all(|r| r.status() == 200));
    println!(
        "wait mode: 3 concurrent requests admitted in {:?}",
        t.elapsed()
    );
    assert!(t.elapsed() >= Duration::from_millis(750));

    // A deadline shorter than the wait: rejected at once (the next chance is past it), 429
    // with the last denial's headers, nothing consumed. One request per 10 s, so however slow
    // the machine, the second request finds the next chance well past its 100 ms deadline.
    let slow = limiter
        .rate_limit("slow", Quota::new(1, Duration::from_secs(10)).burst(1))
        .await
        .unwrap();
    let short = by_api_key(&slow)
        .wait_up_to(Duration::from_millis(100))
        .layer(ok_service(calls.clone()));
    assert_eq!(status(&short, Some("s")).await, 200);
    let t = Instant::now();
    let res = send(&short, request(Some("s"))).await;
    let after = retry_after(&res);
    println!(
        "wait mode, deadline 100 ms, next chance in ~10 s: {} after {:?}, Retry-After {after}",
        res.status(),
        t.elapsed()
    );
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!((1..=10).contains(&after), "Retry-After {after}");
    assert_none_remaining(&res);
    assert!(t.elapsed() < Duration::from_secs(5));
    assert_eq!(calls.load(Ordering::SeqCst), 8);
    // Nothing consumed by the rejected one: the next chance is still within 10 s of the
    // admitted one (had it consumed, ~20 s). A denied check consumes nothing either.
    let d = slow.check_n("s", 1).await.unwrap();
    let next = d.retry_after.unwrap();
    println!("after the 429, the next chance is in {next:?}");
    assert!(!d.allowed);
    assert!(next <= Duration::from_secs(10), "{next:?}");
}

/// An inner HTTP service that counts how many of its clones hold readiness (polled ready, not
/// yet called nor dropped): a stand-in for a concurrency-limit slot or a buffer's place.
struct Gate {
    held: Arc<AtomicUsize>,
    ready: bool,
}

impl Clone for Gate {
    fn clone(&self) -> Self {
        // As tower's own: a clone is not ready.
        Gate {
            held: self.held.clone(),
            ready: false,
        }
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        if self.ready {
            self.held.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Service<Req> for Gate {
    type Response = Res;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Res, Infallible>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        if !self.ready {
            self.ready = true;
            self.held.fetch_add(1, Ordering::SeqCst);
        }
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Req) -> Self::Future {
        assert!(self.ready, "called without poll_ready");
        self.ready = false;
        self.held.fetch_sub(1, Ordering::SeqCst);
        std::future::ready(Ok(Response::new("ok".to_string())))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_request_does_not_hold_the_inner_services_readiness() {
    let (_cluster, _limiter, rl) = on_etcd(
        "rate-layer-ready",
        "paced",
        Quota::new(1, Duration::from_secs(2)).burst(1),
    )
    .await;
    let held = Arc::new(AtomicUsize::new(0));
    let gate = Gate {
        held: held.clone(),
        ready: false,
    };
    let waiting = by_api_key(&rl)
        .wait_up_to(Duration::from_secs(20))
        .layer(gate);
    assert_eq!(status(&waiting, Some("r")).await, 200);
    assert_eq!(held.load(Ordering::SeqCst), 0);
    // The next one waits ~2 s for its turn; meanwhile no clone of the inner service is ready.
    let t = Instant::now();
    let second = tokio::spawn({
        let waiting = waiting.clone();
        async move { send(&waiting, request(Some("r"))).await }
    });
    let mut seen = Vec::new();
    while !second.is_finished() && t.elapsed() < Duration::from_secs(30) {
        seen.push(held.load(Ordering::SeqCst));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let res = second.await.unwrap();
    println!(
        "wait mode: admitted after {:?}; ready inner clones seen while waiting: max {:?} over {} \
         samples",
        t.elapsed(),
        seen.iter().max(),
        seen.len()
    );
    assert_eq!(res.status(), 200);
    assert!(
        seen.iter().all(|&n| n == 0),
        "readiness held during the wait: {seen:?}"
    );
    assert_eq!(held.load(Ordering::SeqCst), 0);
}

// ---------------------------------------------------------------------------------------------
// Services that are not HTTP

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_that_is_not_http_gets_rate_limited_errors() {
    let cluster = ZkCluster::single();
    let (limiter, rl) = limit(
        &cluster.url("/rate-layer-err"),
        "jobs",
        Quota::per_minute(1).burst(1),
    )
    .await;
    // Requests are job ids; the key is the id's tenant (id / 100); job 999 fails.
    let svc = ClusterRateLimitLayer::new(rl.clone(), |job: &u32| (job / 100).to_string())
        .reject_as_error()
        .layer(service_fn(|job: u32| async move {
            if job == 999 {
                Err(std::io::Error::other("job 999 failed"))
            } else {
                Ok(job * 2)
            }
        }));
    let run = |job: u32| {
        let svc = svc.clone();
        async move {
            timeout(Duration::from_secs(60), svc.oneshot(job))
                .await
                .unwrap()
        }
    };
    assert_eq!(run(101).await.unwrap(), 202);
    match run(102).await {
        Err(e @ RateLimitError::RateLimited { .. }) => {
            assert!(e.is_rejected());
            let after = e.retry_after().unwrap();
            assert!(
                // 60 s less the time since the first job (generous for a loaded machine).
                after > Duration::from_secs(45) && after <= Duration::from_secs(60),
                "{after:?}"
            );
            let RateLimitError::RateLimited {
                limit,
                decision,
                source,
            } = &e
            else {
                unreachable!()
            };
            assert_eq!((limit.as_str(), source), ("jobs", &DecisionSource::Store));
            assert!(!decision.allowed);
            // Whole seconds, rounded up.
            let secs = after.as_secs() + u64::from(after.subsec_nanos() > 0);
            assert!(e.to_string().contains(&format!("retry in {secs} s")), "{e}");
        }
        other => panic!("expected RateLimited, got {other:?}"),
    }
    match run(999).await {
        Err(RateLimitError::Service(e)) => assert_eq!(e.to_string(), "job 999 failed"),
        other => panic!("expected the service's error, got {other:?}"),
    }
    // Missing key as an error (a closure returning None).
    let keyless = ClusterRateLimitLayer::new(rl.clone(), |_: &u32| None::<String>)
        .reject_as_error()
        .layer(service_fn(
            |job: u32| async move { Ok::<_, Infallible>(job) },
        ));
    match keyless.oneshot(1).await {
        Err(RateLimitError::MissingKey { limit, .. }) => assert_eq!(limit, "jobs"),
        other => panic!("expected MissingKey, got {other:?}"),
    }
    limiter.close().await.unwrap();
    match run(301).await {
        Err(RateLimitError::Limiter(Error::Closed)) => {}
        other => panic!("expected Limiter(Closed), got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Store down

/// Sends `n` requests while the store is known down; prints p50/p90/max and returns the
/// answers.
///
/// Answers come from the breaker, except the one request per retry interval (1 s here) that
/// asks the dead store again and may take up to the store timeout: so the median must be fast,
/// and at most one slow answer per started second of the run (plus one) is allowed.
async fn while_down<S>(svc: &S, what: &str, n: usize) -> Vec<Res>
where
    S: Service<Req, Response = Res, Error = Infallible> + Clone,
{
    const SLOW: Duration = Duration::from_millis(250);
    let mut answers = Vec::with_capacity(n);
    let mut took = Vec::with_capacity(n);
    let start = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        answers.push(send(svc, request(Some("k"))).await);
        took.push(t.elapsed());
    }
    let run = start.elapsed();
    took.sort();
    let (p50, p90, max) = (took[n / 2], took[n * 9 / 10], took[n - 1]);
    let slow = took.iter().filter(|&&t| t >= SLOW).count();
    let slow_allowed = run.as_secs() as usize + 1;
    println!(
        "etcd killed, {what}: p50 {p50:?}, p90 {p90:?}, max {max:?} over {n} requests in \
         {run:?}; {slow} answers took {SLOW:?} or more (re-probes of the store; allowed \
         {slow_allowed})"
    );
    // Typically well under 1 ms; a loaded 2-core machine gets a wide margin.
    assert!(p50 < SLOW, "{what}: p50 {p50:?}");
    assert!(
        slow <= slow_allowed,
        "{what}: {slow} slow answers in {run:?} (allowed {slow_allowed}): {took:?}"
    );
    answers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_etcd_gets_each_policys_answer_at_once_and_recovery() {
    let mut cluster = EtcdCluster::single();
    let (_limiter, rl) =
        quick_limit(&cluster.url("rate-layer-down"), "api", Quota::per_minute(9)).await;
    let layer = |policy| {
        by_api_key(&rl)
            .store_down(policy)
            .store_timeout(Duration::from_millis(300))
            .store_retry_interval(Duration::from_secs(1))
    };
    let layers = [
        layer(StoreDownPolicy::FailOpen),
        layer(StoreDownPolicy::FailClosed),
        layer(StoreDownPolicy::Local { replicas: 3 }),
    ];
    let open = layers[0].layer(ok_service(Arc::default()));
    let closed = layers[1].layer(ok_service(Arc::default()));
    let local = layers[2].layer(ok_service(Arc::default()));
    for svc in [&open, &closed, &local] {
        let res = send(svc, request(Some("warm"))).await;
        assert_eq!(info(&res).source, DecisionSource::Store);
    }

    cluster.kill(0);
    for ((svc, what), layer) in [
        (&open, "fail_open"),
        (&closed, "fail_closed"),
        (&local, "local:3"),
    ]
    .into_iter()
    .zip(&layers)
    {
        let t = Instant::now();
        let res = send(svc, request(Some("k"))).await;
        println!(
            "etcd killed, {what}: first request answered in {:?} ({})",
            t.elapsed(),
            res.status()
        );
        assert!(
            t.elapsed() < Duration::from_secs(3),
            "{what}: {:?}",
            t.elapsed()
        );
        assert_ne!(info(&res).source, DecisionSource::Store, "{what}");
        // A dead store is silence: the breaker opens once it lasted SLOW_OPEN_AFTER (each
        // request until then waits its store timeout). Another key, so "k"'s local share
        // stays as the first request left it.
        let give_up = Instant::now()
            + clusterlimit::ClusterBreaker::SLOW_OPEN_AFTER
            + Duration::from_secs(10);
        for _ in 0..100 {
            if layer.guard().store_down() {
                break;
            }
            assert!(Instant::now() < give_up, "{what}: the breaker never opened");
            let res = send(svc, request(Some("until-open"))).await;
            assert_ne!(info(&res).source, DecisionSource::Store, "{what}");
        }
        assert!(layer.guard().store_down(), "{what}");
    }

    let answers = while_down(&open, "fail_open", 100).await;
    for res in &answers {
        assert_eq!(res.status(), 200);
        assert_eq!(info(res).source, DecisionSource::FailOpen);
        assert!(
            !res.headers().contains_key("ratelimit"),
            "made-up decisions carry no fields"
        );
    }

    let answers = while_down(&closed, "fail_closed", 50).await;
    for res in &answers {
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(header(res.headers(), "retry-after"), "1");
        assert_eq!(
            assert_detail(res, "fail-closed")["code"],
            "store_unavailable"
        );
    }

    // A third of 9 per minute in this process: 1 admitted already, 2 more, then 429s.
    let answers = while_down(&local, "local:3", 10).await;
    let admitted = answers.iter().filter(|r| r.status() == 200).count();
    assert_eq!(
        admitted,
        2,
        "{:?}",
        answers.iter().map(Res::status).collect::<Vec<_>>()
    );
    assert!(answers
        .iter()
        .all(|r| info(r).source == DecisionSource::Local));
    let denied = answers.last().unwrap();
    assert_eq!(denied.status(), 429);
    assert!(denied.headers().contains_key("retry-after"));
    assert_none_remaining(denied);

    cluster.restart(0);
    let back = Instant::now();
    for (svc, what) in [
        (&open, "fail_open"),
        (&closed, "fail_closed"),
        (&local, "local:3"),
    ] {
        let res = until(svc, "after", &format!("{what}: the store decides"), |res| {
            res.extensions().get::<RateLimitInfo>().map(|i| i.source) == Some(DecisionSource::Store)
        })
        .await;
        assert_eq!(res.status(), 200, "{what}");
    }
    println!(
        "etcd restarted: every layer asks the store again after {:?}",
        back.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layer_is_cheap_to_clone_and_its_services_share_the_breaker() {
    let mut cluster = EtcdCluster::single();
    let (_limiter, rl) = quick_limit(
        &cluster.url("rate-layer-share"),
        "api",
        Quota::per_minute(100),
    )
    .await;
    // A long store timeout: a slow (loaded) store before the kill is not taken for a dead one,
    // and the dead one is noticed by the Limiter's own 1 s request timeout. A long retry
    // interval: the sibling answers from the breaker, never re-probes the dead store.
    let layer = by_api_key(&rl)
        .store_down(StoreDownPolicy::FailOpen)
        .store_timeout(Duration::from_secs(5))
        .store_retry_interval(Duration::from_secs(60));
    let a = layer.layer(ok_service(Arc::default()));
    let b = layer.clone().layer(ok_service(Arc::default()));
    assert_eq!(status(&a, Some("k")).await, 200);
    assert!(!layer.guard().store_down());
    cluster.kill(0);
    assert_eq!(
        info(&send(&a, request(Some("k"))).await).source,
        DecisionSource::FailOpen
    );
    assert!(
        layer.guard().store_down(),
        "the layer sees what its service learned"
    );
    // The other service knows at once: no wait on the dead store.
    let t = Instant::now();
    let res = send(&b, request(Some("k"))).await;
    println!(
        "a sibling service answered from the shared breaker in {:?}",
        t.elapsed()
    );
    assert_eq!(info(&res).source, DecisionSource::FailOpen);
    // Typically microseconds (no store call); generous for a loaded 2-core machine.
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
}

/// A SIGSTOPped store (it accepts, never answers): every request still gets the policy's
/// answer within the store timeout, in reject and in wait mode; then the store again.
async fn hung_store_is_answered_within_the_store_timeout(
    url: &str,
    store: &str,
    pause: impl FnOnce(),
    resume: impl FnOnce(),
) {
    let (_limiter, rl) = quick_limit(url, "api", Quota::per_minute(60)).await;
    let store_timeout = Duration::from_millis(400);
    let fail_closed = by_api_key(&rl)
        .store_down(StoreDownPolicy::FailClosed)
        .store_timeout(store_timeout);
    let reject = fail_closed.clone().layer(ok_service(Arc::default()));
    let waiting = fail_closed
        .wait_up_to(Duration::from_secs(5))
        .layer(ok_service(Arc::default()));
    for svc in [&reject, &waiting] {
        assert_eq!(status(svc, Some("k")).await, 200);
    }
    pause();
    for (svc, what) in [(&reject, "reject"), (&waiting, "wait_up_to(5 s)")] {
        let t = Instant::now();
        let res = send(svc, request(Some("k"))).await;
        let took = t.elapsed();
        println!(
            "{store} hung, {what}: {} after {took:?} (store timeout {store_timeout:?})",
            res.status()
        );
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        // Generous: the answer is due at the store timeout; a loaded machine may be late.
        assert!(
            took < store_timeout + Duration::from_secs(2),
            "{what}: {took:?}"
        );
    }
    resume();
    for svc in [&reject, &waiting] {
        let res = until(svc, "k", &format!("{store}: a 200 after resume"), |res| {
            res.status() == 200
        })
        .await;
        assert_eq!(info(&res).source, DecisionSource::Store);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_etcd_is_answered_within_the_store_timeout() {
    let cluster = std::sync::Mutex::new(EtcdCluster::single());
    let url = cluster.lock().unwrap().url("rate-layer-hung");
    hung_store_is_answered_within_the_store_timeout(
        &url,
        "etcd",
        || cluster.lock().unwrap().pause(0),
        || cluster.lock().unwrap().resume(0),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_zookeeper_is_answered_within_the_store_timeout() {
    let cluster = std::sync::Mutex::new(ZkCluster::single());
    let url = cluster.lock().unwrap().url("/rate-layer-hung");
    hung_store_is_answered_within_the_store_timeout(
        &url,
        "ZooKeeper",
        || cluster.lock().unwrap().pause(0),
        || cluster.lock().unwrap().resume(0),
    )
    .await;
}

// ---------------------------------------------------------------------------------------------
// Option checks that need no store (memory://)

#[test]
fn outside_a_tokio_runtime_a_request_gets_a_500_not_a_panic() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    // Only the RateLimit leaves the runtime; the Limiter is dropped inside it.
    let rl = rt.block_on(async {
        limit("memory://rate-layer-no-rt", "api", Quota::per_minute(5))
            .await
            .1
    });
    let svc = by_api_key(&rl).layer(ok_service(Arc::default()));
    // Polled by a plain executor on a thread of its own: no Tokio context.
    let res = std::thread::spawn(move || {
        futures::executor::block_on(svc.oneshot(request(Some("k")))).unwrap()
    })
    .join()
    .unwrap();
    assert_eq!(res.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_detail(&res, "needs a Tokio runtime");
}

#[tokio::test]
async fn wait_up_to_zero_is_the_same_as_reject() {
    let (_limiter, rl) = limit("memory://rate-layer-zero", "api", Quota::per_minute(1)).await;
    let svc = by_api_key(&rl)
        .wait_up_to(Duration::ZERO)
        .layer(ok_service(Arc::default()));
    assert_eq!(status(&svc, Some("k")).await, 200);
    let t = Instant::now();
    assert_eq!(status(&svc, Some("k")).await, 429);
    assert!(t.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn wait_up_to_duration_max_waits_its_turn_without_overflow() {
    let (_limiter, rl) = limit(
        "memory://rate-layer-max",
        "api",
        Quota::per_second(2).burst(1),
    )
    .await;
    let svc = by_api_key(&rl)
        .wait_up_to(Duration::MAX)
        .layer(ok_service(Arc::default()));
    assert_eq!(status(&svc, Some("k")).await, 200);
    let t = Instant::now();
    assert_eq!(status(&svc, Some("k")).await, 200);
    println!(
        "wait_up_to(Duration::MAX), 1 per 500 ms: admitted after {:?}",
        t.elapsed()
    );
    assert!(
        t.elapsed() >= Duration::from_millis(400),
        "{:?}",
        t.elapsed()
    );
}

#[tokio::test]
async fn stacked_layers_each_add_their_ietf_entry() {
    let (limiter, per_ip) = limit(
        "memory://rate-layer-stacked",
        "per-ip",
        Quota::per_minute(100),
    )
    .await;
    let per_key = limiter
        .rate_limit("per-key", Quota::per_minute(10))
        .await
        .unwrap();
    let svc = tower::ServiceBuilder::new()
        .layer(ClusterRateLimitLayer::new(per_ip, key::peer_ip()))
        .layer(ClusterRateLimitLayer::new(
            per_key,
            key::header("x-api-key"),
        ))
        .service(ok_service(Arc::default()));
    let mut req = request(Some("k"));
    req.extensions_mut()
        .insert("10.0.0.1:1234".parse::<SocketAddr>().unwrap());
    let res = send(&svc, req).await;
    assert_eq!(res.status(), 200);
    let fields: Vec<&str> = res
        .headers()
        .get_all("ratelimit")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    assert_eq!(fields, [r#""per-key";r=9;t=6"#, r#""per-ip";r=99;t=1"#]);
    // The outer layer's decision is the extension left on the response.
    assert_eq!(info(&res).limit, "per-ip");
}
