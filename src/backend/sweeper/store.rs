//! What a store implements for the sweeper ([`SweepStore`]), and what the sweeper's tasks
//! share ([`Core`]).

use super::remembered::Remembered;
use std::time::Duration;
use tokio::time::Interval;
use tokio_util::sync::CancellationToken;

/// The calls of one store that the sweeper makes: deleting due keys at the version written,
/// and scanning for expired keys nobody remembers.
#[async_trait::async_trait]
pub(crate) trait SweepStore: Send + Sync + 'static {
    /// What a delete must find to apply (the version written, and what else the store needs).
    type Target: Copy + Send + Sync + 'static;
    /// What a round deletes with (a client of the current session, or nothing).
    type Conn: Send;

    /// Most keys taken per round (between two looks at the clock and the stop token).
    const ROUND: usize;
    /// A round starts this long after its earliest key is due, so keys that fall due
    /// meanwhile share its requests (zero: each key as soon as it is due).
    const GATHER: Duration;
    /// Most scan requests per second: a scan is a steady trickle, never a burst.
    const SCAN_REQUESTS_PER_SEC: u32;

    /// What a round deletes with now; `None`: not now (no session), the records wait.
    fn connection(&self) -> Option<Self::Conn>;

    /// A token cancelled when a round must stop midway (ZooKeeper: its session ended; its
    /// keys are then put back with [`retry`](Self::retry)). Default: nothing stops a round.
    fn session_end(&self) -> Option<CancellationToken> {
        None
    }

    /// The target a delete whose outcome is unknown is tried again with; `None`: not again
    /// (left to the scan or the key's next writer). Default: the same target.
    fn retry(target: Self::Target) -> Option<Self::Target> {
        Some(target)
    }

    /// Deletes each due key still at its target; the ones whose outcome is unknown go back
    /// to `remembered` ([`Remembered::again`]).
    async fn delete(
        &self,
        conn: Self::Conn,
        due: Vec<(String, Self::Target)>,
        remembered: &Remembered<Self::Target>,
    );

    /// One pass of the slow scan: deletes expired keys that `remembered` does not hold (the
    /// sweep deletes those), one request per tick of `pace`.
    async fn scan(&self, remembered: &Remembered<Self::Target>, pace: &mut Interval);
}

/// What the sweep and the scan tasks share.
pub(super) struct Core<S: SweepStore> {
    pub(super) remembered: Remembered<S::Target>,
    pub(super) stop: CancellationToken,
    pub(super) store: S,
}
