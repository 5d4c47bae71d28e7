//! [`Decision`]: the answer to one check, with what a client needs to tell its caller.

use super::state::SlotLog;
use serde::Serialize;
use std::time::Duration;

/// The answer to a check of a rate limit.
///
/// `limit`, `remaining`, `retry_after` and `reset_after` mean what redis-cell's `CL.THROTTLE`
/// (and the IETF `RateLimit` header fields) mean:
///
/// ```
/// # async fn f(rl: clusterlimit::RateLimit) -> clusterlimit::Result<()> {
/// let d = rl.check("user-42").await?;
/// if !d.allowed {
///     let wait = d.retry_after.unwrap_or_default(); // Some iff denied
///     println!("429, Retry-After: {}", wait.as_secs_f64().ceil());
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Decision {
    /// Whether the request is admitted (and its cost consumed).
    pub allowed: bool,
    /// The most a key can take at once: GCRA's `burst`, a window's `limit`.
    pub limit: u64,
    /// How much more the key could take right now, after this decision.
    pub remaining: u64,
    /// When denied: how long until the same check could be admitted (at least, if others keep
    /// taking). `None` when allowed.
    pub retry_after: Option<Duration>,
    /// How long until the key is back to full (nothing consumed, no ban).
    pub reset_after: Duration,
    /// The key's slot log as this decision saw it: a reservation's refund needs it to know
    /// how far its slots have moved since (`adjust.rs`). Empty when the key was not read.
    #[serde(skip)]
    pub(crate) slots: SlotLog,
}

/// A `retry_after` this long means never: no quota's wait or ban comes near it (a cost above
/// what the stored quota admits at once is denied with `Duration::MAX`).
const NEVER: Duration = Duration::from_secs(1000 * 24 * 3600);

impl Decision {
    /// Whether this denial can never turn into an admission: the cost is above what the quota
    /// now stored admits at once (another client lowered it after the cost was checked), so
    /// its `retry_after` means never. A wait ends at such a denial instead of sleeping.
    pub fn never_admits(&self) -> bool {
        !self.allowed && self.retry_after.is_some_and(|r| r >= NEVER)
    }
}
