//! The edge rows: the sidecar as Envoy's rate limit service in production, i.e. a 3-member
//! etcd, `clusterlimit serve --grpc-listen` with its default settings (no
//! `--rls-store-timeout`), many concurrent `ShouldRateLimit` callers on real quotas that deny.
//! Per row: throughput, latency, the answers, the answers a store-down policy made (fail-open)
//! and the interval check of admissions (window_check.rs). Then the same load while the etcd
//! leader is SIGSTOPped and SIGKILLed: when the policy answered, against when the store itself
//! could (a raw etcd client's first write after the fault).

use crate::plan::Plan;
use crate::server::{Client, Rls};
use crate::stats::Samples;
use crate::window_check::{self, Seen, Verdict};
use anyhow::{bail, Context as _};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use support::EtcdCluster;

use crate::support;

/// The domain of the edge rules (apart from the other rows' `bench`).
pub const DOMAIN: &str = "edgebench";

/// One rule of the edge config: fixed windows (the RLS default), one counter per value.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    /// The descriptor key (and the metrics' `limit` label).
    pub key: &'static str,
    pub unit: &'static str,
    pub per_unit: u32,
    pub period: Duration,
}

impl Rule {
    pub fn label(&self) -> String {
        format!("{} per {}", thousands(u64::from(self.per_unit)), self.unit)
    }
}

pub const PER_MINUTE: Rule = Rule {
    key: "per_minute",
    unit: "minute",
    per_unit: 20,
    period: Duration::from_secs(60),
};
pub const PER_SECOND: Rule = Rule {
    key: "per_second",
    unit: "second",
    per_unit: 1_000,
    period: Duration::from_secs(1),
};

/// Both rules in envoyproxy/ratelimit's YAML.
pub fn write_config(dir: &Path) -> anyhow::Result<PathBuf> {
    let path = dir.join("edge.yaml");
    let mut text = format!("domain: {DOMAIN}\ndescriptors:\n");
    for r in [PER_MINUTE, PER_SECOND] {
        text.push_str(&format!(
            "  - key: {}\n    rate_limit: {{unit: {}, requests_per_unit: {}}}\n",
            r.key, r.unit, r.per_unit
        ));
    }
    std::fs::write(&path, text).with_context(|| format!("write {}", path.display()))?;
    Ok(path)
}

/// How one answer came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The store decided: admitted or not.
    Exact { admitted: bool },
    /// OK by the store-down policy (fail-open): the sidecar answers a made-up decision with the
    /// whole limit remaining, which no counted admission of 1 can leave.
    FailOpen,
    /// A gRPC error, a timeout, or an answer of an unexpected shape.
    Error,
}

/// One call as the client saw it.
#[derive(Debug, Clone, Copy)]
pub struct Call {
    pub key: u32,
    /// Unix ns, the client's clock.
    pub sent: u64,
    pub received: u64,
    pub took: Duration,
    pub outcome: Outcome,
    /// `duration_until_reset` of the answer, ns (0 for an error).
    pub until_reset: u64,
}

/// Which values a row's calls use: `keys` of them, taken round-robin across all callers.
#[derive(Debug, Clone)]
struct Keys {
    prefix: String,
    count: u32,
    next: Arc<AtomicU64>,
}

impl Keys {
    fn new(prefix: &str, count: u32) -> Keys {
        Keys {
            prefix: prefix.to_string(),
            count: count.max(1),
            next: Arc::new(AtomicU64::new(0)),
        }
    }

    fn pick(&self) -> u32 {
        (self.next.fetch_add(1, Ordering::Relaxed) % u64::from(self.count)) as u32
    }
}

pub fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// A bound on one call: far above any answer of a live sidecar.
const CALL_LIMIT: Duration = Duration::from_secs(10);
/// A bound on one caller's calls in one run (a 10 s row makes a few tens of thousands).
const MAX_CALLS_PER_CALLER: usize = 500_000;

/// One ShouldRateLimit of cost 1 on `rule` for value `key`, classified.
async fn call(client: &mut Client, rule: &Rule, keys: &Keys, key: u32) -> (Call, Option<String>) {
    let req = RateLimitRequest {
        domain: DOMAIN.to_string(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: rule.key.to_string(),
                value: format!("{}-{key}", keys.prefix),
            }],
            ..Default::default()
        }],
        hits_addend: 1,
    };
    let sent = unix_ns();
    let t = Instant::now();
    let answer = tokio::time::timeout(CALL_LIMIT, client.should_rate_limit(req)).await;
    let took = t.elapsed();
    let received = unix_ns();
    let mut c = Call {
        key,
        sent,
        received,
        took,
        outcome: Outcome::Error,
        until_reset: 0,
    };
    let answer = match answer {
        Ok(Ok(a)) => a.into_inner(),
        Ok(Err(status)) => return (c, Some(format!("ShouldRateLimit failed: {status}"))),
        Err(_) => return (c, Some(format!("ShouldRateLimit took over {CALL_LIMIT:?}"))),
    };
    let Some(status) = answer.statuses.first() else {
        return (c, Some(format!("an answer without a status: {answer:?}")));
    };
    let limit = status.current_limit.as_ref().map(|l| l.requests_per_unit);
    let until = status
        .duration_until_reset
        .as_ref()
        .map(|d| d.seconds.max(0) as u64 * 1_000_000_000 + d.nanos.max(0) as u64);
    let (Some(limit), Some(until)) = (limit, until) else {
        return (
            c,
            Some(format!("an answer without a limit or reset: {answer:?}")),
        );
    };
    c.until_reset = until;
    c.outcome = if answer.overall_code == Code::Ok as i32 {
        if status.limit_remaining >= limit {
            Outcome::FailOpen
        } else {
            Outcome::Exact { admitted: true }
        }
    } else if answer.overall_code == Code::OverLimit as i32 {
        Outcome::Exact { admitted: false }
    } else {
        return (
            c,
            Some(format!("an answer neither OK nor OVER_LIMIT: {answer:?}")),
        );
    };
    (c, None)
}

/// What a load run recorded.
#[derive(Debug, Default)]
pub struct Load {
    pub calls: Vec<Call>,
    pub took: Duration,
    /// The first few error messages.
    pub errors: Vec<String>,
}

/// `callers` tasks over `clients` (caller i on connection i mod n) calling until `stop` is set
/// or `limit` passed, each key picked round-robin.
async fn load(
    clients: Vec<Client>,
    callers: usize,
    rule: Rule,
    keys: Keys,
    stop: Arc<AtomicBool>,
    limit: Duration,
) -> anyhow::Result<Load> {
    let start = Instant::now();
    let deadline = start + limit;
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..callers {
        let mut client = clients[i % clients.len()].clone();
        let (keys, stop) = (keys.clone(), stop.clone());
        tasks.spawn(async move {
            let mut calls = Vec::new();
            let mut errors = Vec::new();
            while !stop.load(Ordering::Relaxed)
                && Instant::now() < deadline
                && calls.len() < MAX_CALLS_PER_CALLER
            {
                let (c, error) = call(&mut client, &rule, &keys, keys.pick()).await;
                if let Some(e) = error {
                    if errors.len() < 3 {
                        errors.push(e);
                    }
                }
                calls.push(c);
            }
            (calls, errors)
        });
    }
    let mut all = Load::default();
    while let Some(done) = tasks.join_next().await {
        let (calls, errors) = done.context("a caller panicked")?;
        all.calls.extend(calls);
        all.errors
            .extend(errors.into_iter().take(3 - all.errors.len().min(3)));
    }
    all.took = start.elapsed();
    all.calls.sort_by_key(|c| c.sent);
    Ok(all)
}

/// The sidecar's rate-limit counters for [`DOMAIN`] (summed over its limits).
#[derive(Debug, Clone, Copy, Default)]
pub struct Counters {
    pub hits: u64,
    pub over_limit: u64,
    /// Hits admitted by the store-down policy (`clusterlimit_rate_failure_mode_allowed`).
    pub failure_mode_allowed: u64,
    /// Hits denied by the store-down policy (`clusterlimit_rate_store_down_denied`).
    pub store_down_denied: u64,
}

impl Counters {
    pub fn since(&self, before: &Counters) -> Counters {
        Counters {
            hits: self.hits.saturating_sub(before.hits),
            over_limit: self.over_limit.saturating_sub(before.over_limit),
            failure_mode_allowed: self
                .failure_mode_allowed
                .saturating_sub(before.failure_mode_allowed),
            store_down_denied: self
                .store_down_denied
                .saturating_sub(before.store_down_denied),
        }
    }

    /// The answers a store-down policy made.
    pub fn policy(&self) -> u64 {
        self.failure_mode_allowed + self.store_down_denied
    }
}

/// Scrapes the sidecar's `/metrics`.
pub async fn scrape(http: &reqwest::Client, rls: &Rls) -> anyhow::Result<Counters> {
    let url = format!("{}/metrics", rls.http_url());
    let text = tokio::time::timeout(Duration::from_secs(10), async {
        http.get(&url)
            .send()
            .await?
            .error_for_status()?
            .text()
            .await
    })
    .await
    .with_context(|| format!("GET {url} took over 10 s"))?
    .with_context(|| format!("GET {url}"))?;
    let domain = format!("domain=\"{DOMAIN}\"");
    let sum = |family: &str| -> u64 {
        text.lines()
            .filter(|l| l.starts_with(&format!("{family}{{")) && l.contains(&domain))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .map(|v| v as u64)
            .sum()
    };
    Ok(Counters {
        hits: sum("clusterlimit_rate_hits_total"),
        over_limit: sum("clusterlimit_rate_over_limit_total"),
        failure_mode_allowed: sum("clusterlimit_rate_failure_mode_allowed_total"),
        store_down_denied: sum("clusterlimit_rate_store_down_denied_total"),
    })
}

/// One row: a rule, a number of keys, the load's figures.
#[derive(Debug, Default)]
pub struct Row {
    pub keys: u32,
    pub rule: Option<Rule>,
    pub calls: usize,
    pub took: Duration,
    pub latency: Samples,
    pub admitted: usize,
    pub denied: usize,
    pub fail_open_answers: usize,
    pub errors: usize,
    pub error_samples: Vec<String>,
    /// The sidecar's own count of the row's answers.
    pub counters: Counters,
    pub window: Verdict,
}

impl Row {
    pub fn per_second(&self) -> f64 {
        let s = self.took.as_secs_f64();
        if s > 0.0 {
            self.calls as f64 / s
        } else {
            0.0
        }
    }

    pub fn rule(&self) -> Rule {
        self.rule.unwrap_or(PER_SECOND)
    }
}

/// The figures of a load's calls, and the interval check.
fn summarize(keys: u32, rule: Rule, load: Load, counters: Counters) -> Row {
    let mut row = Row {
        keys,
        rule: Some(rule),
        calls: load.calls.len(),
        took: load.took,
        latency: Samples::new(load.calls.iter().map(|c| c.took).collect()),
        counters,
        error_samples: load.errors,
        ..Row::default()
    };
    let mut seen = Vec::with_capacity(load.calls.len());
    for c in &load.calls {
        match c.outcome {
            Outcome::Exact { admitted: true } => row.admitted += 1,
            Outcome::Exact { admitted: false } => row.denied += 1,
            Outcome::FailOpen => row.fail_open_answers += 1,
            Outcome::Error => {
                row.errors += 1;
                continue;
            }
        }
        seen.push(Seen {
            key: c.key,
            sent: c.sent,
            received: c.received,
            until_reset: c.until_reset,
            admitted: c.outcome == Outcome::Exact { admitted: true },
        });
    }
    let period = u64::try_from(rule.period.as_nanos()).unwrap_or(u64::MAX);
    row.window = window_check::check(&seen, u64::from(rule.per_unit), period);
    row
}

/// A 3-member etcd, one sidecar with the default settings, and the client connections.
pub struct Setup {
    pub rls: Rls,
    pub clients: Vec<Client>,
    pub http: reqwest::Client,
}

impl Setup {
    pub async fn start(etcd: &EtcdCluster, config: &Path, plan: &Plan) -> anyhow::Result<Setup> {
        // No --rls-store-timeout: the default is what Envoy users run.
        let rls = Rls::start(&etcd.url("rls-edge"), config, &[]).await?;
        let clients = rls.connections(plan.edge_connections).await?;
        Ok(Setup {
            rls,
            clients,
            http: reqwest::Client::new(),
        })
    }
}

/// The four rows: one key and 1,000 keys, each under 20 per minute and 1,000 per second.
pub async fn rows(setup: &Setup, plan: &Plan) -> anyhow::Result<Vec<Row>> {
    // A few unmeasured calls per connection: connections and the limits' first reads.
    for rule in [PER_MINUTE, PER_SECOND] {
        let warm = Keys::new("warmup", 1);
        for c in &setup.clients {
            let mut c = c.clone();
            let (_, error) = call(&mut c, &rule, &warm, 0).await;
            if let Some(e) = error {
                bail!("warmup: {e}");
            }
        }
    }
    let mut rows = Vec::new();
    for (n, keys) in [1, plan.edge_keys].into_iter().enumerate() {
        for (r, rule) in [PER_MINUTE, PER_SECOND].into_iter().enumerate() {
            crate::step(&format!(
                "edge: {} callers, {} key(s), {}, {:?}",
                plan.edge_callers,
                keys,
                rule.label(),
                plan.edge_for
            ));
            let before = scrape(&setup.http, &setup.rls).await?;
            let run = load(
                setup.clients.clone(),
                plan.edge_callers,
                rule,
                Keys::new(&format!("row{n}{r}"), keys),
                Arc::new(AtomicBool::new(false)),
                plan.edge_for,
            )
            .await?;
            let after = scrape(&setup.http, &setup.rls).await?;
            rows.push(summarize(keys, rule, run, after.since(&before)));
        }
    }
    Ok(rows)
}

/// One fault of the fault run, its times relative to the fault.
#[derive(Debug, Default)]
pub struct Fault {
    pub what: String,
    /// When it was injected, since the run started.
    pub at: Duration,
    /// The first successful raw etcd write after the fault (a probe per surviving member).
    pub store_back: Option<Duration>,
    /// Fail-open answers received from this fault until the next one (or the end).
    pub policy_answers: usize,
    pub first_policy: Option<Duration>,
    pub last_policy: Option<Duration>,
    /// Policy answers received later than the store's recovery + [`RESUME_SLACK`].
    pub late_policy: usize,
    /// The first store-made admission of a call sent after the store was back: exact
    /// counting again (a denial proves nothing, it can come from a cached state).
    pub first_exact_admission: Option<Duration>,
}

impl Fault {
    /// The policy answered only after the fault began and at most [`RESUME_SLACK`] after the
    /// store's recovery, and the store admitted again after its recovery. (When the first such
    /// admission came is printed, not judged: a window the store had already filled before the
    /// fault admits nothing until it ends, however fast the sidecar is.)
    pub fn met(&self) -> bool {
        match self.store_back {
            Some(back) => {
                self.late_policy == 0
                    && self.last_policy.is_none_or(|l| l <= back + RESUME_SLACK)
                    && self.first_exact_admission.is_some()
            }
            None => false,
        }
    }
}

/// How much later than the store the policy may still answer (the target).
pub const RESUME_SLACK: Duration = Duration::from_millis(500);

/// The fault run's figures.
#[derive(Debug, Default)]
pub struct FaultRun {
    pub row: Row,
    /// Fail-open answers before the first fault (the store healthy).
    pub policy_before: usize,
    pub faults: Vec<Fault>,
}

/// 64 callers on one key under 1,000 per second; SIGSTOP of the leader, SIGCONT, then SIGKILL
/// of the (new) leader and its restart.
pub async fn faults(
    setup: &Setup,
    etcd: &mut EtcdCluster,
    plan: &Plan,
) -> anyhow::Result<FaultRun> {
    let rule = PER_SECOND;
    let stop = Arc::new(AtomicBool::new(false));
    let limit = plan.fault_warm + plan.fault_pause + plan.fault_settle * 2 + plan.fault_down;
    let start_ns = unix_ns();
    let before = scrape(&setup.http, &setup.rls).await?;
    let running = tokio::spawn(load(
        setup.clients.clone(),
        plan.edge_callers,
        rule,
        Keys::new("faults", 1),
        stop.clone(),
        // Bounded even if the driver below fails half-way.
        limit + Duration::from_secs(60),
    ));
    // The driver: (what, unix ns of the injection, the probe's answer).
    let mut injected: Vec<(String, u64, Option<Duration>)> = Vec::new();
    let driven = async {
        tokio::time::sleep(plan.fault_warm).await;
        let leader = support::etcd::leader(etcd).await;
        let at = unix_ns();
        let t = Instant::now();
        etcd.pause(leader);
        let probe = store_probe(etcd, leader, t);
        tokio::time::sleep(plan.fault_pause).await;
        etcd.resume(leader);
        let back = probe.await.ok().flatten();
        injected.push((
            format!("SIGSTOP leader for {} s", plan.fault_pause.as_secs_f64()),
            at,
            back,
        ));
        tokio::time::sleep(plan.fault_settle).await;
        let leader = support::etcd::leader(etcd).await;
        let at = unix_ns();
        let t = Instant::now();
        etcd.kill(leader);
        let probe = store_probe(etcd, leader, t);
        tokio::time::sleep(plan.fault_down).await;
        tokio::task::block_in_place(|| etcd.restart(leader));
        let back = probe.await.ok().flatten();
        injected.push((
            format!(
                "SIGKILL leader, restarted after {} s",
                plan.fault_down.as_secs_f64()
            ),
            at,
            back,
        ));
        tokio::time::sleep(plan.fault_settle).await;
    };
    driven.await;
    stop.store(true, Ordering::Relaxed);
    let run = running.await.context("the fault load panicked")??;
    let after = scrape(&setup.http, &setup.rls).await?;
    let mut out = FaultRun::default();
    for (i, (what, at, back)) in injected.iter().enumerate() {
        let until = injected.get(i + 1).map_or(u64::MAX, |n| n.1);
        let rel = |ns: u64| Duration::from_nanos(ns.saturating_sub(*at));
        let mut f = Fault {
            what: what.clone(),
            at: Duration::from_nanos(at.saturating_sub(start_ns)),
            store_back: *back,
            ..Fault::default()
        };
        let back_ns = back.map(|b| at + u64::try_from(b.as_nanos()).unwrap_or(u64::MAX));
        for c in run
            .calls
            .iter()
            .filter(|c| c.received >= *at && c.received < until)
        {
            if c.outcome == Outcome::FailOpen {
                f.policy_answers += 1;
                f.first_policy.get_or_insert(rel(c.received));
                f.last_policy = Some(rel(c.received));
                let slack = u64::try_from(RESUME_SLACK.as_nanos()).unwrap_or(u64::MAX);
                if back_ns.is_some_and(|b| c.received > b + slack) {
                    f.late_policy += 1;
                }
            }
        }
        if let Some(b) = back_ns {
            f.first_exact_admission = run
                .calls
                .iter()
                .filter(|c| {
                    c.sent >= b
                        && c.received < until
                        && c.outcome == Outcome::Exact { admitted: true }
                })
                .map(|c| rel(c.received))
                .min();
        }
        out.faults.push(f);
    }
    let first_fault = injected.first().map_or(u64::MAX, |f| f.1);
    out.policy_before = run
        .calls
        .iter()
        .filter(|c| c.received < first_fault && c.outcome == Outcome::FailOpen)
        .count();
    out.row = summarize(1, rule, run, after.since(&before));
    Ok(out)
}

/// Bound of one probe write: a healthy 3-member write takes a few ms, even on a loaded machine
/// far less than this; a hung attempt must not hide the moment the store is back.
const PROBE_ATTEMPT: Duration = Duration::from_millis(250);
/// How long the probe tries.
const PROBE_LIMIT: Duration = Duration::from_secs(20);

/// The store's own recovery: one raw client per member other than `faulted`, each writing
/// every ~10 ms; how long after `since` the first write succeeded.
fn store_probe(
    etcd: &EtcdCluster,
    faulted: usize,
    since: Instant,
) -> tokio::task::JoinHandle<Option<Duration>> {
    let members: Vec<String> = etcd
        .endpoints()
        .into_iter()
        .enumerate()
        .filter(|(i, _)| *i != faulted)
        .map(|(_, e)| e)
        .collect();
    tokio::spawn(async move {
        let deadline = Instant::now() + PROBE_LIMIT;
        let mut set = tokio::task::JoinSet::new();
        for ep in members {
            set.spawn(async move {
                let options = etcd_client::ConnectOptions::new()
                    .with_connect_timeout(PROBE_ATTEMPT)
                    .with_timeout(PROBE_ATTEMPT);
                let mut client =
                    etcd_client::Client::connect([format!("http://{ep}")], Some(options))
                        .await
                        .ok()?;
                while Instant::now() < deadline {
                    let put = client.put("/rls-edge-store-probe", "x", None);
                    if let Ok(Ok(_)) = tokio::time::timeout(PROBE_ATTEMPT, put).await {
                        return Some(Instant::now());
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                None
            });
        }
        let mut first = None;
        while let Some(done) = set.join_next().await {
            if let Ok(Some(at)) = done {
                first = Some(at);
                break;
            }
        }
        set.abort_all();
        first.map(|at| at.saturating_duration_since(since))
    })
}

/// 1234567 → "1,234,567".
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}
