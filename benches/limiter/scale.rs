//! Row 6 (and the 500-waiter half of row 5): many waiters on one semaphore, and many
//! semaphores with one holder each. Heap bytes come from the counting allocator
//! ([`crate::alloc`]); request counts from the Limiters' own counters.

use crate::alloc::live_bytes;
use crate::handoff::wait_until_waiting;
use crate::stats::Samples;
use crate::stores::{client, close_all, limiter, total_stats};
use anyhow::Context as _;
use clusterlimit::{Permit, Semaphore};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Bound on queueing every waiter (hundreds of sessions on a 2-core machine).
const QUEUE_BOUND: Duration = Duration::from_secs(120);
/// Bound on one handoff.
const STEP_BOUND: Duration = Duration::from_secs(10);
/// Time after a grant in which any other client reacting to the release (re-reads, a herd)
/// would show in the counters.
const SETTLE: Duration = Duration::from_millis(20);

/// Heap bytes per waiting `acquire()` when `n` of them wait in one Limiter.
pub async fn bytes_per_waiter(url: &str, n: usize) -> anyhow::Result<f64> {
    let name = "one-limiter-waiters";
    let (holder, held_sem) = client(url, "holder", name, 1).await?;
    let held = held_sem.acquire().await?;
    let (waiters, sem) = client(url, "waiters", name, 1).await?;
    // A first wait sets up what a Limiter needs once per semaphore (the etcd watch): not
    // a per-waiter cost.
    let mut tasks = vec![spawn_acquire(&sem)];
    wait_until_waiting(&held_sem, 1, QUEUE_BOUND).await?;
    let before = live_bytes();
    tasks.extend((0..n).map(|_| spawn_acquire(&sem)));
    wait_until_waiting(&held_sem, n + 1, QUEUE_BOUND).await?;
    let per_waiter = (live_bytes() - before) as f64 / n as f64;
    // Closing ends every wait at once (they fail with Closed) and removes the entries.
    waiters.close().await?;
    for t in tasks {
        let _ = tokio::time::timeout(STEP_BOUND, t)
            .await
            .context("a wait outlived its closed Limiter")?;
    }
    held.release().await?;
    holder.close().await?;
    Ok(per_waiter)
}

fn spawn_acquire(sem: &Semaphore) -> tokio::task::JoinHandle<clusterlimit::Result<Permit>> {
    let sem = sem.clone();
    tokio::spawn(async move { sem.acquire().await })
}

#[derive(Debug, Clone, Default)]
pub struct ManyWaiters {
    /// Connecting `n` clients and queueing them.
    pub setup: Duration,
    /// Heap bytes per waiting client (its Limiter, session, connection and wait).
    pub bytes_per_client: f64,
    /// Release → the next waiter's acquire returning, with `n` others waiting.
    pub handoff: Samples,
    /// Requests of all clients from a release until its grant settled, averaged and at most.
    pub requests_per_release: f64,
    pub max_requests_per_release: u64,
    /// Requests of a client joining the tail of the queue behind `n` waiters.
    pub requests_per_enqueue: f64,
}

/// A grant: which client, when its acquire returned, and what it returned.
type Grant = (usize, Instant, clusterlimit::Result<Permit>);

/// `n` clients, each its own Limiter, wait on a semaphore of capacity 1; then `handoffs`
/// times the holder releases, the next in line is granted, and the old holder queues again at
/// the tail, so `n` keep waiting throughout.
pub async fn many_waiters(url: &str, n: usize, handoffs: usize) -> anyhow::Result<ManyWaiters> {
    let name = "many-waiters";
    // Polls status for the setup; not counted with the clients.
    let (observer, observed) = client(url, "observer", name, 1).await?;
    let (first, first_sem) = client(url, "client-0", name, 1).await?;
    let mut holder = (0, first_sem.acquire().await?);
    let (tx, mut rx) = mpsc::unbounded_channel::<Grant>();

    let started = Instant::now();
    let bytes_before = live_bytes();
    let mut limiters = vec![first];
    let mut sems = vec![first_sem];
    for i in 1..=n {
        let (l, s) = client(url, &format!("client-{i}"), name, 1).await?;
        spawn_wait(i, &s, &tx);
        limiters.push(l);
        sems.push(s);
    }
    wait_until_waiting(&observed, n, QUEUE_BOUND).await?;
    let mut out = ManyWaiters {
        setup: started.elapsed(),
        bytes_per_client: (live_bytes() - bytes_before) as f64 / n as f64,
        ..ManyWaiters::default()
    };

    let (mut handoff, mut release_costs, mut enqueue_costs) = (vec![], vec![], vec![]);
    for _ in 0..handoffs {
        let before = total_stats(&limiters);
        let released = Instant::now();
        holder.1.release().await?;
        let (next, granted, permit) = tokio::time::timeout(STEP_BOUND, rx.recv())
            .await
            .context("no waiter granted within 10 s of a release")?
            .context("every wait ended")?;
        let permit = permit.with_context(|| format!("client {next}'s acquire failed"))?;
        tokio::time::sleep(SETTLE).await;
        handoff.push(granted - released);
        release_costs.push(total_stats(&limiters).since(&before).total());

        let old = holder.0;
        let before = limiters[old].stats();
        spawn_wait(old, &sems[old], &tx);
        wait_until_waiting(&observed, n, QUEUE_BOUND).await?;
        enqueue_costs.push(limiters[old].stats().since(&before).total());
        holder = (next, permit);
    }
    out.handoff = Samples::new(handoff);
    out.requests_per_release = mean(&release_costs);
    out.max_requests_per_release = release_costs.iter().copied().max().unwrap_or(0);
    out.requests_per_enqueue = mean(&enqueue_costs);

    drop(holder);
    limiters.push(observer);
    close_all(&limiters).await?;
    Ok(out)
}

fn spawn_wait(client: usize, sem: &Semaphore, grants: &mpsc::UnboundedSender<Grant>) {
    let (sem, grants) = (sem.clone(), grants.clone());
    tokio::spawn(async move {
        let r = sem.acquire().await;
        let _ = grants.send((client, Instant::now(), r));
    });
}

fn mean(v: &[u64]) -> f64 {
    v.iter().sum::<u64>() as f64 / v.len().max(1) as f64
}

#[derive(Debug, Clone, Default)]
pub struct ManySemaphores {
    /// Creating `n` semaphores and taking one permit of each, one after the other.
    pub setup: Duration,
    pub requests_per_semaphore: f64,
    pub bytes_per_semaphore: f64,
    /// While all are held: session keepalive requests per second, and every other request.
    pub window: Duration,
    pub keepalives_per_second: f64,
    pub other_requests: u64,
}

/// One Limiter creates `n` semaphores and holds one permit in each, then sits for `window`.
pub async fn many_semaphores(
    url: &str,
    n: usize,
    window: Duration,
) -> anyhow::Result<ManySemaphores> {
    let l = limiter(url, "many-semaphores").await?;
    let (bytes_before, before, started) = (live_bytes(), l.stats(), Instant::now());
    let mut permits = Vec::with_capacity(n);
    for i in 0..n {
        let sem = l.semaphore(&format!("sem-{i}"), 1).await?;
        permits.push(sem.acquire().await?);
    }
    let setup = started.elapsed();
    let setup_requests = l.stats().since(&before).total();
    let bytes = live_bytes() - bytes_before;

    let before = l.stats();
    tokio::time::sleep(window).await;
    let steady = l.stats().since(&before);
    l.close().await?;
    drop(permits);
    Ok(ManySemaphores {
        setup,
        requests_per_semaphore: setup_requests as f64 / n as f64,
        bytes_per_semaphore: bytes as f64 / n as f64,
        window,
        keepalives_per_second: steady.lease as f64 / window.as_secs_f64(),
        other_requests: steady.total(),
    })
}
