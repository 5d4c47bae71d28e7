//! Classes: a guaranteed share is lent while its class is idle and comes back release by
//! release; a shrink keeps every holder and grants again only once usage fits.

use super::setup::{ask, fair, finished, granted, held_by_flow, limiter, queue, take};
use crate::testing::harness::Harness;
use crate::testing::util::{wait_status, within, PROMPT};

/// Class "critical" is guaranteed 25% of 8. While it is idle, batch holds all 8; a critical
/// request then waits and gets the very next release (not batch's next waiter), and so does the
/// next; once critical has nothing waiting, releases go back to batch.
pub async fn fair_reserve_is_lent_and_returned<H: Harness>(h: &H) {
    let (lb, lc) = (
        limiter(h, "batch-host").await,
        limiter(h, "critical-host").await,
    );
    let sem_b = fair(&lb, "fair-classes", 8, "critical=25%,batch").await;
    let sem_c = fair(&lc, "fair-classes", 8, "critical=25%,batch").await;
    let batch = ask("nightly", "batch", 1, 1);
    let mut held = Vec::new();
    for _ in 0..8 {
        held.push(take(&sem_b, batch.clone()).await);
    }
    let st = sem_b.status().await.expect("status");
    let usage: Vec<(u32, u32)> = st.classes.iter().map(|c| (c.guaranteed, c.held)).collect();
    assert_eq!(
        usage,
        vec![(2, 0), (0, 8)],
        "batch borrows critical's idle share: {st:?}"
    );
    let mut batch_waiting = queue(&sem_b, &batch, 3, 0).await;
    let mut critical = queue(&sem_c, &ask("pager", "critical", 1, 1), 2, 3).await;
    for expected in [1u32, 2] {
        let p = held.pop().expect("a batch permit");
        within("release", PROMPT, p.release())
            .await
            .expect("release");
        wait_status(&sem_c, "critical granted", PROMPT, |st| {
            held_by_flow(st).get("pager") == Some(&expected)
        })
        .await;
    }
    let _critical_held = granted(&mut critical, 2).await;
    assert!(
        finished(&mut batch_waiting).is_empty(),
        "batch waits while critical waits"
    );
    // Critical has nothing waiting: the next release goes back to batch's earliest waiter.
    let p = held.pop().expect("a batch permit");
    within("release", PROMPT, p.release())
        .await
        .expect("release");
    let st = wait_status(&sem_b, "batch granted again", PROMPT, |st| {
        held_by_flow(st).get("nightly") == Some(&6)
    })
    .await;
    let usage: Vec<(u32, usize)> = st.classes.iter().map(|c| (c.held, c.waiting)).collect();
    assert_eq!(usage, vec![(2, 0), (6, 2)], "{st:?}");
    assert_eq!(st.classes[1].waiting_flows, vec!["nightly".to_string()]);
    for w in batch_waiting.into_iter().chain(critical) {
        w.abort();
    }
}

/// Shrinking 4 → 2 with 4 holders keeps all 4; a waiter is granted only once 2 have been
/// released (usage back under the new capacity); a capacity the classes' guaranteed permits
/// do not fit in is refused and changes nothing.
pub async fn fair_shrink_keeps_holders<H: Harness>(h: &H) {
    let l = limiter(h, "shrink").await;
    let sem = fair(&l, "fair-shrink", 4, "critical=1,batch").await;
    let mut held = Vec::new();
    for f in ["a", "b", "c", "d"] {
        held.push(take(&sem, ask(f, "batch", 1, 1)).await);
    }
    within("set_capacity", PROMPT, sem.set_capacity(2))
        .await
        .expect("shrink to 2");
    let err = within("set_capacity", PROMPT, sem.set_capacity(0))
        .await
        .unwrap_err();
    assert!(matches!(err, crate::Error::InvalidArgument(_)), "{err}");
    let mut waiting = queue(&sem, &ask("e", "batch", 1, 1), 1, 0).await;
    let st = sem.status().await.expect("status");
    assert_eq!(
        (st.capacity, st.used, st.waiting),
        (2, 4, 1),
        "holders kept: {st:?}"
    );
    for _ in 0..2 {
        let p = held.pop().expect("held");
        within("release", PROMPT, p.release())
            .await
            .expect("release");
    }
    let st = sem.status().await.expect("status");
    assert_eq!(
        (st.used, st.waiting),
        (2, 1),
        "still no room at 2 of 2: {st:?}"
    );
    let p = held.pop().expect("held");
    within("release", PROMPT, p.release())
        .await
        .expect("release");
    wait_status(&sem, "e granted once usage fits", PROMPT, |st| {
        held_by_flow(st).get("e") == Some(&1)
    })
    .await;
    let _waiting_held = granted(&mut waiting, 1).await;
}
