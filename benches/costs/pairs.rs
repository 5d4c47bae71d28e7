//! Row 1: reserve + settle beside a plain check of the same cost, one caller in sequence on a
//! cached key of a quota it never exhausts. Each kind has its own Limiter (so its counters are
//! its own) and key; one unmeasured batch each, then rounds of a batch of each, the order
//! rotating, so a load change on this shared machine hits every kind alike.

use crate::stats::Samples;
use anyhow::{ensure, Context as _};
use clusterlimit::{Limiter, Quota, RateLimit};
use std::time::{Duration, Instant};

/// The estimate (and a check's cost).
pub const ESTIMATE: u64 = 100;
/// A quota no sequential loop exhausts: every check is admitted. Per day, so that what a check
/// takes (100 × 86.4 µs) outlasts the next call and a refund has something to give back (on a
/// per-second quota the key is full again before the settlement, and a refund is a no-op).
const ROOMY: u64 = 1_000_000_000;
const DAY: Duration = Duration::from_secs(86_400);
/// Bound on one call: a healthy one takes milliseconds.
const CALL_BOUND: Duration = Duration::from_secs(10);

/// What is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `check_n(ESTIMATE)`: the baseline.
    Check,
    /// `reserve(ESTIMATE)`, settled at the estimate, below it (half) and above it (1.5×).
    Equal,
    Lower,
    Higher,
}

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::Check, Kind::Equal, Kind::Lower, Kind::Higher];

    pub fn label(self) -> &'static str {
        match self {
            Kind::Check => "check_n(100) (baseline)",
            Kind::Equal => "reserve(100) + settle(100)",
            Kind::Lower => "reserve(100) + settle(50)",
            Kind::Higher => "reserve(100) + settle(150)",
        }
    }

    async fn once(self, rl: &RateLimit, key: &str) -> anyhow::Result<Duration> {
        let started = Instant::now();
        let actual = match self {
            Kind::Check => {
                let d = rl.check_n(key, ESTIMATE).await.context("check")?;
                ensure!(d.allowed, "a roomy check was denied: {d:?}");
                return Ok(started.elapsed());
            }
            Kind::Equal => ESTIMATE,
            Kind::Lower => ESTIMATE / 2,
            Kind::Higher => ESTIMATE * 3 / 2,
        };
        let call = rl.reserve(key, ESTIMATE).await.context("reserve")?;
        ensure!(call.allowed(), "a roomy reservation was denied");
        call.settle(actual).await.context("settle")?;
        Ok(started.elapsed())
    }
}

/// One kind's figures on one store.
#[derive(Debug)]
pub struct PairRow {
    pub kind: Kind,
    pub latency: Samples,
    /// Store requests per pair (or per check), keepalives apart.
    pub requests: f64,
}

/// Row 1 on the store at `url`.
pub async fn measure(url: &str, rounds: usize, batch: usize) -> anyhow::Result<Vec<PairRow>> {
    let mut each = Vec::new();
    for kind in Kind::ALL {
        let l = Limiter::builder(url)
            .owner(format!("costs-{kind:?}"))
            .connect()
            .await
            .with_context(|| format!("connect to {url}"))?;
        let quota = Quota::new(ROOMY, DAY);
        let rl = l.rate_limit("costs-pairs", quota).await?;
        batch_of(kind, &rl, batch).await?; // warm-up: the key cached
        let before = l.stats();
        each.push((kind, l, rl, before, Vec::new()));
    }
    for round in 0..rounds {
        for k in 0..each.len() {
            let i = (round + k) % each.len();
            let (kind, _, rl, _, samples) = &mut each[i];
            samples.extend(batch_of(*kind, rl, batch).await?);
        }
    }
    let n = (rounds * batch).max(1) as f64;
    let mut rows = Vec::new();
    for (kind, l, _, before, samples) in each {
        let requests = l.stats().since(&before).total() as f64 / n;
        l.close().await?;
        rows.push(PairRow {
            kind,
            latency: Samples::new(samples),
            requests,
        });
    }
    Ok(rows)
}

/// `n` of `kind` one after another on its own key: the time of each.
async fn batch_of(kind: Kind, rl: &RateLimit, n: usize) -> anyhow::Result<Vec<Duration>> {
    let key = format!("{kind:?}");
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let d = tokio::time::timeout(CALL_BOUND, kind.once(rl, &key))
            .await
            .context("a call took over 10 s")??;
        out.push(d);
    }
    Ok(out)
}
