//! Row 2, the LLM scenario: `replicas` Limiters (one per gateway replica) × `callers` callers
//! each spend `tenants` tenants' budgets of tokens per window (a fixed window, scaled from
//! 1,000,000 tokens per minute), every call asking `max_tokens` and using a lognormal cost
//! (mean 800, p99 8,000, at most a context window), its call lasting 20 ms + 20 µs per token.
//! A denied caller waits the decision's `retry_after` (plus up to 10 ms of jitter).
//!
//! Two policies: `Settle` reserves `max_tokens` and settles at the real cost (the unused part
//! back, the excess charged into debt); `MaxTokens` is what a plain check forces today: a check
//! of `max_tokens`, never corrected. Tokens are counted in the window the call was admitted in;
//! only the windows wholly inside the run count.

use crate::lognormal;
use anyhow::{ensure, Context as _};
use clusterlimit::{Algorithm, Limiter, Quota, RateLimit};
use std::future::Future;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The scenario's sizes.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub replicas: usize,
    pub callers: usize,
    pub tenants: usize,
    pub window: Duration,
    /// Tokens per tenant per window.
    pub budget: u64,
    /// Windows measured.
    pub windows: u64,
    pub max_tokens: u64,
}

/// How a gateway spends a budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    Settle,
    MaxTokens,
}

impl Policy {
    pub const ALL: [Policy; 2] = [Policy::Settle, Policy::MaxTokens];

    pub fn label(self) -> &'static str {
        match self {
            Policy::Settle => "reserve max_tokens, settle",
            Policy::MaxTokens => "check max_tokens (today)",
        }
    }
}

/// One admitted call.
struct Call {
    tenant: usize,
    window: u64,
    used: u64,
}

/// One tenant's windows.
#[derive(Debug, Default)]
pub struct TenantRow {
    /// Tokens used by the calls admitted in each measured window.
    pub used: Vec<u64>,
    /// Tokens counted at admission (`max_tokens` per call) in each.
    pub reserved: Vec<u64>,
    /// The largest `used − max_tokens` of one call (0: none above).
    pub overshoot: u64,
    /// Tokens used beyond `max_tokens`, summed.
    pub beyond: u64,
}

/// One policy on one store.
#[derive(Debug)]
pub struct LlmRun {
    pub policy: Policy,
    pub tenants: Vec<TenantRow>,
    pub calls: u64,
    pub denied: u64,
    /// Store requests per admitted call, keepalives apart.
    pub requests_per_call: f64,
    /// Denials answered by a Limiter without a store request.
    pub local_answers: u64,
    /// The denials' `retry_after`, sorted.
    pub retry_after: crate::stats::Samples,
}

/// Bound on one store call.
const CALL_BOUND: Duration = Duration::from_secs(10);

async fn bounded<T>(
    what: &str,
    f: impl Future<Output = clusterlimit::Result<T>>,
) -> anyhow::Result<T> {
    let r = tokio::time::timeout(CALL_BOUND, f)
        .await
        .with_context(|| format!("{what} took over 10 s"))?;
    r.with_context(|| what.to_string())
}

/// The fixed window (aligned to the Unix epoch) now.
fn window_now(window: Duration) -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    (now.as_nanos() / window.as_nanos()) as u64
}

/// When window `w` starts, as an `Instant`.
fn window_start(window: Duration, w: u64) -> Instant {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let at = window * w as u32;
    Instant::now() + at.saturating_sub(now)
}

pub async fn run(url: &str, s: &Scenario, policy: Policy) -> anyhow::Result<LlmRun> {
    let quota = Quota::new(s.budget, s.window).algorithm(Algorithm::FixedWindow);
    let mut replicas = Vec::new();
    for r in 0..s.replicas {
        let l = Limiter::builder(url)
            .owner(format!("replica-{r}"))
            .connect()
            .await
            .with_context(|| format!("connect to {url}"))?;
        let rl = l.rate_limit(&format!("llm-{policy:?}"), quota).await?;
        replicas.push((l, rl));
    }
    let before: Vec<_> = replicas.iter().map(|(l, _)| l.stats()).collect();
    let first = window_now(s.window) + 1;
    let last = first + s.windows - 1;
    let until = window_start(s.window, last + 1);
    let mut tasks = Vec::new();
    for (r, (_, rl)) in replicas.iter().enumerate() {
        for c in 0..s.callers {
            let caller = Caller {
                rl: rl.clone(),
                tenant: (r * s.callers + c) % s.tenants,
                policy,
                scenario: s.clone(),
                until,
                rng: fastrand::Rng::with_seed((r * 1000 + c) as u64),
            };
            tasks.push(tokio::spawn(caller.run()));
        }
    }
    let (mut calls, mut retries) = (Vec::new(), Vec::new());
    for t in tasks {
        let (c, r) = t.await.context("a caller panicked")??;
        calls.extend(c);
        retries.extend(r);
    }
    let (mut requests, mut local_answers) = (0, 0);
    for ((l, _), before) in replicas.into_iter().zip(before) {
        let spent = l.stats().since(&before);
        requests += spent.total();
        local_answers += spent.rate_local_answers;
        l.close().await?;
    }
    let admitted = calls.len() as u64;
    Ok(LlmRun {
        policy,
        tenants: tally(s, &calls, first..=last),
        calls: admitted,
        denied: retries.len() as u64,
        requests_per_call: requests as f64 / admitted.max(1) as f64,
        local_answers,
        retry_after: crate::stats::Samples::new(retries),
    })
}

/// Per tenant, the measured windows' tokens.
fn tally(s: &Scenario, calls: &[Call], windows: std::ops::RangeInclusive<u64>) -> Vec<TenantRow> {
    let n = (windows.end() - windows.start() + 1) as usize;
    let mut rows: Vec<TenantRow> = (0..s.tenants)
        .map(|_| TenantRow {
            used: vec![0; n],
            reserved: vec![0; n],
            ..TenantRow::default()
        })
        .collect();
    for c in calls {
        let row = &mut rows[c.tenant];
        let over = c.used.saturating_sub(s.max_tokens);
        row.overshoot = row.overshoot.max(over);
        row.beyond += over;
        if windows.contains(&c.window) {
            let i = (c.window - windows.start()) as usize;
            row.used[i] += c.used;
            row.reserved[i] += s.max_tokens;
        }
    }
    rows
}

/// One caller's loop.
struct Caller {
    rl: RateLimit,
    tenant: usize,
    policy: Policy,
    scenario: Scenario,
    until: Instant,
    rng: fastrand::Rng,
}

impl Caller {
    /// Calls until `until`: the admitted calls and the denials' `retry_after`.
    async fn run(mut self) -> anyhow::Result<(Vec<Call>, Vec<Duration>)> {
        let params = lognormal::parameters();
        let key = format!("tenant-{}", self.tenant);
        let max_tokens = self.scenario.max_tokens;
        let (mut calls, mut denied) = (Vec::new(), Vec::new());
        while Instant::now() < self.until {
            let window = window_now(self.scenario.window);
            let used = lognormal::draw(&mut self.rng, params);
            let retry_after = match self.policy {
                Policy::Settle => {
                    let call = bounded("reserve", self.rl.reserve(&key, max_tokens)).await?;
                    if call.allowed() {
                        llm_call(used).await;
                        bounded("settle", call.settle(used)).await?;
                        None
                    } else {
                        Some(call.decision().retry_after)
                    }
                }
                Policy::MaxTokens => {
                    let d = bounded("check", self.rl.check_n(&key, max_tokens)).await?;
                    if d.allowed {
                        llm_call(used).await;
                        None
                    } else {
                        Some(d.retry_after)
                    }
                }
            };
            match retry_after {
                None => calls.push(Call {
                    tenant: self.tenant,
                    window,
                    used,
                }),
                Some(after) => {
                    let after = after.context("a denial without retry_after")?;
                    denied.push(after);
                    self.wait(after).await?;
                }
            }
        }
        Ok((calls, denied))
    }

    /// Waits `after` (a denial has one) plus jitter, never past `until`.
    async fn wait(&mut self, after: Duration) -> anyhow::Result<()> {
        ensure!(
            after <= self.scenario.window * 10,
            "retry_after {after:?} is implausible"
        );
        let jitter = Duration::from_millis(self.rng.u64(0..=10));
        let wake = (Instant::now() + after + jitter).min(self.until);
        tokio::time::sleep_until(wake.into()).await;
        Ok(())
    }
}

/// The LLM answering: 20 ms + 20 µs per token.
async fn llm_call(tokens: u64) {
    tokio::time::sleep(Duration::from_millis(20) + Duration::from_micros(20 * tokens)).await;
}
