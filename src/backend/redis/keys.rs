//! Where rate limits live in Redis. One hash holds every limit's quota; rate-limit keys are
//! spread over buckets, each with its own copy of the quotas, because a script may only touch
//! keys of one hash slot: every key of a bucket shares its slot through a hash tag
//! (`{PREFIX:bN}`), so one script call checks a key's quota and writes the key at once.
//!
//! One Redis (or Sentinel's primary) has one bucket; a Redis Cluster [`CLUSTER_BUCKETS`], so
//! keys spread over its primaries. Keys with a `{tag}` land in one bucket whatever their limit
//! (`key_hash.rs`), so `check_all` over them is one all-or-nothing call.

use crate::backend::key_hash::key_hash;

/// Buckets on a Redis Cluster: enough that keys spread evenly over many primaries, few enough
/// that a quota change (one copy per bucket) stays cheap.
pub(super) const CLUSTER_BUCKETS: u32 = 256;

/// How long Redis keeps a state past its expiry: room for the clients' and the server's clocks
/// to differ without forgetting a state that still counts. Until then a version stays
/// writable (`RateStore::version_life`).
pub(super) const GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// The key names of one store (prefix) and its number of buckets.
#[derive(Debug, Clone)]
pub(super) struct Keys {
    prefix: String,
    buckets: u32,
}

impl Keys {
    pub(super) fn new(prefix: &str, buckets: u32) -> Keys {
        Keys {
            prefix: prefix.to_string(),
            buckets: buckets.max(1),
        }
    }

    pub(super) fn buckets(&self) -> u32 {
        self.buckets
    }

    /// The hash of every limit's quota (the reference the buckets copy).
    pub(super) fn quotas(&self) -> String {
        format!("{{{}}}:quotas", self.prefix)
    }

    /// The bucket that keeps `key` of `limit`.
    pub(super) fn bucket_of(&self, limit: &str, key: &str) -> u32 {
        (key_hash(limit, key) % u64::from(self.buckets)) as u32
    }

    /// Bucket `bucket`'s copy of the quotas.
    pub(super) fn bucket_quotas(&self, bucket: u32) -> String {
        format!("{{{}:b{bucket}}}:quotas", self.prefix)
    }

    /// The Redis key of `key` of `limit` (limit names hold no `:`, so none collide).
    pub(super) fn key(&self, limit: &str, key: &str) -> String {
        let bucket = self.bucket_of(limit, key);
        format!("{{{}:b{bucket}}}:k:{limit}:{key}", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_shares_its_bucket_slot_tag() {
        let keys = Keys::new("app", CLUSTER_BUCKETS);
        let b = keys.bucket_of("per-ip", "1.2.3.4");
        assert_eq!(
            keys.key("per-ip", "1.2.3.4"),
            format!("{{app:b{b}}}:k:per-ip:1.2.3.4")
        );
        assert!(keys.bucket_quotas(b).starts_with(&format!("{{app:b{b}}}")));
    }

    #[test]
    fn tagged_keys_of_any_limit_share_a_bucket() {
        let keys = Keys::new("app", CLUSTER_BUCKETS);
        for i in 0..100 {
            let tag = format!("{{user{i}}}");
            assert_eq!(
                keys.bucket_of("per-second", &format!("{tag}:s")),
                keys.bucket_of("per-day", &format!("{tag}:d"))
            );
        }
        let used: std::collections::HashSet<u32> = (0..2000)
            .map(|i| keys.bucket_of("l", &format!("k{i}")))
            .collect();
        assert!(used.len() > 200, "keys spread over {} buckets", used.len());
    }

    #[test]
    fn one_redis_has_one_bucket() {
        let keys = Keys::new("app", 1);
        assert_eq!(keys.bucket_of("l", "k"), 0);
        assert_eq!(keys.key("l", "{t}x"), "{app:b0}:k:l:{t}x");
    }
}
