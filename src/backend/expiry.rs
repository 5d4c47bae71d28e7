//! When a stored rate-limit state may be deleted, and how a store keeps its expiry beside it:
//! shared by the stores that delete idle keys themselves (etcd, ZooKeeper) rather than by a
//! per-key TTL.
//!
//! A key's stored bytes are the caller's state followed by `\n@<expires_at>` (Unix ns,
//! decimal): [`with_expiry`] / [`split_expiry`]. The suffix lets any process sweep a key whose
//! writer died before its expiry; callers only ever see their own bytes.
//!
//! A state is deleted no sooner than [`due`]: its `expires_at` plus a margin (at least
//! [`MIN_MARGIN`], else a tenth of the state's lifetime at the write) that protects a writer
//! whose clock is behind ours: it still sees the state as unexpired a little longer.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Shortest wait past `expires_at` before a delete.
pub(crate) const MIN_MARGIN: Duration = Duration::from_secs(1);

/// Unix time now in nanoseconds (0 if the clock is before 1970): the clock callers'
/// `expires_at` comes from.
pub(crate) fn unix_nanos_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// `d` in nanoseconds, saturating.
pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// When a state written at `now` that expires at `expires_at` may be deleted.
pub(crate) fn due(now: u64, expires_at: u64) -> u64 {
    let tenth = expires_at.saturating_sub(now) / 10;
    let margin = tenth.max(nanos(MIN_MARGIN));
    expires_at.saturating_add(margin)
}

/// The stored bytes of a key: `value` + `\n@<expires_at>`.
pub(crate) fn with_expiry(value: &[u8], expires_at: u64) -> Vec<u8> {
    let mut data = Vec::with_capacity(value.len() + 22);
    data.extend_from_slice(value);
    data.extend_from_slice(format!("\n@{expires_at}").as_bytes());
    data
}

/// A key's stored bytes as (the caller's value, `expires_at`). The suffix is the last `\n@`
/// (it holds only digits), so any value splits back exactly; data without a readable suffix
/// (written by something else, or before stores kept it) is all value, with no expiry known.
pub(crate) fn split_expiry(mut data: Vec<u8>) -> (Vec<u8>, Option<u64>) {
    let at = data.windows(2).rposition(|w| w == b"\n@");
    let Some(at) = at else {
        return (data, None);
    };
    let expires_at = std::str::from_utf8(&data[at + 2..])
        .ok()
        .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|t| t.parse::<u64>().ok());
    if expires_at.is_some() {
        data.truncate(at);
    }
    (data, expires_at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_waits_a_margin_past_expiry() {
        let s = 1_000_000_000u64;
        assert_eq!(due(0, 2 * s), 3 * s, "at least one second");
        assert_eq!(due(0, 100 * s), 110 * s, "a tenth of the lifetime");
        assert_eq!(due(50 * s, 10 * s), 11 * s, "already expired: the minimum");
        assert_eq!(due(0, u64::MAX), u64::MAX);
    }

    #[test]
    fn stored_bytes_split_back_exactly() {
        for value in [&b""[..], b"1 g 5 0 7 9", b"x\n@12", b"\n@", b"a\n@b\n"] {
            let data = with_expiry(value, 1234);
            assert_eq!(
                split_expiry(data),
                (value.to_vec(), Some(1234)),
                "{value:?}"
            );
        }
        assert_eq!(split_expiry(b"plain".to_vec()), (b"plain".to_vec(), None));
        assert_eq!(split_expiry(b"x\n@1a".to_vec()), (b"x\n@1a".to_vec(), None));
        assert_eq!(split_expiry(b"x\n@".to_vec()), (b"x\n@".to_vec(), None));
    }
}
