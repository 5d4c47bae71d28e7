//! What every semaphore case starts with: Limiters (default or short session TTL), a
//! semaphore created, permits taken and released promptly, or the case fails saying which.

use crate::testing::harness::{Harness, LimiterOptions, SHORT_TTL};
use crate::testing::util::{connect, within, PROMPT};
use crate::{Limiter, Permit, Semaphore};
use std::time::Duration;

/// Bound on "granted at once" after the blocker went away.
pub(super) const ONE_SEC: Duration = Duration::from_secs(1);

/// A Limiter with the default session TTL (cases that do not depend on expiry).
pub(super) async fn limiter<H: Harness>(h: &H) -> Limiter {
    connect(h, LimiterOptions::new()).await
}

/// A Limiter with the 2 s session TTL (cases that depend on expiry).
pub(super) async fn short_ttl_limiter<H: Harness>(h: &H) -> Limiter {
    connect(h, LimiterOptions::new().session_ttl(SHORT_TTL)).await
}

/// Creates (or opens) `name` with `capacity` promptly.
pub(super) async fn create(limiter: &Limiter, name: &str, capacity: u32) -> Semaphore {
    within("semaphore()", PROMPT, limiter.semaphore(name, capacity))
        .await
        .unwrap_or_else(|e| panic!("semaphore({name:?}, {capacity}): {e}"))
}

/// Acquires `permits` that must be granted promptly (nothing in the way).
pub(super) async fn take(sem: &Semaphore, permits: u32) -> Permit {
    within("acquire", PROMPT, sem.acquire_many(permits))
        .await
        .unwrap_or_else(|e| panic!("acquire_many({permits}) on {:?}: {e}", sem.name()))
}

/// Releases `permit` promptly.
pub(super) async fn release(permit: Permit) {
    within("release", PROMPT, permit.release())
        .await
        .expect("release");
}

/// The holders' fencing tokens, in the order `status()` lists them.
pub(super) fn holder_tokens(st: &crate::Status) -> Vec<u64> {
    st.holders.iter().map(|x| x.fencing_token).collect()
}
