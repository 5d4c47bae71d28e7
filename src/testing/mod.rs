//! The contract suite, for any [`Backend`](crate::backend::Backend): what a cluster-wide
//! semaphore means (strict FIFO, whole weighted grants, `try_acquire`, timeouts, cancelled
//! waits, stored capacity, `set_capacity`, dead holders, `close`, `status`, bad input, `lost()`,
//! request counts, fencing tokens, dropped permits, announcement boards, adaptive capacities; see
//! `docs/design.md`), written once as
//! [`cases`] over a small [`Harness`] and run by [`contract_suite!`](crate::contract_suite).
//! The crate runs it on `memory://`, etcd and ZooKeeper (`tests/contract.rs`); a backend
//! written outside the crate runs the same cases with one `Harness` impl and one macro line.
//! `docs/external-backends.md` is the guide.
//!
//! Behind the `testing` cargo feature (off by default). This is test support: its cases and
//! helpers fail by panicking (`assert!`), with a message that says what was expected and what
//! was seen, and every wait in them is bounded in time and count.
//!
//! ```
//! use clusterlimit::backend::memory::{self, MemoryBackend};
//! use clusterlimit::testing::{self, DoomedHolder, Harness, LimiterOptions};
//! use clusterlimit::Limiter;
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! /// A fresh store per test; the anchor keeps it alive between Limiters, as a real store
//! /// outlives its clients.
//! struct MyHarness {
//!     store: String,
//!     _anchor: MemoryBackend,
//! }
//!
//! impl Harness for MyHarness {
//!     const DEAD_HOLDER_FREED_WITHIN: Duration = Duration::from_secs(1);
//!
//!     async fn start() -> Self {
//!         static SEQ: AtomicU64 = AtomicU64::new(0);
//!         let store = format!("doc-{}-{}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed));
//!         MyHarness { _anchor: MemoryBackend::open(&store), store }
//!     }
//!
//!     async fn connect(&self, opts: LimiterOptions) -> clusterlimit::Result<Limiter> {
//!         opts.check()?; // refuse what `Limiter::builder` refuses
//!         // Your backend here (with `opts.session_ttl` as its session TTL).
//!         let backend = Arc::new(MemoryBackend::open(&self.store));
//!         Limiter::from_backend(backend, opts.owner.unwrap_or_else(|| "doc".to_string()))
//!     }
//!
//!     async fn revoke_sessions(&self) {
//!         assert!(memory::expire_sessions(&self.store) > 0, "no session to end");
//!     }
//!
//!     async fn queue_entries(&self, sem: &str) -> usize {
//!         // A network store would count its keys or rows here instead.
//!         let limiter = self.connect(LimiterOptions::new()).await.expect("connect");
//!         testing::entries_via_status(limiter, sem).await
//!     }
//!
//!     async fn spawn_holder(&self, sem: &str) -> DoomedHolder {
//!         let limiter = self.connect(LimiterOptions::new()).await.expect("connect");
//!         DoomedHolder::hold_in_task(limiter, sem).await
//!     }
//! }
//!
//! // In a test file: one #[test] per case, named `my_store::fifo_order`, `my_store::lost`, …
//! clusterlimit::contract_suite!(my_store, MyHarness);
//!
//! // One case run by hand (what each generated test does):
//! # fn main() {
//! testing::block_on(async {
//!     let harness = MyHarness::start().await;
//!     testing::cases::weighted(&harness).await;
//! });
//! # }
//! ```

pub mod adaptive_cases;
pub mod cases;
mod holder;
pub mod rate_cases;
pub mod rate_history;
mod util;

pub use holder::{DoomedHolder, Victim};
pub use util::{
    assert_still_waiting, entries_via_status, join, spawn_acquire, wait_entries, wait_status,
    within, POLL,
};

use crate::{Clock, Error, Limiter, LimiterBuilder, Result, MIN_SESSION_TTL};
use std::future::Future;
use std::time::Duration;

/// Session TTL the cases that depend on expiry ask for (the shortest one accepted).
pub const SHORT_TTL: Duration = MIN_SESSION_TTL;

/// Upper bound for one whole case (a hang fails the test instead of the CI job).
pub const TEST_LIMIT: Duration = Duration::from_secs(90);

/// How a case wants its [`Limiter`]: `None` means the default. The options a
/// [`Harness::connect`] receives, mirroring [`LimiterBuilder`]'s.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LimiterOptions {
    /// Session TTL ([`LimiterBuilder::session_ttl`]).
    pub session_ttl: Option<Duration>,
    /// Owner label ([`LimiterBuilder::owner`]).
    pub owner: Option<String>,
    /// Bound on each store request ([`LimiterBuilder::request_timeout`]).
    pub request_timeout: Option<Duration>,
    /// The rate-limit clock ([`LimiterBuilder::clock`]).
    pub clock: Option<Clock>,
}

impl LimiterOptions {
    /// All defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the session TTL.
    pub fn session_ttl(mut self, ttl: Duration) -> Self {
        self.session_ttl = Some(ttl);
        self
    }

    /// Sets the owner label.
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }

    /// Sets the bound on each store request.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = Some(timeout);
        self
    }

    /// Sets the rate-limit clock.
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// A [`LimiterBuilder`] for the store at `url` with these options: all a harness of a
    /// URL store (`memory://`, `etcd://`, `zk://`) needs in [`Harness::connect`].
    pub fn builder(&self, url: &str) -> LimiterBuilder {
        let mut b = Limiter::builder(url);
        if let Some(ttl) = self.session_ttl {
            b = b.session_ttl(ttl);
        }
        if let Some(owner) = &self.owner {
            b = b.owner(owner.clone());
        }
        if let Some(timeout) = self.request_timeout {
            b = b.request_timeout(timeout);
        }
        if let Some(clock) = &self.clock {
            b = b.clock(clock.clone());
        }
        b
    }

    /// `InvalidArgument` for what [`LimiterBuilder::connect`] refuses (a session TTL below
    /// [`MIN_SESSION_TTL`], a zero request timeout; a bad owner is refused by
    /// [`Limiter::from_backend`] itself). A harness that builds Limiters with
    /// `Limiter::from_backend` calls it first, so the `bad_input` case holds for it too.
    pub fn check(&self) -> Result<()> {
        if let Some(ttl) = self.session_ttl.filter(|t| *t < MIN_SESSION_TTL) {
            return Err(Error::invalid(format!(
                "session TTL must be at least {MIN_SESSION_TTL:?}, got {ttl:?}"
            )));
        }
        if self
            .request_timeout
            .is_some_and(|t| t.is_zero() || t > crate::MAX_REQUEST_TIMEOUT)
        {
            return Err(Error::invalid(format!(
                "request timeout must be above zero and at most {:?}",
                crate::MAX_REQUEST_TIMEOUT
            )));
        }
        Ok(())
    }
}

/// What a store must provide to run the contract suite. Deliberately small and store-neutral.
///
/// Each generated test calls [`start`](Harness::start) once and runs one case on the result;
/// tests run in parallel, so two harnesses must never share a store's state.
// `async fn` keeps impls simple; the suite polls a harness on its test's own thread (no
// spawn), so its futures need no `Send` bound.
#[allow(async_fn_in_trait)]
pub trait Harness: Sized {
    /// How soon the permits of a killed holder (see [`Harness::spawn_holder`]) must come
    /// back: for a network store, its session TTL ([`SHORT_TTL`]) plus a margin.
    const DEAD_HOLDER_FREED_WITHIN: Duration;

    /// A fresh, empty store for one test.
    async fn start() -> Self;

    /// A new [`Limiter`] with a session of its own on this harness's store, with `opts`.
    /// Must refuse, with `InvalidArgument`, what [`LimiterBuilder::connect`] refuses:
    /// [`LimiterOptions::builder`] does it for URL stores, [`LimiterOptions::check`] for
    /// `Limiter::from_backend`.
    async fn connect(&self, opts: LimiterOptions) -> Result<Limiter>;

    /// Ends every session in the store behind the library's back (lease revocation, session
    /// expiry): every permit must report lost, every wait must fail.
    async fn revoke_sessions(&self);

    /// Number of queue entries (holders and waiters) of semaphore `sem`, read from the store
    /// as directly as the store allows; 0 if the semaphore does not exist.
    async fn queue_entries(&self, sem: &str) -> usize;

    /// Starts a holder of one permit of the existing semaphore `sem` that can be killed
    /// without any chance to clean up; returns once it holds. [`DoomedHolder::hold_in_task`]
    /// is the in-process one.
    async fn spawn_holder(&self, sem: &str) -> DoomedHolder;
}

/// Runs `fut` to completion on a new multi-thread Tokio runtime with 2 workers (what
/// `#[tokio::test(flavor = "multi_thread", worker_threads = 2)]` does); each test generated by
/// [`contract_suite!`](crate::contract_suite) runs its case with it. Like any runtime's
/// `block_on`, it panics when called from inside a Tokio runtime.
pub fn block_on<F: Future>(fut: F) -> F::Output {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("cannot build the Tokio runtime of a contract test: {e}"));
    runtime.block_on(fut)
}

/// `rate_contract_suite!(module, HarnessType)`: every rate-limit case of
/// [`testing::rate_cases`](crate::testing::rate_cases) on one backend, as
/// [`contract_suite!`](crate::contract_suite) does for semaphores (same [`Harness`]; the
/// backend must keep rate limits, see [`Backend::rate_store`](crate::backend::Backend::rate_store)).
///
/// The list of cases lives here and only here.
#[macro_export]
macro_rules! rate_contract_suite {
    ($module:ident, $harness:ty $(,)?) => {
        $crate::rate_contract_suite!(@cases $module, $harness;
            rate_gcra_decisions,
            rate_shared_between_limiters,
            rate_costs,
            rate_windows,
            rate_ban,
            rate_quota_storage,
            rate_warm_up,
            rate_set_quota_is_live,
            rate_reset,
            rate_wait,
            rate_check_all,
            rate_bad_input,
            rate_request_counts,
            rate_closed,
            rate_exact_under_contention,
            rate_write_each,
        );
    };
    (@cases $module:ident, $harness:ty; $($case:ident),* $(,)?) => {
        $crate::contract_suite!(@run $module, $harness, rate_cases; $($case),*);
    };
}

/// `contract_suite!(module, HarnessType)` runs every contract case on one backend: it expands
/// to `mod module { ... }` with one `#[test]` per case, named `module::case` (for example
/// `module::fifo_order`), each starting a fresh `HarnessType` (see
/// [`testing::Harness`](crate::testing::Harness)) and running the case of the same name in
/// [`testing::cases`](crate::testing::cases) within
/// [`TEST_LIMIT`](crate::testing::TEST_LIMIT). `HarnessType` is resolved from the
/// invoking module. Needs the `testing` feature; the module doc of
/// [`testing`](crate::testing) has an example.
///
/// The list of cases lives here and only here: a new case is added once.
#[macro_export]
macro_rules! contract_suite {
    ($module:ident, $harness:ty $(,)?) => {
        $crate::contract_suite!(@cases $module, $harness;
            safety_under_load,
            fifo_order,
            weighted,
            try_acquire,
            timeouts,
            cancelled_waits_leave_nothing,
            capacity_mismatch,
            set_capacity,
            holder_dies,
            close,
            status_counts,
            bad_input,
            lost,
            request_counts,
            fencing_tokens,
            drop_releases,
            announcements,
            adaptive_steps_from_outcomes,
            adaptive_controller_takeover,
            adaptive_bad_input,
        );
    };
    (@cases $module:ident, $harness:ty; $($case:ident),* $(,)?) => {
        $crate::contract_suite!(@run $module, $harness, cases; $($case),*);
    };
    (@run $module:ident, $harness:ty, $set:ident; $($case:ident),* $(,)?) => {
        mod $module {
            // The harness type is named in the invoking module.
            #[allow(unused_imports)]
            use super::*;
            $(
                #[test]
                fn $case() {
                    $crate::testing::block_on(async {
                        let harness =
                            <$harness as $crate::testing::Harness>::start().await;
                        $crate::testing::within(
                            concat!(stringify!($case), " (whole test)"),
                            $crate::testing::TEST_LIMIT,
                            $crate::testing::$set::$case(&harness),
                        )
                        .await;
                    });
                }
            )*
        }
    };
}
