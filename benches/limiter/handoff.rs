//! Row 4: handoff latency. Two clients (own Limiters, own sessions) take turns on a semaphore
//! of capacity 1: while one holds, the other waits; the time from the holder's `release()` call
//! to the waiter's `acquire()` returning is one sample. Each turn also times one raw delete with
//! the same client library ("one write": the write a release is) and one raw notification
//! (delete → another raw client's watch fires, [`crate::notify`]), so the ratios compare figures
//! taken under the same load.

use crate::latency::Op;
use crate::notify::{Notify, Spy};
use crate::stats::Samples;
use crate::stores::{client, close_all};
use anyhow::{bail, Context as _};
use clusterlimit::Semaphore;
use std::time::{Duration, Instant};

/// The semaphore the turns are taken on.
pub const SEMAPHORE: &str = "handoff";
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
    /// With a spy (a raw watcher of the semaphore): release → the spy sees the delete, and
    /// the spy sees it → the waiter's acquire returns (negative: zero).
    pub spy_sees: Samples,
    pub grant_after_spy: Samples,
}

/// Raw clients of the store for the reference samples (none on memory://).
pub enum Raw {
    /// A raw delete and a raw notification after each turn (boxed: raw clients are large).
    References { write: Box<Op>, notify: Box<Notify> },
    /// A raw watcher of the semaphore during the turns.
    Spy(Spy),
}

pub async fn run(url: &str, mut raw: Option<Raw>, handoffs: usize) -> anyhow::Result<Outcome> {
    let (a, sa) = client(url, "handoff-a", SEMAPHORE, 1).await?;
    let (b, sb) = client(url, "handoff-b", SEMAPHORE, 1).await?;
    let observer = sa.clone();
    let mut holder = sa.acquire().await?;
    let mut next_waiter = sb;
    let mut other = sa;
    let mut out = [(); 6].map(|()| Vec::new());
    for turn in 0..WARMUP + handoffs {
        let sem = next_waiter.clone();
        let wait = tokio::spawn(async move {
            let r = sem.acquire().await;
            (Instant::now(), r)
        });
        wait_until_waiting(&observer, 1, STEP_BOUND).await?;
        if let Some(Raw::Spy(spy)) = raw.as_mut() {
            spy.clear();
        }
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
            match raw.as_mut() {
                Some(Raw::References { write, notify }) => {
                    out[2].push(write.once().await?.leave);
                    out[3].push(notify.once().await?);
                }
                Some(Raw::Spy(spy)) => {
                    let seen = spy.next_delete().await?;
                    out[4].push(seen.saturating_duration_since(released));
                    out[5].push(granted.saturating_duration_since(seen));
                }
                None => {}
            }
        }
        std::mem::swap(&mut next_waiter, &mut other);
    }
    holder.release().await?;
    close_all(&[a, b]).await?;
    let [handoff, release, one_write, notify, spy_sees, grant_after_spy] = out.map(Samples::new);
    Ok(Outcome {
        handoff,
        release,
        one_write,
        notify,
        spy_sees,
        grant_after_spy,
    })
}

/// Polls the semaphore's status until `n` requests wait (for at most `bound`), then gives the
/// last waiter a moment to register for its grant, so a release finds it waiting.
pub async fn wait_until_waiting(sem: &Semaphore, n: usize, bound: Duration) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + bound;
    for _ in 0..100_000 {
        if sem.status().await?.waiting >= n {
            tokio::time::sleep(Duration::from_millis(2)).await;
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    bail!(
        "{n} waiter(s) not queued on {} within {bound:?}",
        sem.name()
    )
}
