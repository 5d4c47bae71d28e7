//! Bad input on fair semaphores: refused with the reason, before anything is queued.

use super::setup::{ask, fair, limiter};
use crate::fair::{Classes, Share};
use crate::testing::harness::Harness;
use crate::testing::util::{within, PROMPT};
use crate::{AcquireOptions, Error};

fn reason(r: crate::Result<impl std::fmt::Debug>) -> String {
    match r {
        Err(Error::InvalidArgument(why)) => why,
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

/// Unknown classes, flows on a plain semaphore, a fair semaphore over a plain one or with other
/// classes, shares that do not fit, bad flow names and weights: each refused, naming why, and
/// the queue stays empty.
pub async fn fair_bad_input<H: Harness>(h: &H) {
    let l = limiter(h, "bad").await;
    let sem = fair(&l, "fair-bad", 4, "critical=1,batch").await;
    let why = reason(within("acquire", PROMPT, sem.acquire_with(ask("f", "bulk", 1, 1))).await);
    assert!(
        why.contains("class \"bulk\" is not one of") && why.contains("critical=1,batch=0"),
        "{why}"
    );
    let why = reason(sem.acquire_with(AcquireOptions::new().flow("")).await);
    assert!(why.contains("flow name must be 1-128 bytes"), "{why}");
    let why = reason(
        sem.acquire_with(AcquireOptions::new().flow("f").weight(0))
            .await,
    );
    assert!(
        why.contains("weight must be between 1 and 1000000"),
        "{why}"
    );
    let plain = within("semaphore", PROMPT, l.semaphore("fair-bad-plain", 2))
        .await
        .expect("plain");
    let why = reason(within("acquire", PROMPT, plain.acquire_with(ask("f", "", 1, 1))).await);
    assert!(why.contains("plain FIFO semaphore"), "{why}");
    let why = reason(
        l.fair_semaphore("fair-bad-plain", 2, Classes::single())
            .await,
    );
    assert!(why.contains("plain FIFO semaphore"), "{why}");
    let other: Classes = "critical=2,batch".parse().expect("classes");
    let why = reason(l.fair_semaphore("fair-bad", 4, other).await);
    assert!(
        why.contains("has the classes critical=1,batch=0, not critical=2,batch=0"),
        "{why}"
    );
    let big = Classes::new([("a", Share::Permits(3)), ("b", Share::Permits(2))]).expect("table");
    let why = reason(l.fair_semaphore("fair-bad-big", 4, big).await);
    assert!(
        why.contains("need 5 permits (a 3 + b 2), more than the capacity 4"),
        "{why}"
    );
    let st = sem.status().await.expect("status");
    assert_eq!((st.used, st.waiting), (0, 0), "nothing queued: {st:?}");
    // Opening without classes works, and so does a plain acquire (flow "default", first class).
    let opened = within("open", PROMPT, l.open_semaphore("fair-bad"))
        .await
        .expect("open");
    let p = within("acquire", PROMPT, opened.acquire())
        .await
        .expect("plain acquire");
    let st = opened.status().await.expect("status");
    assert_eq!(st.holders[0].flow.as_deref(), Some("default"));
    assert_eq!(st.holders[0].class.as_deref(), Some("critical"));
    p.release().await.expect("release");
}

/// A store that keeps no fair semaphores yet refuses to make one and refuses flows on a plain
/// semaphore, each saying so, and stores nothing.
pub async fn fair_refused_where_not_kept<H: Harness>(h: &H) {
    let l = limiter(h, "refused").await;
    let why = reason(
        within(
            "fair_semaphore",
            PROMPT,
            l.fair_semaphore("fair-no", 2, Classes::single()),
        )
        .await,
    );
    assert!(
        why.contains("keeps no fair semaphores yet (semaphore \"fair-no\")"),
        "{why}"
    );
    let why = reason(
        l.open_semaphore("fair-no")
            .await
            .map(|_| ())
            .map_err(|e| match e {
                Error::NotFound(n) => Error::invalid(format!("not found {n}")),
                e => e,
            }),
    );
    assert!(why.contains("not found fair-no"), "nothing stored: {why}");
    let plain = within("semaphore", PROMPT, l.semaphore("fair-no-plain", 2))
        .await
        .expect("plain");
    let why = reason(plain.acquire_with(ask("f", "", 1, 1)).await);
    assert!(why.contains("this store keeps none yet"), "{why}");
    let st = plain.status().await.expect("status");
    assert_eq!((st.used, st.waiting), (0, 0), "nothing queued: {st:?}");
}
