//! The contract cases: what a cluster-wide semaphore means (docs/design.md describes it), each
//! an async function generic over the [`Harness`](crate::testing::Harness) and run on every
//! backend by [`contract_suite!`](crate::contract_suite). They use the public API only, and
//! panic (through `assert!`) on the first broken promise.
//!
//! A catalogue of independent cases (each readable alone, none calling another) that a backend
//! author reads as one contract, one file per topic below `cases/`; `setup.rs` holds the steps
//! they all start with. This file only names them, at the paths the suite runs them by.

mod announcements;
mod bad_input;
mod capacity;
mod grants;
mod load;
mod loss;
mod setup;
mod shrink;
mod status;
mod waits;

pub use announcements::announcements;
pub use bad_input::bad_input;
pub use capacity::{capacity_mismatch, set_capacity};
pub use grants::{fencing_tokens, fifo_order, try_acquire, weighted};
pub use load::safety_under_load;
pub use loss::{close, drop_releases, holder_dies, lost};
pub use shrink::shrink;
pub use status::{request_counts, status_counts};
pub use waits::{cancelled_waits_leave_nothing, timeouts};
