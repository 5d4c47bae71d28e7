//! Hot keys decided locally (the approximate mode, `rate_limit/approx_book.rs`,
//! `rate/approximate.rs`): several Limiters hammering one key admit close to the quota —
//! within 5% over, at least 90% of it — with their checks decided in memory and about ten
//! writes a second per Limiter; both modes at once are refused.

use super::leases::hammer;
use super::setup::open;
use crate::testing::harness::{Harness, LimiterOptions};
use crate::testing::rate_history::{gcra_bound, gcra_excess, window_excess, Admitted};
use crate::{Algorithm, Error, Limiter, Quota};
use std::time::Duration;

const LIMITERS: usize = 3;

async fn limiters(h: &impl Harness) -> Vec<Limiter> {
    let mut all = Vec::new();
    for _ in 0..LIMITERS {
        let l = h
            .connect(LimiterOptions::new().approximate_hot_keys(true))
            .await
            .unwrap_or_else(|e| panic!("connect: {e}"));
        all.push(l);
    }
    all
}

/// The span of `events`, first start to last end, in ns.
fn span(events: &[Admitted]) -> u64 {
    let first = events.iter().map(|e| e.start).min().unwrap_or(0);
    let last = events.iter().map(|e| e.end).max().unwrap_or(0);
    last.saturating_sub(first)
}

/// How long Limiters starting together may over-admit at the quota's rate while their first
/// reports settle their shares (the bound `LimiterBuilder::approximate_hot_keys` states).
const START_SETTLING: Duration = Duration::from_millis(250);

/// 3 Limiters × 8 callers on a key of 2,000/s for 2 s: admitted within [0.9, 1.05] × what
/// the quota allows over the run (no interval over by more than 5% of it, or than the
/// quota at its rate for `START_SETTLING` as the holders start), most checks
/// decided locally, at most one write per five admitted checks; a window quota decided per
/// check, exactly.
pub async fn rate_approximate_under_contention(h: &impl Harness) {
    let all = limiters(h).await;
    let quota = Quota::per_second(2_000);
    open(&all[0], "approximate", quota).await;
    let out = hammer(&all, "approximate", Duration::from_secs(2)).await;
    let used = out.all();
    let admitted = out.events.len() as f64;
    let allowed = gcra_bound(&quota, span(&out.events));
    let worst = gcra_excess(&out.events, &quota);
    println!(
        "approximate: {admitted} admitted of {allowed:.0} allowed ({:.3}) in {:.2} s, {} decided \
         locally, {} reports, worst interval over by {:.0}, at most {:.1} writes/s per Limiter",
        admitted / allowed,
        out.secs,
        used.rate_approximate_admitted,
        used.rate_approximate_reports,
        worst.over,
        out.worst_writes_per_sec()
    );
    assert!(
        admitted <= 1.05 * allowed && admitted >= 0.9 * allowed,
        "{admitted} admitted where the quota allows {allowed:.0}: {used:?}"
    );
    // Holders starting together over-admit while their first reports settle the shares: by
    // up to 5% of the run or about the quota's rate for `START_SETTLING` (two and a half
    // report intervals; reports answered slowly on a loaded machine stretch it).
    let settling = quota.limit as f64 * START_SETTLING.as_secs_f64();
    assert!(
        worst.over <= (0.05 * allowed).max(settling),
        "over by {:.0} in [{}, {}]",
        worst.over,
        worst.from,
        worst.to
    );
    assert!(
        used.rate_approximate_admitted as f64 >= 0.8 * admitted,
        "a hot key is decided locally: {used:?}"
    );
    // 10 reports a second per Limiter, plus the per-check writes before the key is seen hot
    // (and, on a loaded machine, while a Limiter's first report is slow: one Limiter wrote
    // 190 a second in one loaded run): far below the per-check path's 0.3–1 write per
    // admitted check at this rate.
    let writes: u64 = out.used.iter().map(|u| u.put + u.txn).sum();
    assert!(
        writes as f64 <= 0.2 * admitted,
        "{writes} writes for {admitted} admitted: {:?}",
        out.used
    );

    // Windows are not decided locally (`rate::approximable`): their keys take the per-check
    // path and stay exact however hot.
    let windowed = Quota::per_second(2_000).algorithm(Algorithm::FixedWindow);
    open(&all[0], "approximate-window", windowed).await;
    let out = hammer(&all, "approximate-window", Duration::from_millis(1_500)).await;
    let (most, window) = window_excess(&out.events, &windowed);
    println!(
        "approximate, fixed window: {} admitted, at most {most} in window {window}",
        out.events.len()
    );
    assert!(most <= 2_000, "{most} admitted in window {window}");
    assert_eq!(out.all().rate_approximate_admitted, 0, "{:?}", out.all());
    for l in all {
        l.close().await.expect("close");
    }
}

/// Exact leases and the approximate mode at once are refused at connect, saying which two.
pub async fn rate_approximate_excludes_leases(h: &impl Harness) {
    let both = LimiterOptions::new()
        .hot_key_leases(true)
        .approximate_hot_keys(true);
    match h.connect(both).await {
        Err(Error::InvalidArgument(msg)) => {
            assert!(
                msg.contains("hot_key_leases") && msg.contains("approximate_hot_keys"),
                "{msg}"
            );
        }
        Err(e) => panic!("refused for another reason: {e}"),
        Ok(_) => panic!("both modes at once were accepted"),
    }
}
