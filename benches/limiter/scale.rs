//! Row 6 (and the 500-waiter half of row 5): many waiters on one semaphore, and many
//! semaphores with one holder each. Heap bytes come from the counting allocator
//! ([`crate::alloc`]); request counts from the Limiters' own counters.

use crate::alloc::{settled_live_bytes, track};
use crate::handoff::wait_until_waiting;
use crate::stats::Samples;
use crate::stores::{client, close_all, limiter, total_stats};
use anyhow::Context as _;
use clusterlimit::{Limiter, Permit, RequestStats, Semaphore};
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

/// Where the waiters live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Every waiter is its own Limiter (own session, own connection), as separate processes
    /// would be, except that here one process serves all of them.
    OwnLimiter,
    /// Every waiter is an `acquire()` of one shared Limiter.
    OneLimiter,
}

#[derive(Debug, Clone, Default)]
pub struct ManyWaiters {
    /// Connecting the clients (for `OwnLimiter`) and queueing them.
    pub setup: Duration,
    /// Heap bytes per waiting client (for `OwnLimiter`: its Limiter, session and connection
    /// too).
    pub bytes_per_waiter: f64,
    /// Release → the next waiter's acquire returning, with `n` others waiting.
    pub handoff: Samples,
    /// Requests of all clients from a release until its grant settled, mean and most.
    pub requests_per_release: f64,
    pub max_requests_per_release: u64,
    /// Requests of a client joining the tail of the queue, mean; one-time watch setups apart.
    pub requests_per_enqueue: f64,
    /// Watches created while joining (a Limiter's first wait on a semaphore sets one up).
    pub watches_per_enqueue: f64,
}

/// A grant: which client, when its acquire returned, and what it returned.
type Grant = (usize, Instant, clusterlimit::Result<Permit>);

/// The clients of a run: a semaphore handle each, and the Limiter it belongs to.
struct Clients {
    limiters: Vec<Limiter>,
    sems: Vec<Semaphore>,
    limiter_of: Vec<usize>,
}

/// `n` waiters on a semaphore of capacity 1 behind one holder (client 0, its own Limiter);
/// then `handoffs` times the holder releases, the next in line is granted, and the old holder
/// queues again at the tail, so `n` keep waiting throughout.
pub async fn many_waiters(
    url: &str,
    layout: Layout,
    n: usize,
    handoffs: usize,
) -> anyhow::Result<ManyWaiters> {
    let name = match layout {
        Layout::OwnLimiter => "waiters-own-limiter",
        Layout::OneLimiter => "waiters-one-limiter",
    };
    // Polls status for the setup; not counted with the clients.
    let (observer, observed) = client(url, "observer", name, 1).await?;
    let (first, first_sem) = client(url, "client-0", name, 1).await?;
    let mut holder = (0, first_sem.acquire().await?);
    let mut c = Clients {
        limiters: vec![first],
        sems: vec![first_sem],
        limiter_of: vec![0],
    };
    let (tx, mut rx) = mpsc::unbounded_channel::<Grant>();
    let heap = track();
    // Client 1 queues first, outside the heap window: what a Limiter sets up once per semaphore
    // (the etcd watch) is not a per-waiter cost.
    let started = Instant::now();
    add_client(&mut c, url, name, layout).await?;
    spawn_wait(1, &c.sems[1], &tx);
    wait_until_waiting(&observed, 1, QUEUE_BOUND).await?;
    let bytes_before = settled_live_bytes().await;
    for i in 2..=n {
        add_client(&mut c, url, name, layout).await?;
        spawn_wait(i, &c.sems[i], &tx);
    }
    wait_until_waiting(&observed, n, QUEUE_BOUND).await?;
    let setup = started.elapsed();
    let bytes = settled_live_bytes().await - bytes_before;
    drop(heap);

    let (mut handoff, mut release_costs, mut enqueue_costs) = (vec![], vec![], vec![]);
    for _ in 0..handoffs {
        let before = total_stats(&c.limiters);
        let released = Instant::now();
        holder.1.release().await?;
        let (next, granted, permit) = tokio::time::timeout(STEP_BOUND, rx.recv())
            .await
            .context("no waiter granted within 10 s of a release")?
            .context("every wait ended")?;
        let permit = permit.with_context(|| format!("client {next}'s acquire failed"))?;
        tokio::time::sleep(SETTLE).await;
        handoff.push(granted - released);
        release_costs.push(total_stats(&c.limiters).since(&before).total());

        let old = holder.0;
        let old_limiter = &c.limiters[c.limiter_of[old]];
        let before = old_limiter.stats();
        spawn_wait(old, &c.sems[old], &tx);
        wait_until_waiting(&observed, n, QUEUE_BOUND).await?;
        enqueue_costs.push(old_limiter.stats().since(&before));
        holder = (next, permit);
    }
    drop(holder);
    c.limiters.push(observer);
    close_all(&c.limiters).await?;
    Ok(ManyWaiters {
        setup,
        bytes_per_waiter: bytes as f64 / n.saturating_sub(1).max(1) as f64,
        handoff: Samples::new(handoff),
        requests_per_release: mean(release_costs.iter().copied()),
        max_requests_per_release: release_costs.iter().copied().max().unwrap_or(0),
        requests_per_enqueue: mean(enqueue_costs.iter().map(|s| s.total() - s.watch)),
        watches_per_enqueue: mean(enqueue_costs.iter().map(|s: &RequestStats| s.watch)),
    })
}

/// The next client: a Limiter of its own, or another handle on the shared one (made with the
/// first waiter).
async fn add_client(c: &mut Clients, url: &str, name: &str, layout: Layout) -> anyhow::Result<()> {
    let i = c.sems.len();
    if layout == Layout::OneLimiter && i > 1 {
        c.sems.push(c.sems[1].clone());
        c.limiter_of.push(1);
        return Ok(());
    }
    let (l, s) = client(url, &format!("client-{i}"), name, 1).await?;
    c.limiter_of.push(c.limiters.len());
    c.limiters.push(l);
    c.sems.push(s);
    Ok(())
}

fn spawn_wait(client: usize, sem: &Semaphore, grants: &mpsc::UnboundedSender<Grant>) {
    let (sem, grants) = (sem.clone(), grants.clone());
    tokio::spawn(async move {
        let r = sem.acquire().await;
        let _ = grants.send((client, Instant::now(), r));
    });
}

fn mean(v: impl Iterator<Item = u64>) -> f64 {
    let (sum, count) = v.fold((0, 0), |(s, c), x| (s + x, c + 1));
    sum as f64 / count.max(1) as f64
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
    let heap = track();
    let bytes_before = settled_live_bytes().await;
    let (before, started) = (l.stats(), Instant::now());
    let mut permits = Vec::with_capacity(n);
    for i in 0..n {
        let sem = l.semaphore(&format!("sem-{i}"), 1).await?;
        permits.push(sem.acquire().await?);
    }
    let setup = started.elapsed();
    let setup_requests = l.stats().since(&before).total();
    let bytes = settled_live_bytes().await - bytes_before;
    drop(heap);

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
