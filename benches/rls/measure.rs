//! The measurements: the library's `check_n` and ShouldRateLimit through the sidecar, one
//! caller interleaved in rounds, then many callers; and the answers while the store is dead.

use crate::plan::Plan;
use crate::server::{self, Client};
use crate::stats::Samples;
use anyhow::{bail, Context as _};
use clusterlimit::RateLimit;
use std::future::Future;
use std::time::{Duration, Instant};

/// One caller in sequence: both paths on the same store, same rounds.
#[derive(Debug, Default)]
pub struct Sequential {
    pub library: Samples,
    pub rls: Samples,
}

/// Many callers at once on one path.
#[derive(Debug, Default)]
pub struct Concurrent {
    pub calls: usize,
    pub took: Duration,
    pub latency: Samples,
}

impl Concurrent {
    pub fn per_second(&self) -> f64 {
        let s = self.took.as_secs_f64();
        if s > 0.0 {
            self.calls as f64 / s
        } else {
            0.0
        }
    }
}

/// One policy's answers after the store died.
#[derive(Debug, Default)]
pub struct Down {
    pub policy: String,
    /// The first call after the death (it waits for the store timeout).
    pub first: Duration,
    /// The calls after it, and the time they took together.
    pub rest: Samples,
    pub span: Duration,
}

/// One library check of a fresh key, which must be admitted.
pub async fn check(rl: &RateLimit) -> anyhow::Result<()> {
    let d = rl
        .check_n(&server::fresh_key(), 1)
        .await
        .context("check_n")?;
    if !d.allowed {
        bail!("check_n denied a fresh key: {d:?}");
    }
    Ok(())
}

/// Warmup, then `plan.rounds` rounds of `plan.batch` calls per path, the order alternating.
pub async fn sequential(plan: &Plan, rl: &RateLimit, c: &mut Client) -> anyhow::Result<Sequential> {
    for _ in 0..plan.warmup {
        check(rl).await?;
        server::should_rate_limit(c).await?;
    }
    let (mut lib, mut rls) = (Vec::new(), Vec::new());
    for round in 0..plan.rounds {
        for path in [round % 2, 1 - round % 2] {
            for _ in 0..plan.batch {
                let t = Instant::now();
                if path == 0 {
                    check(rl).await?;
                    lib.push(t.elapsed());
                } else {
                    server::should_rate_limit(c).await?;
                    rls.push(t.elapsed());
                }
            }
        }
    }
    Ok(Sequential {
        library: Samples::new(lib),
        rls: Samples::new(rls),
    })
}

/// `callers` tasks calling `call` in a loop for `run_for` (each at most `MAX_CALLS` times).
pub async fn concurrent<F, Fut>(
    callers: usize,
    run_for: Duration,
    call: F,
) -> anyhow::Result<Concurrent>
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: Future<Output = anyhow::Result<()>> + Send,
{
    const MAX_CALLS: usize = 1_000_000;
    let start = Instant::now();
    let deadline = start + run_for;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..callers {
        let call = call.clone();
        tasks.spawn(async move {
            let mut took = Vec::new();
            while Instant::now() < deadline && took.len() < MAX_CALLS {
                let t = Instant::now();
                call().await?;
                took.push(t.elapsed());
            }
            anyhow::Ok(took)
        });
    }
    let mut all = Vec::new();
    while let Some(done) = tasks.join_next().await {
        all.extend(done.context("a caller panicked")??);
    }
    Ok(Concurrent {
        calls: all.len(),
        took: start.elapsed(),
        latency: Samples::new(all),
    })
}

/// The store is already dead: the first call timed alone, then `n` more.
pub async fn down(policy: &str, c: &mut Client, n: usize) -> anyhow::Result<Down> {
    let t = Instant::now();
    server::should_rate_limit(c)
        .await
        .with_context(|| format!("{policy}: the first answer after the store died"))?;
    let first = t.elapsed();
    let mut rest = Vec::with_capacity(n);
    let started = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        server::should_rate_limit(c)
            .await
            .with_context(|| format!("{policy}: an answer while the store is down"))?;
        rest.push(t.elapsed());
    }
    Ok(Down {
        policy: policy.to_string(),
        first,
        rest: Samples::new(rest),
        span: started.elapsed(),
    })
}
