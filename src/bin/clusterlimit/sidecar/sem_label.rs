//! The label of every per-semaphore metric family (`metrics.rs`, `adaptive_metrics.rs`).

use prometheus_client::encoding::EncodeLabelSet;

/// `{semaphore="NAME"}`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SemLabel {
    pub semaphore: String,
}
