//! What every rate-limit case starts with: a Limiter, a rate limit opened, a check that must
//! not fail, the requests counted, a key read back from the store.

use crate::backend::{RateStore, Versioned};
use crate::testing::harness::{Harness, LimiterOptions};
use crate::{Limiter, Quota, RateLimit, RequestStats};
use std::time::Duration;

/// A year: windows so long that no test sees one end.
pub(super) const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);

/// A Limiter with the default options.
pub(super) async fn limiter(h: &impl Harness) -> Limiter {
    h.connect(LimiterOptions::new())
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"))
}

/// Opens (or creates) the rate limit `name` with `q`.
pub(super) async fn open(l: &Limiter, name: &str, q: Quota) -> RateLimit {
    l.rate_limit(name, q)
        .await
        .unwrap_or_else(|e| panic!("rate_limit({name}, {q}): {e}"))
}

/// `check_n(key, cost)`, which must not fail.
pub(super) async fn check(rl: &RateLimit, key: &str, cost: u64) -> crate::Decision {
    rl.check_n(key, cost)
        .await
        .unwrap_or_else(|e| panic!("check_n({key:?}, {cost}) on {}: {e}", rl.name()))
}

/// The store requests `l` made since `since`.
pub(super) fn requests(l: &Limiter, since: &RequestStats) -> u64 {
    l.stats().since(since).total()
}

/// The key's value and version as the store reads it (`None`: absent).
pub(super) async fn stored(store: &dyn RateStore, limit: &str, key: &str) -> Option<Versioned> {
    store
        .read_key(limit, key)
        .await
        .unwrap_or_else(|e| panic!("read_key({limit}, {key}): {e}"))
        .key
}
