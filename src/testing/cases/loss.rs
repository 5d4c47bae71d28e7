//! Permits coming back without a release: a dead holder, `close()`, a lost session, a
//! dropped `Permit`.

use super::setup::{create, holder_tokens, limiter, release, short_ttl_limiter, take, ONE_SEC};
use crate::testing::harness::{Harness, SHORT_TTL};
use crate::testing::util::{
    assert_err, join, ms, open, spawn_acquire, wait_entries, wait_status, within, PROMPT,
};
use crate::Error;
use std::time::{Duration, Instant};

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
