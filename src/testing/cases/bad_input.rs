//! Bad input is refused with InvalidArgument and creates nothing.

use super::setup::{create, limiter};
use crate::testing::harness::{Harness, LimiterOptions};
use crate::testing::util::{assert_err, within};
use crate::{AcquireOptions, Error, Limiter};
use std::time::Duration;

/// Bad names, capacities, URLs and options are refused with InvalidArgument, and nothing is
/// created in the store.
pub async fn bad_input<H: Harness>(h: &H) {
    let l = limiter(h).await;
    bad_names_and_capacities(&l).await;
    bad_urls().await;
    refused_options(h).await;
    assert_eq!(
        l.semaphores().await.expect("semaphores"),
        Vec::<String>::new(),
        "a rejected call created something"
    );
    bad_arguments_on_a_valid_semaphore(h, &l).await;
}

/// Names the store cannot hold, and capacities out of range.
async fn bad_names_and_capacities(l: &Limiter) {
    let long = "a".repeat(129);
    for bad in ["", "a/b", "..", long.as_str(), "é"] {
        assert_err!(
            l.semaphore(bad, 1).await,
            Error::InvalidArgument(_),
            "(semaphore({bad:?}))"
        );
        assert_err!(
            l.open_semaphore(bad).await,
            Error::InvalidArgument(_),
            "(open_semaphore({bad:?}))"
        );
    }
    for cap in [0, 1_000_001] {
        assert_err!(
            l.semaphore("fine", cap).await,
            Error::InvalidArgument(_),
            "(capacity {cap})"
        );
    }
}

/// Store URLs that are not one.
async fn bad_urls() {
    for url in [
        "",
        "nonsense",
        "consul://127.0.0.1:8500",
        "etcd://",
        "etcd://127.0.0.1",
        "etcd://127.0.0.1:0",
        "etcd://127.0.0.1:99999",
        "etcd://a b:1/x",
    ] {
        assert_err!(
            within(
                "connect(bad url)",
                Duration::from_secs(2),
                Limiter::connect(url)
            )
            .await,
            Error::InvalidArgument(_),
            "(url {url:?})"
        );
    }
}

/// Options the Limiter refuses, through the harness's own way of connecting.
async fn refused_options<H: Harness>(h: &H) {
    let refused = [
        (
            "session_ttl(1s)",
            LimiterOptions::new().session_ttl(Duration::from_secs(1)),
        ),
        (
            "request_timeout(0)",
            LimiterOptions::new().request_timeout(Duration::ZERO),
        ),
        ("owner with a newline", LimiterOptions::new().owner("a\nb")),
        (
            "owner of 257 bytes",
            LimiterOptions::new().owner("o".repeat(257)),
        ),
    ];
    for (what, opts) in refused {
        assert_err!(
            within(what, Duration::from_secs(2), h.connect(opts)).await,
            Error::InvalidArgument(_),
            "({what})"
        );
    }
}

/// Bad arguments on a valid semaphore change nothing either.
async fn bad_arguments_on_a_valid_semaphore<H: Harness>(h: &H, l: &Limiter) {
    let longest = "a".repeat(128);
    let sem = create(l, &longest, 1).await;
    assert_err!(sem.set_capacity(0).await, Error::InvalidArgument(_));
    assert_err!(sem.set_capacity(1_000_001).await, Error::InvalidArgument(_));
    let bad_owner = AcquireOptions::new().owner("x\ny");
    assert_err!(sem.acquire_with(bad_owner).await, Error::InvalidArgument(_));
    assert_eq!(sem.status().await.expect("status").capacity, 1);
    assert_eq!(h.queue_entries(&longest).await, 0);
    assert_eq!(l.semaphores().await.expect("semaphores"), vec![longest]);
}
