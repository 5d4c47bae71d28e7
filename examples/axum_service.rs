//! An axum service whose `/report` route runs at most 2 requests at once across every replica,
//! answering `503 Service Unavailable` with `Retry-After` when the cluster is at its cap; and
//! whose `/search` route admits a burst of 3 requests, then one every 2 s, per client IP
//! across every replica (`429 Too Many Requests` with `Retry-After` and the `RateLimit` fields).
//!
//! ```sh
//! cargo run --example axum_service -- --demo         # no servers: 8 concurrent requests, summary, exit
//! cargo run --example axum_service                   # serve on 127.0.0.1:3000 until Ctrl-C
//! CLUSTERLIMIT_STORE=etcd://127.0.0.1:2379/demo cargo run --example axum_service -- --listen 127.0.0.1:3001
//! ```
//!
//! Start several replicas on one etcd and the cap holds for all of them together.

use axum::error_handling::HandleErrorLayer;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

// The cap is clusterlimit's layer, shared by every replica through the store; tower only
// stacks the layers (tower's own `ConcurrencyLimitLayer` would cap this process alone).
use clusterlimit::tower::ClusterRateLimitLayer;
use clusterlimit::tower::{key, ClusterConcurrencyLimitLayer, LimitError};
use clusterlimit::{Limiter, Quota, StoreDownPolicy};
use std::net::SocketAddr;
use tower::ServiceBuilder;

/// Requests running inside the handler right now, and the most seen at once (for `--demo`).
#[derive(Clone, Default)]
struct Busy {
    now: Arc<AtomicUsize>,
    max: Arc<AtomicUsize>,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let demo = args.iter().any(|a| a == "--demo");
    let listen = match args.iter().position(|a| a == "--listen") {
        Some(i) => args.get(i + 1).ok_or("--listen needs ADDR")?.clone(),
        None if demo => "127.0.0.1:0".to_string(),
        None => "127.0.0.1:3000".to_string(),
    };
    let store =
        std::env::var("CLUSTERLIMIT_STORE").unwrap_or_else(|_| "memory://axum-service".into());

    // One Limiter per process: its session's permits come back if the process dies.
    let limiter = Limiter::connect(&store).await?;
    let semaphore = limiter.semaphore("report-api", 2).await?;
    let limit = ClusterConcurrencyLimitLayer::builder(semaphore)
        .acquire_timeout(Duration::from_millis(200)) // queue briefly, then shed load
        .on_store_error(StoreDownPolicy::FailClosed) // keep the cap even if the store is down
        .retry_after(Duration::from_secs(1))
        .build()?;

    // Per client IP, cluster-wide: a burst of 3, then one every 2 s. The 429s are answered by
    // the layer itself (no HandleErrorLayer needed: its error type stays axum's Infallible).
    let search_api = limiter
        .rate_limit("search-api", Quota::per_minute(30).burst(3))
        .await?;
    let per_ip = ClusterRateLimitLayer::new(search_api, key::peer_ip())
        .store_down(StoreDownPolicy::Local { replicas: 3 }) // a third each if the store is down
        .store_timeout(Duration::from_millis(300));

    let busy = Busy::default();
    let app = Router::new()
        .route(
            "/report",
            get(report).layer(
                ServiceBuilder::new()
                    // Turns the layer's error into a response: axum routes cannot fail.
                    .layer(HandleErrorLayer::new(overloaded))
                    .layer(limit),
            ),
        )
        .route("/search", get(|| async { "results\n" }).layer(per_ip))
        .route("/healthz", get(|| async { "ok\n" })) // never limited
        .with_state(busy.clone());

    let listener = tokio::net::TcpListener::bind(&listen).await?;
    let addr = listener.local_addr()?;
    println!("axum_service: listening on http://{addr} (store {store})");
    // With the peer address in each request (`ConnectInfo`), for `key::peer_ip()`.
    let app = app.into_make_service_with_connect_info::<SocketAddr>();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    if demo {
        let mut outcome = run_demo(&format!("http://{addr}"), &busy).await;
        if outcome.is_ok() {
            outcome = search_demo(&format!("http://{addr}")).await;
        }
        server.abort();
        limiter.close().await?;
        return outcome;
    }
    tokio::signal::ctrl_c().await?;
    server.abort();
    limiter.close().await?;
    Ok(())
}

/// The guarded work: 300 ms of "report rendering".
async fn report(axum::extract::State(busy): axum::extract::State<Busy>) -> String {
    let now = busy.now.fetch_add(1, Ordering::SeqCst) + 1;
    busy.max.fetch_max(now, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(300)).await;
    busy.now.fetch_sub(1, Ordering::SeqCst);
    "report ready\n".to_string()
}

/// Maps the layer's rejections to HTTP: 503 + `Retry-After` for "try later", 500 otherwise.
async fn overloaded(err: LimitError<Infallible>) -> Response {
    match err.retry_after() {
        Some(after) => {
            let secs = after.as_secs_f64().ceil().max(1.0) as u64;
            let mut res = (StatusCode::SERVICE_UNAVAILABLE, format!("{err}\n")).into_response();
            res.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
            res
        }
        // A setup mistake (weight above the capacity, closed Limiter): not the client's fault.
        None => (StatusCode::INTERNAL_SERVER_ERROR, format!("{err}\n")).into_response(),
    }
}

/// Sends 8 concurrent requests: 2 are served at once, the rest wait 200 ms and get 503.
async fn run_demo(base: &str, busy: &Busy) -> Result<(), BoxError> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?;
    let requests = (0..8).map(|_| {
        let client = client.clone();
        let url = format!("{base}/report");
        async move {
            let res = client.get(url).send().await?;
            let retry_after = res
                .headers()
                .get(header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            Ok::<_, reqwest::Error>((res.status(), retry_after))
        }
    });
    let (mut served, mut shed) = (0, 0);
    for outcome in futures::future::join_all(requests).await {
        match outcome? {
            (StatusCode::OK, _) => served += 1,
            (StatusCode::SERVICE_UNAVAILABLE, Some(after)) => {
                println!("503, Retry-After: {after}");
                shed += 1;
            }
            (status, after) => {
                return Err(format!("unexpected {status} (Retry-After {after:?})").into())
            }
        }
    }
    let max = busy.max.load(Ordering::SeqCst);
    println!("served {served}, shed {shed} with 503; at most {max} ran at once (cap 2)");
    if max > 2 || served == 0 || shed == 0 {
        return Err("the cap did not hold as expected".into());
    }
    Ok(())
}

/// Sends 5 requests to `/search` in a row from one client: 3 pass (the burst), 2 get 429.
async fn search_demo(base: &str) -> Result<(), BoxError> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?;
    let (mut served, mut limited) = (0, 0);
    for _ in 0..5 {
        let res = client.get(format!("{base}/search")).send().await?;
        let field = |name: &str| {
            res.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("-")
                .to_string()
        };
        match res.status() {
            StatusCode::OK => served += 1,
            StatusCode::TOO_MANY_REQUESTS => {
                println!(
                    "search: 429, Retry-After: {}, RateLimit: {}",
                    field("retry-after"),
                    field("ratelimit")
                );
                limited += 1;
            }
            status => return Err(format!("/search: unexpected {status}").into()),
        }
    }
    println!("search: served {served}, limited {limited} with 429 (burst 3 per client IP)");
    if served != 3 || limited != 2 {
        return Err("the rate limit did not hold as expected".into());
    }
    Ok(())
}
