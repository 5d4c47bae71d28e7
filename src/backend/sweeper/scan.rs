//! The slow scan's schedule: a pass [`FIRST_SCAN`] after the first write, then
//! [`SCAN_INTERVAL`] after the end of each, paced at the store's requests per second.

use super::store::{Core, SweepStore};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::{Instant, MissedTickBehavior};

/// Delay of the first scan after the first write (so a restarted process cleans up after its
/// previous life soon).
pub(crate) const FIRST_SCAN: Duration = Duration::from_secs(5);
/// Pause between the end of a scan and the next.
pub(crate) const SCAN_INTERVAL: Duration = Duration::from_secs(300);

pub(super) async fn run<S: SweepStore>(core: Arc<Core<S>>) {
    let mut next = Instant::now() + FIRST_SCAN;
    let mut pace = tokio::time::interval(Duration::from_secs(1) / S::SCAN_REQUESTS_PER_SEC);
    pace.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = core.stop.cancelled() => return,
            _ = tokio::time::sleep_until(next) => {}
        }
        tokio::select! {
            _ = core.stop.cancelled() => return,
            () = core.store.scan(&core.remembered, &mut pace) => {}
        }
        next = Instant::now() + SCAN_INTERVAL;
    }
}
