//! Background tasks a backend starts on first use, once (the rate-limit sweepers of etcd and
//! ZooKeeper start with the first key written, not at connect).

use std::sync::atomic::{AtomicBool, Ordering};

/// Whether the tasks were started.
#[derive(Debug, Default)]
pub(crate) struct StartOnce(AtomicBool);

impl StartOnce {
    /// Calls `spawn` with the current runtime the first time. Outside a runtime (which an async
    /// call never is) nothing starts, and the next call tries again.
    pub(crate) fn start(&self, spawn: impl FnOnce(&tokio::runtime::Handle)) {
        if self.0.swap(true, Ordering::AcqRel) {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(h) => spawn(&h),
            Err(_) => self.0.store(false, Ordering::Release),
        }
    }
}
