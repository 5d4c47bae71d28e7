//! `serve`'s traces (docs/operations.md#tracing): the real binary on a real etcd, exporting
//! over OTLP/gRPC to a receiver this test runs (the TraceService of `opentelemetry-proto`).
//! Callers' `traceparent` (HTTP headers, RLS metadata) become the server spans' parents, and
//! the library's spans nest under them: check → store request, acquire → enqueue. Without an
//! endpoint nothing is sent; a collector that is down is logged and requests go on.

use crate::binary::{self, cmd, eventually, http_client, within};
use crate::support::EtcdCluster;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::json;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::Child;

/// Every span received, with its resource's `service.name`.
type Received = Arc<Mutex<Vec<(String, Span)>>>;

/// An OTLP/gRPC trace receiver on a loopback port; stops with the test's runtime.
struct Receiver {
    url: String,
    spans: Received,
}

#[derive(Clone)]
struct Collect(Received);

#[tonic::async_trait]
impl TraceService for Collect {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = self.0.lock().unwrap();
        for rs in request.into_inner().resource_spans {
            let service = rs
                .resource
                .as_ref()
                .and_then(|r| r.attributes.iter().find(|a| a.key == "service.name"))
                .map(|a| text(a.value.as_ref().and_then(|v| v.value.as_ref())))
                .unwrap_or_default();
            for ss in rs.scope_spans {
                spans.extend(ss.spans.into_iter().map(|s| (service.clone(), s)));
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

impl Receiver {
    /// A receiver on `addr` (`127.0.0.1:0`: any free port), or `None` if it is taken.
    async fn start(addr: &str) -> Option<Receiver> {
        let listener = tokio::net::TcpListener::bind(addr).await.ok()?;
        let url = format!("http://{}", listener.local_addr().unwrap());
        let spans: Received = Arc::default();
        let incoming = tonic::transport::server::TcpIncoming::from(listener);
        let service = TraceServiceServer::new(Collect(spans.clone()));
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(incoming),
        );
        Some(Receiver { url, spans })
    }

    fn spans(&self) -> Vec<(String, Span)> {
        self.spans.lock().unwrap().clone()
    }
}

/// An attribute's value as text (numbers and booleans as Rust prints them).
fn text(v: Option<&Value>) -> String {
    match v {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

fn attr(span: &Span, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|a| a.key == key)
        .map(|a| text(a.value.as_ref().and_then(|v| v.value.as_ref())))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The one span of `trace` named `name` whose parent is `parent` (hex span id).
fn child<'a>(spans: &'a [(String, Span)], trace: &str, name: &str, parent: &str) -> &'a Span {
    let found: Vec<&Span> = spans
        .iter()
        .map(|(_, s)| s)
        .filter(|s| hex(&s.trace_id) == trace && s.name == name)
        .filter(|s| hex(&s.parent_span_id) == parent)
        .collect();
    match found.as_slice() {
        [one] => one,
        _ => panic!(
            "expected one {name} span under {parent} in trace {trace}, found {}; trace: {:#?}",
            found.len(),
            spans
                .iter()
                .filter(|(_, s)| hex(&s.trace_id) == trace)
                .map(|(_, s)| (&s.name, hex(&s.span_id), hex(&s.parent_span_id)))
                .collect::<Vec<_>>()
        ),
    }
}

/// A running `serve`: its HTTP and RLS addresses, its stderr lines so far.
struct Served {
    child: Child,
    http: String,
    grpc: String,
    stderr: Arc<Mutex<Vec<String>>>,
}

/// `serve --config CONFIG` with `env` set (and no other OTEL_* variable), reading its two
/// addresses from stdout.
async fn serve(config: &Path, env: &[(&str, &str)]) -> Served {
    let mut c = cmd(&["serve", "--config", config.to_str().unwrap()]);
    for var in [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_SERVICE_NAME",
        "OTEL_SDK_DISABLED",
        "OTEL_BSP_SCHEDULE_DELAY",
    ] {
        c.env_remove(var);
    }
    c.envs(env.iter().copied());
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = c.spawn().expect("spawn clusterlimit serve");
    let stderr = Arc::new(Mutex::new(Vec::new()));
    collect_lines(child.stderr.take().unwrap(), stderr.clone());
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let (http, grpc) = within(
        "serve to print its addresses",
        Duration::from_secs(30),
        async {
            let (mut http, mut grpc) = (None, None);
            for _ in 0..20 {
                let line = lines
                    .next_line()
                    .await
                    .unwrap()
                    .expect("serve exited early");
                if let Some(rest) = line.split("listening on http://").nth(1) {
                    http = Some(format!(
                        "http://{}",
                        rest.split_whitespace().next().unwrap()
                    ));
                }
                if let Some(rest) =
                    line.strip_prefix("clusterlimit serve: rls listening on grpc://")
                {
                    grpc = Some(format!("http://{rest}"));
                }
                if let (Some(h), Some(g)) = (&http, &grpc) {
                    return (h.clone(), g.clone());
                }
            }
            panic!("serve printed no addresses")
        },
    )
    .await;
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Served {
        child,
        http,
        grpc,
        stderr,
    }
}

fn collect_lines(from: impl AsyncRead + Unpin + Send + 'static, into: Arc<Mutex<Vec<String>>>) {
    tokio::spawn(async move {
        let mut lines = BufReader::new(from).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            into.lock().unwrap().push(line);
        }
    });
}

impl Served {
    /// SIGTERM, and the exit within 10 s (the export flushes before it).
    async fn stop(mut self) -> Vec<String> {
        binary::signal(self.child.id().unwrap(), "TERM");
        let status = within("serve to exit", Duration::from_secs(10), self.child.wait())
            .await
            .unwrap();
        assert!(status.success(), "serve exited with {status}");
        // The stderr reader has read to the end once the pipe closed.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let lines = self.stderr.lock().unwrap().clone();
        lines
    }
}

/// A config for `store`: the semaphore `jobs`, the rate limit `api`, the RLS (rule file in
/// `dir`) and `extra` (a `[tracing]` table).
fn config(dir: &Path, store: &str, extra: &str) -> std::path::PathBuf {
    let rules = dir.join("rls.yaml");
    std::fs::write(
        &rules,
        "domain: web\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 100}\n",
    )
    .unwrap();
    let path = dir.join("serve.toml");
    let text = format!(
        "listen = \"127.0.0.1:0\"\nstore = \"{store}\"\ngrpc_listen = \"127.0.0.1:0\"\n\
         rls_config = [\"{}\"]\n\n[[semaphores]]\nname = \"jobs\"\ncapacity = 2\n\n\
         [[rate_limits]]\nname = \"api\"\nlimit = 10\nperiod = \"1s\"\n\n{extra}",
        rules.display()
    );
    std::fs::write(&path, text).unwrap();
    path
}

const TRACE_CHECK: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const TRACE_ACQUIRE: &str = "0af7651916cd43dd8448eb211c80319c";
const TRACE_RLS: &str = "a3ce929d0e0e47364bf92f3577b34da6";
const CALLER: &str = "00f067aa0ba902b7";
/// The RLS call's server span, named as OpenTelemetry's RPC conventions say.
const RLS_SPAN: &str = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

fn traceparent(trace: &str) -> String {
    format!("00-{trace}-{CALLER}-01")
}

/// A rate check, an acquire (each with a `traceparent` header; the permit then released) and
/// an RLS call (with `traceparent` metadata): all answered.
async fn requests(s: &Served) {
    let http = http_client();
    let r = http
        .post(format!("{}/v1/ratelimits/api/check", s.http))
        .header("traceparent", traceparent(TRACE_CHECK))
        .header("tracestate", "vendor=1")
        .json(&json!({"key": "user-1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{:?}", r.text().await);
    let r = http
        .post(format!("{}/v1/semaphores/jobs/permits", s.http))
        .header("traceparent", traceparent(TRACE_ACQUIRE))
        .json(&json!({"timeout_ms": 5000}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "{:?}", r.text().await);
    let permit = r.headers()["location"].to_str().unwrap().to_string();
    let r = http
        .delete(format!("{}{permit}", s.http))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "release: {}", r.status());
    let mut rls = RateLimitServiceClient::connect(s.grpc.clone())
        .await
        .unwrap();
    let mut call = tonic::Request::new(RateLimitRequest {
        domain: "web".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "user".into(),
                value: "alice".into(),
            }],
            ..Default::default()
        }],
        hits_addend: 0,
    });
    call.metadata_mut()
        .insert("traceparent", traceparent(TRACE_RLS).parse().unwrap());
    let answer = within(
        "ShouldRateLimit",
        Duration::from_secs(10),
        rls.should_rate_limit(call),
    )
    .await
    .unwrap()
    .into_inner();
    assert_eq!(answer.overall_code, 1, "{answer:?}"); // OK
}

/// The store request under `parent`: a positive latency, no error.
fn store_request(spans: &[(String, Span)], trace: &str, parent: &Span, op: &str) {
    let req = child(spans, trace, "store.request", &hex(&parent.span_id));
    assert_eq!(attr(req, "op").as_deref(), Some(op));
    let latency: u64 = attr(req, "latency_us").unwrap().parse().unwrap();
    assert!(latency > 0, "{req:?}");
    assert_eq!(attr(req, "error"), None, "{req:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_join_the_callers_trace_and_nest_the_library_spans() {
    let cluster = EtcdCluster::single();
    let receiver = Receiver::start("127.0.0.1:0").await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let extra = format!("[tracing]\notlp_endpoint = \"{}\"\n", receiver.url);
    let cfg = config(dir.path(), &cluster.url("traced"), &extra);
    let served = serve(&cfg, &[("OTEL_SERVICE_NAME", "edge-sidecar")]).await;
    requests(&served).await;
    // The batch exporter waits 5 s between sends: these spans go out with the shutdown flush.
    let stderr = served.stop().await;
    let spans = receiver.spans();
    assert!(
        spans.iter().all(|(service, _)| service == "edge-sidecar"),
        "service names: {:?}",
        spans.iter().map(|(s, _)| s).collect::<Vec<_>>()
    );

    // HTTP check: server span ← the caller's span; check under it; its store write under that.
    let server = child(
        &spans,
        TRACE_CHECK,
        "POST /v1/ratelimits/{name}/check",
        CALLER,
    );
    assert_eq!(server.kind, SpanKind::Server as i32);
    assert_eq!(attr(server, "http.request.method").as_deref(), Some("POST"));
    let route = attr(server, "http.route");
    assert_eq!(route.as_deref(), Some("/v1/ratelimits/{name}/check"));
    assert_eq!(
        attr(server, "http.response.status_code").as_deref(),
        Some("200")
    );
    assert_eq!(server.trace_state, "vendor=1");
    let check = child(
        &spans,
        TRACE_CHECK,
        "rate_limit.check",
        &hex(&server.span_id),
    );
    for (key, want) in [
        ("name", "api"),
        ("key", "user-1"),
        ("cost", "1"),
        ("allowed", "true"),
        ("remaining", "9"),
        ("limit", "10"),
    ] {
        assert_eq!(
            attr(check, key).as_deref(),
            Some(want),
            "{key} of {check:?}"
        );
    }
    store_request(&spans, TRACE_CHECK, check, "write");

    // HTTP acquire: server span, acquire under it with its token, the enqueue under that.
    let server = child(
        &spans,
        TRACE_ACQUIRE,
        "POST /v1/semaphores/{name}/permits",
        CALLER,
    );
    let route = attr(server, "http.route");
    assert_eq!(route.as_deref(), Some("/v1/semaphores/{name}/permits"));
    assert_eq!(
        attr(server, "http.response.status_code").as_deref(),
        Some("201")
    );
    let acquire = child(
        &spans,
        TRACE_ACQUIRE,
        "semaphore.acquire",
        &hex(&server.span_id),
    );
    assert_eq!(attr(acquire, "name").as_deref(), Some("jobs"));
    assert_eq!(attr(acquire, "permits").as_deref(), Some("1"));
    let token: u64 = attr(acquire, "token").unwrap().parse().unwrap();
    assert!(token > 0, "{acquire:?}");
    store_request(&spans, TRACE_ACQUIRE, acquire, "enqueue");

    // RLS: the gRPC server span ← the caller's; check under it; store write under that.
    let server = child(&spans, TRACE_RLS, RLS_SPAN, CALLER);
    assert_eq!(server.kind, SpanKind::Server as i32);
    assert_eq!(
        attr(server, "rpc.method").as_deref(),
        Some("ShouldRateLimit")
    );
    assert_eq!(attr(server, "rpc.grpc.status_code").as_deref(), Some("0"));
    let check = child(&spans, TRACE_RLS, "rate_limit.check", &hex(&server.span_id));
    assert_eq!(attr(check, "key").as_deref(), Some("user_alice")); // the RLS key: entries joined
    assert_eq!(attr(check, "allowed").as_deref(), Some("true"));
    store_request(&spans, TRACE_RLS, check, "write");

    let said = stderr.join("\n");
    assert!(
        said.contains(&format!("exporting traces over OTLP to {}", receiver.url)),
        "{said}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_endpoint_nothing_is_exported() {
    let cluster = EtcdCluster::single();
    let dir = tempfile::tempdir().unwrap();
    // No endpoint anywhere: nothing may reach the OTLP default port either (when free here).
    let default_port = Receiver::start("127.0.0.1:4317").await;
    let cfg = config(dir.path(), &cluster.url("untraced"), "");
    let served = serve(&cfg, &[("OTEL_BSP_SCHEDULE_DELAY", "100")]).await;
    requests(&served).await;
    let stderr = served.stop().await;
    assert!(
        !stderr.join("\n").contains("exporting traces"),
        "{stderr:?}"
    );
    match &default_port {
        Some(r) => assert!(r.spans().is_empty(), "{:?}", r.spans()),
        None => println!("127.0.0.1:4317 is taken: not watched"),
    }

    // An endpoint in the environment, but OTEL_SDK_DISABLED: off as well.
    let receiver = Receiver::start("127.0.0.1:0").await.unwrap();
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url.as_str()),
        ("OTEL_SDK_DISABLED", "true"),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
    ];
    let served = serve(&cfg, &env).await;
    requests(&served).await;
    served.stop().await;
    assert!(receiver.spans().is_empty(), "{:?}", receiver.spans());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_environment_endpoint_exports_and_a_down_collector_is_logged_not_felt() {
    let cluster = EtcdCluster::single();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &cluster.url("env-traced"), "");
    // OTEL_EXPORTER_OTLP_ENDPOINT alone turns the export on; spans leave every 100 ms.
    let receiver = Receiver::start("127.0.0.1:0").await.unwrap();
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url.as_str()),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
    ];
    let served = serve(&cfg, &env).await;
    requests(&served).await;
    eventually("spans before shutdown", Duration::from_secs(10), || async {
        let spans = receiver.spans();
        spans
            .iter()
            .any(|(service, s)| {
                s.name == RLS_SPAN && hex(&s.trace_id) == TRACE_RLS && service == "clusterlimit"
            })
            .then_some(())
    })
    .await;
    served.stop().await;

    // A collector nobody listens on: every request still answered, one warning in words.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", url.as_str()),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
    ];
    let served = serve(&cfg, &env).await;
    for _ in 0..3 {
        requests(&served).await;
    }
    let warning = eventually("the export warning", Duration::from_secs(15), || async {
        let lines = served.stderr.lock().unwrap().clone();
        lines
            .into_iter()
            .find(|l| l.contains("cannot send traces to the collector"))
    })
    .await;
    assert!(warning.contains(&url), "{warning}");
    assert!(
        warning.contains("requests are served as usual"),
        "{warning}"
    );
    assert!(
        !warning.contains("Tonic") && !warning.contains("Status {"),
        "{warning}"
    );
    requests(&served).await;
    let stderr = served.stop().await;
    let warnings = stderr
        .iter()
        .filter(|l| l.contains("cannot send traces to the collector"))
        .count();
    assert_eq!(
        warnings, 1,
        "one warning until it answers again: {stderr:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_endpoint_is_a_usage_error_naming_the_setting() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        dir.path(),
        "memory://",
        "[tracing]\notlp_endpoint = \"collector:4317\"\n",
    );
    let out = binary::check_config(&cfg).await;
    assert_eq!(out.code, Some(64), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("config [tracing] otlp_endpoint = \"collector:4317\""),
        "{}",
        out.stderr
    );
    let mut c = cmd(&["serve", "--config", cfg.to_str().unwrap()]);
    c.env_remove("OTEL_EXPORTER_OTLP_ENDPOINT");
    let out = binary::output(c, Duration::from_secs(20)).await;
    assert_eq!(out.code, Some(64), "{}", out.stderr);
    assert!(
        out.stderr.contains("http://127.0.0.1:4317"),
        "{}",
        out.stderr
    );

    // An unknown key of [tracing] is refused like any other.
    let cfg = config(
        dir.path(),
        "memory://",
        "[tracing]\nendpoint = \"http://x:4317\"\n",
    );
    let out = binary::check_config(&cfg).await;
    assert_eq!(out.code, Some(64), "{}", out.stderr);
    assert!(out.stderr.contains("endpoint"), "{}", out.stderr);

    // A good one is shown by --check-config.
    let cfg = config(
        dir.path(),
        "memory://",
        "[tracing]\notlp_endpoint = \"http://127.0.0.1:4317\"\n",
    );
    let out = binary::check_config(&cfg).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout
            .contains("tracing      OTLP to http://127.0.0.1:4317"),
        "{}",
        out.stdout
    );
}
