//! `clusterlimit serve --grpc-listen`: Envoy's rate limit service as a real process, called
//! with the tonic client from envoy-types, on memory://, etcd and ZooKeeper: every config
//! feature field by field, sharing one limit across sidecars, the store-down policies, and
//! config errors.

use crate::binary;
use crate::support;

use binary::{cmd, output, within};
use clusterlimit::{Limiter, Quota};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use support::{EtcdCluster, ZkCluster};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;
use tonic::transport::Channel;

pub(crate) type Client = RateLimitServiceClient<Channel>;

/// A running `serve` with the RLS on; SIGKILLed when dropped.
pub(crate) struct Rls {
    _child: Child,
    pub(crate) http: String,
    grpc: String,
}

impl Rls {
    /// `serve --listen 127.0.0.1:0 --grpc-listen 127.0.0.1:0 ARGS`, reading both addresses.
    async fn start(args: &[&str]) -> Rls {
        let mut c = serve("127.0.0.1:0", args);
        c.stdout(Stdio::piped()).stderr(Stdio::inherit());
        let mut child = c.spawn().expect("spawn clusterlimit serve");
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
                        .expect("serve exited before listening");
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
                panic!("serve printed no rls address")
            },
        )
        .await;
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Rls {
            _child: child,
            http,
            grpc,
        }
    }

    pub(crate) async fn client(&self) -> Client {
        RateLimitServiceClient::connect(self.grpc.clone())
            .await
            .unwrap()
    }
}

/// `clusterlimit serve --listen 127.0.0.1:0 --grpc-listen GRPC ARGS`.
fn serve(grpc: &str, args: &[&str]) -> tokio::process::Command {
    let mut all = vec!["serve", "--listen", "127.0.0.1:0", "--grpc-listen", grpc];
    all.extend_from_slice(args);
    cmd(&all)
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

pub(crate) fn desc(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: k.to_string(),
                value: v.to_string(),
            })
            .collect(),
        ..Default::default()
    }
}

pub(crate) fn req(
    domain: &str,
    descriptors: Vec<RateLimitDescriptor>,
    hits_addend: u32,
) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_string(),
        descriptors,
        hits_addend,
    }
}

pub(crate) async fn call(c: &mut Client, r: RateLimitRequest) -> RateLimitResponse {
    within(
        "ShouldRateLimit",
        Duration::from_secs(10),
        c.should_rate_limit(r),
    )
    .await
    .unwrap()
    .into_inner()
}

/// One descriptor, one hit.
pub(crate) async fn one(
    c: &mut Client,
    domain: &str,
    entries: &[(&str, &str)],
) -> RateLimitResponse {
    call(c, req(domain, vec![desc(entries)], 0)).await
}

pub(crate) fn code(s: &DescriptorStatus) -> Code {
    Code::try_from(s.code).unwrap()
}

pub(crate) fn overall(r: &RateLimitResponse) -> Code {
    Code::try_from(r.overall_code).unwrap()
}

/// A status with a limit: code, remaining, the limit's (requests_per_unit, unit, name).
fn limited(s: &DescriptorStatus) -> (Code, u32, (u32, Unit, String)) {
    let l = s.current_limit.clone().expect("a current_limit");
    (
        code(s),
        s.limit_remaining,
        (l.requests_per_unit, Unit::try_from(l.unit).unwrap(), l.name),
    )
}

fn until_reset(s: &DescriptorStatus) -> Duration {
    let d = s.duration_until_reset.expect("duration_until_reset");
    Duration::new(d.seconds as u64, d.nanos as u32)
}

/// No rule applies: OK, no current_limit.
fn assert_no_limit(s: &DescriptorStatus) {
    assert_eq!(code(s), Code::Ok, "{s:?}");
    assert_eq!(s.current_limit, None, "{s:?}");
    assert_eq!(s.duration_until_reset, None, "{s:?}");
}

/// What `limited` returns for a limit with no name.
fn unnamed(code: Code, remaining: u32, rpu: u32, unit: Unit) -> (Code, u32, (u32, Unit, String)) {
    (code, remaining, (rpu, unit, String::new()))
}

/// A descriptor of `entries` with a `limit` override of `rpu` per `unit`.
fn with_limit(entries: &[(&str, &str)], rpu: u32, unit: i32) -> RateLimitDescriptor {
    let mut d = desc(entries);
    d.limit = Some(RateLimitOverride {
        requests_per_unit: rpu,
        unit,
    });
    d
}

/// One request of the descriptors `a=key` and `b=key` (all or nothing across them).
fn a_and_b(key: &str) -> RateLimitRequest {
    req("web", vec![desc(&[("a", key)]), desc(&[("b", key)])], 0)
}

/// A call the sidecar refuses with `want`; the status, to check its message.
async fn refused(
    c: &mut Client,
    r: impl tonic::IntoRequest<RateLimitRequest>,
    want: tonic::Code,
) -> tonic::Status {
    let e = c.should_rate_limit(r).await.unwrap_err();
    assert_eq!(e.code(), want, "{e}");
    e
}

/// A sidecar on `store` with one config file `name` holding `yaml`, then `extra` flags; the
/// temp dir is returned to live as long as the sidecar.
pub(crate) async fn start_with(
    store: &str,
    name: &str,
    yaml: &str,
    extra: &[&str],
) -> (tempfile::TempDir, Rls) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), name, yaml);
    let mut args = vec!["--store", store, "--rls-config", cfg.to_str().unwrap()];
    args.extend_from_slice(extra);
    let sc = Rls::start(&args).await;
    (dir, sc)
}

/// The sidecar's /metrics text, asserted to hold every one of `lines`.
async fn metrics_with(sc: &Rls, lines: &[&str]) -> String {
    let text = reqwest::get(format!("{}/metrics", sc.http))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in lines {
        assert!(text.contains(line), "{line} missing from\n{text}");
    }
    text
}

/// Distinct keys `prefix-0`, `prefix-1`, … for retries: a timed-out attempt may have counted.
struct FreshKeys(std::sync::atomic::AtomicU32);

impl FreshKeys {
    fn new() -> FreshKeys {
        FreshKeys(std::sync::atomic::AtomicU32::new(0))
    }

    fn next(&self, prefix: &str) -> String {
        let n = self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("{prefix}-{n}")
    }
}

const WEB: &str = "\
domain: web
descriptors:
  # no value: every user counted apart
  - key: user
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: plan
    value: gold
    rate_limit: {unit: day, requests_per_unit: 5, name: gold}
  - key: path
    value: /api/*
    rate_limit: {unit: day, requests_per_unit: 2}
  - key: tenant
    descriptors:
      - key: op
        value: write
        rate_limit: {unit: day, requests_per_unit: 1}
  - key: free
    rate_limit: {unlimited: true}
  - key: watch
    shadow_mode: true
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: broad
    rate_limit: {unit: day, requests_per_unit: 100, name: broad}
  - key: narrow
    rate_limit: {unit: day, requests_per_unit: 2, replaces: [{name: broad}]}
  - key: bucket
    algorithm: gcra
    burst: 2
    rate_limit: {unit: hour, requests_per_unit: 60}
  - key: a
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: b
    rate_limit: {unit: day, requests_per_unit: 10}
";

const DAY: Duration = Duration::from_secs(86_400);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_answers_every_feature_field_by_field() {
    let (_dir, sc) = start_with(
        "memory://rls-fields",
        "web.yaml",
        WEB,
        &["--rls-response-headers", "ietf"],
    )
    .await;
    let mut c = sc.client().await;

    // A key without a value counts each value apart; remaining and the window's reset.
    for left in [2, 1, 0] {
        let r = one(&mut c, "web", &[("user", "u1")]).await;
        assert_eq!(overall(&r), Code::Ok);
        assert_eq!(
            limited(&r.statuses[0]),
            unnamed(Code::Ok, left, 3, Unit::Day)
        );
        let reset = until_reset(&r.statuses[0]);
        assert!(reset > Duration::ZERO && reset <= DAY, "{reset:?}");
    }
    let r = one(&mut c, "web", &[("user", "u1")]).await;
    assert_eq!(overall(&r), Code::OverLimit);
    assert_eq!(
        limited(&r.statuses[0]),
        unnamed(Code::OverLimit, 0, 3, Unit::Day)
    );
    let r = one(&mut c, "web", &[("user", "u2")]).await;
    assert_eq!(limited(&r.statuses[0]).1, 2, "u2 counts apart");
    // The RateLimit header fields of the tightest descriptor.
    let names: Vec<&str> = r
        .response_headers_to_add
        .iter()
        .map(|h| h.key.as_str())
        .collect();
    assert_eq!(names, ["ratelimit-policy", "ratelimit"], "{r:?}");
    assert!(r.response_headers_to_add[1].value.contains("r=2"), "{r:?}");

    // key_value with a name; a value no rule names.
    let r = one(&mut c, "web", &[("plan", "gold")]).await;
    assert_eq!(
        limited(&r.statuses[0]),
        (Code::Ok, 4, (5, Unit::Day, "gold".into()))
    );
    assert_no_limit(&one(&mut c, "web", &[("plan", "silver")]).await.statuses[0]);

    // Wildcard: a prefix; each value still its own counter.
    for _ in 0..2 {
        assert_eq!(
            code(&one(&mut c, "web", &[("path", "/api/v1")]).await.statuses[0]),
            Code::Ok
        );
    }
    assert_eq!(
        code(&one(&mut c, "web", &[("path", "/api/v1")]).await.statuses[0]),
        Code::OverLimit
    );
    assert_eq!(
        limited(&one(&mut c, "web", &[("path", "/api/v2")]).await.statuses[0]).1,
        1
    );
    assert_no_limit(&one(&mut c, "web", &[("path", "/other")]).await.statuses[0]);

    // Nested: the last entry must land on the rule.
    let write_op = [("tenant", "t1"), ("op", "write")];
    assert_eq!(
        limited(&one(&mut c, "web", &write_op).await.statuses[0]).0,
        Code::Ok
    );
    assert_eq!(
        limited(&one(&mut c, "web", &write_op).await.statuses[0]).0,
        Code::OverLimit
    );
    assert_no_limit(&one(&mut c, "web", &[("tenant", "t1")]).await.statuses[0]);
    assert_no_limit(
        &one(&mut c, "web", &[("tenant", "t1"), ("op", "read")])
            .await
            .statuses[0],
    );

    // Unlimited: OK, remaining u32::MAX, no limit.
    let r = one(&mut c, "web", &[("free", "x")]).await;
    assert_eq!(
        (
            code(&r.statuses[0]),
            r.statuses[0].limit_remaining,
            &r.statuses[0].current_limit
        ),
        (Code::Ok, u32::MAX, &None)
    );

    // Shadow rule: counted, answered OK.
    let r = one(&mut c, "web", &[("watch", "w")]).await;
    assert_eq!(limited(&r.statuses[0]).0, Code::Ok);
    let r = one(&mut c, "web", &[("watch", "w")]).await;
    assert_eq!(overall(&r), Code::Ok, "shadow mode answers OK");
    assert_eq!(limited(&r.statuses[0]), unnamed(Code::Ok, 0, 1, Unit::Day));

    // requests_per_unit 0: over every time.
    let r = one(&mut c, "web", &[("blocked", "x")]).await;
    assert_eq!(overall(&r), Code::OverLimit);
    assert_eq!(
        limited(&r.statuses[0]),
        unnamed(Code::OverLimit, 0, 0, Unit::Second)
    );

    // replaces: the matched `broad` limit is dropped when `narrow` matches too.
    let r = call(
        &mut c,
        req(
            "web",
            vec![desc(&[("broad", "x")]), desc(&[("narrow", "y")])],
            0,
        ),
    )
    .await;
    assert_no_limit(&r.statuses[0]);
    assert_eq!(limited(&r.statuses[1]), unnamed(Code::Ok, 1, 2, Unit::Day));
    let r = one(&mut c, "web", &[("broad", "x")]).await;
    assert_eq!(
        limited(&r.statuses[0]),
        (Code::Ok, 99, (100, Unit::Day, "broad".into()))
    );

    // GCRA extension: burst 2, then over with the time until one more passes (60 s / 60).
    for left in [1, 0] {
        assert_eq!(
            limited(&one(&mut c, "web", &[("bucket", "k")]).await.statuses[0]).1,
            left
        );
    }
    let r = one(&mut c, "web", &[("bucket", "k")]).await;
    assert_eq!(code(&r.statuses[0]), Code::OverLimit);
    let wait = until_reset(&r.statuses[0]);
    assert!(
        wait > Duration::ZERO && wait <= Duration::from_secs(60),
        "{wait:?}"
    );

    // hits_addend: the request's; a descriptor's own wins; 0 there only reads; above the
    // limit is OVER_LIMIT and counts nothing.
    let r = call(&mut c, req("web", vec![desc(&[("user", "u3")])], 2)).await;
    assert_eq!(limited(&r.statuses[0]).1, 1);
    let mut own = desc(&[("user", "u3")]);
    own.hits_addend = Some(UInt64Value { value: 1 });
    let r = call(&mut c, req("web", vec![own.clone()], 2)).await;
    assert_eq!(limited(&r.statuses[0]), unnamed(Code::Ok, 0, 3, Unit::Day));
    own.hits_addend = Some(UInt64Value { value: 0 });
    let r = call(&mut c, req("web", vec![own], 0)).await;
    assert_eq!(
        limited(&r.statuses[0]).0,
        Code::Ok,
        "a read of a spent key passes"
    );
    let r = call(&mut c, req("web", vec![desc(&[("user", "u4")])], 5)).await;
    assert_eq!(overall(&r), Code::OverLimit);
    assert_eq!(limited(&r.statuses[0]).0, Code::OverLimit);
    assert_eq!(
        limited(&one(&mut c, "web", &[("user", "u4")]).await.statuses[0]).1,
        2
    );

    // All or nothing across a request's descriptors: `b` is not charged when `a` is over.
    let r = call(&mut c, a_and_b("k")).await;
    assert_eq!((overall(&r), limited(&r.statuses[1]).1), (Code::Ok, 9));
    let r = call(&mut c, a_and_b("k")).await;
    assert_eq!(overall(&r), Code::OverLimit);
    assert_eq!(limited(&r.statuses[0]).0, Code::OverLimit);
    assert_eq!(limited(&r.statuses[1]).0, Code::Ok);
    assert_eq!(
        limited(&one(&mut c, "web", &[("b", "k")]).await.statuses[0]).1,
        8
    );

    // No match, an unknown domain: OK with no limit.
    assert_no_limit(&one(&mut c, "web", &[("nothing", "1")]).await.statuses[0]);
    let r = one(&mut c, "elsewhere", &[("user", "u1")]).await;
    assert_eq!(overall(&r), Code::Ok);
    assert_no_limit(&r.statuses[0]);

    // A descriptor's limit override: its own fixed window.
    let o = overridden("o1", 1);
    let r = call(&mut c, req("web", vec![o.clone()], 0)).await;
    assert_eq!(limited(&r.statuses[0]), unnamed(Code::Ok, 0, 1, Unit::Hour));
    let r = call(&mut c, req("web", vec![o], 0)).await;
    assert_eq!(limited(&r.statuses[0]).0, Code::OverLimit);
    let no_unit = with_limit(&[("user", "o1")], 1, 0);
    let e = refused(
        &mut c,
        req("web", vec![no_unit], 0),
        tonic::Code::InvalidArgument,
    )
    .await;
    assert!(e.message().contains("descriptors[0].limit.unit"), "{e}");

    // An override of requests_per_unit 0: over every time, nothing counted.
    let r = call(&mut c, req("web", vec![overridden("o0", 0)], 0)).await;
    assert_eq!(overall(&r), Code::OverLimit);
    assert_eq!(
        limited(&r.statuses[0]),
        unnamed(Code::OverLimit, 0, 0, Unit::Hour)
    );
    // Negative hits (a refund) are not supported: INVALID_ARGUMENT naming the field.
    let mut neg = desc(&[("user", "neg")]);
    neg.is_negative_hits = true;
    let e = refused(
        &mut c,
        req("web", vec![neg], 0),
        tonic::Code::InvalidArgument,
    )
    .await;
    assert!(
        e.message().contains("descriptors[0].is_negative_hits"),
        "{e}"
    );
    // More descriptors than one store transaction takes: INVALID_ARGUMENT naming the cap.
    let many = (0..65)
        .map(|i| desc(&[("user", &format!("m{i}"))]))
        .collect();
    let e = refused(&mut c, req("web", many, 0), tonic::Code::InvalidArgument).await;
    assert!(
        e.message().contains("at most 64") && e.message().contains("65"),
        "{e}"
    );

    // Empty domain, no descriptors: UNKNOWN with envoyproxy's messages (its service panics
    // with a plain Go error, which gRPC sends as UNKNOWN).
    let e = refused(
        &mut c,
        req("", vec![desc(&[("user", "u")])], 0),
        tonic::Code::Unknown,
    )
    .await;
    assert_eq!(e.message(), "rate limit domain must not be empty");
    let e = refused(&mut c, req("web", vec![], 0), tonic::Code::Unknown).await;
    assert_eq!(e.message(), "rate limit descriptor list must not be empty");

    // Metrics by domain and rule.
    let text = metrics_with(
        &sc,
        &[
            r#"clusterlimit_rate_hits_total{domain="web",limit="user"}"#,
            r#"clusterlimit_rate_over_limit_total{domain="web",limit="user"}"#,
            r#"clusterlimit_rate_shadow_mode_total{domain="web",limit="watch"} 1"#,
            // All or nothing: `a` over once; `b` within its limit in the denied request, so
            // neither over nor charged there (1 + 0 + 1 hits).
            r#"clusterlimit_rate_hits_total{domain="web",limit="a"} 2"#,
            r#"clusterlimit_rate_over_limit_total{domain="web",limit="a"} 1"#,
            r#"clusterlimit_rate_hits_total{domain="web",limit="b"} 2"#,
            // requests_per_unit 0 is over every time, and recorded.
            r#"clusterlimit_rate_hits_total{domain="web",limit="blocked"} 1"#,
            r#"clusterlimit_rate_over_limit_total{domain="web",limit="blocked"} 1"#,
        ],
    )
    .await;
    assert!(
        !text.contains(r#"clusterlimit_rate_over_limit_total{domain="web",limit="b"}"#),
        "b was never over:\n{text}"
    );

    // Latency through the sidecar vs the library's own check_n, same machine, same run.
    latency_vs_library("memory", &c, "web", "user", 300, "memory://rls-baseline", 3).await;
}

/// Prints p50/p99 of `n` calls `domain` `key=perf-i` through the sidecar, and of `n`
/// `check_n`s of the library on a limit `key` of `per_day` a day at `baseline_url`.
async fn latency_vs_library(
    store: &str,
    c: &Client,
    domain: &str,
    key: &str,
    n: usize,
    baseline_url: &str,
    per_day: u64,
) {
    let through = measure(n, |i| {
        let mut c = c.clone();
        async move {
            one(&mut c, domain, &[(key, &format!("perf-{i}"))]).await;
        }
    })
    .await;
    let limiter = Limiter::connect(baseline_url).await.unwrap();
    let rl = limiter
        .rate_limit(key, Quota::per_day(per_day))
        .await
        .unwrap();
    let library = measure(n, |i| {
        let rl = rl.clone();
        async move {
            rl.check_n(&format!("perf-{i}"), 1).await.unwrap();
        }
    })
    .await;
    println!(
        "{store}: ShouldRateLimit p50 {:?} p99 {:?}; library check_n p50 {:?} p99 {:?}",
        through.0, through.1, library.0, library.1
    );
}

/// p50 and p99 of `n` sequential runs of `f(i)`.
async fn measure<F, Fut>(n: usize, mut f: F) -> (Duration, Duration)
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut took = Vec::with_capacity(n);
    for i in 0..n {
        let t = Instant::now();
        f(i).await;
        took.push(t.elapsed());
    }
    took.sort();
    (took[n / 2], took[(n * 99 / 100).min(n - 1)])
}

/// A descriptor `user` with a `limit` override of `rpu` per hour.
fn overridden(user: &str, rpu: u32) -> RateLimitDescriptor {
    with_limit(&[("user", user)], rpu, Unit::Hour as i32)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distinct_limit_overrides_are_capped() {
    let (_dir, sc) = start_with("memory://rls-override-cap", "web.yaml", WEB, &[]).await;
    let mut c = sc.client().await;
    // 1024 distinct override rules (the cap) are served.
    let t = Instant::now();
    for rpu in 1..=1024 {
        let r = call(&mut c, req("web", vec![overridden("cap", rpu)], 0)).await;
        assert_eq!(overall(&r), Code::Ok, "override {rpu}");
    }
    println!("1024 distinct overrides in {:?}", t.elapsed());
    // The next distinct one is refused, naming the cap.
    let e = refused(
        &mut c,
        req("web", vec![overridden("cap", 5000)], 0),
        tonic::Code::ResourceExhausted,
    )
    .await;
    assert!(
        e.message().contains("descriptors[0].limit") && e.message().contains("1024"),
        "{e}"
    );
    // A known override still counts (rpu 2: one hit taken above, this one leaves 0).
    let r = call(&mut c, req("web", vec![overridden("cap", 2)], 0)).await;
    assert_eq!(limited(&r.statuses[0]), unnamed(Code::Ok, 0, 2, Unit::Hour));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detailed_metric_labels_each_value_up_to_a_cap() {
    let (_dir, sc) = start_with(
        "memory://rls-detailed",
        "det.yaml",
        "domain: det\ndescriptors:\n  - key: user\n    detailed_metric: true\n    rate_limit: {unit: day, requests_per_unit: 5}\n",
        &[],
    )
    .await;
    let mut c = sc.client().await;
    // 1000 values get a label each (u0 twice); the next ones fall back to the rule's path.
    one(&mut c, "det", &[("user", "u0")]).await;
    for i in 0..1002 {
        let r = one(&mut c, "det", &[("user", &format!("u{i}"))]).await;
        assert_eq!(overall(&r), Code::Ok);
    }
    let text = metrics_with(
        &sc,
        &[
            r#"clusterlimit_rate_hits_total{domain="det",limit="user_u0"} 2"#,
            r#"clusterlimit_rate_hits_total{domain="det",limit="user_u999"} 1"#,
            r#"clusterlimit_rate_hits_total{domain="det",limit="user"} 2"#,
        ],
    )
    .await;
    assert!(!text.contains(r#"limit="user_u1000""#), "past the cap");
    assert!(!text.contains(r#"limit="user_u1001""#), "past the cap");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_shadow_mode_counts_but_answers_ok() {
    let (_dir, sc) = start_with(
        "memory://rls-shadow",
        "web.yaml",
        WEB,
        &["--rls-shadow-mode"],
    )
    .await;
    let mut c = sc.client().await;
    let r = one(&mut c, "web", &[("a", "k")]).await;
    assert_eq!(limited(&r.statuses[0]).1, 0);
    // Over: the status says so, the overall answer is OK (envoyproxy's global shadow mode).
    let r = one(&mut c, "web", &[("a", "k")]).await;
    assert_eq!(overall(&r), Code::Ok);
    assert_eq!(limited(&r.statuses[0]).0, Code::OverLimit);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_is_required_as_bearer_metadata() {
    let token_dir = tempfile::tempdir().unwrap();
    let token = write(token_dir.path(), "token", "s3cret\n");
    let (_dir, sc) = start_with(
        "memory://rls-token",
        "web.yaml",
        WEB,
        &["--token-file", token.to_str().unwrap()],
    )
    .await;
    let mut c = sc.client().await;
    let x = || req("web", vec![desc(&[("user", "x")])], 0);
    // The request for user x with `authorization` metadata `auth`.
    let with_auth = |auth: &str| {
        let mut r = tonic::Request::new(x());
        r.metadata_mut()
            .insert("authorization", auth.parse().unwrap());
        r
    };
    refused(&mut c, x(), tonic::Code::Unauthenticated).await;
    for bad in ["Bearer nope", "s3cret", "Basic s3cret"] {
        let e = c.should_rate_limit(with_auth(bad)).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated, "{bad}: {e}");
    }
    let ok = c
        .should_rate_limit(with_auth("Bearer s3cret"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(limited(&ok.statuses[0]).1, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unix_socket_listener() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "web.yaml", WEB);
    let sock = dir.path().join("rls.sock");
    let mut c = serve(
        &format!("unix:{}", sock.display()),
        &[
            "--store",
            "memory://rls-unix",
            "--rls-config",
            cfg.to_str().unwrap(),
        ],
    );
    c.stdout(Stdio::piped()).stderr(Stdio::inherit());
    let mut child = c.spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let want = format!(
        "clusterlimit serve: rls listening on unix:{}",
        sock.display()
    );
    within("the unix line", Duration::from_secs(30), async {
        for _ in 0..20 {
            let line = lines.next_line().await.unwrap().expect("serve exited");
            if line == want {
                return;
            }
        }
        panic!("no line {want:?}")
    })
    .await;
    assert!(sock.exists());
    let path = sock.clone();
    let channel = tonic::transport::Endpoint::from_static("http://unix.invalid")
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
            }
        }))
        .await
        .unwrap();
    let mut client = RateLimitServiceClient::new(channel);
    let r = one(&mut client, "web", &[("user", "over-unix")]).await;
    assert_eq!(limited(&r.statuses[0]), unnamed(Code::Ok, 2, 3, Unit::Day));
    // Graceful shutdown removes it.
    binary::signal(child.id().unwrap(), "TERM");
    let st = within("serve to exit", Duration::from_secs(10), child.wait())
        .await
        .unwrap();
    assert!(st.success(), "{st:?}");
    assert!(!sock.exists(), "socket removed at shutdown");
}

const SHARED: &str = "\
domain: shared
descriptors:
  - key: k
    rate_limit: {unit: day, requests_per_unit: 25}
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sidecars_on_one_etcd_share_one_limit_exactly() {
    let cluster = EtcdCluster::single();
    let url = cluster.url("rls-shared");
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "shared.yaml", SHARED);
    // A stored quota that differs from the config's: the config wins at start.
    let other = Limiter::connect(&url).await.unwrap();
    other
        .rate_limit("rls.shared.k", Quota::per_day(3))
        .await
        .unwrap();
    let args = [
        "--store",
        url.as_str(),
        "--rls-config",
        cfg.to_str().unwrap(),
        // Exactness, not the breaker, is under test: a loaded machine may be slow.
        "--rls-store-timeout",
        "10s",
    ];
    let (a, b) = tokio::join!(Rls::start(&args), Rls::start(&args));
    let (ca, cb) = (a.client().await, b.client().await);
    let mut tasks = Vec::new();
    for i in 0..40 {
        let mut c = if i % 2 == 0 { ca.clone() } else { cb.clone() };
        tasks.push(tokio::spawn(async move {
            one(&mut c, "shared", &[("k", "same")]).await
        }));
    }
    let mut ok = 0;
    for t in tasks {
        if overall(&t.await.unwrap()) == Code::Ok {
            ok += 1;
        }
    }
    assert_eq!(ok, 25, "exactly the limit across both sidecars");
    let stored = other.open_rate_limit("rls.shared.k").await.unwrap().quota();
    assert_eq!(
        (stored.limit, stored.period),
        (25, DAY),
        "the config's quota was stored"
    );

    // Latency on etcd: through the sidecar vs the library's check_n against the same etcd.
    let baseline = cluster.url("rls-baseline");
    latency_vs_library("etcd", &ca, "shared", "k", 200, &baseline, 25).await;
}

/// A domain with the store-down policy `policy` (our `store_down` extension) and one rule,
/// key `k`, of `rpu` a day.
fn policy_domain(domain: &str, policy: &str, rpu: u32) -> String {
    format!(
        "domain: {domain}\nstore_down: {policy}\ndescriptors:\n  - key: k\n    rate_limit: {{unit: day, requests_per_unit: {rpu}}}\n"
    )
}

/// `n` answers while the store is down: each within a generous bound; prints p50/p99.
async fn answers_while_down(
    c: &mut Client,
    domain: &str,
    n: usize,
    store: &str,
) -> Vec<RateLimitResponse> {
    let mut out = Vec::new();
    let mut took = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        out.push(one(c, domain, &[("k", "down")]).await);
        took.push(t.elapsed());
    }
    took.sort();
    println!(
        "{store} down, {domain}: p50 {:?} p99 {:?} max {:?} over {n} answers",
        took[n / 2],
        took[(n * 99 / 100).min(n - 1)],
        took[n - 1]
    );
    assert!(
        took[n * 9 / 10] < Duration::from_millis(50),
        "answers while down: {took:?}"
    );
    out
}

/// A sidecar on `url` with the three policy domains, a 300 ms store timeout, then `extra`.
async fn start_policies(url: &str, extra: &[&str]) -> (tempfile::TempDir, Rls) {
    let dir = tempfile::tempdir().unwrap();
    // One domain per policy.
    write(
        dir.path(),
        "a-open.yaml",
        &policy_domain("open", "fail_open", 5),
    );
    write(
        dir.path(),
        "b-closed.yaml",
        &policy_domain("closed", "fail_closed", 5),
    );
    write(
        dir.path(),
        "c-local.yaml",
        &policy_domain("local", "local:2", 10),
    );
    let mut args = vec![
        "--store",
        url,
        "--rls-config",
        dir.path().to_str().unwrap(),
        "--rls-store-timeout",
        "300ms",
    ];
    args.extend_from_slice(extra);
    let sc = Rls::start(&args).await;
    (dir, sc)
}

/// Kill the store; each policy answers fast; restart; answers come from the store again.
async fn store_down_policies<C>(
    store: &str,
    url: &str,
    cluster: &mut C,
    kill: impl FnOnce(&mut C),
    restart: impl FnOnce(&mut C),
) {
    let (_dir, sc) = start_policies(url, &["--session-ttl", "2s"]).await;
    let mut c = sc.client().await;
    for d in ["open", "closed", "local"] {
        assert_eq!(
            overall(&one(&mut c, d, &[("k", "up")]).await),
            Code::Ok,
            "{d}"
        );
    }
    kill(cluster);
    // The first answers after the death wait for the store timeout each: a dead store is
    // silence, and the breaker opens once the silence lasted SLOW_OPEN_AFTER (a busy store is
    // not a down one); then the breaker answers at once. (Another key than the one counted
    // below, so the local share of "k" is left as it is.)
    for d in ["open", "closed", "local"] {
        let t = Instant::now();
        one(&mut c, d, &[("k", "first")]).await;
        println!("{store} down, {d}: first answer after {:?}", t.elapsed());
        let give_up = Instant::now()
            + clusterlimit::ClusterBreaker::SLOW_OPEN_AFTER
            + Duration::from_secs(10);
        for _ in 0..200 {
            let t = Instant::now();
            one(&mut c, d, &[("k", "until-open")]).await;
            if t.elapsed() < Duration::from_millis(30) {
                break;
            }
            assert!(Instant::now() < give_up, "{d}: the breaker never opened");
        }
        println!("{store} down, {d}: breaker open after {:?}", t.elapsed());
    }
    let open = answers_while_down(&mut c, "open", 50, store).await;
    assert!(open.iter().all(|r| overall(r) == Code::Ok));
    let closed = answers_while_down(&mut c, "closed", 50, store).await;
    assert!(closed.iter().all(|r| overall(r) == Code::OverLimit));
    // local:2 → 5 per day in this process (the first-answer check above may have taken one).
    let local = answers_while_down(&mut c, "local", 20, store).await;
    let admitted = local.iter().filter(|r| overall(r) == Code::Ok).count();
    assert!(
        (4..=5).contains(&admitted),
        "local share admitted {admitted}"
    );

    restart(cluster);
    // Recovery: the fail_closed domain admits again once the store decides. A fresh key per
    // attempt: one that timed out may still have committed its hit.
    let keys = FreshKeys::new();
    let back = binary::eventually("the store to answer again", Duration::from_secs(60), || {
        let mut c = c.clone();
        let key = keys.next("after");
        async move {
            let r = one(&mut c, "closed", &[("k", &key)]).await;
            (overall(&r) == Code::Ok).then_some(r)
        }
    })
    .await;
    assert_eq!(limited(&back.statuses[0]).1, 4, "counted by the store");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_down_each_policy_answers_fast_and_recovers() {
    let mut cluster = EtcdCluster::single();
    let url = cluster.url("rls-down");
    store_down_policies("etcd", &url, &mut cluster, |c| c.kill(0), |c| c.restart(0)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_override_on_a_hung_etcd_answers_by_policy_within_the_store_timeout() {
    let mut cluster = EtcdCluster::single();
    let url = cluster.url("rls-hung-override");
    let (_dir, sc) = start_policies(&url, &[]).await;
    let mut c = sc.client().await;
    let with_override = |rpu: u32| with_limit(&[("k", "hung")], rpu, Unit::Hour as i32);
    cluster.pause(0);
    // Each domain opens a new override rate limit on the hung store: the store timeout (not
    // the library's 5 s) bounds it, and the domain's policy answers.
    let mut answers = Vec::new();
    for (d, rpu) in [("open", 7), ("closed", 8), ("local", 9)] {
        let t = Instant::now();
        let r = call(&mut c, req(d, vec![with_override(rpu)], 0)).await;
        let took = t.elapsed();
        println!("etcd hung, new override on {d}: answered in {took:?}");
        assert!(took < Duration::from_secs(3), "{d}: {took:?}");
        answers.push(r);
    }
    cluster.resume(0);
    assert_eq!(overall(&answers[0]), Code::Ok, "fail_open");
    assert_no_limit(&answers[0].statuses[0]);
    assert_eq!(overall(&answers[1]), Code::OverLimit, "fail_closed");
    assert_eq!(
        limited(&answers[1].statuses[0]),
        unnamed(Code::OverLimit, 0, 8, Unit::Hour)
    );
    assert_eq!(overall(&answers[2]), Code::Ok, "local: as fail_open");
    assert_no_limit(&answers[2].statuses[0]);
    // Once the store answers, the override opens and counts.
    let keys = FreshKeys::new();
    binary::eventually("the override to open", Duration::from_secs(60), || {
        let mut c = c.clone();
        let key = keys.next("back");
        async move {
            let d = with_limit(&[("k", &key)], 7, Unit::Hour as i32);
            let r = call(&mut c, req("open", vec![d], 0)).await;
            (r.statuses[0].current_limit.is_some()).then_some(())
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_most_descriptors_on_the_most_limits_fit_one_etcd_transaction() {
    let cluster = EtcdCluster::single();
    let url = cluster.url("rls-many");
    // 64 rules: 64 descriptors on 64 limits, the worst case for etcd's 128-op transaction.
    let mut yaml = String::from("domain: many\ndescriptors:\n");
    for i in 0..64 {
        yaml.push_str(&format!(
            "  - key: k{i}\n    rate_limit: {{unit: day, requests_per_unit: 1}}\n"
        ));
    }
    let (_dir, sc) = start_with(&url, "many.yaml", &yaml, &["--rls-store-timeout", "10s"]).await;
    let mut c = sc.client().await;
    let all = || {
        (0..64)
            .map(|i| desc(&[(&format!("k{i}"), "v")]))
            .collect::<Vec<_>>()
    };
    let r = call(&mut c, req("many", all(), 0)).await;
    assert_eq!(overall(&r), Code::Ok, "{r:?}");
    assert!(r.statuses.iter().all(|s| limited(s).1 == 0), "{r:?}");
    let r = call(&mut c, req("many", all(), 0)).await;
    assert_eq!(overall(&r), Code::OverLimit);
    let mut more = all();
    more.push(desc(&[("k0", "w")]));
    refused(&mut c, req("many", more, 0), tonic::Code::InvalidArgument).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_address_in_use_exits_69_naming_it() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "web.yaml", WEB);
    let args = [
        "--store",
        "memory://rls-in-use",
        "--rls-config",
        cfg.to_str().unwrap(),
    ];
    let out = output(serve(&addr, &args), Duration::from_secs(30)).await;
    assert_eq!(out.code, Some(69), "{}", out.stderr);
    assert!(
        out.stderr
            .contains(&format!("cannot listen on grpc://{addr}")),
        "{}",
        out.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_counts_and_each_policy_answers_fast_and_recovers() {
    let mut cluster = ZkCluster::single();
    let url = cluster.url("/rls");
    // Counting on ZooKeeper, field by field.
    {
        let (_dir, sc) = start_with(&url, "web.yaml", WEB, &["--rls-store-timeout", "10s"]).await;
        let mut c = sc.client().await;
        for left in [2, 1, 0] {
            let r = one(&mut c, "web", &[("user", "zk")]).await;
            assert_eq!(
                limited(&r.statuses[0]),
                unnamed(Code::Ok, left, 3, Unit::Day)
            );
        }
        let r = one(&mut c, "web", &[("user", "zk")]).await;
        assert_eq!(overall(&r), Code::OverLimit);
        let r = call(&mut c, a_and_b("z")).await;
        assert_eq!(overall(&r), Code::Ok);
        let r = call(&mut c, a_and_b("z")).await;
        assert_eq!(
            (overall(&r), limited(&r.statuses[1]).1),
            (Code::OverLimit, 9)
        );
    }
    store_down_policies(
        "zookeeper",
        &url,
        &mut cluster,
        |c| c.kill(0),
        |c| c.restart(0),
    )
    .await;
}

/// `check` exited 0 and its stdout holds each of `wants`.
fn assert_prints(out: &binary::Out, wants: &[&str]) {
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    for want in wants {
        assert!(out.stdout.contains(want), "{want} not in {}", out.stdout);
    }
}

/// `check` exited 64 (a usage error) and its stderr holds `want`; `what` names the case.
fn assert_usage_error(out: &binary::Out, want: &str, what: &str) {
    assert_eq!(out.code, Some(64), "{what}: {}", out.stderr);
    assert!(
        out.stderr.contains(want),
        "{what}: {want} not in {}",
        out.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_config_validates_the_yaml_and_names_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let good = write(dir.path(), "web.yaml", WEB);
    let run = |args: Vec<String>| async move {
        let mut all = vec!["serve".to_string(), "--check-config".to_string()];
        all.extend(args);
        let refs: Vec<&str> = all.iter().map(String::as_str).collect();
        output(cmd(&refs), Duration::from_secs(20)).await
    };
    let s = |x: &str| x.to_string();
    // `--grpc-listen 127.0.0.1:0 --rls-config CFG`, then `extra`.
    let rls = |cfg: &Path, extra: &[&str]| {
        let mut args = vec![
            s("--grpc-listen"),
            s("127.0.0.1:0"),
            s("--rls-config"),
            cfg.to_str().unwrap().to_string(),
        ];
        args.extend(extra.iter().map(|x| s(x)));
        args
    };
    let g = good.to_str().unwrap().to_string();

    let out = run(rls(&good, &[])).await;
    assert_prints(
        &out,
        &[
            "rls domain   web (12 rules",
            "rls rule     web.plan_gold: 5 per day (fixed_window), name \"gold\"",
        ],
    );

    // A directory: its *.yaml and *.yml, sorted; two files with one domain clash.
    let d2 = tempfile::tempdir().unwrap();
    write(d2.path(), "a.yaml", SHARED);
    write(
        d2.path(),
        "b.yml",
        &policy_domain("closed", "fail_closed", 5),
    );
    write(d2.path(), "notes.txt", "not yaml");
    let out = run(rls(d2.path(), &[])).await;
    assert_prints(&out, &["rls domain   closed", "rls domain   shared"]);
    write(d2.path(), "c.yaml", SHARED);
    let out = run(rls(d2.path(), &[])).await;
    assert_usage_error(&out, "c.yaml:1: duplicate domain \"shared\"", "clash");

    // A directory with no *.yaml / *.yml file: an error naming it.
    let empty = tempfile::tempdir().unwrap();
    write(empty.path(), "notes.txt", "not yaml");
    let out = run(rls(empty.path(), &[])).await;
    let want = format!(
        "rls_config {}: the directory has no *.yaml or *.yml file",
        empty.path().display()
    );
    assert_usage_error(&out, &want, "empty directory");

    for (text, at) in [
        ("domain: x\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n", ":4: invalid rate limit unit"),
        ("domain: x\ndescriptors:\n  - key: k\n  - key: k\n", ":4: duplicate descriptor"),
        ("domain: x\nbogus: 1\n", ":2: unknown key \"bogus\""),
        ("domain: x\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: true\n      unit: day\n", ":6: unlimited: true takes no unit"),
        ("domain: [\n", ":2: bad YAML"),
        ("domain: x\ndescriptors:\n  - key: k\n    shadow_mode: yes\n", ":4: shadow_mode must be true or false"),
        ("domain: x\ndescriptors:\n  - key: k\n    rate_limit:\n", ":5: rate_limit must be a mapping, got nothing"),
    ] {
        let bad = write(dir.path(), "bad.yaml", text);
        let out = run(rls(&bad, &[])).await;
        assert_usage_error(&out, &format!("{}{at}", bad.display()), text);
    }

    // Bad flags and keys: exit 64 naming them.
    for (args, why) in [
        (
            vec![s("--grpc-listen"), s("127.0.0.1:0")],
            "needs rls_config",
        ),
        (vec![s("--rls-config"), g.clone()], "needs grpc_listen"),
        (
            vec![
                s("--grpc-listen"),
                s("nowhere"),
                s("--rls-config"),
                g.clone(),
            ],
            "grpc_listen \"nowhere\"",
        ),
        (rls(&good, &["--rls-store-down", "maybe"]), "rls_store_down"),
        (
            rls(&good, &["--rls-response-headers", "x"]),
            "rls_response_headers",
        ),
        (
            rls(&good, &["--rls-store-timeout", "0ms"]),
            "rls_store_timeout",
        ),
        (
            vec![
                s("--grpc-listen"),
                s("0.0.0.0:0"),
                s("--rls-config"),
                g.clone(),
            ],
            "without a token",
        ),
        (
            rls(Path::new("/nonexistent.yaml"), &[]),
            "/nonexistent.yaml",
        ),
    ] {
        let out = run(args.clone()).await;
        assert_usage_error(&out, why, &format!("{args:?}"));
    }

    // The same keys in the TOML file.
    let toml = write(
        dir.path(),
        "c.toml",
        &format!(
            "grpc_listen = \"127.0.0.1:0\"\nrls_config = [{:?}]\nrls_store_down = \"local:3\"\nrls_store_timeout = \"80ms\"\nrls_shadow_mode = true\nrls_response_headers = \"legacy\"\n",
            good.display().to_string()
        ),
    );
    let out = run(vec![s("--config"), toml.to_str().unwrap().into()]).await;
    assert_prints(
        &out,
        &["store_down local:3, store_timeout 80ms, shadow_mode true, response_headers legacy"],
    );
}

// --- envoyproxy/ratelimit parity: its own files, its own expectations ---

/// A file copied from envoyproxy/ratelimit (see tests/envoyproxy_ratelimit/README.md).
fn upstream(path: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/envoyproxy_ratelimit")
        .join(path)
        .to_str()
        .unwrap()
        .to_string()
}

/// A sidecar on `store` loading envoyproxy's `files`, then `extra` flags.
async fn start_upstream(store: &str, files: &[&str], extra: &[&str]) -> Rls {
    let paths: Vec<String> = files.iter().map(|f| upstream(f)).collect();
    let mut args = vec!["--store", store];
    for p in &paths {
        args.extend(["--rls-config", p.as_str()]);
    }
    args.extend_from_slice(extra);
    Rls::start(&args).await
}

/// Sleeps past the end of the current `period` window of the Unix epoch when less than
/// `margin` of it is left, so a counting sequence stays inside one fixed window (a window
/// boundary is also the boundary of every longer unit's window).
async fn fresh_window(period: Duration, margin: Duration) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let into = Duration::from_nanos((now.as_nanos() % period.as_nanos()) as u64);
    let left = period - into;
    if left < margin {
        tokio::time::sleep(left + Duration::from_millis(50)).await;
    }
}

const MINUTE: Duration = Duration::from_secs(60);

/// A value no earlier run used (memory:// starts empty, but keep runs apart anyway).
fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{prefix}{nanos}")
}

/// envoyproxy's integration test `testBasicBaseConfig` (its basic.yaml and another.yaml),
/// answer by answer. The one difference is all-or-nothing counting (see
/// docs/envoy-ratelimit-parity.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_integration_basic_config() {
    let sc = start_upstream(
        "memory://rls-upstream-basic",
        &["integration/basic.yaml", "integration/another.yaml"],
        &[],
    )
    .await;
    let mut c = sc.client().await;

    // An unknown domain: OK, no current limit, nothing remaining.
    let r = one(&mut c, "foo", &[("hello", "world")]).await;
    assert_eq!(overall(&r), Code::Ok);
    assert_eq!(r.statuses.len(), 1);
    assert_no_limit(&r.statuses[0]);
    assert_eq!(r.statuses[0].limit_remaining, 0);

    let r = one(&mut c, "basic", &[("key1", "foo")]).await;
    assert_eq!(overall(&r), Code::Ok);
    assert_eq!(
        limited(&r.statuses[0]),
        unnamed(Code::Ok, 49, 50, Unit::Second)
    );

    // 25 hits on a 20-per-minute key: 20 OK, counting down, then OVER_LIMIT with 0 left.
    fresh_window(MINUTE, Duration::from_secs(20)).await;
    let v = unique("r");
    for i in 0..25u32 {
        let r = one(&mut c, "another", &[("key2", &v)]).await;
        let (code, left) = if i >= 20 {
            (Code::OverLimit, 0)
        } else {
            (Code::Ok, 20 - (i + 1))
        };
        assert_eq!(overall(&r), code, "hit {i}");
        assert_eq!(
            limited(&r.statuses[0]),
            unnamed(code, left, 20, Unit::Minute),
            "hit {i}"
        );
        assert!(until_reset(&r.statuses[0]) <= MINUTE);
    }

    // Two keys in one request: key3 (10 per hour) goes over first.
    fresh_window(MINUTE, Duration::from_secs(20)).await;
    let v = unique("s");
    for i in 0..15u32 {
        let r = call(
            &mut c,
            req(
                "another",
                vec![desc(&[("key2", &v)]), desc(&[("key3", &v)])],
                0,
            ),
        )
        .await;
        if i < 10 {
            assert_eq!(overall(&r), Code::Ok, "hit {i}");
            assert_eq!(
                limited(&r.statuses[0]),
                unnamed(Code::Ok, 20 - (i + 1), 20, Unit::Minute)
            );
            assert_eq!(
                limited(&r.statuses[1]),
                unnamed(Code::Ok, 10 - (i + 1), 10, Unit::Hour)
            );
        } else {
            assert_eq!(overall(&r), Code::OverLimit, "hit {i}");
            // All or nothing: key2 is not counted once the request is denied, so it keeps
            // 10 (envoyproxy with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT answers the same;
            // by default it counts on: 20 - (i + 1)).
            assert_eq!(
                limited(&r.statuses[0]),
                unnamed(Code::Ok, 10, 20, Unit::Minute),
                "hit {i}"
            );
            assert_eq!(
                limited(&r.statuses[1]),
                unnamed(Code::OverLimit, 0, 10, Unit::Hour),
                "hit {i}"
            );
        }
    }

    // duration_until_reset ticks down.
    let r1 = one(&mut c, "another", &[("key4", "durTest")]).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let r2 = one(&mut c, "another", &[("key4", "durTest")]).await;
    assert!(
        until_reset(&r2.statuses[0]).as_secs() < until_reset(&r1.statuses[0]).as_secs(),
        "{r1:?} {r2:?}"
    );
}

/// envoyproxy's integration test `testShareThreshold` (its share_threshold.yaml).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_integration_share_threshold() {
    let sc = start_upstream(
        "memory://rls-upstream-share",
        &["integration/share_threshold.yaml"],
        &[],
    )
    .await;
    let mut c = sc.client().await;
    let domain = "share-threshold-test";
    fresh_window(MINUTE, Duration::from_secs(20)).await;
    // share_threshold: files/a.pdf spends the limit that files/b.csv shares.
    for i in 0..10u32 {
        let r = one(&mut c, domain, &[("files", "files/a.pdf")]).await;
        assert_eq!(
            limited(&r.statuses[0]),
            unnamed(Code::Ok, 10 - (i + 1), 10, Unit::Hour),
            "hit {i}"
        );
    }
    let r = one(&mut c, domain, &[("files", "files/b.csv")]).await;
    assert_eq!(overall(&r), Code::OverLimit);
    assert_eq!(
        limited(&r.statuses[0]),
        unnamed(Code::OverLimit, 0, 10, Unit::Hour)
    );
    assert!(until_reset(&r.statuses[0]) <= Duration::from_secs(3600));
    // Without share_threshold each value matching the wildcard counts apart.
    for i in 0..10 {
        let v = unique(&format!("files_no_share/{i}-"));
        let r = one(&mut c, domain, &[("files_no_share", &v)]).await;
        assert_eq!(overall(&r), Code::Ok);
        assert_eq!(
            limited(&r.statuses[0]),
            unnamed(Code::Ok, 9, 10, Unit::Hour),
            "{v}"
        );
    }
}

/// envoyproxy's examples/ratelimit/config/example.yaml, as its integration-test scripts
/// (quota.sh, replaces.sh, trigger-ratelimit.sh, trigger-shadow-mode-key.sh) drive it
/// through examples/envoy/proxy.yaml: the descriptors Envoy sends for each curl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_example_yaml_answers_as_upstream() {
    let sc = start_upstream(
        "memory://rls-upstream-example",
        &["examples/example.yaml"],
        &["--rls-response-headers", "legacy"],
    )
    .await;
    let mut c = sc.client().await;
    fresh_window(MINUTE, Duration::from_secs(25)).await;

    // quota.sh: /quota sends service_1 (1/min) and service_2 (2/min), both quota_mode.
    let quota = || {
        req(
            "rl",
            vec![
                desc(&[("service", "service_1")]),
                desc(&[("service", "service_2")]),
            ],
            0,
        )
    };
    let r = call(&mut c, quota()).await;
    assert_eq!(overall(&r), Code::Ok);
    assert_eq!(
        limited(&r.statuses[0]),
        unnamed(Code::Ok, 0, 1, Unit::Minute)
    );
    assert_eq!(
        limited(&r.statuses[1]),
        unnamed(Code::Ok, 1, 2, Unit::Minute)
    );
    // service_1 over, service_2 within: its status says OVER_LIMIT, the answer is OK.
    let r = call(&mut c, quota()).await;
    assert_eq!(overall(&r), Code::Ok, "{r:?}");
    assert_eq!(
        limited(&r.statuses[0]),
        unnamed(Code::OverLimit, 0, 1, Unit::Minute)
    );
    assert_eq!(
        limited(&r.statuses[1]),
        unnamed(Code::Ok, 0, 2, Unit::Minute)
    );
    // envoyproxy's header names, of the first descriptor with the least remaining.
    let h: Vec<(&str, &str)> = r
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.as_str(), h.value.as_str()))
        .collect();
    assert_eq!(h.len(), 3, "{h:?}");
    assert_eq!(h[0], ("RateLimit-Limit", "1"));
    assert_eq!(h[1], ("RateLimit-Remaining", "0"));
    assert_eq!(h[2].0, "RateLimit-Reset");
    let reset: u64 = h[2].1.parse().unwrap();
    assert!((1..=60).contains(&reset), "{h:?}");
    // Every quota descriptor over: OVER_LIMIT.
    let r = call(&mut c, quota()).await;
    assert_eq!(overall(&r), Code::OverLimit);
    assert_eq!(code(&r.statuses[0]), Code::OverLimit);
    assert_eq!(code(&r.statuses[1]), Code::OverLimit);

    // replaces.sh. /twoheader sends (foo, bar); /fourheader adds (source_cluster,
    // destination_cluster); /fiveheader adds (category).
    let send = |foo: &str, bar: &str, cluster: Option<&str>, category: Option<&str>| {
        let mut d = vec![desc(&[("foo", foo), ("bar", bar)])];
        if let Some(dst) = cluster {
            d.push(desc(&[
                ("source_cluster", "proxy"),
                ("destination_cluster", dst),
            ]));
        }
        if let Some(cat) = category {
            d.push(desc(&[("category", cat)]));
        }
        req("rl", d, 0)
    };
    // (foo, bar, destination_cluster, category, the overall answer)
    type Step<'a> = (&'a str, &'a str, Option<&'a str>, Option<&'a str>, Code);
    let steps: &[Step<'_>] = &[
        // replaces raises the limit: banned_limit is 0 per minute...
        ("bkthomps", "banned", None, None, Code::OverLimit),
        ("bkthomps", "banned", Some("mock"), None, Code::OverLimit),
        // ...but destination override (2/min) replaces it.
        ("bkthomps", "banned", Some("override"), None, Code::Ok),
        ("bkthomps", "banned", Some("override"), None, Code::Ok),
        (
            "bkthomps",
            "banned",
            Some("override"),
            None,
            Code::OverLimit,
        ),
        // replaces leaves the replaced limit alone.
        ("my_foo", "bkthomps", Some("bkthomps"), None, Code::Ok),
        ("my_foo", "bkthomps", Some("bkthomps"), None, Code::Ok),
        (
            "my_foo",
            "bkthomps",
            Some("bkthomps"),
            None,
            Code::OverLimit,
        ),
        ("my_foo", "bkthomps", Some("not_bkthomps"), None, Code::Ok),
        (
            "my_foo",
            "bkthomps",
            Some("not_bkthomps"),
            None,
            Code::OverLimit,
        ),
        (
            "my_foo",
            "bkthomps",
            Some("bkthomps"),
            None,
            Code::OverLimit,
        ),
        // category account (4/min) replaces both bkthomps and fake_name.
        (
            "my_foo",
            "bkthomps",
            Some("fake"),
            Some("account"),
            Code::Ok,
        ),
        (
            "my_foo",
            "bkthomps",
            Some("fake"),
            Some("account"),
            Code::Ok,
        ),
        (
            "my_foo",
            "bkthomps",
            Some("fake"),
            Some("account"),
            Code::Ok,
        ),
        (
            "my_foo",
            "bkthomps",
            Some("fake"),
            Some("account"),
            Code::Ok,
        ),
        (
            "my_foo",
            "bkthomps",
            Some("fake"),
            Some("account"),
            Code::OverLimit,
        ),
        ("foo_2", "bkthomps", None, None, Code::Ok),
        ("foo_2", "bkthomps", None, None, Code::OverLimit),
        ("foo_3", "bar_3", Some("fake"), None, Code::Ok),
        ("foo_3", "bar_3", Some("fake"), None, Code::Ok),
        ("foo_3", "bar_3", Some("fake"), None, Code::OverLimit),
        (
            "my_foo",
            "bkthomps",
            Some("fake"),
            Some("account"),
            Code::OverLimit,
        ),
    ];
    for (i, (foo, bar, cluster, category, want)) in steps.iter().enumerate() {
        let r = call(&mut c, send(foo, bar, *cluster, *category)).await;
        assert_eq!(overall(&r), *want, "replaces.sh step {i}: {r:?}");
    }

    // trigger-ratelimit.sh: (foo, baz not-so-shady) is 3 per minute.
    for i in 0..5u32 {
        let r = one(&mut c, "rl", &[("foo", "pelle"), ("baz", "not-so-shady")]).await;
        let want = if i < 3 { Code::Ok } else { Code::OverLimit };
        assert_eq!(overall(&r), want, "hit {i}");
    }
    // trigger-shadow-mode-key.sh: shadow_mode answers OK past the limit, 0 remaining.
    for i in 0..6u32 {
        let r = one(&mut c, "rl", &[("foo", "pelle"), ("baz", "shady")]).await;
        assert_eq!(overall(&r), Code::Ok, "hit {i}");
        let left = if i < 3 { 3 - (i + 1) } else { 0 };
        assert_eq!(
            limited(&r.statuses[0]),
            unnamed(Code::Ok, left, 3, Unit::Minute),
            "hit {i}"
        );
    }
    // Unlimited rules: OK with u32::MAX remaining and no current limit.
    for entries in [&[("qux", "x")][..], &[("foo", "x"), ("bay", "y")]] {
        let r = one(&mut c, "rl", entries).await;
        assert_eq!(overall(&r), Code::Ok);
        assert_eq!(r.statuses[0].limit_remaining, u32::MAX);
        assert_eq!(r.statuses[0].current_limit, None);
    }
}

/// Wildcards anywhere in a value (envoyproxy's wildcard.yaml): without share_threshold each
/// matching value counts apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wildcards_anywhere_in_a_value() {
    let sc = start_upstream(
        "memory://rls-upstream-wildcard",
        &["config/wildcard.yaml"],
        &[],
    )
    .await;
    let mut c = sc.client().await;
    fresh_window(MINUTE, Duration::from_secs(20)).await;
    for (entries, rpu) in [
        (&[("midWild", "barab")][..], 20),
        (&[("midWild", "bar123b")], 20),
        (&[("midWild", "barb")], 20),
        (&[("multiWild", "foo123bar456baz")], 10),
        (&[("multiWild", "foobarbaz")], 10),
        (&[("nestedWild", "val1"), ("wild", "goo2")], 20),
    ] {
        let r = one(&mut c, "test-domain", entries).await;
        assert_eq!(
            limited(&r.statuses[0]),
            unnamed(Code::Ok, rpu - 1, rpu, Unit::Minute),
            "{entries:?}"
        );
    }
    for entries in [
        &[("midWild", "bara")][..],
        &[("midWild", "xbarb")],
        &[("multiWild", "foo123baz")],
        &[("noWild", "foo1")],
    ] {
        let r = one(&mut c, "test-domain", entries).await;
        assert_no_limit(&r.statuses[0]);
    }
}

/// envoyproxy's MERGE_DOMAIN_CONFIG as --rls-merge-domain-config / rls_merge_domain_config:
/// off by default, then two files with one domain are an error naming both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merge_domain_config() {
    let (k1, k2) = (
        upstream("config/merge_domain_key1.yaml"),
        upstream("config/merge_domain_key2.yaml"),
    );
    let check = |extra: &[&str]| {
        let mut args = vec![
            "serve",
            "--check-config",
            "--grpc-listen",
            "127.0.0.1:0",
            "--rls-config",
            &k1,
            "--rls-config",
            &k2,
        ];
        args.extend_from_slice(extra);
        output(cmd(&args), Duration::from_secs(20))
    };
    let out = check(&[]).await;
    assert_usage_error(
        &out,
        &format!("{k2}:2: duplicate domain \"test-domain\": {k1} declares it too"),
        "no merge",
    );
    assert_usage_error(&out, "rls_merge_domain_config = true", "no merge");
    let out = check(&["--rls-merge-domain-config"]).await;
    assert_prints(
        &out,
        &[
            "merge_domain_config true",
            &format!("rls domain   test-domain (2 rules, {k1} + {k2})"),
        ],
    );
    // The TOML key.
    let dir = tempfile::tempdir().unwrap();
    let toml = write(
        dir.path(),
        "c.toml",
        &format!(
            "grpc_listen = \"127.0.0.1:0\"\nrls_config = [{k1:?}, {k2:?}]\nrls_merge_domain_config = true\n"
        ),
    );
    let out = output(
        cmd(&[
            "serve",
            "--check-config",
            "--config",
            toml.to_str().unwrap(),
        ]),
        Duration::from_secs(20),
    )
    .await;
    assert_prints(&out, &["merge_domain_config true"]);
    // One file twice: its descriptor declared twice, both places named.
    let out = output(
        cmd(&[
            "serve",
            "--check-config",
            "--grpc-listen",
            "127.0.0.1:0",
            "--rls-config",
            &k1,
            "--rls-config",
            &k1,
            "--rls-merge-domain-config",
        ]),
        Duration::from_secs(20),
    )
    .await;
    assert_usage_error(
        &out,
        &format!(
            "{k1}:5: duplicate descriptor composite key test-domain.key1_value1 (also at {k1}:5)"
        ),
        "a key twice",
    );

    // Served merged: both files' limits answer.
    let sc = start_upstream(
        "memory://rls-upstream-merge",
        &[
            "config/merge_domain_key1.yaml",
            "config/merge_domain_key2.yaml",
        ],
        &["--rls-merge-domain-config"],
    )
    .await;
    let mut c = sc.client().await;
    fresh_window(MINUTE, Duration::from_secs(5)).await;
    let r = one(&mut c, "test-domain", &[("key1", "value1")]).await;
    assert_eq!(
        limited(&r.statuses[0]),
        unnamed(Code::Ok, 9, 10, Unit::Minute)
    );
    let r = one(&mut c, "test-domain", &[("key2", "value2")]).await;
    assert_eq!(
        limited(&r.statuses[0]),
        unnamed(Code::Ok, 19, 20, Unit::Minute)
    );
}

/// A quota-mode descriptor over its limit leaves the answer OK while another quota-mode
/// descriptor is within, and then must not stop the request's other descriptors from being
/// counted (it is counted on its own, as a shadow one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_mode_counts_the_others_while_the_answer_is_ok() {
    let (_dir, sc) = start_with(
        "memory://rls-quota",
        "q.yaml",
        "domain: q\n\
         descriptors:\n\
         \x20 - key: plain\n\
         \x20   rate_limit: {unit: day, requests_per_unit: 5}\n\
         \x20 - key: small\n\
         \x20   quota_mode: true\n\
         \x20   rate_limit: {unit: day, requests_per_unit: 1}\n\
         \x20 - key: big\n\
         \x20   quota_mode: true\n\
         \x20   rate_limit: {unit: day, requests_per_unit: 3}\n",
        &[],
    )
    .await;
    let mut c = sc.client().await;
    fresh_window(DAY, Duration::from_secs(20)).await;
    let three = || {
        req(
            "q",
            vec![
                desc(&[("plain", "p")]),
                desc(&[("small", "s")]),
                desc(&[("big", "b")]),
            ],
            0,
        )
    };
    // (overall, plain's remaining, small's code, big's code and remaining)
    let want = [
        (Code::Ok, 4, Code::Ok, Code::Ok, 2),
        (Code::Ok, 3, Code::OverLimit, Code::Ok, 1),
        (Code::Ok, 2, Code::OverLimit, Code::Ok, 0),
        // Every quota-mode descriptor over: OVER_LIMIT; plain, within, is counted as the
        // request's enforced descriptors are (all or nothing among themselves).
        (Code::OverLimit, 1, Code::OverLimit, Code::OverLimit, 0),
    ];
    for (i, (all, plain_left, small, big, big_left)) in want.into_iter().enumerate() {
        let r = call(&mut c, three()).await;
        assert_eq!(overall(&r), all, "request {i}: {r:?}");
        assert_eq!(
            limited(&r.statuses[0]),
            unnamed(Code::Ok, plain_left, 5, Unit::Day),
            "request {i}"
        );
        assert_eq!(code(&r.statuses[1]), small, "request {i}");
        assert_eq!(
            limited(&r.statuses[2]),
            unnamed(big, big_left, 3, Unit::Day),
            "request {i}"
        );
    }
}

/// A reload loads the files as the start did: merged with --rls-merge-domain-config.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_merges_domains_as_the_start_did() {
    let dir = tempfile::tempdir().unwrap();
    let k1 = std::fs::read_to_string(upstream("config/merge_domain_key1.yaml")).unwrap();
    let k2 = std::fs::read_to_string(upstream("config/merge_domain_key2.yaml")).unwrap();
    write(dir.path(), "a.yaml", &k1);
    let b = write(dir.path(), "b.yaml", &k2);
    let d = dir.path().to_str().unwrap();
    let sc = Rls::start(&[
        "--store",
        "memory://rls-merge-reload",
        "--rls-config",
        d,
        "--rls-merge-domain-config",
    ])
    .await;
    let mut c = sc.client().await;
    let rpu = |r: &RateLimitResponse| limited(&r.statuses[0]).2 .0;
    let r = one(&mut c, "test-domain", &[("key2", "value2")]).await;
    assert_eq!(rpu(&r), 20);
    std::fs::write(
        &b,
        k2.replace("requests_per_unit: 20", "requests_per_unit: 7"),
    )
    .unwrap();
    let mut last = None;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let r = one(&mut c, "test-domain", &[("key2", "value2")]).await;
        last = Some(rpu(&r));
        if last == Some(7) {
            break;
        }
    }
    assert_eq!(
        last,
        Some(7),
        "the changed file of a merged domain reloaded"
    );
    // The other file's descriptor is still in the merged domain.
    let r = one(&mut c, "test-domain", &[("key1", "value1")]).await;
    assert_eq!(rpu(&r), 10);
}

/// The caller's `grpc-timeout` (Envoy sends its filter timeout) bounds the store calls, not
/// only `rls_store_timeout`: against a hung etcd, a call that allows 300 ms gets the domain's
/// store-down answer well within it although the store timeout is 10 s; one without a
/// deadline waits for the store timeout. A healthy store answers exactly within the deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_callers_grpc_timeout_bounds_the_store_calls() {
    let mut cluster = EtcdCluster::single();
    let url = cluster.url("rls-grpc-timeout");
    let yaml = policy_domain("closed", "fail_closed", 5);
    let (_dir, sc) = start_with(&url, "closed.yaml", &yaml, &["--rls-store-timeout", "10s"]).await;
    let mut c = sc.client().await;
    let with_deadline = |key: &str, ms: u64| {
        let mut r = tonic::Request::new(req("closed", vec![desc(&[("k", key)])], 0));
        r.set_timeout(Duration::from_millis(ms));
        r
    };
    let ok = c
        .should_rate_limit(with_deadline("up", 2_000))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(overall(&ok), Code::Ok, "the store decides in time");
    assert_eq!(limited(&ok.statuses[0]).1, 4);

    cluster.pause(0);
    let t = Instant::now();
    let r = within(
        "ShouldRateLimit with grpc-timeout 300m",
        Duration::from_secs(5),
        c.should_rate_limit(with_deadline("hung", 300)),
    )
    .await;
    let took = t.elapsed();
    println!("etcd hung, grpc-timeout 300 ms: answered in {took:?}");
    let r = r.expect("answered, not timed out").into_inner();
    assert_eq!(overall(&r), Code::OverLimit, "fail_closed answered: {r:?}");
    assert!(took < Duration::from_millis(300), "{took:?}");
    cluster.resume(0);
}
