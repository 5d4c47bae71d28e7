//! The contract suite, for any [`Backend`](crate::backend::Backend): what a cluster-wide
//! semaphore means (strict FIFO, whole weighted grants, `try_acquire`, timeouts, cancelled
//! waits, stored capacity, `set_capacity`, dead holders, `close`, `status`, bad input, `lost()`,
//! request counts, fencing tokens, dropped permits, announcement boards, adaptive capacities,
//! capacities per member; see `docs/design.md`), written once as [`cases`] over a small
//! [`Harness`] and run by [`contract_suite!`](crate::contract_suite).
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
pub mod fair_cases;
mod harness;
mod holder;
mod max_tree;
pub mod per_member_cases;
pub mod rate_cases;
pub mod rate_history;
pub mod rate_store_cases;
pub mod settle_history;
mod util;
mod within;

pub use harness::{block_on, Harness, LimiterOptions, SHORT_TTL, TEST_LIMIT};
pub use holder::{DoomedHolder, Victim};
pub use util::{
    assert_still_waiting, entries_via_status, join, spawn_acquire, wait_entries, wait_status,
    within, POLL,
};

/// `rate_contract_suite!(module, HarnessType)` (or `…, HarnessType, rate_only)` for a store
/// without semaphores): every rate-limit case of
/// [`testing::rate_cases`](crate::testing::rate_cases) and every store case of
/// [`testing::rate_store_cases`](crate::testing::rate_store_cases) on one backend, as
/// [`contract_suite!`](crate::contract_suite) does for semaphores (same [`Harness`]; the
/// backend must keep rate limits, see [`Backend::rate_store`](crate::backend::Backend::rate_store)).
///
/// The list of cases lives here and only here.
#[macro_export]
macro_rules! rate_contract_suite {
    ($module:ident, $harness:ty $(,)?) => {
        $crate::rate_contract_suite!(@all $module, $harness;
            rate_store_cases::store_limits_beside_semaphores,
        );
    };
    // A store that keeps rate limits and no semaphores: every case but the one that opens
    // semaphores beside rate limits.
    ($module:ident, $harness:ty, rate_only $(,)?) => {
        $crate::rate_contract_suite!(@all $module, $harness;);
    };
    (@all $module:ident, $harness:ty; $($xset:ident :: $xcase:ident,)*) => {
        $crate::contract_suite!(@run $module, $harness;
            rate_cases::rate_gcra_decisions,
            rate_cases::rate_shared_between_limiters,
            rate_cases::rate_costs,
            rate_cases::rate_windows,
            rate_cases::rate_ban,
            rate_cases::rate_quota_storage,
            rate_cases::rate_warm_up,
            rate_cases::rate_set_quota_is_live,
            rate_cases::rate_reset,
            rate_cases::rate_wait,
            rate_cases::rate_check_all,
            rate_cases::rate_bad_input,
            rate_cases::rate_request_counts,
            rate_cases::rate_closed,
            rate_cases::rate_exact_under_contention,
            rate_cases::rate_reserve_stored,
            rate_cases::rate_reserve_under_contention,
            rate_cases::rate_flows_stored,
            rate_cases::rate_flows_share_under_contention,
            rate_cases::rate_flows_steady_split,
            rate_cases::rate_write_each,
            rate_cases::rate_settle,
            rate_cases::rate_settle_refusals,
            rate_cases::rate_debt_windows,
            rate_cases::rate_settle_exact_under_contention,
            rate_cases::rate_leases_exact_under_contention,
            rate_cases::rate_leases_follow_the_quota,
            rate_cases::rate_leases_spare_reservations,
            rate_cases::rate_leases_spare_big_checks,
            rate_cases::rate_leases_given_back_on_close,
            rate_cases::rate_approximate_under_contention,
            rate_cases::rate_approximate_excludes_leases,
            rate_store_cases::store_limits,
            rate_store_cases::store_compare_and_swap,
            rate_store_cases::store_quota_versions,
            rate_store_cases::store_batches_all_or_nothing,
            rate_store_cases::store_keys_kept_as_given_and_reset,
            rate_store_cases::store_idle_keys_vanish,
            rate_store_cases::store_rewritten_keys_stay,
            $($xset::$xcase,)*
        );
    };
}

/// `fair_contract_suite!(module, HarnessType)` runs the contract cases of fair semaphores
/// ([`testing::fair_cases`](crate::testing::fair_cases)) on one backend that keeps them, like
/// [`contract_suite!`](crate::contract_suite) does for plain semaphores;
/// `fair_contract_suite!(module, HarnessType, refused)` checks instead that a backend which
/// keeps none refuses them with a clear error. Needs the `testing` feature.
#[macro_export]
macro_rules! fair_contract_suite {
    ($module:ident, $harness:ty $(,)?) => {
        $crate::contract_suite!(@run $module, $harness;
            fair_cases::fair_safety_under_load,
            fair_cases::fair_busy_flow_delays_another_by_one_grant,
            fair_cases::fair_weights_share,
            fair_cases::fair_turns_at_capacity_one,
            fair_cases::fair_dead_holder_and_heavy_entry,
            fair_cases::fair_reserve_is_lent_and_returned,
            fair_cases::fair_shrink_keeps_holders,
            fair_cases::fair_permit_shrink,
            fair_cases::fair_bad_input,
        );
    };
    // A store that keeps no fair semaphores yet: it must refuse them clearly.
    ($module:ident, $harness:ty, refused $(,)?) => {
        $crate::contract_suite!(@run $module, $harness; fair_cases::fair_refused_where_not_kept,);
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
            shrink,
        );
    };
    (@cases $module:ident, $harness:ty; $($case:ident),* $(,)?) => {
        $crate::contract_suite!(@run $module, $harness;
            $(cases::$case,)*
            adaptive_cases::adaptive_steps_from_outcomes,
            adaptive_cases::adaptive_controller_takeover,
            adaptive_cases::adaptive_bad_input,
            per_member_cases::per_member_follows_members,
            per_member_cases::per_member_bounds,
            per_member_cases::per_member_refusals,
        );
    };
    (@run $module:ident, $harness:ty; $($set:ident :: $case:ident),* $(,)?) => {
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
