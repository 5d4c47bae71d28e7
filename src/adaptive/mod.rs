//! Adaptive capacities (issue 31): a semaphore whose stored capacity a controller adjusts from
//! the outcomes its holders report.
//!
//! The pure parts: a window of outcomes (`window.rs`, summed by each Limiter and merged across
//! the cluster) and the controller's step (`algorithm.rs`: AIMD and a latency gradient with a
//! protected baseline). The parts with a store: each Limiter's window in progress
//! (`reporter.rs`), the window task that announces it and, in the one Limiter elected
//! controller, steps the capacity (`control.rs`), opening one (`open.rs`), what a Limiter
//! keeps of one it has open (`adaptivity.rs`), the names of its store objects (`names.rs`) and
//! the controller seat (`seat.rs`, shared with `per_member/`).

pub(crate) mod adaptivity;
pub mod algorithm;
pub(crate) mod config;
mod control;
pub(crate) mod names;
pub(crate) mod open;
pub(crate) mod reporter;
pub(crate) mod seat;
#[cfg(test)]
mod simulation;
pub mod window;

#[allow(deprecated)]
pub use algorithm::Algorithm;
pub use algorithm::{step, Aimd, Bounds, CapacityAlgorithm, Gradient, Memory, Step};
pub use config::{Adaptive, MAX_WINDOW, MIN_WINDOW};
// Defined as `Decision` in control.rs; public as `CapacityDecision`, so that it is not
// mistaken for the rate limits' `clusterlimit::Decision`.
pub use control::Decision as CapacityDecision;
pub use open::AdaptiveStatus;
pub use window::{Outcome, WindowSummary};

/// Old name of [`CapacityDecision`]; using it warns (`clusterlimit::Decision` is a rate limit's
/// decision, another type).
///
/// ```compile_fail
/// #![deny(deprecated)]
/// let _: Option<clusterlimit::adaptive::Decision> = None;
/// ```
#[deprecated(since = "0.1.0", note = "renamed to `CapacityDecision`")]
pub type Decision = CapacityDecision;
