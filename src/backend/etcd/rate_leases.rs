//! Leases that make idle rate-limit keys vanish: one lease per expiry bucket, shared by every
//! key of that bucket, so a million keys cost a few lease grants, not a million.
//!
//! A key whose state is worth nothing from `expires_at` on is put with a lease whose deadline
//! lies in `[e, e + slack]`, where `e = max(expires_at, now + MIN_LEFT, now + etcd's minimum
//! TTL)` and `slack = max(2 s, (e − now) / 8)`: a cached lease in that window is reused, else
//! one is granted with TTL `floor(e − now + slack)` whole seconds. That TTL is at least
//! `e − now` and ends at most 1 s before the bucket's top, so a fresh lease serves the writes
//! of the next `slack − 1 s` (≥ 1 s) too; a 1 s slack would leave a whole-second TTL just past
//! `e` and a grant per write. A lease's deadline is measured on the local clock from the
//! *send* time of its grant, and etcd starts the TTL only when it receives the grant (and a
//! leader change only extends it), so etcd never deletes a key before its `expires_at`.
//!
//! Bound: a key vanishes at most `slack` plus etcd's lease expiry lag (its expiry check runs
//! every 500 ms) after `max(expires_at, write time + etcd's minimum TTL)`. With a keys'
//! horizon `h = expires_at − now`, a steady stream of writes grants about one lease per
//! `max(1 s, h / 8 − 1 s)`.
//!
//! These leases are not the session's: never kept alive, never revoked. The cache drops
//! leases about to expire and holds at most [`MAX_CACHED`].

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::backend::lock;

const SEC: u64 = 1_000_000_000;
/// Smallest bucket width: one TTL granule (1 s) more than the reuse span it leaves.
const MIN_SLACK: u64 = 2 * SEC;
/// A lease is reused only while at least this much of it is left, so a write sent with it
/// reaches etcd before it expires (if not, the write fails with "lease not found" and is sent
/// again with a fresh lease).
pub(super) const MIN_LEFT: Duration = Duration::from_millis(500);
/// Most leases remembered; past that the earliest deadline is forgotten (it still expires).
pub(super) const MAX_CACHED: usize = 1024;

/// Unix time now in ns, from the same clock the callers' `expires_at` comes from.
pub(super) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// The deadlines a key expiring at `expires_at` accepts, and the TTL of a new lease for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Bucket {
    /// Earliest acceptable deadline (Unix ns).
    pub lo: u64,
    /// Latest acceptable deadline (Unix ns).
    pub hi: u64,
    /// TTL to ask for, in whole seconds.
    pub ttl_secs: i64,
}

/// etcd's largest lease TTL (`MaxLeaseTTL`, about 285 years).
pub(super) const MAX_TTL_SECS: i64 = 9_000_000_000;

/// The bucket of a key expiring at `expires_at`, written at `now`, on a server whose smallest
/// TTL is `min_ttl_ns` (0 while unknown); `None` past etcd's largest TTL (such a key is put
/// without a lease: kept, never deleted early).
pub(super) fn bucket(expires_at: u64, now: u64, min_ttl_ns: u64) -> Option<Bucket> {
    let floor = now
        .saturating_add(MIN_LEFT.as_nanos() as u64)
        .max(now.saturating_add(min_ttl_ns));
    let e = expires_at.max(floor);
    let ahead = e - now;
    let slack = (ahead / 8).max(MIN_SLACK);
    let ttl_secs = (ahead.saturating_add(slack) / SEC).max(1);
    if ttl_secs > MAX_TTL_SECS as u64 {
        return None;
    }
    Some(Bucket {
        lo: e,
        hi: e.saturating_add(slack),
        ttl_secs: ttl_secs as i64,
    })
}

/// The leases granted so far, by deadline.
#[derive(Debug, Default)]
pub(super) struct RateLeases {
    by_deadline: Mutex<BTreeMap<u64, i64>>,
    /// etcd's smallest TTL in ns, learnt from a grant it raised (0 until then).
    min_ttl_ns: AtomicU64,
    /// Held while granting, so writers of one bucket wait for one grant instead of each
    /// granting its own.
    pub granting: tokio::sync::Mutex<()>,
}

impl RateLeases {
    /// The bucket of a key expiring at `expires_at`, written now.
    pub(super) fn bucket(&self, expires_at: u64) -> Option<Bucket> {
        bucket(expires_at, unix_now(), self.min_ttl_ns.load(Relaxed))
    }

    /// A remembered lease whose deadline lies in the bucket (the earliest such one), after
    /// forgetting the ones too close to expiry to be used.
    pub(super) fn find(&self, b: &Bucket) -> Option<i64> {
        let mut map = lock(&self.by_deadline);
        let usable_from = unix_now().saturating_add(MIN_LEFT.as_nanos() as u64);
        *map = map.split_off(&usable_from);
        map.range(b.lo..=b.hi).next().map(|(_, lease)| *lease)
    }

    /// Remembers a lease etcd granted with `granted_ttl_secs` for a grant sent at `sent`
    /// (Unix ns), asked for `asked_ttl_secs`.
    pub(super) fn add(&self, lease: i64, sent: u64, asked_ttl_secs: i64, granted_ttl_secs: i64) {
        if granted_ttl_secs > asked_ttl_secs {
            // etcd raised it to its minimum: ask for buckets at least that far out from now on.
            let min = (granted_ttl_secs.max(0) as u64).saturating_mul(SEC);
            self.min_ttl_ns.fetch_max(min, Relaxed);
        }
        let deadline = sent.saturating_add((granted_ttl_secs.max(0) as u64).saturating_mul(SEC));
        let mut map = lock(&self.by_deadline);
        map.insert(deadline, lease);
        while map.len() > MAX_CACHED {
            map.pop_first();
        }
    }

    /// Forgets leases etcd no longer has ("lease not found").
    pub(super) fn forget(&self, leases: &[i64]) {
        lock(&self.by_deadline).retain(|_, l| !leases.contains(l));
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.by_deadline).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_700_000_000 * SEC;

    #[test]
    fn a_new_lease_covers_the_expiry_and_lies_in_its_own_bucket() {
        for ahead in [
            0,
            SEC / 10,
            SEC,
            2 * SEC,
            3 * SEC / 2,
            1_980_000_000,
            2_999_999_999,
            16 * SEC,
            17_300_000_000,
            60 * SEC,
            86_400 * SEC,
        ] {
            for min_ttl in [0, SEC, 2 * SEC] {
                let b = bucket(NOW + ahead, NOW, min_ttl).unwrap();
                let deadline = NOW + b.ttl_secs as u64 * SEC;
                assert!(deadline >= NOW + ahead, "never before expires_at ({ahead})");
                assert!(deadline >= NOW + min_ttl);
                assert!(
                    (b.lo..=b.hi).contains(&deadline),
                    "a fresh lease serves its own bucket ({ahead}, {min_ttl}): {b:?}"
                );
                let slack = b.hi - b.lo;
                assert!(slack >= MIN_SLACK && slack <= (ahead.max(min_ttl) / 8).max(MIN_SLACK));
                assert!(
                    deadline >= b.lo + slack - SEC,
                    "and the writes of the next second or more ({ahead}, {min_ttl}): {b:?}"
                );
            }
        }
    }

    #[test]
    fn past_or_near_expiries_get_a_lease_with_time_left() {
        let b = bucket(NOW - 5 * SEC, NOW, 0).unwrap();
        assert_eq!(b.lo, NOW + MIN_LEFT.as_nanos() as u64);
        assert_eq!(b.ttl_secs, 2);
        let b = bucket(0, NOW, 2 * SEC).unwrap();
        assert_eq!((b.lo, b.ttl_secs), (NOW + 2 * SEC, 4));
    }

    #[test]
    fn expiries_past_etcds_largest_ttl_get_no_lease() {
        assert_eq!(bucket(u64::MAX, NOW, 0), None);
        let b = bucket(NOW + 1000 * 86_400 * SEC, NOW, 0).unwrap();
        assert!(b.ttl_secs >= 1000 * 86_400 && b.ttl_secs <= MAX_TTL_SECS);
    }

    #[test]
    fn the_cache_reuses_within_the_bucket_and_stays_bounded() {
        let leases = RateLeases::default();
        let now = unix_now();
        leases.add(7, now, 3, 3);
        let bucket = |at| leases.bucket(at).unwrap();
        let b = bucket(now + 2 * SEC);
        assert_eq!(leases.find(&b), Some(7));
        // A key expiring after the lease's deadline cannot use it.
        assert_eq!(leases.find(&bucket(now + 4 * SEC)), None);
        // A key expiring much earlier would vanish too late with it.
        leases.add(8, now, 60, 60);
        assert_eq!(leases.find(&bucket(now + 2 * SEC)), Some(7));
        leases.forget(&[7]);
        assert_eq!(leases.find(&bucket(now + 2 * SEC)), None);
        // Expired ones are dropped on lookup.
        leases.add(9, now - 10 * SEC, 1, 1);
        leases.find(&b);
        assert_eq!(leases.len(), 1);
        for i in 0..(MAX_CACHED as i64 + 10) {
            leases.add(100 + i, now + i as u64, 100, 100);
        }
        assert_eq!(leases.len(), MAX_CACHED);
    }

    #[test]
    fn a_raised_ttl_moves_later_buckets_out() {
        let leases = RateLeases::default();
        let now = unix_now();
        leases.add(1, now, 1, 2);
        let b = leases.bucket(now).unwrap();
        // Asks for more than the minimum from now on, so the next lease serves later writes.
        assert!(b.lo >= now + 2 * SEC && b.ttl_secs >= 3, "{b:?}");
    }
}
