//! Quotas kept in the store: stored once and compared, warm-ups, changed live, keys reset.

use super::setup::{check, limiter, open, stored, YEAR};
use crate::testing::harness::Harness;
use crate::testing::rate_store_cases::store_of;
use crate::testing::util::{assert_err, ms};
use crate::{Algorithm, Error, Quota};
use std::time::Duration;

/// Stored quotas: created once, a different one is a mismatch, open reads it, list names it.
pub async fn rate_quota_storage(h: &impl Harness) {
    let l = limiter(h).await;
    let q = Quota::per_hour(100).burst(7);
    open(&l, "stored", q).await;
    let other = Quota::per_hour(100);
    match l.rate_limit("stored", other).await {
        Err(Error::QuotaMismatch { stored, requested }) => {
            assert_eq!((*stored, *requested), (q, other));
        }
        r => panic!("expected QuotaMismatch, got {r:?}"),
    }
    assert_eq!(
        open(&l, "stored", q).await.quota(),
        q,
        "the same quota opens"
    );
    assert_eq!(
        l.open_rate_limit("stored").await.map(|r| r.quota()).ok(),
        Some(q)
    );
    assert_err!(l.open_rate_limit("absent").await, Error::NotFound(_));
    open(&l, "a-first", Quota::per_second(1)).await;
    let names = l.rate_limits().await.expect("rate_limits");
    assert_eq!(names, vec!["a-first".to_string(), "stored".to_string()]);
}

/// A quota with a warm-up round-trips through the store (another Limiter opens it by name), a
/// cold key paces slower for every Limiter sharing it, its state is stored as text (`1 w …`),
/// and the quota without the warm-up reads that state as plain GCRA on the same `tat`.
pub async fn rate_warm_up(h: &impl Harness) {
    let a = limiter(h).await;
    let b = limiter(h).await;
    // T = 1 s, τ = 10 s; cold: each of the first units costs ~3 s (f × T), so 3 pass at once
    // (2.997 + 2.990 + 2.983 = 8.970 s), the 4th (2.977 s more) 1.947 s later. Plain: 10.
    let q = Quota::per_minute(60)
        .burst(10)
        .warmup(Duration::from_secs(600));
    let ra = open(&a, "warm", q).await;
    let rb = b.open_rate_limit("warm").await.expect("open_rate_limit");
    assert_eq!(rb.quota(), q, "the warm-up round-trips through the store");
    let peek = check(&ra, "k", 0).await;
    assert!(peek.allowed && peek.remaining == 10, "{peek:?}");
    for (i, rl) in [&ra, &rb, &ra].into_iter().enumerate() {
        let d = check(rl, "k", 1).await;
        assert!(d.allowed, "cold admission {i}: {d:?}");
    }
    for rl in [&ra, &rb] {
        let d = check(rl, "k", 1).await;
        assert!(!d.allowed && d.remaining == 0, "{d:?}");
        let retry = d.retry_after.expect("a denial says when to retry");
        assert!(
            retry > Duration::from_millis(1500) && retry <= Duration::from_millis(1947),
            "{d:?}"
        );
    }
    // Another key of the same limit is cold too; a plain quota would take the whole burst.
    assert!(check(&rb, "other", 3).await.allowed);
    assert!(!check(&rb, "other", 1).await.allowed);
    let state = stored(store_of(&a), "warm", "k")
        .await
        .expect("the key is stored");
    let text = String::from_utf8_lossy(&state.value).into_owned();
    assert!(text.starts_with("1 w "), "{text}");
    // Opening with the quota without its warm-up is a mismatch naming both.
    let plain = Quota::per_minute(60).burst(10);
    match b.rate_limit("warm", plain).await {
        Err(Error::QuotaMismatch { stored, requested }) => {
            assert_eq!((*stored, *requested), (q, plain));
        }
        r => panic!("expected QuotaMismatch, got {r:?}"),
    }
    // Without the warm-up: plain GCRA on the stored tat (~9 s owed of 10: 1 more passes),
    // written back as a plain state.
    ra.set_quota(plain).await.expect("set_quota");
    let d = check(&ra, "k", 1).await;
    assert!(d.allowed, "{d:?}");
    let state = stored(store_of(&a), "warm", "k")
        .await
        .expect("the key is stored");
    let text = String::from_utf8_lossy(&state.value).into_owned();
    assert!(text.starts_with("1 g "), "{text}");
    // Bad warm-ups are refused before any store sees them.
    for bad in [
        Quota::per_minute(60).warmup(Duration::from_secs(1)),
        Quota::per_minute(60)
            .warmup(Duration::from_secs(600))
            .cold_factor(20),
        Quota::new(3, YEAR)
            .algorithm(Algorithm::FixedWindow)
            .warmup(Duration::from_secs(600)),
    ] {
        assert_err!(
            a.rate_limit("warm-bad", bad).await,
            Error::InvalidArgument(_)
        );
    }
    assert_err!(a.open_rate_limit("warm-bad").await, Error::NotFound(_));
}

/// `set_quota` reaches every Limiter: at its next write, or within a second of checks.
pub async fn rate_set_quota_is_live(h: &impl Harness) {
    let a = limiter(h).await;
    let b = limiter(h).await;
    let ra = open(&a, "live", Quota::per_minute(60).burst(1)).await;
    let rb = b.open_rate_limit("live").await.expect("open");
    assert!(check(&ra, "k", 1).await.allowed);
    assert!(!check(&rb, "k", 1).await.allowed);
    let bigger = Quota::per_minute(60).burst(5);
    rb.set_quota(bigger).await.expect("set_quota");
    assert_eq!(rb.quota(), bigger);
    assert!(
        check(&rb, "k", 1).await.allowed,
        "b writes with the new quota"
    );
    let started = std::time::Instant::now();
    loop {
        let d = check(&ra, "k", 1).await;
        if d.allowed {
            assert_eq!(ra.quota(), bigger);
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "a still denies under the old quota: {d:?}"
        );
        tokio::time::sleep(ms(100)).await;
    }
    assert_err!(
        rb.set_quota(Quota::per_second(0)).await,
        Error::InvalidArgument(_)
    );
}

/// `reset` forgets a key for everyone.
pub async fn rate_reset(h: &impl Harness) {
    let a = limiter(h).await;
    let b = limiter(h).await;
    let ra = open(&a, "reset", Quota::per_minute(60).burst(1)).await;
    let rb = b.open_rate_limit("reset").await.expect("open");
    assert!(check(&ra, "k", 1).await.allowed);
    assert!(!check(&ra, "k", 1).await.allowed);
    assert!(!check(&rb, "k", 1).await.allowed);
    ra.reset("k").await.expect("reset");
    assert!(check(&ra, "k", 0).await.allowed, "a forgot it at once");
    let started = std::time::Instant::now();
    while !check(&rb, "k", 0).await.allowed {
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "b never saw the reset"
        );
        tokio::time::sleep(ms(100)).await;
    }
    ra.reset("never-seen")
        .await
        .expect("resetting an absent key succeeds");
}
