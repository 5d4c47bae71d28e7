//! The rate-limit contract: what a cluster-wide rate limit means on any store, one `pub async
//! fn` per case over a [`Harness`](crate::testing::Harness), run by
//! [`rate_contract_suite!`](crate::rate_contract_suite) on each backend that keeps rate limits.
//! The algorithms' arithmetic is tested without a store (`src/rate`, `tests/rate_model.rs`);
//! these cases check what the store and the generic layer add: sharing between Limiters,
//! atomicity, quota storage and changes, costs, and bad input.
//!
//! A catalogue of independent cases read as one contract, like `cases.rs`: one file per topic
//! below `rate_cases/`, `setup.rs` holding the steps they all start with. This file only names
//! them, at the paths the suite runs them by.
//!
//! Quotas here are slow (per minute, or windows of a year) so that a loaded CI machine cannot
//! turn a planned denial into an admission.

mod approximate;
mod calls;
mod decisions;
mod flows;
mod leases;
mod load;
mod quotas;
mod refusals;
mod reserves;
mod settle;
mod setup;
mod write_each;

pub use approximate::{rate_approximate_excludes_leases, rate_approximate_under_contention};
pub use calls::{rate_check_all, rate_wait};
pub use decisions::{
    rate_ban, rate_costs, rate_gcra_decisions, rate_shared_between_limiters, rate_windows,
};
pub use flows::{rate_flows_share_under_contention, rate_flows_steady_split, rate_flows_stored};
pub use leases::{
    rate_leases_exact_under_contention, rate_leases_follow_the_quota,
    rate_leases_given_back_on_close, rate_leases_spare_big_checks, rate_leases_spare_reservations,
};
pub use load::{rate_exact_under_contention, rate_request_counts};
pub use quotas::{rate_quota_storage, rate_reset, rate_set_quota_is_live, rate_warm_up};
pub use refusals::{rate_bad_input, rate_closed};
pub use reserves::{rate_reserve_stored, rate_reserve_under_contention};
pub use settle::{
    rate_debt_windows, rate_settle, rate_settle_exact_under_contention, rate_settle_refusals,
};
pub use write_each::rate_write_each;
