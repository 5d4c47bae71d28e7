//! What a rate limit means, written once as pure code (like [`crate::queue`] for semaphores):
//! [`decide`] maps (quota, stored state, cost, now) to a [`Decision`] and the state to store.
//! Every backend only reads and compare-and-swaps these states, so all stores mean the same.
//!
//! Charges and refunds after the fact, which may run a key into debt: `adjust.rs`. Slices of a
//! hot key's units taken in one write and spent locally, never over-admitting: `lease.rs`. A hot key decided locally and reported every
//! ~100 ms, over-admitting by a bounded amount (the approximate mode): `approximate.rs`.
//!
//! Algorithms: GCRA (`gcra.rs`, redis-cell's), fixed and sliding windows (`window.rs`), both
//! answering in `take.rs`'s terms, and the ban that wraps each (`decide.rs`). The quota is
//! `quota.rs` (what can be wrong with one: `quota_checks.rs`; its priority classes `reserves.rs`), a key's stored state
//! `state.rs` (with its flows' shares, `flows.rs`, decided within in `flow_decide.rs`), the
//! answer `decision.rs`.

mod adjust;
mod approximate;
mod decide;
mod decision;
mod flow_decide;
pub(crate) mod flows;
mod gcra;
pub mod headers;
mod lease;
pub(crate) mod quota;
mod quota_checks;
pub(crate) mod reserves;
mod state;
mod take;
mod window;

pub use adjust::{adjust, debt, Adjustment};
pub use approximate::{
    approximable, local_after_report, local_start, report_usage, scaled, start_local, Report,
};
pub use decide::{decide, Verdict};
pub use decision::Decision;
pub use flow_decide::{decide_as, decide_flow};
pub use flows::{FlowEntry, FlowId, FlowTable, MAX_FLOWS, MAX_FLOW_LEN};
pub use lease::{count_plain_check, leasable, return_lease, take_lease, Lease, LeaseVerdict};
pub use quota::{
    Algorithm, Quota, COLD_FACTORS, DEFAULT_COLD_FACTOR, MAX_PERIOD, MAX_RATE, MIN_PERIOD,
};
pub use reserves::{Reserves, MAX_CLASSES, MAX_CLASS_LEN};
pub use state::{KeyState, Meter, SlotLog, UnixNanos, SLOT_LOG_KEPT};

#[cfg(test)]
mod adjust_tests;
#[cfg(test)]
mod approximate_tests;
#[cfg(test)]
mod flow_tests;
#[cfg(test)]
mod lease_tests;
#[cfg(test)]
mod reserve_tests;
