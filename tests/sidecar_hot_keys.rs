//! Hot keys served from leased units through the real `clusterlimit serve` (issue 43): the
//! `hot_key_leases` switch from the flag and the config file (`--check-config` shows it, a
//! value that is not a boolean exits 64 naming it); two sidecars on one real etcd sharing a
//! hot key hammered over HTTP, with the switch on (leases taken, checks admitted from them,
//! never over the quota in any interval, a fraction of the store writes per admitted check)
//! and off (nothing leased); the same through the Envoy RLS (gRPC) on a fixed window.

use crate::binary;
use crate::sidecar_rls::{call, desc, overall, req, start_with, Client as RlsClient};
use crate::support;

use binary::{cmd, http_client, metrics, output, sample, within, Sidecar};
use clusterlimit::testing::rate_history::{assert_gcra_exact, unix_ns, window_excess, Admitted};
use clusterlimit::{Algorithm, Quota};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use reqwest::{Client, StatusCode};
use serde_json::json;
use std::time::Duration;
use support::EtcdCluster;
use tokio::time::Instant;

/// The hot key's quota: 2,000 a second, burst 1,000 (a GCRA quota is leasable when its
/// burst exceeds 300 ms of its rate, here 600).
pub(crate) const RATE: u64 = 2_000;
pub(crate) const BURST: u64 = 1_000;
/// Concurrent clients, shared evenly between the sidecars.
pub(crate) const CLIENTS: usize = 16;
/// How long the clients check.
const RUN: Duration = Duration::from_secs(2);
/// Bound on one client's checks in a run (the run's time is the other bound).
const MAX_CHECKS: usize = 20_000;

/// The hot key's quota as the library states it.
pub(crate) fn hot_quota() -> Quota {
    Quota::per_second(RATE).burst(BURST)
}

/// Sidecar flags for exactness: every answer from the store (`fail_closed`: a store-down
/// answer is a 503, never an uncounted admission) and a store timeout a loaded machine never
/// reaches.
pub(crate) fn exact_flags(url: &str, leases: bool) -> Vec<&str> {
    let mut flags = vec![
        "--store",
        url,
        "--rate-store-down",
        "fail_closed",
        "--rate-store-timeout",
        "10s",
    ];
    if leases {
        flags.push("--hot-key-leases");
    }
    flags
}

/// Creates the limit `name` with the hot quota through the sidecar at `base`.
pub(crate) async fn put_hot_quota(c: &Client, base: &str, name: &str) {
    let r = c
        .put(format!("{base}/v1/ratelimits/{name}"))
        .json(&json!({"limit": RATE, "period": "1s", "burst": BURST}))
        .send()
        .await
        .expect("PUT the quota");
    assert_eq!(
        r.status(),
        StatusCode::OK,
        "PUT {name}: {:?}",
        r.text().await
    );
}

/// What one client saw: its admitted checks (sent and answered, Unix ns), its denials, and
/// the answer that stopped it if one was neither 200 nor 429.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    pub admitted: Vec<Admitted>,
    pub denied: u64,
    pub failed: Option<String>,
}

/// Checks `key` of `name` at `base` one after another until `until` (at most
/// [`MAX_CHECKS`]), stopping at the first answer that is neither 200 nor 429.
pub(crate) async fn http_client_loop(
    c: Client,
    base: String,
    name: &'static str,
    until: Instant,
) -> Seen {
    let url = format!("{base}/v1/ratelimits/{name}/check");
    let body = json!({"key": "hot"});
    let mut seen = Seen::default();
    for _ in 0..MAX_CHECKS {
        if Instant::now() >= until {
            break;
        }
        let start = unix_ns();
        let answer = match c.post(&url).json(&body).send().await {
            Ok(r) => {
                let status = r.status();
                // Read to the end, so the connection is kept for the next check.
                r.bytes().await.map(|_| status)
            }
            Err(e) => Err(e),
        };
        let end = unix_ns();
        match answer {
            Ok(StatusCode::OK) => seen.admitted.push(Admitted {
                start,
                end,
                cost: 1,
            }),
            Ok(StatusCode::TOO_MANY_REQUESTS) => seen.denied += 1,
            Ok(s) => {
                seen.failed = Some(format!("HTTP {s}"));
                break;
            }
            Err(e) => {
                seen.failed = Some(format!("no answer: {e}"));
                break;
            }
        }
    }
    seen
}

/// [`CLIENTS`] clients on `bases` in turn for `run`; what each saw, by sidecar.
pub(crate) async fn hammer_http(
    bases: &[String],
    name: &'static str,
    run: Duration,
) -> Vec<Vec<Seen>> {
    let c = http_client();
    let until = Instant::now() + run;
    let mut tasks: Vec<Vec<_>> = bases.iter().map(|_| Vec::new()).collect();
    for i in 0..CLIENTS {
        let side = i % bases.len();
        let task = http_client_loop(c.clone(), bases[side].clone(), name, until);
        tasks[side].push(tokio::spawn(task));
    }
    let mut out = Vec::new();
    for side in tasks {
        let mut seen = Vec::new();
        for t in side {
            let s = within("a client's checks", run + Duration::from_secs(60), t).await;
            seen.push(s.expect("a client task"));
        }
        out.push(seen);
    }
    out
}

/// A sidecar's lease counters and rate-limit writes (etcd transactions), from /metrics.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Counters {
    pub leases: f64,
    pub leased_units: f64,
    pub lease_admitted: f64,
    pub returned_units: f64,
    pub lost_units: f64,
    pub txns: f64,
}

impl Counters {
    /// Units leased and neither spent, given back nor counted lost: what the sidecar holds.
    pub fn held(&self) -> f64 {
        self.leased_units - self.lease_admitted - self.returned_units - self.lost_units
    }
}

/// The counters of the sidecar at `base` now.
pub(crate) async fn counters(c: &Client, base: &str) -> Counters {
    let text = metrics(c, base).await;
    let get = |name: &str| {
        sample(&text, &format!("{name} "))
            .unwrap_or_else(|| panic!("{name} missing from {base}/metrics:\n{text}"))
    };
    Counters {
        leases: get("clusterlimit_rate_leases_total"),
        leased_units: get("clusterlimit_rate_leased_units_total"),
        lease_admitted: get("clusterlimit_rate_lease_admitted_total"),
        returned_units: get("clusterlimit_rate_lease_returned_units_total"),
        lost_units: get("clusterlimit_rate_lease_lost_units_total"),
        txns: get("clusterlimit_store_requests_total{kind=\"txn\"}"),
    }
}

/// Every admitted check of `seen`.
pub(crate) fn admitted_of(seen: &[Vec<Seen>]) -> Vec<Admitted> {
    seen.iter()
        .flatten()
        .flat_map(|s| s.admitted.iter().copied())
        .collect()
}

/// What a run of two sidecars on the hot key came to.
struct Figures {
    admitted: usize,
    denied: u64,
    /// Per sidecar: its counters' growth over the run.
    growth: Vec<Counters>,
    /// Rate-limit writes of both sidecars per admitted check.
    writes_per_admitted: f64,
}

/// Two sidecars on `url` (leases on or off) share the limit `name`, hammered for [`RUN`]:
/// never over the quota in any interval; the figures printed.
async fn two_sidecars(url: &str, name: &'static str, leases: bool) -> Figures {
    let flags = exact_flags(url, leases);
    let (a, b) = tokio::join!(Sidecar::start(&flags), Sidecar::start(&flags));
    let bases = [a.url.clone(), b.url.clone()];
    let c = http_client();
    put_hot_quota(&c, &a.url, name).await;
    let before = [counters(&c, &a.url).await, counters(&c, &b.url).await];
    let seen = hammer_http(&bases, name, RUN).await;
    let after = [counters(&c, &a.url).await, counters(&c, &b.url).await];
    for s in seen.iter().flatten() {
        assert_eq!(s.failed, None, "leases {leases}: a check failed");
    }
    let events = admitted_of(&seen);
    let denied = seen.iter().flatten().map(|s| s.denied).sum();
    let worst = assert_gcra_exact(&events, &hot_quota(), 0.0);
    let growth: Vec<Counters> = before
        .iter()
        .zip(&after)
        .map(|(b, a)| Counters {
            leases: a.leases - b.leases,
            leased_units: a.leased_units - b.leased_units,
            lease_admitted: a.lease_admitted - b.lease_admitted,
            returned_units: a.returned_units - b.returned_units,
            lost_units: a.lost_units - b.lost_units,
            txns: a.txns - b.txns,
        })
        .collect();
    let writes: f64 = growth.iter().map(|g| g.txns).sum();
    let figures = Figures {
        admitted: events.len(),
        denied,
        writes_per_admitted: writes / events.len().max(1) as f64,
        growth,
    };
    let allowed = BURST as f64 + RATE as f64 * RUN.as_secs_f64();
    println!(
        "[leases {leases}] {CLIENTS} clients on 2 sidecars for {RUN:?}: {} admitted ({:.0}% of \
         the {allowed:.0} the quota allows), {} denied; {writes} store writes, {:.4} per admitted \
         check; worst excess {:.3} (≤ 0: never over)",
        figures.admitted,
        100.0 * figures.admitted as f64 / allowed,
        figures.denied,
        figures.writes_per_admitted,
        worst.over
    );
    for (side, g) in ["a", "b"].iter().zip(&figures.growth) {
        println!("[leases {leases}] sidecar {side}: {g:?}");
    }
    figures
}

/// The switch on: both sidecars lease the hot key and admit from their leases, the quota is
/// kept in every interval, and a store write serves many times more admitted checks than
/// with the switch off, when nothing is leased.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_key_is_served_from_leases_only_when_the_switch_is_on() {
    let cluster = EtcdCluster::single();
    let url = cluster.url("hot-keys");
    let on = two_sidecars(&url, "hot-on", true).await;
    let off = two_sidecars(&url, "hot-off", false).await;
    for (side, g) in ["a", "b"].iter().zip(&on.growth) {
        assert!(g.leases > 0.0, "sidecar {side} took no lease: {g:?}");
        assert!(
            g.lease_admitted > 0.0,
            "sidecar {side} admitted nothing from leases: {g:?}"
        );
    }
    let from_leases: f64 = on.growth.iter().map(|g| g.lease_admitted).sum();
    assert!(
        from_leases >= 0.5 * on.admitted as f64,
        "only {from_leases} of {} admitted checks came from leases",
        on.admitted
    );
    for (side, g) in ["a", "b"].iter().zip(&off.growth) {
        assert_eq!(
            (g.leases, g.leased_units, g.lease_admitted),
            (0.0, 0.0, 0.0),
            "sidecar {side} leased with the switch off"
        );
    }
    assert!(
        on.writes_per_admitted * 4.0 < off.writes_per_admitted,
        "leases on: {:.4} writes per admitted check, off: {:.4}",
        on.writes_per_admitted,
        off.writes_per_admitted
    );
    // The quota is served, not starved by the leases: most of what it allows is admitted.
    let allowed = BURST as f64 + RATE as f64 * RUN.as_secs_f64();
    assert!(
        on.admitted as f64 >= 0.5 * allowed.min((on.admitted as u64 + on.denied) as f64),
        "leases on: {} admitted of {allowed:.0} allowed ({} denied)",
        on.admitted,
        on.denied
    );
}

/// The RLS's domain: the key `k` at the hot rate on a fixed window (the RLS's default).
const RLS_DOMAIN: &str = "domain: hot\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 2000}\n";

/// Sends `ShouldRateLimit` for `k=hot` until `until` (at most [`MAX_CHECKS`]): what it saw.
pub(crate) async fn rls_client_loop(mut c: RlsClient, until: Instant) -> Seen {
    let mut seen = Seen::default();
    for _ in 0..MAX_CHECKS {
        if Instant::now() >= until {
            break;
        }
        let start = unix_ns();
        let answer = call(&mut c, req("hot", vec![desc(&[("k", "hot")])], 0)).await;
        let end = unix_ns();
        match overall(&answer) {
            Code::Ok => seen.admitted.push(Admitted {
                start,
                end,
                cost: 1,
            }),
            Code::OverLimit => seen.denied += 1,
            other => {
                seen.failed = Some(format!("{other:?}"));
                break;
            }
        }
    }
    seen
}

/// Two sidecars on `url` serving `domain` over the RLS with `switch` (a hot-key flag), one
/// hot descriptor called by [`CLIENTS`] clients split over them for [`RUN`]: what each client
/// saw (no call failed), and the sidecars (with their temporary config directories), whose
/// counters the caller reads.
pub(crate) async fn two_rls_sidecars(
    url: &str,
    domain: &str,
    switch: &str,
) -> (Vec<Seen>, [(tempfile::TempDir, crate::sidecar_rls::Rls); 2]) {
    let extra = [
        switch,
        "--rls-store-down",
        "fail_closed",
        "--rls-store-timeout",
        "10s",
    ];
    let (a, b) = tokio::join!(
        start_with(url, "hot.yaml", domain, &extra),
        start_with(url, "hot.yaml", domain, &extra)
    );
    let (ca, cb) = (a.1.client().await, b.1.client().await);
    let until = Instant::now() + RUN;
    let mut tasks = Vec::new();
    for i in 0..CLIENTS {
        let c = if i % 2 == 0 { ca.clone() } else { cb.clone() };
        tasks.push(tokio::spawn(rls_client_loop(c, until)));
    }
    let mut seen = Vec::new();
    for t in tasks {
        let s = within("an RLS client's calls", RUN + Duration::from_secs(60), t).await;
        seen.push(s.expect("an RLS client task"));
    }
    for s in &seen {
        assert_eq!(s.failed, None, "an RLS call failed");
    }
    (seen, [a, b])
}

/// The RLS of two sidecars with the switch on, one hot descriptor: leases taken and spent on
/// both, and no fixed window admits more than its limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rls_serves_a_hot_descriptor_from_leases() {
    let cluster = EtcdCluster::single();
    let url = cluster.url("hot-rls");
    let (seen, [a, b]) = two_rls_sidecars(&url, RLS_DOMAIN, "--hot-key-leases").await;
    let events = admitted_of(std::slice::from_ref(&seen));
    let denied: u64 = seen.iter().map(|s| s.denied).sum();
    let quota = Quota::per_second(RATE).algorithm(Algorithm::FixedWindow);
    let (most, window) = window_excess(&events, &quota);
    let c = http_client();
    let counts = [counters(&c, &a.1.http).await, counters(&c, &b.1.http).await];
    println!(
        "[rls] {CLIENTS} clients on 2 sidecars for {RUN:?}: {} admitted, {denied} denied; most \
         in one window {most} (window {window}); {counts:?}",
        events.len()
    );
    assert!(most <= RATE, "window {window} admitted {most}, over {RATE}");
    for (side, g) in ["a", "b"].iter().zip(&counts) {
        assert!(g.leases > 0.0, "sidecar {side}'s RLS took no lease: {g:?}");
        assert!(
            g.lease_admitted > 0.0,
            "sidecar {side}'s RLS admitted nothing from leases: {g:?}"
        );
    }
}

/// `serve --check-config ARGS`, bounded.
async fn check_config(args: &[&str]) -> binary::Out {
    let mut all = vec!["serve", "--check-config"];
    all.extend_from_slice(args);
    output(cmd(&all), Duration::from_secs(20)).await
}

/// The switch from the config file and the flag, as `--check-config` shows it; a value that is
/// not a boolean is refused with exit 64, naming the setting, by `--check-config` and by
/// `serve` itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_switch_is_read_from_the_file_and_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let on = file("on.toml", "hot_key_leases = true\n");
    let off = file("off.toml", "hot_key_leases = false\n");
    let bad = file(
        "bad.toml",
        "store = \"memory://x\"\nhot_key_leases = \"yes\"\n",
    );
    for (args, want) in [
        (vec![], "rate_leases  off"),
        (vec!["--config", off.as_str()], "rate_leases  off"),
        (vec!["--config", on.as_str()], "rate_leases  on"),
        (vec!["--hot-key-leases"], "rate_leases  on"),
        // The flag turns it on over a file's `false`.
        (
            vec!["--config", off.as_str(), "--hot-key-leases"],
            "rate_leases  on",
        ),
    ] {
        let out = check_config(&args).await;
        assert_eq!(out.code, Some(0), "{args:?}: {}", out.stderr);
        assert!(
            out.stdout.contains(want),
            "{args:?}: {want:?} not in\n{}",
            out.stdout
        );
    }
    let refused = [
        check_config(&["--config", bad.as_str()]).await,
        output(
            cmd(&["serve", "--listen", "127.0.0.1:0", "--config", bad.as_str()]),
            Duration::from_secs(20),
        )
        .await,
    ];
    for out in refused {
        assert_eq!(out.code, Some(64), "{}", out.stderr);
        assert!(
            out.stderr.contains("hot_key_leases") && out.stderr.contains("bad.toml"),
            "the setting and the file not named:\n{}",
            out.stderr
        );
        assert_eq!(out.stdout, "", "nothing served");
    }
}
