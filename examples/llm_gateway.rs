//! An LLM gateway: an axum proxy that keeps each tenant within a budget of tokens per minute
//! across every replica, although a call's cost is known only once the LLM has answered.
//!
//! Each `POST /v1/completions` (tenant in the `x-tenant` header, JSON body with `max_tokens`)
//! reserves `max_tokens` from the tenant's budget ([`RateLimit::reserve`]), is forwarded to the
//! upstream LLM, and is settled at the reply's `usage.total_tokens` ([`Reservation::settle`]):
//! what the call did not use goes back to the tenant at once. A tenant without budget left gets
//! `429 Too Many Requests` with `Retry-After` (the end of the minute). The budget is a fixed
//! window per minute aligned to the clock, shared by the replicas through the store.
//!
//! How the upstream's failures are settled (the provider bills no failed call, but may bill a
//! call that answered without saying what it used):
//! - unreachable, or an error status (4xx/5xx): settled at 0, the whole reservation comes back;
//!   the client gets 502 (unreachable) or the upstream's status and body;
//! - a success without a readable `usage.total_tokens`, or a reply cut off: the reservation is
//!   kept (charged at `max_tokens`, the most the call can have cost), 502;
//! - usage above `max_tokens` (prompt tokens count too): the extra is charged into debt, and the
//!   tenant's next calls wait until the minute has paid it off.
//!
//! The same binary is the fake LLM (`--fake-llm`: answers `{"usage": {"total_tokens": n}}`, n
//! random in 1..=max_tokens, and counts what it served per tenant per minute at `GET /usage`)
//! and a load loop (`--load`). Two replicas on one etcd:
//!
//! ```sh
//! etcd --data-dir /tmp/llmgw-etcd &                                   # 127.0.0.1:2379
//! cargo run --example llm_gateway -- --fake-llm --listen 127.0.0.1:4000 &
//! for port in 4001 4002; do
//!   cargo run --example llm_gateway -- --store etcd://127.0.0.1:2379/llmgw \
//!     --upstream http://127.0.0.1:4000 --listen 127.0.0.1:$port --budget 20000 &
//! done
//! cargo run --example llm_gateway -- --load http://127.0.0.1:4001,http://127.0.0.1:4002 \
//!   --tenants acme,globex --callers 8 --seconds 130 --max-tokens 1000 \
//!   --usage http://127.0.0.1:4000/usage --budget 20000
//! ```
//!
//! The load loop's output (a run of 130 s with the debug build: 8 callers over two tenants,
//! each call answered in 10-20 ms, so demand is many times the budget of 20,000 tokens per
//! minute; the `usage:` lines are the fake LLM's own count of what it served per minute):
//!
//! ```text
//! load: acme: 119 calls served, 12 answered 429; globex: 105 calls served, 12 answered 429
//! usage: acme, minute 29932539: 19694 tokens (budget 20000): within budget
//! usage: acme, minute 29932540: 19329 tokens (budget 20000): within budget
//! usage: acme, minute 29932541: 19166 tokens (budget 20000): within budget
//! usage: globex, minute 29932539: 19011 tokens (budget 20000): within budget
//! usage: globex, minute 29932540: 19420 tokens (budget 20000): within budget
//! usage: globex, minute 29932541: 19386 tokens (budget 20000): within budget
//! ```
//!
//! Reserving `max_tokens` (1,000) alone would have admitted 20 calls per tenant per minute;
//! settling gives the unused part back, so about 39 ran (500 tokens each on average), using
//! 95-98% of the budget.
//!
//! Add `--window SECS` to every command for a shorter window than a minute (the tests run the
//! example with 3 s windows).
//!
//! [`RateLimit::reserve`]: clusterlimit::RateLimit::reserve
//! [`Reservation::settle`]: clusterlimit::Reservation::settle

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use clusterlimit::{Algorithm, Error, Limiter, Quota, RateLimit, Reservation};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The header naming the tenant whose budget a call spends.
const TENANT: &str = "x-tenant";
/// The window a call was admitted in (gateway → fake LLM), so the fake LLM counts it there.
const WINDOW: &str = "x-budget-window";
/// How long the gateway waits for the upstream.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(60);

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = Args(std::env::args().skip(1).collect());
    let window = Duration::from_secs(args.number("--window", 60)?);
    if args.flag("--fake-llm") {
        return fake_llm(&args.value("--listen", "127.0.0.1:4000"), window).await;
    }
    if let Some(targets) = args.get("--load") {
        return load(&args, &targets, window).await;
    }
    let store = args.get("--store").ok_or("--store URL is required")?;
    let upstream = args.get("--upstream").ok_or("--upstream URL is required")?;
    let budget = args.number("--budget", 1_000_000)?;
    gateway(
        &store,
        &upstream,
        &args.value("--listen", "127.0.0.1:4001"),
        budget,
        window,
    )
    .await
}

/// The command line: `--name value` pairs and flags.
struct Args(Vec<String>);

impl Args {
    fn flag(&self, name: &str) -> bool {
        self.0.iter().any(|a| a == name)
    }

    fn get(&self, name: &str) -> Option<String> {
        let i = self.0.iter().position(|a| a == name)?;
        self.0.get(i + 1).cloned()
    }

    fn value(&self, name: &str, default: &str) -> String {
        self.get(name).unwrap_or_else(|| default.to_string())
    }

    fn number(&self, name: &str, default: u64) -> Result<u64, BoxError> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| format!("{name} needs a whole number, not {v:?}").into()),
        }
    }
}

/// The window (of `window` length, aligned to the Unix epoch as fixed windows are) now.
fn window_now(window: Duration) -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    (now.as_nanos() / window.as_nanos().max(1)) as u64
}

// ---- the gateway ----

#[derive(Clone)]
struct Gateway {
    tokens: RateLimit,
    upstream: String,
    http: reqwest::Client,
    window: Duration,
}

async fn gateway(
    store: &str,
    upstream: &str,
    listen: &str,
    budget: u64,
    window: Duration,
) -> Result<(), BoxError> {
    let limiter = Limiter::connect(store).await?;
    // A fixed window per minute: at most `budget` tokens in each, plus what a call's settlement
    // charged beyond its reservation, carried into the next windows as debt.
    let quota = Quota::new(budget, window).algorithm(Algorithm::FixedWindow);
    let tokens = limiter.rate_limit("llm-tokens", quota).await?;
    let http = reqwest::Client::builder()
        .timeout(UPSTREAM_TIMEOUT)
        .build()?;
    let state = Gateway {
        tokens,
        upstream: format!("{}/v1/completions", upstream.trim_end_matches('/')),
        http,
        window,
    };
    let app = Router::new()
        .route("/v1/completions", post(complete))
        .route("/healthz", get(|| async { "ok\n" }))
        .with_state(state);
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    println!("llm_gateway: gateway on http://{addr} (store {store}, upstream {upstream}, budget {budget} tokens per {window:?} per tenant)");
    tokio::select! {
        served = axum::serve(listener, app) => served?,
        _ = tokio::signal::ctrl_c() => {}
    }
    limiter.close().await?;
    Ok(())
}

/// Reserve `max_tokens`, forward, settle at the reply's usage.
async fn complete(State(gw): State<Gateway>, headers: HeaderMap, body: Bytes) -> Response {
    let (tenant, max_tokens) = match read_request(&headers, &body) {
        Ok(r) => r,
        Err((field, why)) => return problem(StatusCode::BAD_REQUEST, field, &why),
    };
    let call = match gw.tokens.reserve(&tenant, max_tokens).await {
        Ok(call) => call,
        Err(Error::InvalidArgument(why)) => {
            return problem(StatusCode::BAD_REQUEST, "max_tokens", &why)
        }
        Err(e) => {
            eprintln!("llm_gateway: the token budget store did not answer ({e}); answered 503, the client may retry");
            return problem(
                StatusCode::SERVICE_UNAVAILABLE,
                "",
                "the token budget cannot be checked now; retry later",
            );
        }
    };
    if !call.allowed() {
        return too_many(&tenant, call.decision().retry_after);
    }
    let window = window_now(gw.window);
    let sent = gw
        .http
        .post(&gw.upstream)
        .header(TENANT, &tenant)
        .header(WINDOW, window)
        .header(header::CONTENT_TYPE, "application/json")
        .body(body)
        .send()
        .await;
    match sent {
        Ok(reply) => relay(call, reply).await,
        Err(e) => {
            settle(call, 0).await; // nothing was done: the whole reservation comes back
            eprintln!("llm_gateway: the upstream did not answer ({e}); answered 502, the tokens were given back");
            problem(
                StatusCode::BAD_GATEWAY,
                "",
                "the upstream LLM did not answer",
            )
        }
    }
}

/// What is wrong with a request: the field at fault (empty: none) and why.
type BadInput = (&'static str, String);

/// The tenant and `max_tokens` of a request.
fn read_request(headers: &HeaderMap, body: &[u8]) -> Result<(String, u64), BadInput> {
    let tenant = headers
        .get(TENANT)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or((
            TENANT,
            "the x-tenant header must name the tenant".to_string(),
        ))?;
    let json: Value =
        serde_json::from_slice(body).map_err(|e| ("", format!("the body is not JSON: {e}")))?;
    let max_tokens = json
        .get("max_tokens")
        .and_then(Value::as_u64)
        .filter(|&n| n > 0)
        .ok_or((
            "max_tokens",
            "max_tokens must be a whole number above 0".to_string(),
        ))?;
    Ok((tenant.to_string(), max_tokens))
}

/// Passes the upstream's reply on, settling the call as its status and usage say.
async fn relay(call: Reservation, reply: reqwest::Response) -> Response {
    let status = reply.status();
    let bytes = match reply.bytes().await {
        Ok(b) => b,
        Err(e) => {
            call.keep(); // the call may have run to the end: charged at its reservation
            eprintln!("llm_gateway: the upstream's reply was cut off ({e}); charged max_tokens, answered 502");
            return problem(
                StatusCode::BAD_GATEWAY,
                "",
                "the upstream LLM's reply was cut off",
            );
        }
    };
    if !status.is_success() {
        settle(call, 0).await; // a failed call is not billed
        let status = StatusCode::from_u16(status.as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
        return (status, bytes).into_response();
    }
    let used = serde_json::from_slice::<Value>(&bytes)
        .ok()
        .and_then(|v| v["usage"]["total_tokens"].as_u64());
    let Some(used) = used else {
        call.keep();
        eprintln!("llm_gateway: the upstream's reply has no usage.total_tokens; charged max_tokens, answered 502");
        return problem(
            StatusCode::BAD_GATEWAY,
            "",
            "the upstream LLM's reply says nothing of its usage",
        );
    };
    settle(call, used).await;
    ([(header::CONTENT_TYPE, "application/json")], bytes).into_response()
}

/// Settles `call` at `used` tokens; a failure is logged (the reply is not the client's fault).
async fn settle(call: Reservation, used: u64) {
    let (tenant, estimate) = (call.key().to_string(), call.estimate());
    if let Err(e) = call.settle(used).await {
        eprintln!("llm_gateway: could not settle {tenant}'s call at {used} tokens ({e}); {estimate} stay charged");
    }
}

/// 429 with `Retry-After` in whole seconds (at least 1).
fn too_many(tenant: &str, retry_after: Option<Duration>) -> Response {
    let secs = retry_after.map_or(1, |d| d.as_secs_f64().ceil().max(1.0) as u64);
    let detail = format!("tenant {tenant} has no tokens left in this window; retry in {secs} s");
    let mut res = problem(StatusCode::TOO_MANY_REQUESTS, "", &detail);
    res.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    res
}

/// An RFC 9457 problem+json answer; `field` names the input at fault (empty: none).
fn problem(status: StatusCode, field: &str, detail: &str) -> Response {
    let mut body = json!({
        "type": "about:blank",
        "title": status.canonical_reason().unwrap_or("Error"),
        "status": status.as_u16(),
        "detail": detail,
    });
    if !field.is_empty() {
        body["field"] = field.into();
    }
    let mut res = (status, body.to_string()).into_response();
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    res
}

// ---- the fake LLM ----

/// Tokens served per tenant per window.
type Usage = Arc<Mutex<BTreeMap<String, BTreeMap<u64, u64>>>>;

#[derive(Clone)]
struct FakeLlm {
    usage: Usage,
    window: Duration,
}

async fn fake_llm(listen: &str, window: Duration) -> Result<(), BoxError> {
    let state = FakeLlm {
        usage: Usage::default(),
        window,
    };
    let app = Router::new()
        .route("/v1/completions", post(fake_complete))
        .route("/usage", get(fake_usage))
        .with_state(state);
    let listener = tokio::net::TcpListener::bind(listen).await?;
    println!("llm_gateway: fake LLM on http://{}", listener.local_addr()?);
    tokio::select! {
        served = axum::serve(listener, app) => served?,
        _ = tokio::signal::ctrl_c() => {}
    }
    Ok(())
}

/// Answers after 10-20 ms with a random usage within `max_tokens`.
async fn fake_complete(State(llm): State<FakeLlm>, headers: HeaderMap, body: Bytes) -> Response {
    let max_tokens = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v["max_tokens"].as_u64())
        .filter(|&n| n > 0);
    let Some(max_tokens) = max_tokens else {
        return problem(
            StatusCode::BAD_REQUEST,
            "max_tokens",
            "max_tokens must be a whole number above 0",
        );
    };
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let tenant = header(TENANT).unwrap_or_else(|| "-".to_string());
    let window = header(WINDOW)
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| window_now(llm.window));
    tokio::time::sleep(Duration::from_millis(fastrand::u64(10..=20))).await;
    let used = fastrand::u64(1..=max_tokens);
    if let Ok(mut usage) = llm.usage.lock() {
        *usage.entry(tenant).or_default().entry(window).or_default() += used;
    }
    axum::Json(json!({"usage": {"total_tokens": used}})).into_response()
}

/// `{"window_secs": 60, "tenants": {"acme": {"29413822": 19842, …}}}`.
async fn fake_usage(State(llm): State<FakeLlm>) -> Response {
    let tenants = llm.usage.lock().map(|u| u.clone()).unwrap_or_default();
    axum::Json(json!({"window_secs": llm.window.as_secs(), "tenants": tenants})).into_response()
}

// ---- the load loop ----

/// Calls served and denied per tenant.
type Tally = Arc<Mutex<BTreeMap<String, (u64, u64)>>>;

/// `--callers` loops over the gateways for `--seconds`, each caller a tenant in turn, waiting
/// `Retry-After` when denied; then the fake LLM's count per window against `--budget`.
async fn load(args: &Args, targets: &str, window: Duration) -> Result<(), BoxError> {
    let targets: Vec<String> = targets
        .split(',')
        .map(|t| format!("{t}/v1/completions"))
        .collect();
    let tenants: Vec<String> = args
        .value("--tenants", "acme,globex")
        .split(',')
        .map(str::to_string)
        .collect();
    let callers = args.number("--callers", 8)? as usize;
    let until = Instant::now() + Duration::from_secs(args.number("--seconds", 130)?);
    let max_tokens = args.number("--max-tokens", 1000)?;
    let http = reqwest::Client::builder()
        .timeout(UPSTREAM_TIMEOUT)
        .build()?;
    let tally = Tally::default();
    let loops = (0..callers).map(|i| {
        let (http, tally) = (http.clone(), tally.clone());
        let target = targets[i % targets.len()].clone();
        let tenant = tenants[i % tenants.len()].clone();
        tokio::spawn(call_loop(http, target, tenant, max_tokens, until, tally))
    });
    for done in futures::future::join_all(loops).await {
        done??;
    }
    let line: Vec<String> = tally
        .lock()
        .map_err(|_| "tally poisoned")?
        .iter()
        .map(|(t, (ok, no))| format!("{t}: {ok} calls served, {no} answered 429"))
        .collect();
    println!("load: {}", line.join("; "));
    match args.get("--usage") {
        Some(url) => {
            report_usage(
                &http,
                &url,
                args.number("--budget", 1_000_000)?,
                max_tokens,
                window,
            )
            .await
        }
        None => Ok(()),
    }
}

/// One caller: calls until `until`, sleeping `Retry-After` (at most until `until`) on a 429.
async fn call_loop(
    http: reqwest::Client,
    target: String,
    tenant: String,
    max_tokens: u64,
    until: Instant,
    tally: Tally,
) -> Result<(), BoxError> {
    while Instant::now() < until {
        let res = http
            .post(&target)
            .header(TENANT, &tenant)
            .json(&json!({"prompt": "Hello", "max_tokens": max_tokens}))
            .send()
            .await?;
        let status = res.status();
        let retry = res
            .headers()
            .get(header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok()?.parse().ok());
        res.bytes().await?;
        let denied = match (status, retry) {
            (StatusCode::OK, _) => false,
            (StatusCode::TOO_MANY_REQUESTS, Some(secs)) => {
                let wake = (Instant::now() + Duration::from_secs(secs)).min(until);
                tokio::time::sleep_until(wake.into()).await;
                true
            }
            (status, _) => return Err(format!("{target} answered {status} for {tenant}").into()),
        };
        let mut t = tally.lock().map_err(|_| "tally poisoned")?;
        let entry = t.entry(tenant.clone()).or_default();
        if denied {
            entry.1 += 1
        } else {
            entry.0 += 1
        }
    }
    Ok(())
}

/// Prints the fake LLM's tokens per tenant per window against the budget; an error if a window
/// went over the budget plus one call's `max_tokens`.
async fn report_usage(
    http: &reqwest::Client,
    url: &str,
    budget: u64,
    max_tokens: u64,
    window: Duration,
) -> Result<(), BoxError> {
    let usage: Value = http
        .get(url)
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let name = if window == Duration::from_secs(60) {
        "minute".to_string()
    } else {
        format!("{}s window", window.as_secs())
    };
    let mut over = 0;
    for (tenant, windows) in usage["tenants"].as_object().into_iter().flatten() {
        for (w, tokens) in windows.as_object().into_iter().flatten() {
            let tokens = tokens.as_u64().unwrap_or(0);
            let verdict = match tokens {
                t if t <= budget => "within budget",
                t if t <= budget + max_tokens => "within budget + one call",
                _ => "OVER BUDGET",
            };
            over += usize::from(tokens > budget + max_tokens);
            println!("usage: {tenant}, {name} {w}: {tokens} tokens (budget {budget}): {verdict}");
        }
    }
    if over > 0 {
        return Err(format!("{over} windows went over the budget").into());
    }
    Ok(())
}
