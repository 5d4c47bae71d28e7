//! [`decide`]: one check against one key's state. PLACEHOLDER until the algorithms land.

use super::{Decision, KeyState, Quota, UnixNanos};

/// The outcome of [`decide`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    /// The answer.
    pub decision: Decision,
    /// The state to store, `Some` iff the store must change (an admitted check of cost ≥ 1, or
    /// a denial that starts a ban). Its `tag` is 0: the writer sets its own.
    pub state: Option<KeyState>,
    /// When the key's state (the new one, or the old one if unchanged) is worth nothing any
    /// more: back to full and not banned. A store may forget the key after this instant.
    pub expires_at: UnixNanos,
}

/// Decides a check of `cost` (0: a peek) on a key whose stored state is `state` (`None`:
/// absent, i.e. full), at the caller's time `now`, clamped to the state's `stamp` so that time
/// never runs backwards per key.
///
/// `quota` must be valid and `cost ≤ quota.max_cost()`: the caller checks both.
pub fn decide(quota: &Quota, state: Option<&KeyState>, cost: u64, now: UnixNanos) -> Verdict {
    let _ = (quota, state, cost, now);
    Verdict {
        decision: Decision {
            allowed: true,
            limit: quota.max_cost(),
            remaining: 0,
            retry_after: None,
            reset_after: std::time::Duration::ZERO,
        },
        state: None,
        expires_at: now,
    }
}
