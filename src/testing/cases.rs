//! The contract cases: what a cluster-wide semaphore means (docs/design.md describes it), each
//! an async function generic over the [`Harness`] and run on every backend by
//! [`contract_suite!`](crate::contract_suite). They use the public API only, and panic (through
//! `assert!`) on the first broken promise.
//!
//! Over 600 lines by choice: it is a catalogue of independent cases (each readable alone, none
//! calling another) that a backend author reads as one contract.

use super::harness::{Harness, LimiterOptions, SHORT_TTL};
use super::util::{
    assert_err, assert_still_waiting, connect, join, ms, open, spawn_acquire, wait_entries,
    wait_status, within, Rng, PROMPT,
};
use crate::{AcquireOptions, Announcement, Error, Limiter, Permit, Semaphore};
use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// Bound on "granted at once" after the blocker went away.
const ONE_SEC: Duration = Duration::from_secs(1);

/// A Limiter with the default session TTL (cases that do not depend on expiry).
async fn limiter<H: Harness>(h: &H) -> Limiter {
    connect(h, LimiterOptions::new()).await
}

/// A Limiter with the 2 s session TTL (cases that depend on expiry).
async fn short_ttl_limiter<H: Harness>(h: &H) -> Limiter {
    connect(h, LimiterOptions::new().session_ttl(SHORT_TTL)).await
}

async fn create(limiter: &Limiter, name: &str, capacity: u32) -> Semaphore {
    within("semaphore()", PROMPT, limiter.semaphore(name, capacity))
        .await
        .unwrap_or_else(|e| panic!("semaphore({name:?}, {capacity}): {e}"))
}

/// Acquires `permits` that must be granted promptly (nothing in the way).
async fn take(sem: &Semaphore, permits: u32) -> Permit {
    within("acquire", PROMPT, sem.acquire_many(permits))
        .await
        .unwrap_or_else(|e| panic!("acquire_many({permits}) on {:?}: {e}", sem.name()))
}

async fn release(permit: Permit) {
    within("release", PROMPT, permit.release())
        .await
        .expect("release");
}

fn holder_tokens(st: &crate::Status) -> Vec<u64> {
    st.holders.iter().map(|x| x.fencing_token).collect()
}

// 1 ---------------------------------------------------------------------------------------------

/// Capacity 3, 8 separate Limiters × 10 acquire/hold/release cycles with weights 1–2: the weight
/// held at once (counted in-process between acquire returning and release starting) never
/// exceeds 3, and every cycle finishes.
pub async fn safety_under_load<H: Harness>(h: &H) {
    const CAPACITY: u32 = 3;
    const CLIENTS: u64 = 8;
    const CYCLES: usize = 10;
    let held = Arc::new(AtomicU32::new(0));
    let max_seen = Arc::new(AtomicU32::new(0));
    let mut tasks = Vec::new();
    let mut observer = None;
    for c in 0..CLIENTS {
        let l = limiter(h).await;
        let sem = create(&l, "load", CAPACITY).await;
        observer.get_or_insert_with(|| sem.clone());
        let (held, max_seen) = (held.clone(), max_seen.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng::new(c + 1);
            for cycle in 0..CYCLES {
                let w = 1 + rng.below(2) as u32;
                let permit = sem.acquire_many(w).await.unwrap_or_else(|e| {
                    panic!("client {c} cycle {cycle}: acquire_many({w}) failed: {e}")
                });
                let now = held.fetch_add(w, SeqCst) + w;
                max_seen.fetch_max(now, SeqCst);
                assert!(
                    now <= CAPACITY,
                    "client {c} cycle {cycle}: {now} permits held at once, capacity {CAPACITY}"
                );
                tokio::time::sleep(ms(rng.below(6))).await;
                assert!(!permit.is_lost(), "client {c} cycle {cycle}: permit lost");
                held.fetch_sub(w, SeqCst);
                permit
                    .release()
                    .await
                    .unwrap_or_else(|e| panic!("client {c} cycle {cycle}: release failed: {e}"));
            }
            drop(l);
        }));
    }
    within("all load cycles finish", Duration::from_secs(45), async {
        for (c, t) in tasks.into_iter().enumerate() {
            join(&format!("client {c}"), Duration::from_secs(45), t).await;
        }
    })
    .await;
    assert_eq!(held.load(SeqCst), 0);
    let max = max_seen.load(SeqCst);
    assert!(
        max >= 2,
        "never more than {max} permit(s) held at once: the load did not overlap"
    );
    let sem = observer.expect("at least one client");
    wait_status(&sem, "load semaphore idle", PROMPT, |st| {
        st.used == 0 && st.waiting == 0
    })
    .await;
    wait_entries(h, "load", 0, PROMPT).await;
}

// 2 ---------------------------------------------------------------------------------------------

/// Grants follow request order across Limiters; a heavy request at the head blocks a light one
/// behind it even when the light one would fit.
pub async fn fifo_order<H: Harness>(h: &H) {
    const WAITERS: usize = 5;
    let main = limiter(h).await;
    let sem = create(&main, "fifo", 1).await;
    let gate = take(&sem, 1).await;
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..WAITERS {
        let l = limiter(h).await;
        let s = open(&l, "fifo").await;
        let order = order.clone();
        waiters.push(tokio::spawn(async move {
            let p = s
                .acquire()
                .await
                .unwrap_or_else(|e| panic!("waiter {i}: {e}"));
            // Capacity 1: recorded while holding, so the record order is the grant order.
            order.lock().unwrap().push(i);
            tokio::time::sleep(ms(3)).await;
            p.release()
                .await
                .unwrap_or_else(|e| panic!("waiter {i}: release: {e}"));
        }));
        wait_status(&sem, &format!("waiter {i} queued"), PROMPT, |st| {
            st.waiting == i + 1
        })
        .await;
    }
    release(gate).await;
    for (i, w) in waiters.into_iter().enumerate() {
        join(&format!("waiter {i} granted"), PROMPT, w).await;
    }
    assert_eq!(
        *order.lock().unwrap(),
        (0..WAITERS).collect::<Vec<_>>(),
        "grant order differs from request order"
    );

    // Head-of-line blocking: capacity 3, 2 held, so 1 permit is free.
    let sem = create(&main, "fifo-weighted", 3).await;
    let two = take(&sem, 2).await;
    let heavy_sem = open(&limiter(h).await, "fifo-weighted").await;
    let heavy = spawn_acquire(&heavy_sem, 3);
    wait_status(&sem, "weight-3 request queued", PROMPT, |st| {
        st.waiting == 1
    })
    .await;
    let light_sem = open(&limiter(h).await, "fifo-weighted").await;
    let light = spawn_acquire(&light_sem, 1);
    let st = wait_status(&sem, "weight-1 request queued", PROMPT, |st| {
        st.waiting == 2
    })
    .await;
    assert_eq!(
        (st.capacity, st.used, st.waiting_permits),
        (3, 2, 4),
        "{st:?}"
    );
    assert_still_waiting("weight-1 request behind a weight-3 head", &light, ms(300)).await;
    assert!(
        !heavy.is_finished(),
        "weight-3 request granted with 2 of 3 held"
    );

    release(two).await;
    let heavy_permit = join("weight-3 granted", PROMPT, heavy)
        .await
        .expect("weight-3 request");
    assert_eq!(heavy_permit.permits(), 3);
    let st = sem.status().await.expect("status");
    assert_eq!((st.used, st.waiting), (3, 1), "{st:?}");
    assert!(
        !light.is_finished(),
        "weight-1 request granted beside weight 3"
    );
    release(heavy_permit).await;
    let light_permit = join("weight-1 granted", PROMPT, light)
        .await
        .expect("weight-1 request");
    release(light_permit).await;
}

// 3 ---------------------------------------------------------------------------------------------

/// Weighted grants are whole; impossible weights fail at once.
pub async fn weighted<H: Harness>(h: &H) {
    let l = limiter(h).await;
    let sem = create(&l, "weighted", 3).await;
    let two = take(&sem, 2).await;
    assert_eq!(two.permits(), 2);
    assert_eq!(two.semaphore(), "weighted");
    let st = sem.status().await.expect("status");
    assert_eq!(st.used, 2, "{st:?}");
    assert_eq!(st.holders.len(), 1, "{st:?}");
    assert_eq!(st.holders[0].permits, 2);
    assert_eq!(st.holders[0].fencing_token, two.fencing_token());

    let limit = Duration::from_secs(2);
    assert_err!(
        within("acquire_many(cap+1)", limit, sem.acquire_many(4)).await,
        Error::InvalidArgument(_)
    );
    assert_err!(
        within(
            "acquire_many_timeout(cap+1)",
            limit,
            sem.acquire_many_timeout(4, PROMPT)
        )
        .await,
        Error::InvalidArgument(_)
    );
    assert_err!(
        within("acquire_many(0)", limit, sem.acquire_many(0)).await,
        Error::InvalidArgument(_)
    );
    assert_err!(
        within("try_acquire_many(0)", limit, sem.try_acquire_many(0)).await,
        Error::InvalidArgument(_)
    );

    // Never granted piecemeal: 1 permit free, 2 asked for.
    let other = open(&limiter(h).await, "weighted").await;
    assert_err!(
        within(
            "acquire_many_timeout(2)",
            PROMPT,
            other.acquire_many_timeout(2, ms(300))
        )
        .await,
        Error::Timeout
    );
    let st = sem.status().await.expect("status");
    assert_eq!(st.used, 2, "a partial grant happened: {st:?}");
    wait_entries(h, "weighted", 1, PROMPT).await;

    release(two).await;
    let three = within("acquire_many(3)", ONE_SEC, other.acquire_many(3))
        .await
        .expect("acquire_many(3) on an idle semaphore");
    assert_eq!(three.permits(), 3);
    let st = sem.status().await.expect("status");
    assert_eq!((st.used, st.holders.len()), (3, 1), "{st:?}");
    release(three).await;
}

// 4 ---------------------------------------------------------------------------------------------

/// try_acquire never waits, never jumps the queue, and leaves nothing behind.
pub async fn try_acquire<H: Harness>(h: &H) {
    let l = limiter(h).await;
    let sem = create(&l, "try", 2).await;
    let a = within("try_acquire", PROMPT, sem.try_acquire())
        .await
        .expect("try_acquire on a free semaphore");
    let b = within("try_acquire", PROMPT, sem.try_acquire())
        .await
        .expect("try_acquire with 1 free");
    assert_eq!(sem.status().await.expect("status").used, 2);
    let other = open(&limiter(h).await, "try").await;
    assert_err!(
        within("try_acquire full", PROMPT, other.try_acquire()).await,
        Error::NoPermits
    );
    assert_err!(
        within("try_acquire full", PROMPT, sem.try_acquire()).await,
        Error::NoPermits
    );
    assert_eq!(h.queue_entries("try").await, 2, "a NoPermits left an entry");

    // One permit free, but a weight-2 waiter is ahead.
    release(b).await;
    let waiter = spawn_acquire(&other, 2);
    let st = wait_status(&sem, "weight-2 waiter queued", PROMPT, |st| st.waiting == 1).await;
    assert_eq!(st.used, 1, "{st:?}");
    assert_err!(
        within("try_acquire behind a waiter", PROMPT, sem.try_acquire()).await,
        Error::NoPermits,
        "(1 permit free, but a waiter is ahead)"
    );
    assert_err!(
        within("try_acquire_many(2)", PROMPT, sem.try_acquire_many(2)).await,
        Error::NoPermits
    );
    assert_eq!(
        h.queue_entries("try").await,
        2,
        "holder + waiter expected, a NoPermits left an entry"
    );
    let st = sem.status().await.expect("status");
    assert_eq!((st.used, st.waiting), (1, 1), "{st:?}");

    release(a).await;
    let w = join("weight-2 waiter granted", PROMPT, waiter)
        .await
        .expect("waiter");
    assert_err!(
        within("try_acquire full", PROMPT, sem.try_acquire()).await,
        Error::NoPermits
    );
    release(w).await;
    let again = within("try_acquire", PROMPT, sem.try_acquire_many(2))
        .await
        .expect("try_acquire_many(2) on a free semaphore");
    release(again).await;
    wait_entries(h, "try", 0, PROMPT).await;
}

// 5 ---------------------------------------------------------------------------------------------

/// A timed-out wait returns Timeout in about its time and leaves no entry.
pub async fn timeouts<H: Harness>(h: &H) {
    let l = limiter(h).await;
    let sem = create(&l, "timeouts", 1).await;
    let holder = take(&sem, 1).await;
    let other = open(&limiter(h).await, "timeouts").await;

    let start = Instant::now();
    let r = within(
        "acquire_timeout(200ms)",
        PROMPT,
        other.acquire_timeout(ms(200)),
    )
    .await;
    let took = start.elapsed();
    assert_err!(r, Error::Timeout);
    assert!(took >= ms(190), "Timeout after only {took:?}");
    assert!(took < Duration::from_secs(2), "Timeout took {took:?}");
    wait_entries(h, "timeouts", 1, Duration::from_secs(2)).await;

    assert_err!(
        within(
            "acquire_many_timeout",
            PROMPT,
            other.acquire_many_timeout(1, ms(100))
        )
        .await,
        Error::Timeout
    );
    let opts = AcquireOptions::new().timeout(ms(100)).owner("timing-out");
    assert_err!(
        within("acquire_with(timeout)", PROMPT, other.acquire_with(opts)).await,
        Error::Timeout
    );
    wait_entries(h, "timeouts", 1, Duration::from_secs(2)).await;
    let st = sem.status().await.expect("status");
    assert_eq!((st.used, st.waiting), (1, 0), "{st:?}");

    release(holder).await;
    let p = within(
        "acquire after timeouts",
        ONE_SEC,
        other.acquire_timeout(ONE_SEC),
    )
    .await
    .expect("acquire after the timed-out waits");
    release(p).await;
}

// 6 ---------------------------------------------------------------------------------------------

/// Waits cancelled at every stage (timeouts, dropped futures; 5 rounds of 100 concurrent ones)
/// leave no entry behind, and the permits are grantable at once afterwards.
pub async fn cancelled_waits_leave_nothing<H: Harness>(h: &H) {
    const WAITS: usize = 100;
    // Rounds of 100 concurrent waits: a leak needs an unlucky interleaving, more rounds catch
    // it more often for little time.
    const ROUNDS: usize = 5;
    let l = limiter(h).await;
    let sem = create(&l, "cancelled", 2).await;
    let holder = take(&sem, 2).await;
    let mut sems = Vec::new();
    for _ in 0..4 {
        sems.push(open(&limiter(h).await, "cancelled").await);
    }
    // Four ways to give up, so waits end at every stage: while the enqueue request is in flight,
    // right after it, and while waiting for the grant.
    for round in 0..ROUNDS {
        let waits = (round * WAITS..(round + 1) * WAITS).map(|i| {
            let s = sems[i % sems.len()].clone();
            let weight = 1 + u32::from(i % 3 == 0);
            async move {
                match i % 4 {
                    0 => {
                        // Timeouts of 0–3 ms: mostly during the enqueue.
                        let r = s.acquire_timeout(ms((i / 4 % 4) as u64)).await;
                        assert_err!(r, Error::Timeout, "(wait {i})");
                    }
                    1 => {
                        // Timeouts of 5–24 ms: mostly while waiting.
                        let r = s
                            .acquire_many_timeout(weight, ms(5 + (i % 20) as u64))
                            .await;
                        assert_err!(r, Error::Timeout, "(wait {i})");
                    }
                    2 => {
                        // Dropped after the first few polls.
                        tokio::select! {
                            biased;
                            r = s.acquire_many(weight) => {
                                panic!("wait {i} was granted while the semaphore is full: {r:?}")
                            }
                            _ = async {
                                for _ in 0..i % 5 {
                                    tokio::task::yield_now().await;
                                }
                            } => {}
                        }
                    }
                    _ => {
                        // Dropped after 0–12 ms.
                        tokio::select! {
                            r = s.acquire_many(weight) => {
                                panic!("wait {i} was granted while the semaphore is full: {r:?}")
                            }
                            _ = tokio::time::sleep(ms((i % 13) as u64)) => {}
                        }
                    }
                }
            }
        });
        within(
            &format!("round {round}: 100 cancelled waits end"),
            Duration::from_secs(20),
            futures::future::join_all(waits),
        )
        .await;
    }
    wait_entries(h, "cancelled", 1, Duration::from_secs(5)).await;
    let st = sem.status().await.expect("status");
    assert_eq!((st.used, st.waiting, st.holders.len()), (2, 0, 1), "{st:?}");

    release(holder).await;
    let p = within(
        "acquire after cancelled waits",
        ONE_SEC,
        sems[3].acquire_many(2),
    )
    .await
    .expect("acquire after 100 cancelled waits");
    release(p).await;
}

// 7 ---------------------------------------------------------------------------------------------

/// The capacity is stored with the semaphore: a different one is refused; unknown names are not
/// found when opened.
pub async fn capacity_mismatch<H: Harness>(h: &H) {
    let a = limiter(h).await;
    let b = limiter(h).await;
    create(&a, "sized", 4).await;
    match within("semaphore(sized, 5)", PROMPT, b.semaphore("sized", 5)).await {
        Err(Error::CapacityMismatch {
            stored: 4,
            requested: 5,
        }) => {}
        other => panic!("expected CapacityMismatch {{ stored: 4, requested: 5 }}, got {other:?}"),
    }
    let same = create(&b, "sized", 4).await;
    assert_eq!(same.status().await.expect("status").capacity, 4);
    let opened = open(&b, "sized").await;
    assert_eq!(opened.status().await.expect("status").capacity, 4);
    match within("open unknown", PROMPT, b.open_semaphore("unknown")).await {
        Err(Error::NotFound(name)) => assert_eq!(name, "unknown"),
        other => panic!("expected NotFound(\"unknown\"), got {other:?}"),
    }
    assert_eq!(
        a.semaphores().await.expect("semaphores"),
        vec!["sized".to_string()],
        "a refused or unknown semaphore was created"
    );
}

// 8 ---------------------------------------------------------------------------------------------

/// set_capacity: growing grants waiters; shrinking keeps holders and makes new requests wait
/// until usage fits; every Limiter sees the change.
pub async fn set_capacity<H: Harness>(h: &H) {
    let a = limiter(h).await;
    let sa = create(&a, "resize", 1).await;
    let sb = open(&limiter(h).await, "resize").await;
    let observer = open(&limiter(h).await, "resize").await;
    let pa = take(&sa, 1).await;
    let wb = spawn_acquire(&sb, 1);
    wait_status(&observer, "waiter queued", PROMPT, |st| st.waiting == 1).await;

    // Up.
    within("set_capacity(2)", PROMPT, sa.set_capacity(2))
        .await
        .expect("set_capacity(2)");
    let pb = join("waiter granted after growing", PROMPT, wb)
        .await
        .expect("waiter");
    let st = observer.status().await.expect("status");
    assert_eq!((st.capacity, st.used, st.waiting), (2, 2, 0), "{st:?}");

    // Down below usage: nobody is revoked.
    within("set_capacity(1)", PROMPT, sa.set_capacity(1))
        .await
        .expect("set_capacity(1)");
    let st = observer.status().await.expect("status");
    assert_eq!((st.capacity, st.used), (1, 2), "{st:?}");
    assert!(st.used > st.capacity);
    assert_eq!(
        holder_tokens(&st),
        vec![pa.fencing_token(), pb.fencing_token()]
    );
    assert!(!pa.is_lost() && !pb.is_lost(), "shrinking revoked a holder");
    let wc = spawn_acquire(&observer, 1);
    wait_status(&sa, "new waiter queued", PROMPT, |st| st.waiting == 1).await;
    release(pa).await;
    let st = wait_status(&sa, "one holder left", PROMPT, |st| st.used == 1).await;
    assert_eq!(st.waiting, 1, "{st:?}");
    assert_still_waiting("waiter while usage 1 = capacity 1", &wc, ms(200)).await;
    release(pb).await;
    let pc = join("waiter granted once usage fits", PROMPT, wc)
        .await
        .expect("waiter after shrink");
    let st = sa.status().await.expect("status");
    assert_eq!((st.capacity, st.used, st.waiting), (1, 1, 0), "{st:?}");

    // Capacity falling below a waiting request's weight fails that request.
    within("set_capacity(3)", PROMPT, sb.set_capacity(3))
        .await
        .expect("set_capacity(3)");
    let heavy = spawn_acquire(&sb, 3);
    wait_status(&sa, "weight-3 waiter queued", PROMPT, |st| st.waiting == 1).await;
    within("set_capacity(2)", PROMPT, sa.set_capacity(2))
        .await
        .expect("set_capacity(2)");
    assert_err!(
        join("weight-3 waiter after shrink to 2", PROMPT, heavy).await,
        Error::InvalidArgument(_)
    );
    wait_entries(h, "resize", 1, PROMPT).await;
    assert_eq!(observer.status().await.expect("status").capacity, 2);
    release(pc).await;
}

// 9 ---------------------------------------------------------------------------------------------

/// A holder that dies without cleaning up loses its permit within the bound of the store.
pub async fn holder_dies<H: Harness>(h: &H) {
    let l = limiter(h).await;
    let sem = create(&l, "dies", 1).await;
    let holder = h.spawn_holder("dies").await;
    let st = sem.status().await.expect("status");
    assert_eq!(holder_tokens(&st), vec![holder.token()], "{st:?}");
    assert_err!(
        within("try_acquire", PROMPT, sem.try_acquire()).await,
        Error::NoPermits
    );
    let old_token = holder.token();

    let bound = H::DEAD_HOLDER_FREED_WITHIN;
    let killed = Instant::now();
    holder.kill().await;
    let r = within(
        "acquire after the holder died",
        bound + Duration::from_secs(2),
        sem.acquire_timeout(bound),
    )
    .await;
    let took = killed.elapsed();
    println!(
        "holder_dies [{}]: permit back {took:?} after the kill (bound {bound:?})",
        std::any::type_name::<H>()
    );
    let p = r.unwrap_or_else(|e| panic!("permit not back within {bound:?} of the kill: {e}"));
    assert!(took <= bound, "permit back after {took:?}, bound {bound:?}");
    assert!(p.fencing_token() > old_token);
    release(p).await;
}

// 10 --------------------------------------------------------------------------------------------

/// close(): the permits come back at once, report lost; the Limiter refuses further calls.
pub async fn close<H: Harness>(h: &H) {
    let a = limiter(h).await;
    let sa = create(&a, "closing", 2).await;
    let sb = open(&limiter(h).await, "closing").await;
    let p1 = take(&sa, 1).await;
    let p2 = take(&sa, 1).await;
    let wb = spawn_acquire(&sb, 2);
    wait_status(&sb, "other Limiter's waiter queued", PROMPT, |st| {
        st.waiting == 1
    })
    .await;
    let wa = spawn_acquire(&sa, 1);
    wait_status(&sb, "closing Limiter's waiter queued", PROMPT, |st| {
        st.waiting == 2
    })
    .await;
    assert!(!p1.is_lost() && !p2.is_lost());

    let start = Instant::now();
    within("close()", PROMPT, a.close()).await.expect("close()");
    let pb = join("other Limiter granted after close", ONE_SEC, wb)
        .await
        .expect("other Limiter's waiter");
    let took = start.elapsed();
    assert!(took < ONE_SEC, "permits came back {took:?} after close");
    assert_err!(
        join("closed Limiter's waiter", ONE_SEC, wa).await,
        Error::Closed
    );
    assert!(
        p1.is_lost() && p2.is_lost(),
        "closed Limiter's permits not lost"
    );
    within("lost() after close", ONE_SEC, p1.lost()).await;
    let st = sb.status().await.expect("status");
    assert_eq!(holder_tokens(&st), vec![pb.fencing_token()], "{st:?}");
    assert_eq!((st.used, st.waiting), (2, 0), "{st:?}");

    assert_err!(a.semaphore("closing", 2).await, Error::Closed);
    assert_err!(a.semaphore("new-one", 1).await, Error::Closed);
    assert_err!(a.open_semaphore("closing").await, Error::Closed);
    assert_err!(a.semaphores().await, Error::Closed);
    assert_err!(sa.acquire().await, Error::Closed);
    assert_err!(sa.acquire_timeout(ms(100)).await, Error::Closed);
    assert_err!(sa.try_acquire().await, Error::Closed);
    assert_err!(sa.status().await, Error::Closed);
    assert_err!(sa.set_capacity(3).await, Error::Closed);
    within("second close()", ONE_SEC, a.close())
        .await
        .expect("close() again is a no-op");

    // Late releases of the closed Limiter's permits: no panic, no effect on others.
    drop(p1);
    within("release after close", PROMPT, p2.release())
        .await
        .expect("release after close() succeeds: closing already released it");
    tokio::time::sleep(ms(100)).await;
    let st = sb.status().await.expect("status");
    assert_eq!(holder_tokens(&st), vec![pb.fencing_token()], "{st:?}");
    assert_eq!(sb.status().await.expect("status").capacity, 2);
    wait_entries(h, "closing", 1, PROMPT).await;
    release(pb).await;
}

// 11 --------------------------------------------------------------------------------------------

/// status() reports capacity, usage, holders (owner, weight, token) and waiters; semaphores()
/// lists every name.
pub async fn status_counts<H: Harness>(h: &H) {
    let before = SystemTime::now();
    let a = connect(h, LimiterOptions::new().owner("host-a/worker-1")).await;
    let b = connect(h, LimiterOptions::new().owner("host-b")).await;
    assert_eq!(a.owner(), "host-a/worker-1");
    assert_eq!(b.owner(), "host-b");
    let sa = create(&a, "counted", 5).await;
    let sb = open(&b, "counted").await;
    let st = sa.status().await.expect("status");
    assert_eq!(
        (
            st.name.as_str(),
            st.capacity,
            st.used,
            st.waiting,
            st.waiting_permits
        ),
        ("counted", 5, 0, 0, 0)
    );
    assert!(st.holders.is_empty(), "{st:?}");

    let pa = take(&sa, 2).await;
    let opts = AcquireOptions::new().owner("job-42");
    let pb = within("acquire_with(owner)", PROMPT, sb.acquire_with(opts))
        .await
        .expect("acquire_with owner");
    let pc = take(&sb, 1).await;
    let w1 = spawn_acquire(&sa, 3);
    wait_status(&sa, "first waiter", PROMPT, |st| st.waiting == 1).await;
    let w2 = spawn_acquire(&sb, 1);
    let st = wait_status(&sa, "second waiter", PROMPT, |st| st.waiting == 2).await;
    let after = SystemTime::now();

    assert_eq!(st.name, "counted");
    assert_eq!(st.capacity, 5);
    assert_eq!(st.used, 4);
    assert_eq!(st.waiting, 2);
    assert_eq!(st.waiting_permits, 4);
    let holders: Vec<(&str, u32, u64)> = st
        .holders
        .iter()
        .map(|x| (x.owner.as_str(), x.permits, x.fencing_token))
        .collect();
    assert_eq!(
        holders,
        vec![
            ("host-a/worker-1", 2, pa.fencing_token()),
            ("job-42", 1, pb.fencing_token()),
            ("host-b", 1, pc.fencing_token()),
        ]
    );
    let slack = Duration::from_secs(1);
    for x in &st.holders {
        assert!(
            x.since() + slack >= before && x.since() <= after + slack,
            "holder since {:?} outside the test's time {before:?}..{after:?}",
            x.since()
        );
    }
    // Another Limiter reads the same state.
    let seen_by_b = sb.status().await.expect("status");
    assert_eq!(seen_by_b, st);

    create(&a, "zeta", 1).await;
    create(&b, "alpha", 2).await;
    let expected: Vec<String> = ["alpha", "counted", "zeta"].map(String::from).to_vec();
    assert_eq!(a.semaphores().await.expect("semaphores"), expected);
    assert_eq!(b.semaphores().await.expect("semaphores"), expected);

    // Tidy up: releasing the holders lets the waiters through in order.
    release(pa).await;
    release(pb).await;
    release(pc).await;
    release(join("first waiter", PROMPT, w1).await.expect("w1")).await;
    release(join("second waiter", PROMPT, w2).await.expect("w2")).await;
}

// 12 --------------------------------------------------------------------------------------------

/// Bad names, capacities, URLs and options are refused with InvalidArgument, and nothing is
/// created in the store.
pub async fn bad_input<H: Harness>(h: &H) {
    let l = limiter(h).await;
    let long = "a".repeat(129);
    for bad in ["", "a/b", "..", long.as_str(), "é"] {
        assert_err!(
            l.semaphore(bad, 1).await,
            Error::InvalidArgument(_),
            "(semaphore({bad:?}))"
        );
        assert_err!(
            l.open_semaphore(bad).await,
            Error::InvalidArgument(_),
            "(open_semaphore({bad:?}))"
        );
    }
    for cap in [0, 1_000_001] {
        assert_err!(
            l.semaphore("fine", cap).await,
            Error::InvalidArgument(_),
            "(capacity {cap})"
        );
    }
    for url in [
        "",
        "nonsense",
        "consul://127.0.0.1:8500",
        "etcd://",
        "etcd://127.0.0.1",
        "etcd://127.0.0.1:0",
        "etcd://127.0.0.1:99999",
        "etcd://a b:1/x",
    ] {
        assert_err!(
            within(
                "connect(bad url)",
                Duration::from_secs(2),
                Limiter::connect(url)
            )
            .await,
            Error::InvalidArgument(_),
            "(url {url:?})"
        );
    }
    // Options the Limiter refuses, through the harness's own way of connecting.
    let refused = [
        (
            "session_ttl(1s)",
            LimiterOptions::new().session_ttl(Duration::from_secs(1)),
        ),
        (
            "request_timeout(0)",
            LimiterOptions::new().request_timeout(Duration::ZERO),
        ),
        ("owner with a newline", LimiterOptions::new().owner("a\nb")),
        (
            "owner of 257 bytes",
            LimiterOptions::new().owner("o".repeat(257)),
        ),
    ];
    for (what, opts) in refused {
        assert_err!(
            within(what, Duration::from_secs(2), h.connect(opts)).await,
            Error::InvalidArgument(_),
            "({what})"
        );
    }
    assert_eq!(
        l.semaphores().await.expect("semaphores"),
        Vec::<String>::new(),
        "a rejected call created something"
    );

    // Bad arguments on a valid semaphore change nothing either.
    let longest = "a".repeat(128);
    let sem = create(&l, &longest, 1).await;
    assert_err!(sem.set_capacity(0).await, Error::InvalidArgument(_));
    assert_err!(sem.set_capacity(1_000_001).await, Error::InvalidArgument(_));
    let bad_owner = AcquireOptions::new().owner("x\ny");
    assert_err!(sem.acquire_with(bad_owner).await, Error::InvalidArgument(_));
    assert_eq!(sem.status().await.expect("status").capacity, 1);
    assert_eq!(h.queue_entries(&longest).await, 0);
    assert_eq!(l.semaphores().await.expect("semaphores"), vec![longest]);
}

// 13 --------------------------------------------------------------------------------------------

/// A revoked session: held permits report lost within TTL + 1 s, waits fail with SessionLost,
/// and the Limiter works again afterwards with a new session.
pub async fn lost<H: Harness>(h: &H) {
    let l = short_ttl_limiter(h).await;
    let sem = create(&l, "lost", 1).await;
    let p = take(&sem, 1).await;
    // The waiter shares the holder's session, so both go in one revocation.
    let waiter = spawn_acquire(&sem, 1);
    wait_status(&sem, "waiter queued", PROMPT, |st| st.waiting == 1).await;
    assert!(!p.is_lost());

    let bound = SHORT_TTL + ONE_SEC;
    let start = Instant::now();
    h.revoke_sessions().await;
    within("lost() after the session was revoked", bound, p.lost()).await;
    println!(
        "lost [{}]: lost() fired {:?} after the revocation began",
        std::any::type_name::<H>(),
        start.elapsed()
    );
    assert!(p.is_lost());
    assert_err!(
        join("waiter of the revoked session", bound, waiter).await,
        Error::SessionLost
    );

    let q = within(
        "acquire with a new session",
        PROMPT,
        sem.acquire_timeout(PROMPT),
    )
    .await
    .expect("acquire after the session was lost");
    assert!(!q.is_lost());
    assert!(q.fencing_token() > p.fencing_token());
    let st = sem.status().await.expect("status");
    assert_eq!(holder_tokens(&st), vec![q.fencing_token()], "{st:?}");
    // Dropping the stale permit must not free the new one.
    drop(p);
    tokio::time::sleep(ms(200)).await;
    let st = sem.status().await.expect("status");
    assert_eq!(holder_tokens(&st), vec![q.fencing_token()], "{st:?}");
    assert!(!q.is_lost());
    release(q).await;
}

// 14 --------------------------------------------------------------------------------------------

/// Request costs: an uncontended acquire is one request, a release one delete; try_acquire is
/// one request when granted (plus, on etcd, the one watch a Limiter's second acquire on a
/// semaphore opens, once) and two when refused.
pub async fn request_counts<H: Harness>(h: &H) {
    let l = limiter(h).await;
    let sem = create(&l, "cost", 1).await;

    let before = l.stats();
    let p = take(&sem, 1).await;
    let cost = l.stats().since(&before);
    assert_eq!(cost.total(), 1, "uncontended acquire cost {cost:?}");

    let before = l.stats();
    release(p).await;
    let cost = l.stats().since(&before);
    assert_eq!(cost.delete, 1, "release cost {cost:?}");
    assert_eq!(cost.total(), 1, "release cost {cost:?}");

    let before = l.stats();
    let p = within("try_acquire", PROMPT, sem.try_acquire())
        .await
        .expect("try_acquire");
    let cost = l.stats().since(&before);
    // A Limiter's second acquire on an etcd semaphore also starts its view of it: one watch,
    // once per Limiter and semaphore (design §7a), counted when the stream opens.
    assert!(cost.watch <= 1, "granted try_acquire cost {cost:?}");
    assert_eq!(
        cost.total() - cost.watch,
        1,
        "granted try_acquire cost {cost:?}"
    );

    let other_l = limiter(h).await;
    let other = open(&other_l, "cost").await;
    let before = other_l.stats();
    assert_err!(other.try_acquire().await, Error::NoPermits);
    let cost = other_l.stats().since(&before);
    assert_eq!(cost.total(), 2, "refused try_acquire cost {cost:?}");
    release(p).await;
}

// 15 --------------------------------------------------------------------------------------------

/// Fencing tokens strictly increase across successive grants of one semaphore.
pub async fn fencing_tokens<H: Harness>(h: &H) {
    let mut sems = Vec::new();
    for i in 0..4 {
        let l = limiter(h).await;
        sems.push(if i == 0 {
            create(&l, "fenced", 2).await
        } else {
            open(&l, "fenced").await
        });
    }
    // Successive grants from rotating Limiters, holding up to two at a time.
    let mut tokens = Vec::new();
    let mut held: std::collections::VecDeque<Permit> = Default::default();
    for i in 0..12 {
        if held.len() == 2 {
            release(held.pop_front().expect("held")).await;
        }
        let p = take(&sems[i % sems.len()], 1).await;
        tokens.push(p.fencing_token());
        held.push_back(p);
    }
    for p in held {
        release(p).await;
    }
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens not strictly increasing: {tokens:?}"
    );

    // Contended grants (capacity 1): recorded while holding, so in grant order.
    let first = create(&limiter(h).await, "fenced-contended", 1).await;
    let granted = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for c in 0..4 {
        let s = open(&limiter(h).await, first.name()).await;
        let granted = granted.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..5 {
                let p = s
                    .acquire()
                    .await
                    .unwrap_or_else(|e| panic!("client {c}: {e}"));
                granted.lock().unwrap().push(p.fencing_token());
                tokio::time::sleep(ms(1)).await;
                p.release()
                    .await
                    .unwrap_or_else(|e| panic!("client {c}: release: {e}"));
            }
        }));
    }
    for (c, t) in tasks.into_iter().enumerate() {
        join(&format!("client {c}"), Duration::from_secs(20), t).await;
    }
    let granted = granted.lock().unwrap().clone();
    assert_eq!(granted.len(), 20);
    assert!(
        granted.windows(2).all(|w| w[0] < w[1]),
        "tokens not strictly increasing in grant order: {granted:?}"
    );
}

// 16 --------------------------------------------------------------------------------------------

/// Dropping a Permit releases it in the background.
pub async fn drop_releases<H: Harness>(h: &H) {
    let a = limiter(h).await;
    let sa = create(&a, "dropped", 1).await;
    let sb = open(&limiter(h).await, "dropped").await;
    let pa = take(&sa, 1).await;
    let wb = spawn_acquire(&sb, 1);
    wait_status(&sa, "waiter queued", PROMPT, |st| st.waiting == 1).await;
    drop(pa);
    let pb = join(
        "waiter granted after the holder's permit was dropped",
        ONE_SEC,
        wb,
    )
    .await
    .expect("waiter");
    drop(pb);
    wait_entries(h, "dropped", 0, ONE_SEC).await;
    let st = sa.status().await.expect("status");
    assert_eq!((st.used, st.waiting), (0, 0), "{st:?}");
}

// 17 --------------------------------------------------------------------------------------------

/// Reads `board` through `limiter` promptly.
async fn board(limiter: &Limiter, board: &str) -> Vec<Announcement> {
    within("announcements()", PROMPT, limiter.announcements(board))
        .await
        .unwrap_or_else(|e| panic!("announcements({board:?}): {e}"))
}

/// `(announcer, value)` pairs, sorted by the announcer's id as `announcements()` returns them.
fn values(pairs: &[(&Limiter, &[u8])]) -> Vec<Announcement> {
    let mut all: Vec<Announcement> = pairs
        .iter()
        .map(|(l, v)| Announcement {
            id: l.announcer_id().to_string(),
            value: v.to_vec(),
        })
        .collect();
    all.sort_by(|a, b| a.id.cmp(&b.id));
    all
}

/// Announcement boards: each Limiter's value is read by any other, a second announce replaces
/// it, withdraw removes it, bad input is refused and changes nothing, and `close()` of the
/// announcer makes its values vanish for the others within the session TTL (+ 1 s), as does
/// the loss of its session.
pub async fn announcements<H: Harness>(h: &H) {
    let a = short_ttl_limiter(h).await;
    let b = short_ttl_limiter(h).await;
    let reader = limiter(h).await;
    assert_eq!(board(&reader, "sidecars").await, vec![], "a fresh board");
    let announce = |l: &Limiter, on: &'static str, v: &'static [u8]| {
        let l = l.clone();
        async move {
            within("announce()", PROMPT, l.announce(on, v))
                .await
                .unwrap_or_else(|e| panic!("announce({on:?}): {e}"))
        }
    };
    announce(&a, "sidecars", b"a1").await;
    announce(&b, "sidecars", b"b1").await;
    assert_ne!(a.announcer_id(), b.announcer_id());
    assert_eq!(
        board(&reader, "sidecars").await,
        values(&[(&a, b"a1"), (&b, b"b1")])
    );

    // A second announce replaces the first: still one value per Limiter.
    announce(&a, "sidecars", b"a2").await;
    let now = values(&[(&a, b"a2"), (&b, b"b1")]);
    assert_eq!(board(&reader, "sidecars").await, now);
    announce(&a, "other", b"x").await;
    assert_eq!(board(&reader, "other").await, values(&[(&a, b"x")]));

    // Bad input: InvalidArgument, and the board is as it was. 64 KiB itself is accepted.
    let too_big = vec![0u8; crate::Announcement::MAX_BYTES + 1];
    assert_err!(
        a.announce("sidecars", &too_big).await,
        Error::InvalidArgument(_)
    );
    for bad in ["", "a/b", ".."] {
        assert_err!(
            a.announce(bad, b"v").await,
            Error::InvalidArgument(_),
            "({bad:?})"
        );
        assert_err!(reader.announcements(bad).await, Error::InvalidArgument(_));
        assert_err!(a.withdraw(bad).await, Error::InvalidArgument(_));
    }
    assert_eq!(board(&reader, "sidecars").await, now);
    let biggest = vec![7u8; crate::Announcement::MAX_BYTES];
    within("announce(64 KiB)", PROMPT, b.announce("sidecars", &biggest))
        .await
        .expect("a 64 KiB value is accepted");
    assert_eq!(board(&reader, "sidecars").await[..].len(), 2);

    // Withdraw removes ours only; withdrawing again is fine.
    within("withdraw()", PROMPT, b.withdraw("sidecars"))
        .await
        .expect("withdraw()");
    assert_eq!(board(&reader, "sidecars").await, values(&[(&a, b"a2")]));
    within("withdraw() again", PROMPT, b.withdraw("sidecars"))
        .await
        .expect("withdraw() of an absent value");

    // close(): the closed Limiter's values vanish for everyone else.
    announce(&b, "sidecars", b"b3").await;
    within("close()", PROMPT, a.close()).await.expect("close()");
    let limit = SHORT_TTL + ONE_SEC;
    let start = Instant::now();
    let want = values(&[(&b, b"b3")]);
    let mut last = Vec::new();
    while start.elapsed() < limit {
        last = board(&reader, "sidecars").await;
        if last == want && board(&reader, "other").await.is_empty() {
            break;
        }
        tokio::time::sleep(super::util::POLL).await;
    }
    assert_eq!(
        last, want,
        "closed Limiter's value still there after {limit:?}"
    );
    assert_eq!(board(&reader, "other").await, vec![]);
    assert_err!(a.announce("sidecars", b"late").await, Error::Closed);
    assert_err!(a.announcements("sidecars").await, Error::Closed);
    assert_err!(a.withdraw("sidecars").await, Error::Closed);

    // A lost session takes its values too; announcing again publishes under a new one.
    h.revoke_sessions().await;
    let start = Instant::now();
    while start.elapsed() < limit && !board(&reader, "sidecars").await.is_empty() {
        tokio::time::sleep(super::util::POLL).await;
    }
    assert_eq!(
        board(&reader, "sidecars").await,
        vec![],
        "after the sessions ended"
    );
    announce(&b, "sidecars", b"b4").await;
    assert_eq!(board(&reader, "sidecars").await, values(&[(&b, b"b4")]));
}
