//! Giving back every lease when the Limiter closes (issue 43): what its leases have left goes
//! back to the keys (one write per key, as when a lease ends), so a Limiter shut down cleanly
//! costs the others nothing. A Limiter that dies instead loses at most its leases, for at
//! most their time.

use super::batch::send_lease_work;
use crate::limiter_inner::LimiterInner;
use crate::rate::UnixNanos;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// How often the close looks whether the returns were answered.
const POLL: Duration = Duration::from_millis(5);

/// Stops leasing, ends every lease this Limiter holds and gives back what they have left,
/// waiting for the answers at most as long as a rate-limit decision may take (twice the
/// request timeout). A lease asked meanwhile is given back once it comes.
pub(crate) async fn give_back_all(inner: &Arc<LimiterInner>) {
    if !inner.leasing() {
        return;
    }
    inner.set_leasing(false);
    let by = Instant::now() + inner.request_timeout * 2;
    loop {
        let cells = inner.rates.leased_cells();
        if cells.is_empty() || Instant::now() >= by {
            return;
        }
        for (limit, key, cell) in &cells {
            let (quota, version) = limit.quota();
            // Every lease ends now: what it has left is owed back.
            let unspent = cell.leases_ended(UnixNanos::MAX, version);
            inner.rates.count_unspent(unspent);
            send_lease_work(inner, limit, key, cell, &quota);
        }
        tokio::time::sleep(POLL).await;
    }
}
