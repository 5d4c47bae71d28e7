//! One pass of the slow scan (its schedule is the crate's sweeper's,
//! [`crate::backend::sweeper`]): finds expired rate-limit keys that no live sweeper remembers
//! (their writer died or closed before the expiry, or remembered too many) and deletes them,
//! with the same revision check as the sweep.
//!
//! [`FIRST_SCAN`](crate::backend::sweeper::scan::FIRST_SCAN) after this backend's first rate-limit
//! write (so a restarted process cleans up after its previous life soon), then every
//! [`SCAN_INTERVAL`](crate::backend::sweeper::SCAN_INTERVAL): every key under
//! `<root>/rk/` is read in pages of [`PAGE`] (serializable reads: any member answers, no
//! consensus round), paced at [`PAGES_PER_SEC`], so a scan is a steady trickle, never a
//! burst. A key whose stored `\n@<expires_at>` plus [`SCAN_MARGIN`] has passed is deleted at
//! the revision read (a write since fails the check). The margin is larger than the sweep's:
//! the write time is unknown here, and a key left a few seconds longer costs nothing. Keys without
//! the suffix (written with a lease by an older version, or by something else) are left alone.

use super::client::kv;
use super::sweep_state::{EtcdSweep, PER_TXN};
use crate::backend::expiry::{nanos, split_expiry, unix_nanos_now};
use crate::backend::sweeper::Remembered;
use crate::stats::RequestKind;
use etcd_client::GetOptions;
use std::time::Duration;

/// Keys per read.
pub(super) const PAGE: i64 = 512;
/// Most scan requests (reads and deletes) per second.
pub(super) const PAGES_PER_SEC: u32 = 5;
/// Wait past a key's `expires_at` before the scan deletes it.
pub(super) const SCAN_MARGIN: Duration = Duration::from_secs(10);

/// The first key after every key that starts with `prefix` (etcd's range end of a prefix).
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0] // every key
}

/// One pass over every key under the prefix; `remembered` keys are the sweep's.
pub(super) async fn scan(
    etcd: &EtcdSweep,
    remembered: &Remembered<i64>,
    pace: &mut tokio::time::Interval,
) {
    let end = prefix_end(&etcd.prefix);
    let mut from = etcd.prefix.as_bytes().to_vec();
    let (mut read, mut deleted) = (0usize, 0usize);
    loop {
        pace.tick().await;
        let opts = GetOptions::new()
            .with_range(end.clone())
            .with_limit(PAGE)
            .with_serializable();
        etcd.stats.count(RequestKind::Range);
        let (member, client) = etcd.endpoints.pick();
        let page = tokio::time::timeout(
            etcd.request_timeout,
            kv(&client).get(from.clone(), Some(opts)),
        )
        .await;
        let resp = match page {
            Ok(Ok(resp)) => resp,
            other => {
                etcd.endpoints.failed(member);
                let error = match other {
                    Ok(Err(e)) => e.to_string(),
                    _ => "timed out".to_string(),
                };
                tracing::debug!(%error, "scan of rate-limit keys stopped; next scan later");
                return;
            }
        };
        let now = unix_nanos_now();
        let mut stale = Vec::new();
        for kv in resp.kvs() {
            read += 1;
            let Ok(key) = std::str::from_utf8(kv.key()) else {
                continue;
            };
            if remembered.contains(key) {
                continue; // the sweep removes it
            }
            let (_, Some(expires_at)) = split_expiry(kv.value().to_vec()) else {
                continue;
            };
            if expires_at.saturating_add(nanos(SCAN_MARGIN)) <= now {
                stale.push((key.to_string(), kv.mod_revision()));
            }
        }
        for batch in stale.chunks(PER_TXN) {
            pace.tick().await;
            deleted += etcd.delete_at(batch.to_vec()).await.0;
        }
        match resp.kvs().last() {
            Some(last) if resp.more() => {
                from = last.key().to_vec();
                from.push(0);
            }
            _ => break,
        }
    }
    tracing::debug!(read, deleted, "scan of rate-limit keys done");
}

#[cfg(test)]
mod tests {
    use super::prefix_end;

    #[test]
    fn a_prefix_ends_at_its_last_byte_plus_one() {
        assert_eq!(prefix_end("cl/rk/"), b"cl/rk0".to_vec());
        assert_eq!(prefix_end("a\u{7f}"), b"a\x80".to_vec());
        assert_eq!(String::from_utf8_lossy(&prefix_end("")), "\u{0}");
    }
}
