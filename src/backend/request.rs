//! One acquire request as a backend receives it, and what its enqueue answers.

use crate::lost::LostSignal;

/// One acquire request, as handed to [`Backend::enqueue`](crate::backend::Backend::enqueue).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EntryRequest {
    /// Semaphore name (validated).
    pub name: String,
    /// Weight (validated, at least 1).
    pub permits: u32,
    /// Owner label shown in status.
    pub owner: String,
    /// Unique id chosen by the caller before the first attempt, so a retried enqueue whose
    /// reply was lost finds its entry again instead of queuing twice.
    pub id: String,
    /// Whether the caller waits when the entry does not hold at once (`false` for
    /// `try_acquire`): a backend may prepare for waiting (start a watch) only then.
    pub wait: bool,
    /// Flow, class and weight on a fair semaphore (see [`crate::fair`]); `None` for a plain
    /// acquire (on a fair semaphore: the default flow and the first class). Only sent to a
    /// backend whose [`keeps_fair_semaphores`](crate::backend::Backend::keeps_fair_semaphores)
    /// is true.
    pub fair: Option<crate::fair::FairTag>,
}

/// The result of [`Backend::enqueue`](crate::backend::Backend::enqueue).
#[derive(Debug, Clone)]
pub struct Enqueued {
    /// Store-assigned token: queue position and fencing token.
    pub token: u64,
    /// Whether the entry holds its permits already (no wait needed).
    pub granted: bool,
    /// Fires when this entry can no longer be trusted.
    pub lost: LostSignal,
}
