//! The crate's limits and defaults, as associated constants of the types they describe
//! (`Limiter::DEFAULT_SESSION_TTL`, `Semaphore::MAX_CAPACITY`, `RateLimit::MAX_KEY_LEN`, …).
//! The root constants of the same names are deprecated aliases (see `deprecated.rs`).

use crate::store_down::{breaker, guard};
use crate::{
    rate_limit, timing, validate, Announcement, ClusterBreaker, Limiter, RateLimit, Semaphore,
    StoreDownGuard,
};
use std::time::Duration;

impl Limiter {
    /// Default session TTL ([`LimiterBuilder::session_ttl`](crate::LimiterBuilder::session_ttl)):
    /// permits of a dead process come back within this time.
    pub const DEFAULT_SESSION_TTL: Duration = timing::DEFAULT_SESSION_TTL;
    /// Shortest session TTL accepted.
    pub const MIN_SESSION_TTL: Duration = timing::MIN_SESSION_TTL;
    /// Default bound on one store request
    /// ([`LimiterBuilder::request_timeout`](crate::LimiterBuilder::request_timeout)).
    pub const DEFAULT_REQUEST_TIMEOUT: Duration = timing::DEFAULT_REQUEST_TIMEOUT;
    /// Longest request timeout a Limiter takes (deadlines built from it must fit a clock).
    pub const MAX_REQUEST_TIMEOUT: Duration = timing::MAX_REQUEST_TIMEOUT;
    /// Longest name of a semaphore or rate limit, in bytes.
    pub const MAX_NAME_LEN: usize = validate::MAX_NAME_LEN;
    /// Longest owner label ([`LimiterBuilder::owner`](crate::LimiterBuilder::owner),
    /// [`AcquireOptions::owner`](crate::AcquireOptions::owner)), in bytes.
    pub const MAX_OWNER_LEN: usize = validate::MAX_OWNER_LEN;
}

impl Semaphore {
    /// Largest capacity a semaphore may have.
    pub const MAX_CAPACITY: u32 = validate::MAX_CAPACITY;
}

impl RateLimit {
    /// Longest key, in bytes of UTF-8.
    pub const MAX_KEY_LEN: usize = rate_limit::MAX_KEY_LEN;
}

impl Announcement {
    /// Largest announced value (see [`Limiter::announce`]): a summary, not a blob store.
    pub const MAX_BYTES: usize = validate::MAX_ANNOUNCEMENT_BYTES;
}

impl StoreDownGuard {
    /// Default [`StoreDownGuard::retry_interval`]: while the store is down, one request per
    /// 250 ms asks it again, so exact answers resume within a quarter second of the store's
    /// recovery.
    pub const DEFAULT_RETRY_INTERVAL: Duration = guard::DEFAULT_GUARD_RETRY_INTERVAL;
}

impl ClusterBreaker {
    /// Slow answers (no success between them) needed before a breaker opens on slowness alone.
    pub const SLOW_TO_OPEN: u32 = breaker::SLOW_TO_OPEN;
    /// How long slow answers must go on, with no success, before a breaker opens on them:
    /// longer than a busy store's stalls (an fsync, a compaction, a burst), shorter than an
    /// etcd or ZooKeeper leader election (about a second with their default timings).
    pub const SLOW_OPEN_AFTER: Duration = breaker::SLOW_OPEN_AFTER;
}
