//! What is refused: bad names, quotas and keys before any request, any call after `close`.

use super::setup::{check, limiter, open, requests};
use crate::testing::harness::Harness;
use crate::testing::util::assert_err;
use crate::{Error, Quota};

/// Bad names, quotas and keys are refused before any request; any UTF-8 key up to 512 bytes
/// works.
pub async fn rate_bad_input(h: &impl Harness) {
    let l = limiter(h).await;
    let before = l.stats();
    assert_err!(
        l.rate_limit("a/b", Quota::per_second(1)).await,
        Error::InvalidArgument(_)
    );
    assert_err!(
        l.rate_limit("ok", Quota::per_second(0)).await,
        Error::InvalidArgument(_)
    );
    assert_err!(l.open_rate_limit("").await, Error::InvalidArgument(_));
    assert_eq!(requests(&l, &before), 0, "refused before any request");
    let rl = open(&l, "keys", Quota::per_minute(60).burst(2)).await;
    let before = l.stats();
    assert_err!(rl.check("").await, Error::InvalidArgument(_));
    assert_err!(rl.check(&"x".repeat(513)).await, Error::InvalidArgument(_));
    assert_err!(rl.reset("").await, Error::InvalidArgument(_));
    assert_eq!(requests(&l, &before), 0);
    let long = "é".repeat(256);
    for key in [
        "a/b",
        ".",
        "..",
        " spaced key ",
        "ключ",
        "\u{0}nul",
        "\u{1}\u{7f}",
        "%2F",
        "GET /v1/users",
        "192.168.0.1",
        &long,
    ] {
        let d = check(&rl, key, 2).await;
        assert!(d.allowed && d.remaining == 0, "{key:?}: {d:?}");
        assert!(!check(&rl, key, 1).await.allowed, "{key:?} is its own key");
    }
}

/// After `close`, calls fail with `Closed`.
pub async fn rate_closed(h: &impl Harness) {
    let l = limiter(h).await;
    let rl = open(&l, "closed", Quota::per_second(10)).await;
    l.close().await.expect("close");
    assert_err!(rl.check("k").await, Error::Closed);
    assert_err!(l.rate_limit("x", Quota::per_second(1)).await, Error::Closed);
    assert_err!(l.rate_limits().await, Error::Closed);
}
