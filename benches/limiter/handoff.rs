//! Row 4: handoff latency. Two clients (own Limiters, own sessions) take turns on a semaphore
//! of capacity 1: while one holds, the other waits; the time from the holder's `release()` call
//! to the waiter's `acquire()` returning is one sample. Each turn also times one raw delete with
//! the same client library ("one write": the write a release is) and one raw notification
//! (delete → another raw client's watch fires, [`crate::notify`]), so the ratios compare figures
//! taken under the same load.

use crate::latency::Op;
use crate::notify::Notify;
use crate::stats::Samples;
use crate::stores::{client, close_all};
use anyhow::{bail, Context as _};
use clusterlimit::Semaphore;
use std::time::Duration;
use tokio::time::Instant;

/// Turns run before measuring (the waiter's first wait sets up its watch).
const WARMUP: usize = 5;
/// Bound on a handoff and on a waiter getting queued.
const STEP_BOUND: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub handoff: Samples,
    /// The holder's own `release()` in the same turns (its reply, not the waiter's grant).
    pub release: Samples,
    /// One raw delete per turn; empty on memory://.
    pub one_write: Samples,
    /// One raw delete → raw watcher notified per turn; empty on memory://.
    pub notify: Samples,
}

/// Raw clients of the store for the reference samples (none on memory://).
pub struct Raw {
    pub write: Op,
    pub notify: Notify,
}

pub async fn run(url: &str, mut raw: Option<Raw>, handoffs: usize) -> anyhow::Result<Outcome> {
    let (a, sa) = client(url, "handoff-a", "handoff", 1).await?;
    let (b, sb) = client(url, "handoff-b", "handoff", 1).await?;
    let observer = sa.clone();
    let mut holder = sa.acquire().await?;
    let mut next_waiter = sb;
    let mut other = sa;
    let mut out = [(); 4].map(|()| Vec::new());
    for turn in 0..WARMUP + handoffs {
        let sem = next_waiter.clone();
        let wait = tokio::spawn(async move {
            let r = sem.acquire().await;
            (Instant::now(), r)
        });
        wait_until_waiting(&observer, 1, STEP_BOUND).await?;
        let released = Instant::now();
        holder.release().await?;
        let release_returned = Instant::now();
        let (granted, permit) = tokio::time::timeout(STEP_BOUND, wait)
            .await
            .context("the waiter was not granted within 10 s of the release")?
            .context("the waiting task panicked")?;
        holder = permit?;
        if turn >= WARMUP {
            out[0].push(granted - released);
            out[1].push(release_returned - released);
            if let Some(raw) = raw.as_mut() {
                out[2].push(raw.write.once().await?.leave);
                out[3].push(raw.notify.once().await?);
            }
        }
        std::mem::swap(&mut next_waiter, &mut other);
    }
    holder.release().await?;
    close_all(&[a, b]).await?;
    let [handoff, release, one_write, notify] = out.map(Samples::new);
    Ok(Outcome {
        handoff,
        release,
        one_write,
        notify,
    })
}

/// Polls the semaphore's status until `n` requests wait (for at most `bound`), then gives the
/// last waiter a moment to register for its grant, so a release finds it waiting.
pub async fn wait_until_waiting(sem: &Semaphore, n: usize, bound: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + bound;
    for _ in 0..100_000 {
        if sem.status().await?.waiting >= n {
            tokio::time::sleep(Duration::from_millis(2)).await;
            return Ok(());
        }
        if Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    bail!(
        "{n} waiter(s) not queued on {} within {bound:?}",
        sem.name()
    )
}
