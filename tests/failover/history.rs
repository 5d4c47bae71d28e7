//! The safety history of one run: every permit a holder was granted, and the checks on it.
//!
//! A holder *works* from the moment `acquire` returned until the first of: it called
//! `release()`, or `lost()` fired (holders stop working at once when it fires, as a careful
//! user would). Safety is: at no instant does the weight of the holders that work exceed the
//! capacity.
//!
//! Why "called `release()`" and not "`release()` returned": the store deletes the permit
//! first and answers after, and the next waiter hears of the delete on its own connection.
//! Its `acquire` can return before our `release()` does, a legitimate handoff that the later
//! end would count as an overlap. A holder has stopped working when it calls `release()`, so
//! that is the end the checker uses; the overlaps the later end would show are still counted
//! and reported (`handoff_overlaps`), not hidden.

use std::collections::HashMap;
use std::time::Instant;

/// One permit held by one holder.
#[derive(Clone, Debug)]
pub struct Grant {
    pub holder: String,
    pub weight: u32,
    pub token: u64,
    /// When `acquire` returned the permit.
    pub granted_at: Instant,
    /// When the holder stopped working: it called `release()`, `lost()` fired, or (a child
    /// process) it was SIGKILLed.
    pub work_end: Instant,
    /// When `release()` returned Ok; `None` if the permit was lost or the release failed.
    pub released_at: Option<Instant>,
    /// `lost()` fired while the holder worked.
    pub lost: bool,
}

/// What the checker found in a history.
#[derive(Clone, Debug, Default)]
pub struct Verdict {
    /// Grants at which the working weight exceeded the capacity.
    pub violations: Vec<String>,
    /// The largest working weight seen.
    pub max_held: u32,
    /// Grants that overlapped a previous holder's `release()` call (see the module docs).
    pub handoff_overlaps: usize,
    /// Fencing tokens handed out more than once (a permit granted twice).
    pub duplicate_tokens: Vec<u64>,
}

impl Verdict {
    pub fn is_safe(&self) -> bool {
        self.violations.is_empty() && self.duplicate_tokens.is_empty()
    }
}

/// Checks a history against `capacity`.
pub fn check(grants: &[Grant], capacity: u32) -> Verdict {
    let (violations, max_held) = sweep(grants, capacity, |g| g.work_end);
    let (overlaps, _) = sweep(grants, capacity, |g| g.released_at.unwrap_or(g.work_end));
    let mut seen: HashMap<u64, usize> = HashMap::new();
    for g in grants {
        *seen.entry(g.token).or_default() += 1;
    }
    let mut duplicate_tokens: Vec<u64> = seen
        .into_iter()
        .filter(|&(_, n)| n > 1)
        .map(|(t, _)| t)
        .collect();
    duplicate_tokens.sort_unstable();
    Verdict {
        violations,
        max_held,
        handoff_overlaps: overlaps.len(),
        duplicate_tokens,
    }
}

/// Sweeps the intervals `[granted_at, end(g))` in time order (an end at the same instant as
/// a start comes first) and returns a description of every grant that made the weight exceed
/// `capacity`, plus the largest weight seen.
fn sweep(grants: &[Grant], capacity: u32, end: impl Fn(&Grant) -> Instant) -> (Vec<String>, u32) {
    // (time, is_start, index)
    let mut events: Vec<(Instant, bool, usize)> = Vec::with_capacity(2 * grants.len());
    for (i, g) in grants.iter().enumerate() {
        events.push((g.granted_at, true, i));
        events.push((end(g).max(g.granted_at), false, i));
    }
    events.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
    let zero = grants.iter().map(|g| g.granted_at).min();
    let at = |t: Instant| zero.map_or(0, |z| t.saturating_duration_since(z).as_millis());
    let mut held: u32 = 0;
    let mut max_held = 0;
    let mut working: Vec<usize> = Vec::new();
    let mut bad = Vec::new();
    for (_, is_start, i) in events {
        if is_start {
            held += grants[i].weight;
            working.push(i);
            max_held = max_held.max(held);
            if held > capacity {
                let who: Vec<String> = working
                    .iter()
                    .map(|&j| {
                        let g = &grants[j];
                        format!(
                            "{}×{} (token {}, works +{}..+{} ms{})",
                            g.holder,
                            g.weight,
                            g.token,
                            at(g.granted_at),
                            at(g.work_end),
                            if g.lost { ", lost" } else { "" }
                        )
                    })
                    .collect();
                bad.push(format!(
                    "weight {held} > capacity {capacity} when {} was granted: {}",
                    grants[i].holder,
                    who.join(", ")
                ));
            }
        } else {
            held -= grants[i].weight;
            working.retain(|&j| j != i);
        }
    }
    (bad, max_held)
}

/// The first instant at or after `after` when a grant made the working weight of the holders
/// other than `victim` exceed `capacity - weight`: when somebody else was given the permits of
/// `victim`, a holder of `weight` that stopped at `after` (partitioned, lost or killed). `None`
/// if the others never needed them.
pub fn regranted_at(
    grants: &[Grant],
    capacity: u32,
    victim: &str,
    weight: u32,
    after: Instant,
) -> Option<Instant> {
    let room = capacity.saturating_sub(weight);
    let mut events: Vec<(Instant, i64)> = Vec::with_capacity(2 * grants.len());
    for g in grants.iter().filter(|g| g.holder != victim) {
        events.push((g.granted_at, i64::from(g.weight)));
        events.push((g.work_end.max(g.granted_at), -i64::from(g.weight)));
    }
    events.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
    let mut held: i64 = 0;
    for (t, delta) in events {
        held += delta;
        if delta > 0 && t >= after && held > i64::from(room) {
            return Some(t);
        }
    }
    None
}

/// The first grant at or after `t`.
pub fn first_grant_after(grants: &[Grant], t: Instant) -> Option<Instant> {
    grants
        .iter()
        .map(|g| g.granted_at)
        .filter(|&g| g >= t)
        .min()
}

/// Grants made in `[from, to)`.
pub fn grants_between(grants: &[Grant], from: Instant, to: Instant) -> usize {
    grants
        .iter()
        .filter(|g| g.granted_at >= from && g.granted_at < to)
        .count()
}

/// One wait of a worker: an acquire call from its start to its end.
#[derive(Clone, Debug)]
pub struct Wait {
    pub holder: String,
    pub start: Instant,
    pub end: Instant,
    /// The call returned a permit.
    pub granted: bool,
}

/// A fault a scenario injected, from its start until it was healed (or the store was whole
/// again).
#[derive(Clone, Debug)]
pub struct Window {
    pub what: String,
    pub start: Instant,
    pub end: Instant,
}

/// What the liveness judge found.
#[derive(Clone, Debug, Default)]
pub struct Liveness {
    /// The longest time waiters existed with no grant, faults included.
    pub longest_pause: std::time::Duration,
    /// The same, counted only outside the fault windows (the judged figure).
    pub longest_outside: std::time::Duration,
    /// Pauses outside the fault windows longer than the bound.
    pub stalls: Vec<String>,
}

/// The liveness judge: the queue must move whenever somebody waits. Between two consecutive
/// grants (and from the first wait to the first grant, from the last grant to the end of the
/// record), the time during which at least one wait was pending is a *pause*. Each pause is cut
/// into pieces by the fault windows; a piece (waiting time outside every window) longer than
/// `bound` is a stall. So a pause that begins in a fault may go on for `bound` after the fault
/// ends, not longer; and with no fault, the queue may pause for at most `bound` while waiters
/// exist.
pub fn liveness(
    waits: &[Wait],
    grants: &[Instant],
    windows: &[Window],
    bound: std::time::Duration,
) -> Liveness {
    use std::time::Duration;
    let (Some(first), Some(last)) = (
        waits.iter().map(|w| w.start).min(),
        waits.iter().map(|w| w.end).max(),
    ) else {
        return Liveness::default();
    };
    let zero = first;
    let at = |t: Instant| t.saturating_duration_since(zero).as_millis();
    let mut cuts: Vec<Instant> = grants
        .iter()
        .copied()
        .chain(waits.iter().filter(|w| w.granted).map(|w| w.end))
        .filter(|&g| g > first && g < last)
        .collect();
    cuts.push(first);
    cuts.push(last);
    cuts.sort();
    cuts.dedup();
    // Waits by start, so each gap looks only at the waits that began before its end.
    let mut by_start: Vec<&Wait> = waits.iter().collect();
    by_start.sort_by_key(|w| w.start);
    let mut windows: Vec<(Instant, Instant)> = windows.iter().map(|w| (w.start, w.end)).collect();
    windows.sort();
    let mut verdict = Liveness::default();
    for pair in cuts.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        // Pending-wait intervals clipped to the gap, merged.
        let mut busy: Vec<(Instant, Instant)> = by_start
            .iter()
            .take_while(|w| w.start < b)
            .filter(|w| w.end > a)
            .map(|w| (w.start.max(a), w.end.min(b)))
            .collect();
        busy.sort();
        let busy = merge(busy);
        let measure = |from: Instant, to: Instant| -> Duration {
            busy.iter()
                .map(|&(s, e)| e.min(to).saturating_duration_since(s.max(from)))
                .sum()
        };
        verdict.longest_pause = verdict.longest_pause.max(measure(a, b));
        // The pieces of [a, b) outside every fault window.
        let mut from = a;
        let mut pieces = Vec::new();
        for &(ws, we) in windows.iter().filter(|&&(ws, we)| we > a && ws < b) {
            if ws > from {
                pieces.push((from, ws));
            }
            from = from.max(we);
        }
        if from < b {
            pieces.push((from, b));
        }
        for (s, e) in pieces {
            let waited = measure(s, e);
            verdict.longest_outside = verdict.longest_outside.max(waited);
            if waited > bound {
                let mut who: Vec<&str> = by_start
                    .iter()
                    .filter(|w| w.start < e && w.end > s)
                    .map(|w| w.holder.as_str())
                    .collect();
                who.sort_unstable();
                who.dedup();
                verdict.stalls.push(format!(
                    "no grant from +{} to +{} ms while waiters existed ({} ms of waiting outside \
                     any fault window, bound {} ms; waiting: {})",
                    at(s),
                    at(e),
                    waited.as_millis(),
                    bound.as_millis(),
                    who.join(", ")
                ));
            }
        }
    }
    verdict
}

/// Merges sorted intervals that overlap or touch.
fn merge(sorted: Vec<(Instant, Instant)>) -> Vec<(Instant, Instant)> {
    let mut out: Vec<(Instant, Instant)> = Vec::with_capacity(sorted.len());
    for (s, e) in sorted {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// Checks the checker on made-up histories (this harness=false binary runs no `#[test]`s):
/// it must flag an over-grant and a duplicate token, accept back-to-back handoffs, and find the
/// regrant of a stopped holder's permits. Returns what went wrong, if anything.
pub fn self_check() -> Result<(), String> {
    let t0 = Instant::now();
    let at = |ms: u64| t0 + std::time::Duration::from_millis(ms);
    let grant = |holder: &str, weight: u32, token: u64, from: u64, to: u64| Grant {
        holder: holder.into(),
        weight,
        token,
        granted_at: at(from),
        work_end: at(to),
        released_at: Some(at(to + 5)),
        lost: false,
    };
    // Capacity 3: a (2) then b (1) fill it; c (1) starts when a stops, exactly at 10 ms.
    let safe = [
        grant("a", 2, 1, 0, 10),
        grant("b", 1, 2, 1, 30),
        grant("c", 1, 3, 10, 20),
    ];
    let v = check(&safe, 3);
    if !v.is_safe() || v.max_held != 3 || v.handoff_overlaps != 1 {
        return Err(format!("a safe history was judged {v:?}"));
    }
    // d (1) starts at 5 ms while a, b hold 3.
    let mut over = safe.to_vec();
    over.push(grant("d", 1, 4, 5, 6));
    let v = check(&over, 3);
    if v.violations.len() != 1 || v.max_held != 4 {
        return Err(format!("an over-grant was judged {v:?}"));
    }
    let mut twice = safe.to_vec();
    twice.push(grant("e", 1, 2, 40, 50));
    if check(&twice, 3).duplicate_tokens != vec![2] {
        return Err("a token granted twice was not reported".into());
    }
    // a (2) stops at 10 ms; c's grant at 10 ms takes one of its permits (b holds 1).
    match regranted_at(&safe, 3, "a", 2, at(10)) {
        Some(t) if t == at(10) => {}
        other => {
            return Err(format!(
                "regrant of a's permits found at {other:?}, expected 10 ms"
            ))
        }
    }
    liveness_self_check(at)
}

/// The liveness judge on made-up waits, with a bound of 6 s: a 9 s pause with waiters and no
/// fault is a stall; the same pause is fine when a fault window covers all but 4 s of it, and
/// is a stall again when the waiting goes on 7 s past the window; a quiet time without waiters
/// is no pause at all.
fn liveness_self_check(at: impl Fn(u64) -> Instant) -> Result<(), String> {
    let bound = std::time::Duration::from_secs(6);
    let wait = |holder: &str, from: u64, to: u64, granted: bool| Wait {
        holder: holder.into(),
        start: at(from),
        end: at(to),
        granted,
    };
    let window = |from: u64, to: u64| Window {
        what: "fault".into(),
        start: at(from),
        end: at(to),
    };
    // x waits 0..9 s and is granted at 9 s; y waits 1..5 s and times out.
    let waits = [wait("x", 0, 9000, true), wait("y", 1000, 5000, false)];
    let grants = [at(9000)];
    let v = liveness(&waits, &grants, &[], bound);
    if v.stalls.len() != 1 || v.longest_outside.as_millis() != 9000 {
        return Err(format!("a 9 s stall was judged {v:?}"));
    }
    let v = liveness(&waits, &grants, &[window(500, 5000)], bound);
    if !v.stalls.is_empty() || v.longest_outside.as_millis() != 4000 {
        return Err(format!("a pause mostly in a fault window was judged {v:?}"));
    }
    if v.longest_pause.as_millis() != 9000 {
        return Err(format!("the longest pause was judged {v:?}, expected 9 s"));
    }
    let long = [wait("x", 0, 9000, true)];
    let v = liveness(&long, &grants, &[window(0, 2000)], bound);
    if v.stalls.len() != 1 {
        return Err(format!("7 s of waiting after a fault was judged {v:?}"));
    }
    // Waits of 1 s each, 20 s apart: long quiet times, but nobody waited through them.
    let sparse = [wait("x", 0, 1000, true), wait("x", 20_000, 21_000, true)];
    let v = liveness(&sparse, &[at(1000), at(21_000)], &[], bound);
    if !v.stalls.is_empty() || v.longest_pause.as_millis() != 1000 {
        return Err(format!("quiet times without waiters were judged {v:?}"));
    }
    Ok(())
}
