//! One pass of the slow scan (its schedule is the crate's sweeper's,
//! [`crate::backend::sweeper`]): finds expired keys that no live sweeper remembers (their
//! writer died or closed before the expiry) and deletes them, with the same version check as
//! the sweep.
//!
//! It visits every limit this backend has written keys of:
//! [`FIRST_SCAN`](crate::backend::sweeper::scan::FIRST_SCAN) after the first write (so a restarted
//! process cleans up after its previous life soon), then every
//! [`SCAN_INTERVAL`](crate::backend::sweeper::SCAN_INTERVAL). Per limit: one `getChildren`, then one `getData` per key this backend
//! does not remember itself, and a delete at the read version when the stored expiry (the
//! node's `\n@<expires_at>` suffix, see `nodes.rs`) plus the sweep's margin has passed, the
//! node's modification time standing in for the write time. Requests are paced at
//! [`READS_PER_SEC`], so a scan is a steady trickle, never a burst. A listing too large for
//! one reply (ZooKeeper's `jute.maxbuffer`, about 100,000 keys per limit) fails and that limit
//! is skipped (logged).
//!
//! A delete here is as safe as the sweep's: the state at the read version has expired for
//! every writer within the margin, and a node written since fails the version check.

use super::sweep_state::{Target, ZkSweep};
use crate::backend::expiry::{due, split_expiry, unix_nanos_now};
use crate::backend::sweeper::Remembered;
use crate::stats::RequestKind;
use tokio::time::Interval;
use zookeeper_client as zk;

/// Most scan requests per second.
pub(super) const READS_PER_SEC: u32 = 50;

/// One pass over every limit this backend has written keys of; `remembered` keys are the
/// sweep's.
pub(super) async fn scan(shared: &ZkSweep, remembered: &Remembered<Target>, pace: &mut Interval) {
    for limit in shared.limits() {
        scan_limit(shared, remembered, &limit, pace).await;
        shared.scan_ended();
    }
}

/// A request bounded by the request timeout; `None` on timeout.
async fn bounded<T>(
    shared: &ZkSweep,
    f: impl std::future::Future<Output = Result<T, zk::Error>>,
) -> Option<Result<T, zk::Error>> {
    tokio::time::timeout(shared.request_timeout, f).await.ok()
}

async fn scan_limit(
    shared: &ZkSweep,
    remembered: &Remembered<Target>,
    limit: &str,
    pace: &mut Interval,
) {
    pace.tick().await;
    // The client is taken anew for each request: none is held past its session's end.
    let Some(client) = shared.client() else {
        return;
    };
    shared.scan_started();
    shared.stats.count(RequestKind::Range);
    let children = match bounded(shared, client.list_children(limit)).await {
        Some(Ok(c)) => c,
        Some(Err(zk::Error::NoNode)) => return,
        other => {
            tracing::debug!(
                limit,
                ?other,
                "scan: listing the keys of a rate limit failed"
            );
            return;
        }
    };
    drop(client);
    let (mut read, mut deleted) = (0usize, 0usize);
    for child in children {
        let path = format!("{limit}/{child}");
        if shared.is_ours(&path, remembered) {
            continue; // the sweep removes it
        }
        pace.tick().await;
        let Some(client) = shared.client() else {
            return;
        };
        shared.stats.count(RequestKind::Range);
        read += 1;
        let Some(Ok((data, stat))) = bounded(shared, client.get_data(&path)).await else {
            continue;
        };
        let (_, Some(expires_at)) = split_expiry(data) else {
            continue; // not written by us: no expiry known
        };
        let written = u64::try_from(stat.mtime)
            .unwrap_or(0)
            .saturating_mul(1_000_000);
        if due(written, expires_at) > unix_nanos_now() {
            continue;
        }
        pace.tick().await;
        shared.stats.count(RequestKind::Delete);
        if let Some(Ok(())) = bounded(shared, client.delete(&path, Some(stat.version))).await {
            deleted += 1;
        }
    }
    tracing::debug!(limit, read, deleted, "scan of a rate limit's keys done");
}
