//! The over-admission check on the merged `[sent, answered]` of every admitted decision of a
//! run (Unix µs, every worker on this machine's clock).
//!
//! A decision was made somewhere inside its `[sent, answered]`, so an interval may only be
//! charged with the decisions that lie wholly inside it: then a count above the quota's bound
//! is a real over-admission, whatever the callers' latency (sound).
//!
//! * GCRA: any span of length `t` admits at most `burst + t / T` (`T = period / limit`).
//!   Checking every pair of events is O(n²); instead, with the events sorted by `sent`, events
//!   `i..=j` all lie inside `[sent_i, M_j]` where `M_j` is the largest `answered` among the
//!   first `j + 1`, so `(j − i + 1) − burst − (M_j − sent_i) / T` is a found excess, and its
//!   maximum over `i ≤ j` is one pass keeping the best `sent_i / T − i` so far: O(n log n).
//!   It gives up at most the latency of the last events of a span (`M_j` may reach a little
//!   past `answered_j`), which at milliseconds is a fraction of one event below 1,000/s.
//! * Fixed windows aligned to the Unix epoch (clusterlimit's): per window `[k·P, (k+1)·P)`, the
//!   decisions wholly inside it, at most `limit`.
//! * Windows that start at a key's first hit (the etcd peers'): their alignment is unknown, so
//!   any span of one period admits at most `2 × limit` (it meets at most two windows), checked
//!   with the same pass as GCRA (burst `2 × limit`, no rate term, spans of at most a period).

/// The largest over-admission found (≤ 0: none) for the run's `algorithm`; `aligned`: its
/// windows are aligned to the Unix epoch (clusterlimit's), else they start at a first hit.
pub fn worst_excess(
    events: &[[u64; 2]],
    algorithm: &str,
    aligned: bool,
    limit: u64,
    period_us: u64,
    burst: u64,
) -> f64 {
    match algorithm {
        "gcra" => gcra(events, burst as f64, period_us as f64 / limit.max(1) as f64),
        "fixed-window" if aligned => aligned_windows(events, limit, period_us),
        _ => unaligned_windows(events, limit, period_us),
    }
}

/// The GCRA pass described in the module's comment; `t_us` is the emission interval.
pub fn gcra(events: &[[u64; 2]], burst: f64, t_us: f64) -> f64 {
    let mut sorted = events.to_vec();
    sorted.sort_unstable();
    let mut worst = f64::MIN;
    let mut best_start = f64::MIN; // max over i ≤ j of sent_i / T − i
    let mut max_end = 0u64;
    for (j, e) in sorted.iter().enumerate() {
        best_start = best_start.max(e[0] as f64 / t_us - j as f64);
        max_end = max_end.max(e[1]);
        let over = j as f64 + 1.0 - burst - max_end as f64 / t_us + best_start;
        worst = worst.max(over);
    }
    if sorted.is_empty() {
        0.0
    } else {
        worst
    }
}

/// Per aligned window: the most decisions wholly inside one, minus `limit`.
fn aligned_windows(events: &[[u64; 2]], limit: u64, period_us: u64) -> f64 {
    let period = period_us.max(1);
    let mut per_window = std::collections::HashMap::<u64, u64>::new();
    for e in events {
        if e[0] / period == e[1] / period {
            *per_window.entry(e[0] / period).or_default() += 1;
        }
    }
    per_window
        .values()
        .max()
        .map_or(0.0, |&n| n as f64 - limit as f64)
}

/// Any span of at most one period holds at most `2 × limit` decisions wholly inside it: a
/// two-pointer pass over the events sorted by `sent`.
fn unaligned_windows(events: &[[u64; 2]], limit: u64, period_us: u64) -> f64 {
    let mut sorted = events.to_vec();
    sorted.sort_unstable();
    // For each first event i, the events j ≥ i with answered_j ≤ sent_i + period lie inside
    // [sent_i, sent_i + period]; counting those with sent in range and answered in range.
    let mut worst = 0i64;
    let mut j = 0;
    for i in 0..sorted.len() {
        let to = sorted[i][0] + period_us;
        j = j.max(i);
        while j < sorted.len() && sorted[j][0] <= to {
            j += 1;
        }
        let inside = sorted[i..j].iter().filter(|e| e[1] <= to).count() as i64;
        worst = worst.max(inside);
    }
    worst as f64 - 2.0 * limit as f64
}

/// The checker checked on known histories (a bench has no test harness): run first, so a
/// broken checker cannot pass a run.
pub fn self_check() -> anyhow::Result<()> {
    let at = |ms: u64| [ms * 1000, ms * 1000 + 1];
    // 10/s, burst 2: T = 100 ms.
    let exact: Vec<_> = [0, 0, 100, 200, 300].into_iter().map(at).collect();
    let over: Vec<_> = [0, 0, 0, 100].into_iter().map(at).collect();
    anyhow::ensure!(
        gcra(&exact, 2.0, 100_000.0) <= 0.0,
        "GCRA check blames an exact history"
    );
    anyhow::ensure!(
        gcra(&over, 2.0, 100_000.0) > 0.5,
        "GCRA check misses a burst of 3"
    );
    let mut ev: Vec<_> = [10, 20, 1010, 1020].into_iter().map(at).collect();
    ev.push([990_000, 1_005_000]); // straddles two windows: charged to neither
    anyhow::ensure!(
        aligned_windows(&ev, 2, 1_000_000) == 0.0,
        "window check blames a straddler"
    );
    ev.push(at(30));
    anyhow::ensure!(
        aligned_windows(&ev, 2, 1_000_000) == 1.0,
        "window check misses a third"
    );
    anyhow::ensure!(
        unaligned_windows(&ev, 1, 1_000_000) == 2.0,
        "span check: 4 in a period"
    );
    Ok(())
}
