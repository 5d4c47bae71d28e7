//! One quota version per limit over several clusters. Each cluster stores its own copy of a
//! limit's quota, at a version of its own; the rate layer holds one version per limit. So the
//! sharded store shows the rate layer a version made from the quota's *bytes* (their hash,
//! the same on every cluster), and keeps, per (limit, cluster), the cluster's version of the
//! quota it last saw there and verified against the first cluster's: a write is sent with
//! that cluster version only if the quota it was computed with is that one.
//!
//! Equal bytes are the same quota, so two versions that only differ in number mean nothing
//! to the rate layer: a state computed under quota Q is right under Q whenever it is stored.

use super::ring::hash;
use crate::backend::{lock, Versioned};
use std::collections::HashMap;
use std::sync::Mutex;

/// The version the rate layer sees for a quota's bytes (never 0).
pub(super) fn shown(quota: &[u8]) -> u64 {
    hash(quota).max(1)
}

/// `quota` as the rate layer sees it.
pub(super) fn present(quota: &Versioned) -> Versioned {
    Versioned {
        value: quota.value.clone(),
        version: shown(&quota.value),
    }
}

/// Per (limit, cluster): the cluster's version of the limit's quota, and the shown version of
/// its bytes, once verified to hold the first cluster's quota (or read from the first cluster).
#[derive(Debug, Default)]
pub(super) struct Known {
    versions: Mutex<HashMap<(String, usize), (u64, u64)>>,
}

impl Known {
    /// Records that `cluster` holds `quota` (verified).
    pub(super) fn learn(&self, limit: &str, cluster: usize, quota: &Versioned) {
        lock(&self.versions).insert(
            (limit.to_string(), cluster),
            (quota.version, shown(&quota.value)),
        );
    }

    /// The cluster version to write with, if `cluster` holds the quota shown as `shown`.
    pub(super) fn version_for(&self, limit: &str, cluster: usize, shown: u64) -> Option<u64> {
        lock(&self.versions)
            .get(&(limit.to_string(), cluster))
            .filter(|(_, s)| *s == shown)
            .map(|(v, _)| *v)
    }

    /// Whether `cluster`'s quota version `version` was verified (the shown version follows).
    pub(super) fn verified(&self, limit: &str, cluster: usize, version: u64) -> bool {
        lock(&self.versions)
            .get(&(limit.to_string(), cluster))
            .is_some_and(|(v, _)| *v == version)
    }
}
