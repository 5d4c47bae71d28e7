//! One quota version per limit over several clusters. Each cluster stores its own copy of a
//! limit's quota, at a version of its own; the rate layer holds one version per limit. So the
//! sharded store shows the rate layer a version made from the quota's *bytes* (their hash,
//! the same on every cluster), and keeps, per (limit, cluster), the cluster's version of the
//! quota it last saw there and verified against the first cluster's: a write is sent with
//! that cluster version only if the quota it was computed with is that one.
//!
//! Equal bytes are the same quota, so two versions that only differ in number mean nothing
//! to the rate layer: a state computed under quota Q is right under Q whenever it is stored.

use crate::backend::key_hash::hash;
use crate::backend::{lock, Versioned};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

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

/// Per limit and cluster: the cluster's version of the limit's quota, and the shown version of
/// its bytes, once verified to hold the first cluster's quota (or read from the first cluster).
/// Looked up by `&str` on every write, so no allocation on the request path.
#[derive(Debug, Default)]
pub(super) struct Known {
    versions: Mutex<HashMap<String, Vec<Option<Entry>>>>,
}

/// (the cluster's version of the quota, the shown version of its bytes).
type Pair = (u64, u64);

#[derive(Debug, Clone, Copy)]
struct Entry {
    pair: Pair,
    /// When it was last compared with the first cluster's quota (or claimed for that).
    checked: Instant,
}

impl Known {
    /// Records that `cluster` holds `quota` (verified).
    pub(super) fn learn(&self, limit: &str, cluster: usize, quota: &Versioned) {
        let mut versions = lock(&self.versions);
        let per_cluster = match versions.get_mut(limit) {
            Some(v) => v,
            None => versions.entry(limit.to_string()).or_default(),
        };
        if per_cluster.len() <= cluster {
            per_cluster.resize(cluster + 1, None);
        }
        per_cluster[cluster] = Some(Entry {
            pair: (quota.version, shown(&quota.value)),
            checked: Instant::now(),
        });
    }

    fn get(&self, limit: &str, cluster: usize) -> Option<Pair> {
        lock(&self.versions)
            .get(limit)
            .and_then(|v| v.get(cluster).copied().flatten())
            .map(|e| e.pair)
    }

    /// Whether `cluster`'s copy was last compared with the first cluster's `every` ago or
    /// more; if so, the comparison is claimed (one caller makes it, the others go on).
    pub(super) fn recheck_due(&self, limit: &str, cluster: usize, every: Duration) -> bool {
        let mut versions = lock(&self.versions);
        let Some(Some(e)) = versions.get_mut(limit).and_then(|v| v.get_mut(cluster)) else {
            return false;
        };
        let now = Instant::now();
        if now.duration_since(e.checked) < every {
            return false;
        }
        e.checked = now;
        true
    }

    /// The cluster version to write with, if `cluster` holds the quota shown as `shown`.
    pub(super) fn version_for(&self, limit: &str, cluster: usize, shown: u64) -> Option<u64> {
        self.get(limit, cluster)
            .filter(|(_, s)| *s == shown)
            .map(|(v, _)| v)
    }

    /// Whether `cluster`'s quota version `version` was verified (the shown version follows).
    pub(super) fn verified(&self, limit: &str, cluster: usize, version: u64) -> bool {
        self.get(limit, cluster).is_some_and(|(v, _)| v == version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_kept_per_limit_and_cluster() {
        let known = Known::default();
        let q = |value: &str, version| Versioned {
            value: value.as_bytes().to_vec(),
            version,
        };
        known.learn("l", 1, &q("a", 7));
        assert_eq!(known.version_for("l", 1, shown(b"a")), Some(7));
        assert_eq!(
            known.version_for("l", 1, shown(b"b")),
            None,
            "another quota"
        );
        assert_eq!(
            known.version_for("l", 0, shown(b"a")),
            None,
            "another cluster"
        );
        assert_eq!(
            known.version_for("m", 1, shown(b"a")),
            None,
            "another limit"
        );
        assert!(known.verified("l", 1, 7) && !known.verified("l", 1, 8));
        known.learn("l", 1, &q("b", 9));
        assert_eq!(known.version_for("l", 1, shown(b"b")), Some(9));
        assert_eq!(known.version_for("l", 1, shown(b"a")), None, "replaced");
        assert_eq!(present(&q("a", 7)).version, shown(b"a"));
        assert!(
            !known.recheck_due("l", 1, Duration::from_secs(60)),
            "just learned"
        );
        assert!(known.recheck_due("l", 1, Duration::ZERO), "claimed");
        assert!(
            !known.recheck_due("m", 1, Duration::ZERO),
            "nothing known to recheck"
        );
        assert_ne!(shown(b"a"), shown(b"b"));
    }
}
