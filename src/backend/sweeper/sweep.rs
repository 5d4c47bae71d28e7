//! The sweep: sleeps until the earliest remembered key is due (plus the store's gather time,
//! at most [`IDLE`]), takes up to a round of due keys and has the store delete them.

use super::store::{Core, SweepStore};
use crate::backend::expiry::{nanos, unix_nanos_now, MIN_MARGIN};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Longest sleep of the task (it also looks whether its session ended).
const IDLE: Duration = Duration::from_secs(1);

// Nothing is due sooner than MIN_MARGIN after it is remembered, so no wake-up is needed when a
// key is: the task looks at least every IDLE.
const _: () = assert!(MIN_MARGIN.as_nanos() >= IDLE.as_nanos());

/// Completes when `end` is cancelled; never without one.
async fn ended(end: &Option<CancellationToken>) {
    match end {
        Some(t) => t.cancelled().await,
        None => std::future::pending().await,
    }
}

pub(super) async fn run<S: SweepStore>(core: Arc<Core<S>>) {
    loop {
        let session_end = core.store.session_end();
        let pause = core.remembered.next_due().map_or(IDLE, |d| {
            let start = d.saturating_add(nanos(S::GATHER));
            Duration::from_nanos(start.saturating_sub(unix_nanos_now())).min(IDLE)
        });
        tokio::select! {
            biased;
            _ = core.stop.cancelled() => return,
            _ = ended(&session_end) => continue, // the store drops that session's client
            _ = tokio::time::sleep(pause) => {}
        }
        // No connection (no session): the records wait for the next one.
        let Some(conn) = core.store.connection() else {
            continue;
        };
        let session_end = core.store.session_end();
        let due = core.remembered.take_due(unix_nanos_now(), S::ROUND);
        if due.is_empty() {
            continue;
        }
        // Kept only where a round can be cut short, to put its keys back.
        let kept = session_end.as_ref().map(|_| due.clone());
        tokio::select! {
            biased;
            _ = core.stop.cancelled() => return,
            // The session ended under the round: its keys wait for the next session.
            _ = ended(&session_end) => {
                for (key, target) in kept.into_iter().flatten() {
                    if let Some(target) = S::retry(target) {
                        core.remembered.again(&key, target);
                    }
                }
            }
            () = core.store.delete(conn, due, &core.remembered) => {}
        }
    }
}
