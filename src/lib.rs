//! # clusterlimit
//!
//! Cluster-wide concurrency permits ("at most N of these at once, across every host") and rate
//! limits ("at most N per second, per key, across every replica").
//! Permits live in etcd (leases + revision order), ZooKeeper (ephemeral sequential znodes) or
//! in process memory (`memory://`), and come back by themselves when their holder dies.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> clusterlimit::Result<()> {
//! use clusterlimit::Limiter;
//! let limiter = Limiter::connect("memory://quick").await?;      // or "etcd://127.0.0.1:2379/myapp", "zk://127.0.0.1:2181/myapp"
//! let sem = limiter.semaphore("nightly-export", 4).await?;      // create or open, capacity 4
//! let permit = sem.acquire().await?;                             // FIFO across the cluster
//! tokio::select! {
//!     _ = async { /* the guarded work */ } => {}
//!     _ = permit.lost() => { /* stop: the permit can no longer be trusted */ }
//! }
//! permit.release().await?;
//! # Ok(()) }
//! ```
//!
//! The semaphore's meaning (strict FIFO, atomic weighted grants, capacity stored with the
//! semaphore, loss, fencing) is written once in [`queue`] and shared by every [`backend`].
//!
//! Rate limits ("at most N per period, per key, across every replica": GCRA, sliding and fixed
//! windows, bans) live in the same stores; their meaning is written once in [`rate`]:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> clusterlimit::Result<()> {
//! use clusterlimit::{Limiter, Quota};
//! let limiter = Limiter::connect("memory://quick-rate").await?;
//! let api = limiter.rate_limit("api", Quota::per_second(100).burst(20)).await?;
//! let d = api.check("user-42").await?;          // one store write; a provable denial: none
//! assert!(d.allowed && d.remaining == 19);
//! # Ok(()) }
//! ```
//!
//! Cargo features: `tower` (on by default) adds `clusterlimit::tower`, a layer that caps a
//! service's in-flight requests across the cluster; `cli` (on by default) builds the
//! `clusterlimit` binary (`run`, `status`, `set-capacity`, the `serve` sidecar); `testing` (off)
//! adds `clusterlimit::testing`, the contract suite, to run on a backend of your own.
//! `default-features = false` gives the library alone. The design is in `docs/design.md`.
#![warn(missing_docs)]
// The tower rate layer's response future nests the guard's, the rate layer's and a boxed
// store call: its layout is deeper than the default limit of 128 queries.
#![recursion_limit = "256"]

mod acquire_options;
pub mod adaptive;
mod admission;
mod announce;
pub mod backend;
mod backoff;
mod clock;
mod clusters;
mod error;
pub mod fair;
mod fair_semaphore;
mod limiter;
mod limiter_inner;
mod limits;
mod lost;
mod members;
mod per_member;
mod permit;
pub mod queue;
pub mod rate;
mod rate_limit;
mod release;
mod semaphore;
mod spans;
mod stats;
mod status;
mod store_down;
mod store_open;
mod store_url;
// The contract suite, for backends written outside the crate too (feature `testing`).
#[cfg(feature = "testing")]
pub mod testing;
mod timing;
#[cfg(feature = "tower")]
pub mod tower;
pub mod validate;

// Names before issue 29's renames, kept for one release (each warns when used).
mod deprecated;
#[allow(deprecated)]
pub use deprecated::{Check, Deadline, Guarded, Source};
// The limits and defaults that were root constants, now associated constants of the types they
// describe (src/limits.rs).
#[allow(deprecated)]
pub use deprecated::{
    DEFAULT_GUARD_RETRY_INTERVAL, DEFAULT_REQUEST_TIMEOUT, DEFAULT_SESSION_TTL,
    MAX_ANNOUNCEMENT_BYTES, MAX_CAPACITY, MAX_KEY_LEN, MAX_NAME_LEN, MAX_OWNER_LEN,
    MAX_REQUEST_TIMEOUT, MIN_SESSION_TTL, SLOW_OPEN_AFTER, SLOW_TO_OPEN,
};

pub use announce::Announcement;
pub use clock::Clock;
pub use clusters::{ClusterHealth, StoreCluster};
pub use error::{BoxError, Error, Result};
pub use limiter::{CapacityChange, Limiter, LimiterBuilder};
pub use lost::{LostSignal, SessionDeadline};
pub use members::StoreMember;
pub use per_member::{PerMember, PerMemberStatus};
pub use permit::Permit;
pub use rate::{Algorithm, Decision, Quota, Reserves};
pub use rate_limit::{
    Balance, CheckOptions, KeyCheck, LeasedKey, RateLimit, Reservation, Waited,
    DEFAULT_SETTLE_WITHIN, MAX_CHARGE,
};
pub use semaphore::{AcquireOptions, Semaphore};
pub use stats::{RequestCounters, RequestKind, RequestStats};
pub use status::{ClassUsage, Holder, Status};
pub use store_down::{
    BreakerStats, ClusterBreaker, DecisionSource, GuardedDecision, StoreDownGuard, StoreDownPolicy,
};
pub use store_url::{redact, EtcdUser, RedisMode, RedisUser, ShardUrl, StoreUrl, TlsFiles, ZkAcl};

#[cfg(test)]
mod api_tests {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}

    #[test]
    fn handles_cross_threads() {
        send_sync::<crate::Limiter>();
        send_sync::<crate::Semaphore>();
        send::<crate::Permit>();
        send_sync::<crate::Error>();
    }
}

// Every Rust snippet of the README and the guide is compiled as a doctest, so the docs stay
// true (`cargo test --all-features --doc`). Their shell snippets, links and cited paths are
// checked by tests/docs_snippets.rs.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

#[cfg(doctest)]
#[doc = include_str!("../CONTRIBUTING.md")]
struct ContributingDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/README.md")]
struct DocsIndexDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/semaphores.md")]
struct DocsSemaphoresDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/adaptive.md")]
struct DocsAdaptiveDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/rate-limits.md")]
struct DocsRateLimitsDoctests;

// The tower page's examples use the tower layers and axum.
#[cfg(all(doctest, feature = "tower", feature = "axum"))]
#[doc = include_str!("../docs/tower.md")]
struct DocsTowerDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/cli.md")]
struct DocsCliDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/sidecar-http.md")]
struct DocsSidecarHttpDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/envoy.md")]
struct DocsEnvoyDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/operations.md")]
struct DocsOperationsDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/security.md")]
struct DocsSecurityDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/failure-semantics.md")]
struct DocsFailureSemanticsDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/design.md")]
struct DocsDesignDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/external-backends.md")]
struct DocsExternalBackendsDoctests;
