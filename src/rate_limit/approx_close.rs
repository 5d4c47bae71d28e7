//! The approximate mode at `close` (`approx_report.rs`): local decisions stop, and each hot
//! key's reporter writes what was admitted here since its last report (one write per key),
//! so the key counts everything this Limiter admitted. A Limiter that dies instead leaves
//! that much uncounted: at most one report interval of its share.

use crate::limiter_inner::LimiterInner;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// How often the close looks whether the reporters are done.
const POLL: Duration = Duration::from_millis(5);

/// Stops deciding locally and waits, at most as long as a rate-limit decision may take
/// (twice the request timeout), for every key's last report.
pub(crate) async fn report_all(inner: &Arc<LimiterInner>) {
    if !inner.approximating() {
        return;
    }
    inner.set_approximating(false);
    let by = Instant::now() + inner.request_timeout * 2;
    while !inner.rates.approximate_cells().is_empty() && Instant::now() < by {
        tokio::time::sleep(POLL).await;
    }
}
