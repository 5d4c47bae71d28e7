//! One sweeper for the stores that delete idle rate-limit keys themselves (etcd, ZooKeeper;
//! a store with a native per-key expiry, as Redis's `PEXPIRE`, needs none): for every key this
//! backend wrote it remembers the version to delete at and the due time (`expires_at` plus the
//! margin of [`expiry`](super::expiry)), deletes it once due **if unchanged since**, and runs a
//! slow paced scan for keys that no live sweeper remembers (their writer died or closed before
//! their expiry, or remembered too many).
//!
//! The schedule, the records and the loops are here ([`sweep`], [`scan`]); a store implements
//! only its calls ([`SweepStore`]): how a round deletes due keys at their versions, and one
//! pass of its scan. Everything stops with the backend (`close` does not wait for future
//! expiries).

mod remembered;
mod scan;
mod store;
mod sweep;

pub(crate) use remembered::Remembered;
pub(crate) use scan::SCAN_INTERVAL;
pub(crate) use store::SweepStore;

use crate::backend::start_once::StartOnce;
use std::sync::Arc;
use store::Core;
use tokio_util::sync::CancellationToken;

/// The sweeper of one backend; its tasks (the sweep, the scan) start with the first key
/// remembered.
pub(crate) struct Sweeper<S: SweepStore> {
    core: Arc<Core<S>>,
    started: StartOnce,
}

impl<S: SweepStore> std::fmt::Debug for Sweeper<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sweeper")
            .field("records", &self.core.remembered.len())
            .finish()
    }
}

impl<S: SweepStore> Sweeper<S> {
    /// `stop`: cancelled when the backend stops.
    pub(crate) fn new(store: S, stop: CancellationToken) -> Sweeper<S> {
        Sweeper {
            core: Arc::new(Core {
                remembered: Remembered::default(),
                stop,
                store,
            }),
            started: StartOnce::default(),
        }
    }

    /// The store's part (what it keeps for its calls).
    pub(crate) fn store(&self) -> &S {
        &self.core.store
    }

    /// Whether the backend stopped (then nothing more is remembered).
    pub(crate) fn stopped(&self) -> bool {
        self.core.stop.is_cancelled()
    }

    /// Remembers each `(key, target, due)`, replacing what was remembered of the key, and
    /// starts the tasks on the first call.
    pub(crate) fn remember<'a>(
        &self,
        records: impl IntoIterator<Item = (&'a str, S::Target, u64)>,
    ) {
        if self.stopped() {
            return;
        }
        self.core.remembered.insert_all(records);
        self.started.start(|h| {
            h.spawn(sweep::run(self.core.clone()));
            h.spawn(scan::run(self.core.clone()));
        });
    }
}
