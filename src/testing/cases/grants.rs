//! How permits are granted: in request order, whole (never piecemeal), without waiting
//! (`try_acquire`), each grant with a larger fencing token.

use super::setup::{create, limiter, release, take, ONE_SEC};
use crate::testing::harness::Harness;
use crate::testing::util::{
    assert_err, assert_still_waiting, join, ms, open, spawn_acquire, wait_entries, wait_status,
    within, PROMPT,
};
use crate::{Error, Limiter, Permit};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Grants follow request order across Limiters; a heavy request at the head blocks a light one
/// behind it even when the light one would fit.
pub async fn fifo_order<H: Harness>(h: &H) {
    let main = limiter(h).await;
    granted_in_request_order(h, &main).await;
    heavy_head_blocks_light_request(h, &main).await;
}

/// Five waiters on a semaphore of capacity 1, each from its own Limiter, are granted in the
/// order they queued.
async fn granted_in_request_order<H: Harness>(h: &H, main: &Limiter) {
    const WAITERS: usize = 5;
    let sem = create(main, "fifo", 1).await;
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
}

/// Head-of-line blocking: capacity 3, 2 held, so 1 permit is free; a weight-3 request at the
/// head keeps a weight-1 request behind it waiting.
async fn heavy_head_blocks_light_request<H: Harness>(h: &H, main: &Limiter) {
    let sem = create(main, "fifo-weighted", 3).await;
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
