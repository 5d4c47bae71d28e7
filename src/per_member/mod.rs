//! Capacities per live member (issue 41): a semaphore whose capacity is
//! `ceil(per_member × live Limiters that have it open)`, within bounds.
//!
//! The pure part: the config and its arithmetic (`config.rs`). The parts with a store: what a
//! member announces (`announced.rs`) on the board named in `names.rs`, the task that keeps the
//! announcement and, in the one Limiter holding the controller seat (`adaptive/seat.rs`),
//! counts the members and stores the capacity (`control.rs`), opening one (`open.rs`), what a
//! Limiter keeps of one it has open (`membership.rs`), and reading it (`status.rs`).

mod announced;
pub(crate) mod config;
mod control;
pub(crate) mod membership;
pub(crate) mod names;
pub(crate) mod open;
mod status;

pub use config::PerMember;
pub use status::PerMemberStatus;
