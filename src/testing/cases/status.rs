//! What a Limiter reports: `status()`, `semaphores()`, and the store requests each call
//! costs.

use super::setup::{create, limiter, release, take};
use crate::testing::harness::{Harness, LimiterOptions};
use crate::testing::util::{
    assert_err, connect, join, open, spawn_acquire, wait_status, within, PROMPT,
};
use crate::{AcquireOptions, Error};
use std::time::{Duration, SystemTime};

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
