//! What one Limiter knows of its rate limits: each limit's quota and version, and per key the
//! last state the store showed (`cell.rs`), kept apart from the handles (`rate_limit/`) so that
//! `LimiterInner` can own it without an import cycle.

mod cell;
mod combine;
mod joint;
mod pace;
mod registry;

pub(crate) use cell::{learn, Enqueued, KeyCell, Start};
pub(crate) use combine::{Combiner, Sender as WriteSender};
pub(crate) use joint::{JointCall, JointGroup, JointQueue};
pub(crate) use registry::{LimitShared, RateRegistry};

/// Counts of rate-limit decisions by where they were made.
#[derive(Debug, Default)]
pub(crate) struct RateCounts {
    pub(crate) batches: std::sync::atomic::AtomicU64,
    pub(crate) local_answers: std::sync::atomic::AtomicU64,
}
