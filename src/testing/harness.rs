//! What a backend under test provides ([`Harness`]: start a store, connect a Limiter with
//! [`LimiterOptions`], kill a holder) and how a case runs ([`block_on`], [`TEST_LIMIT`]).

use super::holder::DoomedHolder;
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::limiter::{Limiter, LimiterBuilder};
use crate::timing::MIN_SESSION_TTL;
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
    /// Leases of hot keys ([`LimiterBuilder::hot_key_leases`]).
    pub hot_key_leases: Option<bool>,
    /// Hot keys decided locally ([`LimiterBuilder::approximate_hot_keys`]).
    pub approximate_hot_keys: Option<bool>,
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

    /// Turns leases of hot keys on or off.
    pub fn hot_key_leases(mut self, on: bool) -> Self {
        self.hot_key_leases = Some(on);
        self
    }

    /// Turns the approximate mode of hot keys on or off.
    pub fn approximate_hot_keys(mut self, on: bool) -> Self {
        self.approximate_hot_keys = Some(on);
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
        if let Some(on) = self.hot_key_leases {
            b = b.hot_key_leases(on);
        }
        if let Some(on) = self.approximate_hot_keys {
            b = b.approximate_hot_keys(on);
        }
        b
    }

    /// `InvalidArgument` for what [`LimiterBuilder::connect`] refuses (a session TTL below
    /// [`Limiter::MIN_SESSION_TTL`](crate::Limiter::MIN_SESSION_TTL), a zero request timeout;
    /// a bad owner is refused by
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
            .is_some_and(|t| t.is_zero() || t > crate::Limiter::MAX_REQUEST_TIMEOUT)
        {
            return Err(Error::invalid(format!(
                "request timeout must be above zero and at most {:?}",
                crate::Limiter::MAX_REQUEST_TIMEOUT
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

    /// Whether the store lowers a held weight ([`Permit::shrink_to`](crate::Permit::shrink_to),
    /// [`Backend::shrink_entry`](crate::backend::Backend::shrink_entry)); `false`: the contract
    /// checks instead that it refuses with `InvalidArgument` and changes nothing.
    const SHRINKS_PERMITS: bool = true;

    /// Whether the store lowers a held weight on a fair semaphore too (every store of the
    /// crate does); `false`, the default: the fair contract checks that it refuses clearly.
    const SHRINKS_FAIR_PERMITS: bool = false;

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
