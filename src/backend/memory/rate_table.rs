//! The quotas and key states of one in-process store, under its lock: versions from one
//! counter (none is ever reused), expired keys swept at most once a second.

use crate::backend::{Current, Versioned};
use std::collections::{BTreeMap, HashMap};
use std::time::{SystemTime, UNIX_EPOCH};

/// How often expired keys are swept: amortised, so a call stays O(1) on average.
const SWEEP_EVERY_NS: u64 = 1_000_000_000;

#[derive(Debug, Default)]
pub(super) struct Rates {
    pub(super) limits: BTreeMap<String, Versioned>,
    pub(super) keys: HashMap<(String, String), Stored>,
    version: u64,
    next_sweep: u64,
}

#[derive(Debug)]
pub(super) struct Stored {
    pub(super) value: Versioned,
    pub(super) expires_at: u64,
}

fn unix_ns_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

impl Rates {
    pub(super) fn next_version(&mut self) -> u64 {
        self.version += 1;
        self.version
    }

    pub(super) fn current(&self, limit: &str, key: &str) -> Current {
        Current {
            quota: self.limits.get(limit).cloned(),
            key: self
                .keys
                .get(&(limit.to_string(), key.to_string()))
                .map(|s| s.value.clone()),
        }
    }

    pub(super) fn sweep(&mut self) {
        let now = unix_ns_now();
        if now >= self.next_sweep {
            self.keys.retain(|_, s| s.expires_at > now);
            self.next_sweep = now.saturating_add(SWEEP_EVERY_NS);
        }
    }

    /// Number of key states held (for tests of the sweep: `rate_key_count`, feature `testing`).
    #[cfg(feature = "testing")]
    pub(super) fn key_count(&self) -> usize {
        self.keys.len()
    }
}
