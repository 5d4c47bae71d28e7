//! Background removal of queue entries: what `Drop` of a `Permit` or of a cancelled or failed
//! acquire hands over, since `Drop` can neither await nor fail.
//!
//! **Invariant: an entry handed over here is removed, or its session ends; nothing in
//! between.** An entry left in the store while its session lives blocks every request behind
//! it (FIFO) or holds permits nobody will release, for as long as the process lives. So a
//! removal is retried, with capped and jittered backoff, for as long as the entry's session
//! lives, and it stops only when
//! * the store confirms the removal (removing an absent entry counts), or
//! * the entry's session is lost (the store drops its entries with it: an expired lease or
//!   session, or one we stopped keeping alive), or
//! * the Limiter is closed (closing ended the session).
//!
//! If the removal still cannot be confirmed [`GIVE_UP_AFTER_TTLS`] session TTLs after it was
//! handed over, the session itself is ended ([`Backend::end_session`]): revoked or closed when
//! the store answers, and no longer kept alive either way, so the store frees the entry within
//! one TTL for certain. The session's other permits then report `lost()`, as the contract says
//! for any lost session, and later calls start a new session.

use crate::backend::Backend;
use crate::backoff::Backoff;
use crate::error::Error;
use crate::lost::LostSignal;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// First pause after a failed removal; doubled after each failure up to [`MAX_DELAY`].
const FIRST_DELAY: Duration = Duration::from_millis(50);
/// Longest pause between two attempts: short next to any TTL, so a removal lands soon after
/// the store answers again.
const MAX_DELAY: Duration = Duration::from_secs(1);
pub(crate) use crate::timing::GIVE_UP_AFTER_TTLS;
// Between two attempts a removal never sleeps through a whole session TTL.
const _: () = assert!(MAX_DELAY.as_millis() < crate::timing::MIN_SESSION_TTL.as_millis());

/// One entry to remove, and the loss signal of the session it was written under (`None` when
/// its enqueue never answered: then the session current at hand-over is taken, the only one
/// the entry can belong to unless that one was lost, in which case the entry is gone anyway).
#[derive(Debug)]
struct Removal {
    name: Arc<str>,
    id: String,
    session: Option<LostSignal>,
}

/// Counters of the background removals, shown in [`RequestStats`](crate::RequestStats).
#[derive(Debug, Default)]
pub(crate) struct RemovalCounters {
    /// Removals handed over and not finished yet.
    pending: AtomicU64,
    /// Removals that have failed at least once and are not finished yet.
    failing: AtomicU64,
    /// Sessions ended because a removal could not be confirmed in time.
    sessions_ended: AtomicU64,
}

impl RemovalCounters {
    /// Removals in progress now.
    pub(crate) fn pending(&self) -> u64 {
        self.pending.load(Relaxed)
    }

    /// Sessions ended so far because a removal could not be confirmed.
    pub(crate) fn sessions_ended(&self) -> u64 {
        self.sessions_ended.load(Relaxed)
    }
}

/// Sends entries to remove to a background task. Cheap to clone; never blocks or panics.
#[derive(Debug, Clone)]
pub(crate) struct Releaser {
    tx: mpsc::UnboundedSender<Removal>,
    counters: Arc<RemovalCounters>,
}

impl Releaser {
    /// Starts the background task on `handle`.
    pub(crate) fn spawn(backend: Arc<dyn Backend>, handle: &tokio::runtime::Handle) -> Self {
        let (tx, mut rx) = mpsc::unbounded_channel::<Removal>();
        let counters = Arc::new(RemovalCounters::default());
        let shared = counters.clone();
        handle.spawn(async move {
            while let Some(removal) = rx.recv().await {
                tokio::spawn(remove_until_done(backend.clone(), removal, shared.clone()));
            }
        });
        Releaser { tx, counters }
    }

    /// Queues a removal of an entry written under the session `session` (if known). If the
    /// task is gone (the runtime shut down, so the process is ending), the session TTL frees
    /// the entry: nothing keeps that session alive any more.
    pub(crate) fn remove_later(&self, name: Arc<str>, id: String, session: Option<LostSignal>) {
        self.counters.pending.fetch_add(1, Relaxed);
        let removal = Removal { name, id, session };
        if self.tx.send(removal).is_err() {
            self.counters.pending.fetch_sub(1, Relaxed);
        }
    }

    /// A sink for a backend's orphaned entries. It holds the channel weakly, so a backend that
    /// keeps it does not keep the releaser (which holds the backend) alive.
    pub(crate) fn orphan_sink(&self) -> crate::backend::OrphanSink {
        let tx = self.tx.downgrade();
        let counters = Arc::downgrade(&self.counters);
        Arc::new(move |name: &str, id: &str, session: LostSignal| {
            if let (Some(tx), Some(counters)) = (tx.upgrade(), counters.upgrade()) {
                let releaser = Releaser { tx, counters };
                releaser.remove_later(name.into(), id.to_string(), Some(session));
            }
        })
    }

    /// The counters of the removals handed over so far.
    pub(crate) fn counters(&self) -> &RemovalCounters {
        &self.counters
    }
}

/// How a background removal ended.
#[derive(Debug, PartialEq, Eq)]
enum Done {
    /// The store confirmed it.
    Removed,
    /// The entry's session is gone, and the entry with it (or the Limiter was closed).
    SessionGone,
    /// Not confirmed in time: the session was ended.
    SessionEnded,
}

async fn remove_until_done(
    backend: Arc<dyn Backend>,
    removal: Removal,
    counters: Arc<RemovalCounters>,
) {
    let mut failed = false;
    let done = remove_with_backoff(&*backend, &removal, || {
        if !failed {
            failed = true;
            if counters.failing.fetch_add(1, Relaxed) == 0 {
                tracing::warn!(semaphore = %removal.name, id = %removal.id, "background removal of a queue entry failed; retrying until it is confirmed or its session ends");
            }
        }
    })
    .await;
    if done == Done::SessionEnded {
        counters.sessions_ended.fetch_add(1, Relaxed);
    }
    if failed {
        let still_failing = counters.failing.fetch_sub(1, Relaxed) - 1;
        if still_failing == 0 {
            let last = match done {
                Done::Removed => "the last was confirmed by the store",
                Done::SessionGone => "the last went with its session",
                Done::SessionEnded => {
                    "the last was not confirmed in time, so its session was ended"
                }
            };
            tracing::warn!(semaphore = %removal.name, id = %removal.id, "background removals of queue entries: none failing any more ({last})");
        }
    }
    counters.pending.fetch_sub(1, Relaxed);
}

/// Retries the removal under the rules of the module docs; `on_failure` is called after each
/// failed attempt.
async fn remove_with_backoff(
    backend: &dyn Backend,
    removal: &Removal,
    mut on_failure: impl FnMut(),
) -> Done {
    let session = match removal.session.clone() {
        Some(s) => Some(s),
        None => backend.session_signal().await,
    };
    let Some(session) = session else {
        // No live session: the entry, if it was ever written, went with the last one.
        return Done::SessionGone;
    };
    let give_up_at = Instant::now() + backend.session_ttl() * GIVE_UP_AFTER_TTLS;
    let mut backoff = Backoff::new(FIRST_DELAY, MAX_DELAY);
    let mut attempt = 0u32;
    loop {
        if session.is_lost() {
            return Done::SessionGone;
        }
        attempt += 1;
        match backend.remove(&removal.name, &removal.id).await {
            Ok(()) => return Done::Removed,
            Err(Error::SessionLost | Error::Closed) => return Done::SessionGone,
            Err(e) => {
                on_failure();
                tracing::debug!(semaphore = %removal.name, id = %removal.id, attempt, error = %e, "background removal failed; retrying");
            }
        }
        if Instant::now() >= give_up_at {
            if session.is_lost() {
                return Done::SessionGone;
            }
            tracing::error!(semaphore = %removal.name, id = %removal.id, attempt, "a queue entry's removal could not be confirmed within {GIVE_UP_AFTER_TTLS} session TTLs; ending the session so the store frees it (its other permits report lost)");
            backend.end_session(&session).await;
            return Done::SessionEnded;
        }
        let pause = backoff
            .pause()
            .min(give_up_at.saturating_duration_since(Instant::now()));
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = session.lost() => return Done::SessionGone,
        }
    }
}
