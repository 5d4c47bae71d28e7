//! Row 5, "the existing semaphore rows unchanged when flows are not used": an uncontended
//! acquire + release on a plain semaphore and on a fair one opened with `Classes::single()` and
//! acquired with no flow, class or weight, capacity 8, each from its own Limiter, in
//! interleaved rounds (the order swapped every round) after one unmeasured batch each; the
//! time of each pair and the store requests it took (the Limiters' counters).

use crate::stats::Samples;
use clusterlimit::fair::Classes;
use clusterlimit::{Limiter, Semaphore};
use std::time::{Duration, Instant};

const CAPACITY: u32 = 8;

/// Row 5 on one store.
#[derive(Debug, Default)]
pub struct Plain {
    pub plain: Samples,
    pub fair: Samples,
    /// Store requests per pair (keepalives apart).
    pub plain_requests: f64,
    pub fair_requests: f64,
}

pub async fn measure(url: &str, rounds: usize, pairs: usize) -> anyhow::Result<Plain> {
    let (pl, fl) = (connect(url, "plain").await?, connect(url, "fair").await?);
    let plain = pl.semaphore("plain-pairs", CAPACITY).await?;
    let fair = fl
        .fair_semaphore("fair-pairs", CAPACITY, Classes::single())
        .await?;
    pairs_of(&plain, pairs).await?;
    pairs_of(&fair, pairs).await?;
    let (pl0, fl0) = (pl.stats(), fl.stats());
    let (mut p, mut f) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        if round % 2 == 0 {
            p.extend(pairs_of(&plain, pairs).await?);
            f.extend(pairs_of(&fair, pairs).await?);
        } else {
            f.extend(pairs_of(&fair, pairs).await?);
            p.extend(pairs_of(&plain, pairs).await?);
        }
    }
    let n = (rounds * pairs).max(1) as f64;
    let out = Plain {
        plain_requests: pl.stats().since(&pl0).total() as f64 / n,
        fair_requests: fl.stats().since(&fl0).total() as f64 / n,
        plain: Samples::new(p),
        fair: Samples::new(f),
    };
    pl.close().await?;
    fl.close().await?;
    Ok(out)
}

async fn connect(url: &str, owner: &str) -> anyhow::Result<Limiter> {
    Ok(Limiter::builder(url).owner(owner).connect().await?)
}

/// `n` acquire + release pairs one after another: the time of each.
async fn pairs_of(sem: &Semaphore, n: usize) -> anyhow::Result<Vec<Duration>> {
    let mut took = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        sem.acquire().await?.release().await?;
        took.push(t.elapsed());
    }
    Ok(took)
}
