//! The contract cases of per-member semaphores (`Limiter::per_member_semaphore`): the capacity
//! follows the live Limiters that have it open (3 → 5 → 2 and down to 1) within one session
//! TTL, within its bounds; bad configs and a name open as an adaptive semaphore are refused.
//! Run by [`contract_suite!`](crate::contract_suite) with the semaphore cases.

use super::harness::{Harness, LimiterOptions, SHORT_TTL};
use super::util::{assert_err, connect, open, within, POLL, PROMPT};
use crate::adaptive::Adaptive;
use crate::{Error, Limiter, PerMember, Semaphore};
use std::time::{Duration, Instant};

/// Bound on the capacity following a change of members: one session TTL (a count every third
/// of one, a dead controller's seat back within one) and a margin for a slow machine.
const FOLLOWS: Duration = SHORT_TTL.saturating_add(Duration::from_secs(2));

async fn member<H: Harness>(h: &H, owner: &str) -> Limiter {
    connect(h, LimiterOptions::new().owner(owner).session_ttl(SHORT_TTL)).await
}

async fn per_member(limiter: &Limiter, name: &str, config: &PerMember) -> Semaphore {
    within(
        "per_member_semaphore()",
        PROMPT,
        limiter.per_member_semaphore(name, config.clone()),
    )
    .await
    .unwrap_or_else(|e| panic!("per_member_semaphore({name:?}, {config:?}): {e}"))
}

/// Polls until `sem`'s stored capacity is `capacity` and its status counts `members`; panics
/// with what it saw last after `limit`. Returns how long it took.
pub async fn wait_members(
    sem: &Semaphore,
    members: usize,
    capacity: u32,
    limit: Duration,
) -> Duration {
    let start = Instant::now();
    let mut last = String::from("(none)");
    let polls = limit.as_millis() / POLL.as_millis() + 3;
    for _ in 0..polls {
        let st = within("per_member_status()", PROMPT, sem.per_member_status()).await;
        let cap = within("status()", PROMPT, sem.status()).await;
        match (st, cap) {
            (Ok(Some(st)), Ok(cap))
                if st.members == members
                    && cap.capacity == capacity
                    && st.capacity == Some(capacity) =>
            {
                return start.elapsed()
            }
            (st, cap) => last = format!("{st:?}, capacity {:?}", cap.map(|c| c.capacity)),
        }
        if start.elapsed() >= limit {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    panic!("{members} members, capacity {capacity}: not seen within {limit:?}; last: {last}");
}

/// 2 permits per member: 3 Limiters make 6, 5 make 10, and after 3 of them close (the
/// controller among them) the 2 left make 4 within one session TTL; dropping a Limiter's last
/// handle withdraws it too (1 left: 2). Each member is counted exactly once however many
/// handles it has.
pub async fn per_member_follows_members<H: Harness>(h: &H) {
    let config = PerMember::new(2.0);
    let mut limiters = Vec::new();
    let mut handles = Vec::new();
    for i in 0..5 {
        limiters.push(member(h, &format!("m{i}")).await);
    }
    for l in &limiters[..3] {
        handles.push(per_member(l, "db", &config).await);
    }
    let again = per_member(&limiters[0], "db", &config).await; // one member, two handles
    let took = wait_members(&handles[0], 3, 6, FOLLOWS).await;
    eprintln!("per_member: 3 members -> 6 in {took:?}");
    for l in &limiters[3..] {
        handles.push(per_member(l, "db", &config).await);
    }
    let took = wait_members(&handles[4], 5, 10, FOLLOWS).await;
    eprintln!("per_member: 5 members -> 10 in {took:?}");

    for l in &limiters[..3] {
        within("close()", PROMPT, l.close())
            .await
            .expect("close a member");
    }
    let took = wait_members(&handles[4], 2, 4, FOLLOWS).await;
    eprintln!("per_member: 3 closed, 2 members -> 4 in {took:?}");
    assert!(took <= FOLLOWS, "after the closes: {took:?}");
    drop(again);

    let handle_3 = handles.remove(3);
    drop(handle_3);
    let took = wait_members(&handles[3], 1, 2, FOLLOWS).await;
    eprintln!("per_member: last handle dropped, 1 member -> 2 in {took:?}");

    // Dropped and opened again at once: still a member once the old membership's withdrawal
    // and the new one's first count have both passed.
    let last = handles.remove(3);
    drop(last);
    let again = per_member(&limiters[4], "db", &config).await;
    tokio::time::sleep(SHORT_TTL / 2).await;
    wait_members(&again, 1, 2, SHORT_TTL / 2).await;
    for l in &limiters[3..] {
        let _ = l.close().await;
    }
}

/// The capacity stays within `[min, max]` (2 per member, min 5, max 7: 1 → 5, 3 → 6, 4 → 7);
/// a plain handle acquires but is no member.
pub async fn per_member_bounds<H: Harness>(h: &H) {
    let config = PerMember::new(2.0).min(5).max(7);
    let a = member(h, "a").await;
    let mut others = Vec::new();
    for i in 0..3 {
        others.push(member(h, &format!("b{i}")).await);
    }
    let sa = per_member(&a, "pool", &config).await;
    wait_members(&sa, 1, 5, FOLLOWS).await;
    let plain = open(&others[2], "pool").await;
    let mut handles = Vec::new();
    for l in &others[..2] {
        handles.push(per_member(l, "pool", &config).await);
    }
    wait_members(&sa, 3, 6, FOLLOWS).await;
    let permit = within("acquire on a plain handle", PROMPT, plain.acquire())
        .await
        .expect("a plain handle acquires");
    drop(permit);
    handles.push(per_member(&others[2], "pool", &config).await);
    wait_members(&sa, 4, 7, FOLLOWS).await;
    for l in others.iter().chain([&a]) {
        let _ = l.close().await;
    }
}

/// Bad configs and names are refused with the reason before anything is stored; a name open
/// as an adaptive semaphore is refused as a per-member one, and the other way round.
pub async fn per_member_refusals<H: Harness>(h: &H) {
    let a = member(h, "a").await;
    let b = member(h, "b").await;
    let long = "n".repeat(crate::Limiter::MAX_NAME_LEN - 10);
    let cases = [
        ("db", PerMember::new(f64::NAN)),
        ("db", PerMember::new(0.0)),
        ("db", PerMember::new(-2.0)),
        ("db", PerMember::new(1.0).max(0)),
        ("db", PerMember::new(1.0).min(0)),
        ("db", PerMember::new(1.0).min(5).max(4)),
        ("a/b", PerMember::new(1.0)),
        (long.as_str(), PerMember::new(1.0)),
    ];
    for (name, config) in cases {
        assert_err!(
            a.per_member_semaphore(name, config.clone()).await,
            Error::InvalidArgument(_),
            "({name:?}, {config:?})"
        );
    }
    assert_err!(a.open_semaphore("db").await, Error::NotFound(_));
    assert_err!(a.open_semaphore("db.controller").await, Error::NotFound(_));

    // Per-member first: adaptive refused, here and in another Limiter.
    let _members = per_member(&a, "members", &PerMember::new(1.0)).await;
    for (l, here) in [(&a, "this Limiter"), (&b, "1 Limiter")] {
        match l.adaptive_semaphore("members", Adaptive::aimd()).await {
            Err(Error::InvalidArgument(m)) => assert!(
                m.contains("per-member") && m.contains(here),
                "the refusal should say why and where: {m:?}"
            ),
            other => panic!("adaptive over a per-member semaphore: {other:?}"),
        }
    }
    // Adaptive first (once it has announced a window): per-member refused.
    let window = Duration::from_millis(100);
    let adaptive = within(
        "adaptive_semaphore()",
        PROMPT,
        b.adaptive_semaphore("outcomes", Adaptive::aimd().window(window)),
    )
    .await
    .expect("open an adaptive semaphore");
    match b
        .per_member_semaphore("outcomes", PerMember::new(1.0))
        .await
    {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("adaptive"), "{m:?}"),
        other => panic!("per-member over an adaptive semaphore here: {other:?}"),
    }
    let start = Instant::now();
    while adaptive.adaptive_status().await.ok().flatten().is_none() {
        assert!(start.elapsed() < PROMPT, "no adaptive window announced");
        tokio::time::sleep(POLL).await;
    }
    match a
        .per_member_semaphore("outcomes", PerMember::new(1.0))
        .await
    {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("adaptive"), "{m:?}"),
        other => panic!("per-member over an adaptive semaphore elsewhere: {other:?}"),
    }
    let _ = a.close().await;
    let _ = b.close().await;
}
