//! Adaptive capacities (issue 31): a semaphore whose stored capacity a controller adjusts from
//! the outcomes its holders report. This module holds the pure parts: a window of outcomes
//! (`window.rs`, summed by each Limiter and merged across the cluster) and the controller's
//! step (`algorithm.rs`: AIMD and a latency gradient with a protected baseline).

pub mod algorithm;
pub mod window;

pub use algorithm::{step, Aimd, Algorithm, Bounds, Gradient, Memory, Step};
pub use window::{Outcome, WindowSummary};
