//! The interval check of the edge rows: no key's fixed window ever admitted more than its
//! quota, judged from the client's records alone.
//!
//! A call's decision is made on the sidecar's clock somewhere between the client sending it
//! and receiving the answer. The client's clock may be off from the sidecar's by an unknown
//! `θ` (here they share a host, but the check does not rely on it), so the window a decision
//! counted in is bounded with the server's own alignment: every fixed-window answer carries
//! `duration_until_reset`, the time left in the epoch-aligned window the *answer* was made in
//! (src/bin/clusterlimit/sidecar/rls/answer.rs, `window_left`). So `answer time + until_reset` is a multiple `E`
//! of the period on the sidecar's clock, and that answer time lies in `[sent + θ, received +
//! θ]`, which bounds `θ` per answer; intersected over every answer of a run, `θ` is known to a
//! fraction of the calls' latency (valid while `|θ|` plus a call's latency stays under half a
//! period). Then each admission was decided in `[sent + θ_lo, E − until_reset]` (the decision
//! precedes its answer), i.e. in one window, or in one of two neighbours when that span
//! crosses a boundary.
//!
//! The check asks whether *some* assignment of admissions to their possible windows keeps every
//! window at or under the quota (earliest-deadline-first per key: exact for windows in a row).
//! Admissions that fit nowhere are the excess: more than zero proves an over-admission; zero
//! means the records are consistent with an exact limiter. Only store-made admissions are
//! checked: a store-down policy's admissions are uncounted by design (the fail-open count says
//! how many there were).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// One answer as the client saw it (Unix ns on the client's clock).
#[derive(Debug, Clone, Copy)]
pub struct Seen {
    pub key: u32,
    pub sent: u64,
    pub received: u64,
    /// The answer's `duration_until_reset`, ns.
    pub until_reset: u64,
    /// A store-made admission (checked); other answers only help to estimate `θ`.
    pub admitted: bool,
}

/// What the check found for one run.
#[derive(Debug, Clone, Default)]
pub struct Verdict {
    pub quota: u64,
    /// The sidecar's clock minus the client's, ns: the bounds every answer allows; `None` when
    /// the answers contradict each other (the check then used the widest bounds).
    pub offset: Option<(i64, i64)>,
    pub admitted: usize,
    /// Admissions whose window is not certain (their span crosses a boundary).
    pub ambiguous: usize,
    /// The most admissions certainly in one window of one key.
    pub fullest: u64,
    /// (key, window) pairs with at least one admission.
    pub windows: usize,
    /// Admissions that fit in no window under the quota: > 0 is a proven over-admission.
    pub excess: u64,
}

impl Verdict {
    pub fn exact(&self) -> bool {
        self.excess == 0
    }

    /// One line for a report.
    pub fn summary(&self) -> String {
        let offset = match self.offset {
            Some((lo, hi)) => format!("clock offset {:+.2}..{:+.2} ms", ms(lo), ms(hi)),
            None => "clock offset: answers inconsistent, widest bounds used".to_string(),
        };
        format!(
            "{} admitted in {} key windows, fullest {} / {}, {} near a boundary, excess {}; {offset}",
            self.admitted, self.windows, self.fullest, self.quota, self.ambiguous, self.excess
        )
    }
}

fn ms(ns: i64) -> f64 {
    ns as f64 / 1e6
}

/// Checks `seen` against `quota` admissions per window of `period_ns` (epoch-aligned).
pub fn check(seen: &[Seen], quota: u64, period_ns: u64) -> Verdict {
    let p = i128::from(period_ns.max(1));
    // Per answer: E (the end of the window its answer was made in, sidecar clock) and the
    // offsets it allows.
    let ends: Vec<i128> = seen
        .iter()
        .map(|s| {
            let mid = (i128::from(s.sent) + i128::from(s.received)) / 2 + i128::from(s.until_reset);
            (mid + p / 2).div_euclid(p) * p
        })
        .collect();
    let allowed = |(s, e): (&Seen, &i128)| {
        let answered = e - i128::from(s.until_reset);
        (
            answered - i128::from(s.received),
            answered - i128::from(s.sent),
        )
    };
    let tight = seen
        .iter()
        .zip(&ends)
        .map(allowed)
        .fold((i128::MIN, i128::MAX), |(lo, hi), (a, b)| {
            (lo.max(a), hi.min(b))
        });
    let (lo, hi, offset) = if seen.is_empty() {
        (0, 0, Some((0, 0)))
    } else if tight.0 <= tight.1 {
        (tight.0, tight.1, Some((clamp(tight.0), clamp(tight.1))))
    } else {
        let wide = seen
            .iter()
            .zip(&ends)
            .map(allowed)
            .fold((i128::MAX, i128::MIN), |(lo, hi), (a, b)| {
                (lo.min(a), hi.max(b))
            });
        (wide.0, wide.1, None)
    };
    let mut verdict = Verdict {
        quota,
        offset,
        ..Verdict::default()
    };
    // Per key: each admission's possible windows [first, last].
    let mut spans: HashMap<u32, Vec<(i128, i128)>> = HashMap::new();
    for (s, e) in seen.iter().zip(&ends) {
        if !s.admitted {
            continue;
        }
        let answered = e - i128::from(s.until_reset);
        let last = ((i128::from(s.received) + hi).min(answered)).div_euclid(p);
        let first = (i128::from(s.sent) + lo).div_euclid(p).min(last);
        spans.entry(s.key).or_default().push((first, last));
    }
    for mut list in spans.into_values() {
        verdict.admitted += list.len();
        verdict.ambiguous += list.iter().filter(|(a, b)| a != b).count();
        let mut certain: HashMap<i128, u64> = HashMap::new();
        for (a, _) in list.iter().filter(|(a, b)| a == b) {
            *certain.entry(*a).or_default() += 1;
        }
        verdict.fullest = verdict
            .fullest
            .max(certain.values().copied().max().unwrap_or(0));
        list.sort_unstable();
        let (excess, windows) = fit(&list, quota);
        verdict.excess += excess;
        verdict.windows += windows;
    }
    verdict
}

fn clamp(v: i128) -> i64 {
    i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
}

/// Earliest deadline first over windows in order: each window takes up to `quota` of the
/// admissions that may be in it, those that must be decided soonest first. Returns how many
/// fit nowhere, and how many windows took at least one. `spans` sorted by first window.
fn fit(spans: &[(i128, i128)], quota: u64) -> (u64, usize) {
    let mut pending: BinaryHeap<Reverse<i128>> = BinaryHeap::new();
    let mut next = 0;
    let mut excess = 0;
    let mut windows = 0;
    let mut window = match spans.first() {
        Some(&(first, _)) => first,
        None => return (0, 0),
    };
    // Every round places or drops at least one admission, or moves to a later window that
    // one of them may be in: bounded by the admissions and their spans.
    while next < spans.len() || !pending.is_empty() {
        if pending.is_empty() && spans[next].0 > window {
            window = spans[next].0;
        }
        while next < spans.len() && spans[next].0 <= window {
            pending.push(Reverse(spans[next].1));
            next += 1;
        }
        while pending.peek().is_some_and(|Reverse(last)| *last < window) {
            pending.pop();
            excess += 1;
        }
        let mut placed = 0;
        while placed < quota && pending.pop().is_some() {
            placed += 1;
        }
        if placed > 0 {
            windows += 1;
        }
        window += 1;
    }
    (excess, windows)
}

/// The checker on made-up answers, run before every measurement (it is cheap): a check that
/// could not see an over-admission, or blamed an exact history, would make every row's verdict
/// worthless.
pub fn self_test() -> Result<(), String> {
    const P: u64 = 1_000_000_000;
    let base = 1_700_000_000 * P;
    // An answer sent at `at` ns into the run, taking 1 ms, on a sidecar `skew` ns ahead.
    let seen = |at: u64, skew: u64, admitted: bool| {
        let sent = base + at;
        let answered = sent + skew + 500_000;
        Seen {
            key: 0,
            sent,
            received: sent + 1_000_000,
            until_reset: P - answered % P,
            admitted,
        }
    };
    // 3 per window, exact, on a sidecar 40 ms ahead: 3 in window 0; one sent 0.2 ms before
    // the sidecar's boundary, so it may be in either; 2 in window 1.
    let ms = 1_000_000;
    let skew = 40 * ms;
    let at = |ms_into: f64| (ms_into * 1e6) as u64;
    let exact: Vec<Seen> = [100.0, 200.0, 300.0, 959.8, 1_200.0, 1_300.0]
        .iter()
        .map(|&t| seen(at(t), skew, true))
        .collect();
    let v = check(&exact, 3, P);
    if !v.exact()
        || v.offset
            .is_none_or(|(lo, hi)| lo > 40 * ms as i64 || hi < 40 * ms as i64)
    {
        return Err(format!("an exact history was judged {v:?}"));
    }
    // One more in window 1: 4 > 3, wherever the ambiguous one goes.
    let mut over = exact.clone();
    over.push(seen(1_400 * ms, skew, true));
    let v = check(&over, 3, P);
    if v.excess != 1 {
        return Err(format!("an over-admission by one was judged {v:?}"));
    }
    // Denials and other keys do not count.
    let mut others = exact;
    others.push(seen(1_500 * ms, skew, false));
    others.push(Seen {
        key: 1,
        ..seen(1_600 * ms, skew, true)
    });
    let v = check(&others, 3, P);
    if !v.exact() {
        return Err(format!("denials or another key were counted: {v:?}"));
    }
    Ok(())
}
