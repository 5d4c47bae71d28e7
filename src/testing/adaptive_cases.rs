//! The contract cases of adaptive semaphores (`Limiter::adaptive_semaphore`): outcomes reported
//! by holders in several Limiters move the stored capacity within its bounds, with a reason;
//! one controller at a time, taken over when it goes, the capacity held meanwhile; bad settings
//! refused before anything is stored. Run by [`contract_suite!`](crate::contract_suite) with the
//! semaphore cases.

use super::harness::{Harness, LimiterOptions, SHORT_TTL};
use super::util::{assert_err, connect, open, wait_status, within, POLL, PROMPT};
use crate::adaptive::{Adaptive, AdaptiveStatus, Aimd, CapacityAlgorithm, Outcome};
use crate::{Error, Limiter, Semaphore};
use std::time::{Duration, Instant};

/// Window of the cases: short, so a few steps take a second or two.
const WINDOW: Duration = Duration::from_millis(200);
/// Bound on a capacity move that takes a few windows.
const FEW_WINDOWS: Duration = Duration::from_secs(10);

async fn owned<H: Harness>(h: &H, owner: &str) -> Limiter {
    connect(h, LimiterOptions::new().owner(owner).session_ttl(SHORT_TTL)).await
}

async fn adaptive(limiter: &Limiter, name: &str, config: Adaptive) -> Semaphore {
    within(
        "adaptive_semaphore()",
        PROMPT,
        limiter.adaptive_semaphore(name, config),
    )
    .await
    .unwrap_or_else(|e| panic!("adaptive_semaphore({name:?}): {e}"))
}

/// One call's worth under each handle: acquire one permit and release it with `outcome`.
async fn calls(handles: &[&Semaphore], outcome: Outcome) {
    for sem in handles {
        let permit = within("acquire", PROMPT, sem.acquire())
            .await
            .unwrap_or_else(|e| panic!("acquire on {:?}: {e}", sem.name()));
        within("release_with", PROMPT, permit.release_with(outcome))
            .await
            .unwrap_or_else(|e| panic!("release_with on {:?}: {e}", sem.name()));
    }
}

/// Polls `adaptive_status()` until `pred` holds; panics with the last one seen after `limit`.
pub async fn wait_adaptive(
    sem: &Semaphore,
    what: &str,
    limit: Duration,
    pred: impl Fn(&AdaptiveStatus) -> bool,
) -> AdaptiveStatus {
    let start = Instant::now();
    let mut last = String::from("(none)");
    while start.elapsed() < limit {
        match within("adaptive_status()", PROMPT, sem.adaptive_status()).await {
            Ok(Some(st)) if pred(&st) => return st,
            Ok(st) => last = format!("{st:?}"),
            Err(e) => last = format!("adaptive_status() failed: {e}"),
        }
        tokio::time::sleep(POLL).await;
    }
    panic!("{what}: not seen within {limit:?}; last adaptive status: {last}");
}

/// Drops reported through two Limiters bring the capacity down to its floor (never below),
/// successes that use the pool bring it up again; each step says why, and both Limiters'
/// windows are merged.
pub async fn adaptive_steps_from_outcomes<H: Harness>(h: &H) {
    let a = owned(h, "a").await;
    let b = owned(h, "b").await;
    let config = Adaptive::with(CapacityAlgorithm::Aimd(Aimd {
        backoff: 0.5,
        ..Aimd::default()
    }))
    .min(2)
    .max(20)
    .initial(10)
    .window(WINDOW);
    let sa = adaptive(&a, "db", config.clone()).await;
    let sb = adaptive(&b, "db", config).await;
    assert_eq!(sa.status().await.map(|s| s.capacity).ok(), Some(10));

    let start = Instant::now();
    let mut lowest = u32::MAX;
    while start.elapsed() < FEW_WINDOWS {
        calls(&[&sa, &sb], Outcome::Dropped).await;
        let cap = sa.status().await.map_or(u32::MAX, |s| s.capacity);
        lowest = lowest.min(cap);
        if cap == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(lowest, 2, "drops should bring the capacity down to min 2");
    let st = wait_adaptive(&sb, "a step that names the drops", PROMPT, |st| {
        st.last
            .as_ref()
            .is_some_and(|d| d.to == 2 && d.reason.contains("dropped") && d.dropped > 0)
    })
    .await;
    assert_eq!(st.reporters, 2, "both Limiters announce: {st:?}");
    let d = st
        .last
        .as_ref()
        .map(|d| (d.controller.clone(), d.reporters));
    assert!(
        matches!(&d, Some((c, 2)) if c == "a" || c == "b"),
        "the step merged both Limiters' windows: {st:?}"
    );
    // More drops: the floor holds.
    for _ in 0..10 {
        calls(&[&sa, &sb], Outcome::Dropped).await;
        assert!(
            sa.status().await.map_or(0, |s| s.capacity) >= 2,
            "below min"
        );
        tokio::time::sleep(WINDOW / 4).await;
    }

    // Successes with the whole pool in use: one permit more per window.
    let start = Instant::now();
    let mut grown = false;
    while start.elapsed() < FEW_WINDOWS && !grown {
        let (pa, pb) = (sa.acquire().await, sb.acquire().await);
        tokio::time::sleep(Duration::from_millis(5)).await;
        for p in [pa, pb].into_iter().flatten() {
            let took = p.held_for();
            let _ = p.release_with(Outcome::Success(took)).await;
        }
        grown = sa.status().await.is_ok_and(|s| s.capacity >= 4);
    }
    assert!(grown, "successes that use the pool should grow it");
    wait_adaptive(&sa, "a step that says it grew", PROMPT, |st| {
        st.last
            .as_ref()
            .is_some_and(|d| d.to > d.from && d.reason.contains("no drops"))
    })
    .await;
    let _ = a.close().await;
    let _ = b.close().await;
}

/// One controller at a time: the first Limiter holds the seat and the other waits for it;
/// when the controller goes, the other takes over within the session TTL, and the capacity
/// stays as it was meanwhile.
pub async fn adaptive_controller_takeover<H: Harness>(h: &H) {
    let a = owned(h, "a").await;
    let b = owned(h, "b").await;
    let config = Adaptive::gradient()
        .min(1)
        .max(50)
        .initial(7)
        .window(WINDOW);
    let sa = adaptive(&a, "pool", config.clone()).await;
    wait_adaptive(&sa, "the first Limiter in control", FEW_WINDOWS, |st| {
        st.last.as_ref().is_some_and(|d| d.controller == "a")
    })
    .await;
    let sb = adaptive(&b, "pool", config).await;
    let seat = open(&b, "pool.controller").await;
    let st = wait_status(&seat, "a holds the seat, b waits", PROMPT, |st| {
        st.capacity == 1 && st.holders.len() == 1 && st.waiters.len() == 1
    })
    .await;
    assert_eq!(st.holders[0].owner, "a");

    let closed = Instant::now();
    within("close()", PROMPT, a.close())
        .await
        .expect("close the controller's Limiter");
    let limit = SHORT_TTL + Duration::from_secs(1) + 3 * WINDOW;
    let st = wait_adaptive(&sb, "b takes over", limit, |st| {
        st.last.as_ref().is_some_and(|d| d.controller == "b")
    })
    .await;
    assert!(closed.elapsed() <= limit + POLL);
    assert_eq!(st.reporters, 1, "a's announcements went with it: {st:?}");
    let d = st.last.as_ref().map(|d| (d.from, d.to));
    assert_eq!(d, Some((7, 7)), "no outcomes: the capacity is held: {st:?}");
    assert_eq!(sb.status().await.map(|s| s.capacity).ok(), Some(7));
    let _ = b.close().await;
}

/// Bad settings and names are refused with the reason, before anything is stored.
pub async fn adaptive_bad_input<H: Harness>(h: &H) {
    let a = owned(h, "a").await;
    let long = "n".repeat(crate::Limiter::MAX_NAME_LEN - 10);
    let cases = [
        ("db", Adaptive::gradient().min(0)),
        ("db", Adaptive::gradient().min(5).max(4)),
        ("db", Adaptive::aimd().max(10).initial(11)),
        ("db", Adaptive::aimd().window(Duration::from_millis(1))),
        ("a/b", Adaptive::gradient()),
        (long.as_str(), Adaptive::gradient()),
    ];
    for (name, config) in cases {
        assert_err!(
            a.adaptive_semaphore(name, config.clone()).await,
            Error::InvalidArgument(_),
            "({name:?}, {config:?})"
        );
    }
    assert_err!(a.open_semaphore("db").await, Error::NotFound(_));
    assert_err!(a.open_semaphore("db.controller").await, Error::NotFound(_));
    let _ = a.close().await;
}
