//! Where rate limits live in Redis. One hash holds every limit's quota; rate-limit keys are
//! spread over buckets, each with its own copy of the quotas, because a script may only touch
//! keys of one hash slot: every key of a bucket shares its slot through a hash tag
//! (`{PREFIX:bN}`), so one script call checks a key's quota and writes the key at once.
//!
//! One Redis (or Sentinel's primary) has one bucket; a Redis Cluster [`CLUSTER_BUCKETS`], so
//! keys spread over its primaries. Keys with a `{tag}` land in one bucket whatever their limit
//! (`key_hash.rs`), so `check_all` over them is one all-or-nothing call.
//!
//! The layout is a function of the prefix alone (every client must find a key in one place,
//! whatever cluster it sees), so a cluster's buckets are few, to keep the keys of a batch in
//! few script calls, and each bucket's tag is chosen to hash into its own share of the slot
//! space: on primaries that split the slots evenly, the buckets split evenly too.

use crate::backend::key_hash::key_hash;

/// Buckets on a Redis Cluster: as many on each primary of 2, 3, 4, 6 or 12 (slots split
/// evenly), and few, since a batch costs one script call per bucket it touches (with 256, a
/// batch of 16 keys was 16 calls of one key).
pub(super) const CLUSTER_BUCKETS: u32 = 12;

/// Hash slots of a Redis Cluster.
const SLOTS: u32 = 16384;

/// How long Redis keeps a state past its expiry: room for the clients' and the server's clocks
/// to differ without forgetting a state that still counts. Until then a version stays
/// writable (`RateStore::version_life`).
pub(super) const GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// The key names of one store (prefix) and its buckets' hash tags (`{PREFIX:bN}`).
#[derive(Debug, Clone)]
pub(super) struct Keys {
    prefix: String,
    tags: Vec<String>,
}

impl Keys {
    pub(super) fn new(prefix: &str, buckets: u32) -> Keys {
        let buckets = buckets.max(1);
        let tags = (0..buckets)
            .map(|b| match buckets {
                1 => format!("{{{prefix}:b{b}}}"),
                _ => spread_tag(prefix, b, buckets),
            })
            .collect();
        Keys {
            prefix: prefix.to_string(),
            tags,
        }
    }

    pub(super) fn buckets(&self) -> u32 {
        self.tags.len() as u32
    }

    /// The hash of every limit's quota (the reference the buckets copy).
    pub(super) fn quotas(&self) -> String {
        format!("{{{}}}:quotas", self.prefix)
    }

    /// The bucket that keeps `key` of `limit`.
    pub(super) fn bucket_of(&self, limit: &str, key: &str) -> u32 {
        (key_hash(limit, key) % self.tags.len() as u64) as u32
    }

    /// Bucket `bucket`'s copy of the quotas.
    pub(super) fn bucket_quotas(&self, bucket: u32) -> String {
        format!("{}:quotas", self.tags[bucket as usize])
    }

    /// The Redis key of `key` of `limit` (limit names hold no `:`, so none collide).
    pub(super) fn key(&self, limit: &str, key: &str) -> String {
        self.key_in(self.bucket_of(limit, key), limit, key)
    }

    /// [`Keys::key`] when its bucket is known already.
    pub(super) fn key_in(&self, bucket: u32, limit: &str, key: &str) -> String {
        format!("{}:k:{limit}:{key}", self.tags[bucket as usize])
    }
}

/// The tag of bucket `b` of `buckets`: `{PREFIX:bB}`, or `{PREFIX:bB.N}` with the first N
/// that puts it in the middle half of the bucket's share of the slots (so a primary's range
/// ending a little off the even split still holds it). A prefix holding `}` ends the tag early,
/// so no N moves it: then the plain tag.
fn spread_tag(prefix: &str, b: u32, buckets: u32) -> String {
    let (lo, hi) = (b * SLOTS / buckets, (b + 1) * SLOTS / buckets);
    let quarter = (hi - lo) / 4;
    let fits = |tag: &str| (lo + quarter..hi - quarter).contains(&slot(tag.as_bytes()));
    let first = format!("{{{prefix}:b{b}}}");
    if fits(&first) {
        return first;
    }
    (1u32..10_000)
        .map(|n| format!("{{{prefix}:b{b}.{n}}}"))
        .find(|tag| fits(tag))
        .unwrap_or(first)
}

/// The hash slot of a Redis key: CRC16 (XMODEM) of its `{tag}` if it has a non-empty one,
/// else of the whole key, modulo 16384.
pub(super) fn slot(key: &[u8]) -> u32 {
    let tagged = key.iter().position(|&c| c == b'{').and_then(|open| {
        let len = key[open + 1..].iter().position(|&c| c == b'}')?;
        (len > 0).then(|| &key[open + 1..open + 1 + len])
    });
    let mut crc: u16 = 0;
    for &byte in tagged.unwrap_or(key) {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    u32::from(crc) % SLOTS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_shares_its_bucket_slot_tag() {
        let keys = Keys::new("app", CLUSTER_BUCKETS);
        let b = keys.bucket_of("per-ip", "1.2.3.4");
        let key = keys.key("per-ip", "1.2.3.4");
        assert!(key.starts_with(&format!("{{app:b{b}")), "{key}");
        assert!(key.ends_with("}:k:per-ip:1.2.3.4"), "{key}");
        assert_eq!(slot(key.as_bytes()), slot(keys.bucket_quotas(b).as_bytes()));
    }

    #[test]
    fn slots_are_redis_own() {
        // CLUSTER KEYSLOT's answers.
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"{user1000}.following"), slot(b"{user1000}.followers"));
        // CRC16/XMODEM's check value, below 16384 already.
        assert_eq!(slot(b"123456789"), 0x31C3);
    }

    #[test]
    fn cluster_buckets_split_evenly_over_even_primaries() {
        for prefix in ["app", "clusterlimit", "x{y", "t-42"] {
            let keys = Keys::new(prefix, CLUSTER_BUCKETS);
            for primaries in [2u32, 3, 4, 6, 12] {
                let mut per = vec![0; primaries as usize];
                for b in 0..CLUSTER_BUCKETS {
                    let s = slot(keys.bucket_quotas(b).as_bytes());
                    per[(s * primaries / SLOTS) as usize] += 1;
                }
                let want = CLUSTER_BUCKETS / primaries;
                assert!(
                    per.iter().all(|&n| n == want),
                    "{prefix} on {primaries} primaries: {per:?}"
                );
            }
        }
        // No tag can move: still a layout, in one slot.
        assert_eq!(Keys::new("a}b", CLUSTER_BUCKETS).buckets(), CLUSTER_BUCKETS);
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
        assert_eq!(
            used.len() as u32,
            CLUSTER_BUCKETS,
            "keys spread over every bucket"
        );
    }

    #[test]
    fn one_redis_has_one_bucket() {
        let keys = Keys::new("app", 1);
        assert_eq!(keys.bucket_of("l", "k"), 0);
        assert_eq!(keys.key("l", "{t}x"), "{app:b0}:k:l:{t}x");
    }
}
