//! The approximate mode's reports (`approx_book.rs`; what one means is `rate/approximate.rs`):
//! while a key is hot, one task per key and Limiter writes, every ~100 ms (±20%), what was
//! admitted here and asked since the last report, in the key's batch (one request, shared
//! with whatever else the key writes then), and hands the answer — this Limiter's share and
//! the key as it stands — to the local meter. When the key cools down, or the Limiter
//! closes, it reports what is left and ends.

use super::approx_book::REPORT_EVERY;
use super::approx_usage::Usage;
use super::cell::{Answer, KeyCell};
use super::registry::LimitShared;
use crate::error::Result;
use crate::limiter_inner::LimiterInner;
use futures::future::BoxFuture;
use std::sync::Arc;
use tokio::time::Instant;

/// Sends one report in the key's next batch and waits for its answer (`batch.rs` makes it).
pub(crate) type SendReport = Box<dyn Fn(Usage) -> BoxFuture<'static, Result<Answer>> + Send + Sync>;

/// Starts the reporter of a key (the cell said it must), sending with `send`.
pub(crate) fn start_reporter(
    inner: &Arc<LimiterInner>,
    limit: &Arc<LimitShared>,
    cell: &Arc<KeyCell>,
    send: SendReport,
) {
    let (inner, limit, cell) = (inner.clone(), limit.clone(), cell.clone());
    inner.runtime.clone().spawn(async move {
        // The first report at once: it gives the share checks are decided on.
        while let Some(first) = report_once(&inner, &limit, &cell, &send).await {
            if !inner.approximating() {
                // Closing: what is left goes now.
                continue;
            }
            // After a first report, the next comes sooner: holders starting together learn
            // of each other's demand within a quarter interval.
            let every = if first {
                REPORT_EVERY / 4
            } else {
                REPORT_EVERY
            };
            tokio::time::sleep(every.mul_f64(0.8 + 0.4 * fastrand::f64())).await;
        }
    });
}

/// Writes one report of the key: whether it was a first one, or `None` when the reporter
/// ends (nothing left to report on a key no longer hot, or the Limiter closed).
async fn report_once(
    inner: &Arc<LimiterInner>,
    limit: &Arc<LimitShared>,
    cell: &Arc<KeyCell>,
    send: &SendReport,
) -> Option<bool> {
    let stopping = !inner.approximating() || inner.is_closed();
    let (quota, _) = limit.quota();
    let due = cell.approx(|b| b.usage_due(&quota, stopping, Instant::now()));
    let usage = due?;
    let got = send(usage).await;
    let (quota, _) = limit.quota();
    match got.ok().and_then(|a| a.report) {
        Some(r) => {
            inner.rates.count_approx_report();
            let at = (inner.now_ns(), Instant::now());
            cell.approx(|b| b.reported(&quota, r, at));
        }
        None => cell.approx(|b| b.report_failed(usage)),
    }
    cell.report_came();
    // A Limiter closed meanwhile cannot write again: what is left is lost (over-admitted).
    (!inner.is_closed()).then_some(usage.first)
}
