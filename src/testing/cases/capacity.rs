//! The stored capacity: refused when it differs, changed live by `set_capacity`.

use super::setup::{create, holder_tokens, limiter, release, take};
use crate::testing::harness::Harness;
use crate::testing::util::{
    assert_err, assert_still_waiting, join, ms, open, spawn_acquire, wait_entries, wait_status,
    within, PROMPT,
};
use crate::Error;

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
