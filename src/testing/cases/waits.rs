//! Waits that end without a grant (timed out, cancelled) leave nothing behind.

use super::setup::{create, limiter, release, take, ONE_SEC};
use crate::testing::harness::Harness;
use crate::testing::util::{assert_err, ms, open, wait_entries, within, PROMPT};
use crate::{AcquireOptions, Error};
use std::time::{Duration, Instant};

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
