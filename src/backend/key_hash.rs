//! Where a rate-limit key is placed, for every store that spreads keys (the sharded store's
//! ring, Redis Cluster's buckets): pure code with a hash fixed here (FNV-1a, then a 64-bit
//! finalizer), so every client, whatever its build, places every key in the same place, and
//! keys sharing a `{tag}` land together.

/// The hash tag of a key, Redis Cluster's rule: the text between the first `{` and the first
/// `}` after it, if not empty.
pub(crate) fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let rest = &key[open + 1..];
    let close = rest.find('}')?;
    Some(&rest[..close]).filter(|t| !t.is_empty())
}

/// What places a key: its hash tag alone if it has one (so tagged keys of *any* limit land
/// together, which is what `check_all` needs), else the limit and the key (so one key name
/// used by many limits spreads over the clusters).
pub(crate) fn key_hash(limit: &str, key: &str) -> u64 {
    match hash_tag(key) {
        Some(tag) => hash(tag.as_bytes()),
        None => {
            let mut bytes = Vec::with_capacity(limit.len() + 1 + key.len());
            bytes.extend_from_slice(limit.as_bytes());
            // Limit names cannot hold a NUL, so (limit, key) pairs never collide here.
            bytes.push(0);
            bytes.extend_from_slice(key.as_bytes());
            hash(&bytes)
        }
    }
}

/// 64-bit FNV-1a with murmur3's finalizer: FNV alone spreads short, similar inputs (`id#1`,
/// `id#2`) poorly over the ring.
pub(crate) fn hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}
