//! Fixed and sliding windows, aligned to the Unix epoch: window `w` is
//! `[w × period, (w + 1) × period)`.
//!
//! Fixed (Envoy's global rate limit): at most `limit` admitted per window.
//! Sliding (Cloudflare's two-counter approximation): at `elapsed = now − w × period` into window
//! `w`, `estimate = ⌈previous × (period − elapsed) / period⌉ + count` must stay within `limit`.
//! The weighted part is computed exactly and rounded up, so rounding never admits more.
//! All arithmetic is in `u128` and saturating: no input overflows or panics.
//!
//! # Debt
//!
//! A charge after the fact (`adjust.rs`) may take a window's count past the limit. What is
//! over the limit is carried into the next window, and so on: a count `c` stored for window
//! `w` reads as `c − k × limit` (never below 0) in window `w + k`, and the sliding window's
//! previous counter is what lived in the window before, at most the limit. Checks only ever
//! keep a count within the limit, which therefore reads as 0 a window later, as without debt.

use super::quota::Quota;
use super::state::UnixNanos;
use super::take::{Status, Take};

/// A quota's window constants.
#[derive(Debug, Clone, Copy)]
pub(super) struct Window {
    /// The period in nanoseconds (≥ 1).
    period: u128,
    limit: u64,
    /// The quota's limit, also when `keeping` lowered `limit`: what a window pays off of a debt.
    full: u64,
}

impl Window {
    pub(super) fn new(quota: &Quota) -> Window {
        Window {
            // max(1): an invalid quota must not divide by zero below.
            period: quota.period.as_nanos().max(1),
            limit: quota.limit,
            full: quota.limit,
        }
    }

    /// As a check that must leave `reserve` units sees it: the limit less `reserve`, so a
    /// check of `n` passes exactly when one of `n + reserve` would. 0: unchanged.
    pub(super) fn keeping(mut self, reserve: u64) -> Window {
        self.limit = self.limit.saturating_sub(reserve);
        self
    }

    /// The index of the window `now` is in.
    pub(super) fn index(&self, now: UnixNanos) -> u64 {
        // ≤ now, so it fits.
        u64::try_from(u128::from(now) / self.period).unwrap_or(u64::MAX)
    }

    /// Nanoseconds from `now` to the start of window `index(now) + k`.
    fn until_boundary(&self, now: UnixNanos, k: u128) -> u128 {
        let start = u128::from(self.index(now)).saturating_add(k);
        start
            .saturating_mul(self.period)
            .saturating_sub(u128::from(now))
    }

    /// Nanoseconds since the current window started.
    fn elapsed(&self, now: UnixNanos) -> u128 {
        u128::from(now) % self.period
    }

    /// What a count stored for a window still weighs `k` windows later: what is over the
    /// limit, carried from window to window (see "Debt" above).
    fn living(&self, count: u64, k: u64) -> u64 {
        count.saturating_sub(self.full.saturating_mul(k))
    }

    /// How many windows from the current one until a count `count` of it weighs at most
    /// `room` (≥ 1: the current window is not counted).
    fn windows_until(&self, count: u64, room: u64) -> u128 {
        let over = u128::from(count.saturating_sub(room));
        over.div_ceil(u128::from(self.full.max(1))).max(1)
    }

    /// The fixed window's count at `now`: a state of an earlier window weighs what it carried
    /// over; of a later one (after a period change), 0.
    fn fixed_count(&self, meter: Option<(u64, u64)>, now: UnixNanos) -> u64 {
        match meter {
            Some((window, count)) => match self.index(now).checked_sub(window) {
                Some(k) => self.living(count, k),
                None => 0,
            },
            None => 0,
        }
    }

    /// A fixed window `(window, count)` (`None`: absent) as it stands at `now`.
    pub(super) fn fixed_status(&self, meter: Option<(u64, u64)>, now: UnixNanos) -> Status {
        let count = self.fixed_count(meter, now);
        let reset = if count > 0 {
            self.until_boundary(now, self.windows_until(count, 0))
        } else {
            0
        };
        Status {
            remaining: self.limit.saturating_sub(count),
            reset_ns: reset,
            worthless_at: u128::from(now).saturating_add(reset),
        }
    }

    /// A check of `cost` on a fixed window: the new `(window, count)` if admitted, else how long
    /// until the window that admits it starts (exact for `cost ≤ limit`: the next window,
    /// or a later one while a debt is carried).
    pub(super) fn fixed_take(
        &self,
        meter: Option<(u64, u64)>,
        cost: u64,
        now: UnixNanos,
    ) -> Take<(u64, u64)> {
        let count = self.fixed_count(meter, now);
        match count.checked_add(cost) {
            Some(after) if after <= self.limit => Ok((self.index(now), after)),
            _ => {
                let room = self.limit.saturating_sub(cost);
                Err(self.until_boundary(now, self.windows_until(count, room)))
            }
        }
    }

    /// The sliding window's `(count, previous)` shifted to the window `now` is in.
    fn shifted(&self, meter: Option<(u64, u64, u64)>, now: UnixNanos) -> (u64, u64) {
        let Some((window, count, previous)) = meter else {
            return (0, 0);
        };
        match self.index(now).checked_sub(window) {
            Some(0) => (count, previous),
            Some(k) => self.ahead(count, k),
            // After a period change, "newer": nothing in the last period.
            None => (0, 0),
        }
    }

    /// The sliding counters `(count, previous)` `k ≥ 1` windows after one whose count was
    /// `count`: what it carries into each (see "Debt" above).
    fn ahead(&self, count: u64, k: u64) -> (u64, u64) {
        (
            self.living(count, k),
            self.living(count, k - 1).min(self.full),
        )
    }

    /// `⌈previous × (period − elapsed) / period⌉`: the previous window's weighted part.
    fn weighted(&self, previous: u64, elapsed: u128) -> u128 {
        u128::from(previous)
            .saturating_mul(self.period.saturating_sub(elapsed))
            .div_ceil(self.period)
    }

    /// A sliding window `(window, count, previous)` (`None`: absent) as it stands at `now`.
    pub(super) fn sliding_status(&self, meter: Option<(u64, u64, u64)>, now: UnixNanos) -> Status {
        let (count, previous) = self.shifted(meter, now);
        let estimate = self
            .weighted(previous, self.elapsed(now))
            .saturating_add(u128::from(count));
        // The current count weighs in until the end of the next window, the previous one
        // until the end of this one.
        let reset = if count > 0 {
            self.until_boundary(now, self.windows_until(count, 0).saturating_add(1))
        } else if previous > 0 {
            self.until_boundary(now, 1)
        } else {
            0
        };
        Status {
            remaining: u64::try_from(u128::from(self.limit).saturating_sub(estimate)).unwrap_or(0),
            reset_ns: reset,
            worthless_at: u128::from(now).saturating_add(reset),
        }
    }

    /// A check of `cost` on a sliding window: the new `(window, count, previous)` if admitted,
    /// else the exact time until the same check would be admitted if nothing else happened
    /// (for `cost ≤ limit`; the window after next always admits it).
    pub(super) fn sliding_take(
        &self,
        meter: Option<(u64, u64, u64)>,
        cost: u64,
        now: UnixNanos,
    ) -> Take<(u64, u64, u64)> {
        let (count, previous) = self.shifted(meter, now);
        let elapsed = self.elapsed(now);
        let p = self.period;
        let limit = u128::from(self.limit);
        let stored = count;
        let room_after = self.limit.saturating_sub(cost);
        let (count, cost) = (u128::from(count), u128::from(cost));
        let estimate = self.weighted(previous, elapsed).saturating_add(count);
        if estimate.saturating_add(cost) <= limit {
            let count = u64::try_from(count + cost).unwrap_or(u64::MAX);
            return Ok((self.index(now), count, previous));
        }
        // ⌈x × (p − e) / p⌉ ≤ r  ⟺  x × (p − e) ≤ r × p  ⟺  e ≥ p − ⌊r × p / x⌋: the first
        // elapsed time at which a weighted counter x leaves room r.
        let first_elapsed = |x: u128, r: u128| match r.saturating_mul(p).checked_div(x) {
            Some(room) => p.saturating_sub(room),
            None => 0,
        };
        // Later in this window, as `previous` fades (denied now, so that is after `elapsed`).
        if let Some(room) = limit.checked_sub(count.saturating_add(cost)) {
            let at = first_elapsed(u128::from(previous), room).max(elapsed);
            if at < p {
                return Err(at - elapsed);
            }
        }
        // In the first window whose carried count leaves room for the cost, or the two after
        // it: in the third, both counters have faded (the count carried there is 0).
        let first = self.windows_until(stored, room_after);
        let first = u64::try_from(first).unwrap_or(u64::MAX);
        for j in first..first.saturating_add(2) {
            let (carried, faded) = self.ahead(stored, j);
            if let Some(room) = limit.checked_sub(u128::from(carried).saturating_add(cost)) {
                let at = first_elapsed(u128::from(faded), room);
                if at < p {
                    return Err(self.until_boundary(now, u128::from(j)).saturating_add(at));
                }
            }
        }
        Err(self.until_boundary(now, u128::from(first).saturating_add(2)))
    }
    /// A fixed window charged `n` whatever it holds (the count may pass the limit: a debt).
    pub(super) fn fixed_charge(
        &self,
        meter: Option<(u64, u64)>,
        n: u64,
        now: UnixNanos,
    ) -> (u64, u64) {
        let count = self.fixed_count(meter, now);
        (self.index(now), count.saturating_add(n))
    }

    /// A fixed window given back `n` taken at `taken_at`: only while that window lasts (a
    /// past window's unused budget is gone, as any past window's), never below empty.
    pub(super) fn fixed_refund(
        &self,
        meter: Option<(u64, u64)>,
        n: u64,
        taken_at: UnixNanos,
        now: UnixNanos,
    ) -> (u64, u64) {
        let count = self.fixed_count(meter, now);
        let w = self.index(now);
        if self.index(taken_at) == w {
            (w, count.saturating_sub(n))
        } else {
            (w, count)
        }
    }

    /// The fixed window's debt at `now`: its count over the limit.
    pub(super) fn fixed_debt(&self, meter: Option<(u64, u64)>, now: UnixNanos) -> u64 {
        self.fixed_count(meter, now).saturating_sub(self.full)
    }

    /// A sliding window charged `n` whatever it holds, in the current window.
    pub(super) fn sliding_charge(
        &self,
        meter: Option<(u64, u64, u64)>,
        n: u64,
        now: UnixNanos,
    ) -> (u64, u64, u64) {
        let (count, previous) = self.shifted(meter, now);
        (self.index(now), count.saturating_add(n), previous)
    }

    /// A sliding window given back `n` taken at `taken_at`, from the counter that holds it (the
    /// current window's or the previous one's); taken earlier, it has faded: nothing to give.
    pub(super) fn sliding_refund(
        &self,
        meter: Option<(u64, u64, u64)>,
        n: u64,
        taken_at: UnixNanos,
        now: UnixNanos,
    ) -> (u64, u64, u64) {
        let (count, previous) = self.shifted(meter, now);
        let w = self.index(now);
        match w.checked_sub(self.index(taken_at)) {
            Some(0) => (w, count.saturating_sub(n), previous),
            Some(1) => (w, count, previous.saturating_sub(n)),
            _ => (w, count, previous),
        }
    }

    /// The sliding window's debt at `now`: its estimate over the limit.
    pub(super) fn sliding_debt(&self, meter: Option<(u64, u64, u64)>, now: UnixNanos) -> u64 {
        let (count, previous) = self.shifted(meter, now);
        let estimate = self
            .weighted(previous, self.elapsed(now))
            .saturating_add(u128::from(count));
        u64::try_from(estimate.saturating_sub(u128::from(self.full))).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rate::Algorithm;
    use std::time::Duration;

    const S: u64 = 1_000_000_000;

    fn window(limit: u64, secs: u64) -> Window {
        Window::new(&Quota::new(limit, Duration::from_secs(secs)).algorithm(Algorithm::FixedWindow))
    }

    #[test]
    fn fixed_windows_are_aligned_to_the_epoch() {
        let w = window(3, 10);
        let t = 1_700_000_003 * S; // 3 s into window 170_000_000
        assert_eq!(w.index(t), 170_000_000);
        let mut m = None;
        for k in 0..3 {
            m = Some(
                w.fixed_take(m, 1, t + k)
                    .unwrap_or_else(|e| panic!("{k}: {e}")),
            );
        }
        assert_eq!(m, Some((170_000_000, 3)));
        // Denied until the window ends, 7 s later: exactly.
        assert_eq!(w.fixed_take(m, 1, t), Err(7 * u128::from(S)));
        assert_eq!(w.fixed_take(m, 1, t + 7 * S - 1), Err(1));
        assert_eq!(w.fixed_take(m, 3, t + 7 * S), Ok((170_000_001, 3)));
        let s = w.fixed_status(m, t + S);
        assert_eq!((s.remaining, s.reset_ns), (0, 6 * u128::from(S)));
        assert_eq!(s.worthless_at, u128::from(1_700_000_010 * S));
        // Next window: full, nothing to reset, worth nothing.
        let s = w.fixed_status(m, 1_700_000_010 * S);
        assert_eq!((s.remaining, s.reset_ns), (3, 0));
        assert_eq!(s.worthless_at, u128::from(1_700_000_010 * S));
    }

    #[test]
    fn fixed_window_cost_is_all_or_nothing() {
        let w = window(5, 1);
        let m = w.fixed_take(None, 4, 0).ok();
        assert_eq!(w.fixed_take(m, 2, 10), Err(u128::from(S) - 10));
        assert_eq!(w.fixed_take(m, 1, 10), Ok((0, 5)));
        let s = w.fixed_status(m, 10);
        assert_eq!((s.remaining, s.reset_ns), (1, u128::from(S) - 10));
    }

    #[test]
    fn sliding_estimate_weighs_the_previous_window() {
        // 10 per 10 s. Window 0 takes 8; at 2.5 s into window 1 the previous weighs
        // ⌈8 × 7.5 / 10⌉ = 6.
        let w = window(10, 10);
        let m = w.sliding_take(None, 8, 5 * S).ok();
        assert_eq!(m, Some((0, 8, 0)));
        let t = 12 * S + S / 2;
        let s = w.sliding_status(m, t);
        assert_eq!(s.remaining, 4);
        // The 8 weighs in until the end of window 1.
        assert_eq!(s.reset_ns, u128::from(7 * S + S / 2));
        let m = w.sliding_take(m, 4, t).ok();
        assert_eq!(m, Some((1, 4, 8)));
        assert_eq!(w.sliding_status(m, t).remaining, 0);
        // Now 10: one more needs ⌈8 × (10 − e) / 10⌉ ≤ 5, i.e. e ≥ 10 − ⌊50 / 8⌋ s = 3.75 s.
        assert_eq!(w.sliding_take(m, 1, t), Err(u128::from(5 * S / 4)));
        assert!(w.sliding_take(m, 1, 13 * S + 3 * S / 4 - 1).is_err());
        assert_eq!(w.sliding_take(m, 1, 13 * S + 3 * S / 4), Ok((1, 5, 8)));
        // The current count weighs in until the end of window 2.
        assert_eq!(w.sliding_status(m, t).reset_ns, u128::from(17 * S + S / 2));
    }

    #[test]
    fn sliding_retry_crosses_the_window_boundary() {
        let w = window(10, 10);
        // 6 now in window 1, 4 in window 0: at 1 s, ⌈4 × 0.9⌉ + 6 = 10.
        let m = Some((1, 6, 4));
        // 5 more: this window never (6 + 5 > 10); next window needs ⌈6 × (10 − e) / 10⌉ ≤ 5,
        // e ≥ 10 − ⌊50 / 6⌋ s = 10 − 8.333… s: 1_666_666_667 ns into window 2.
        let t = 11 * S;
        assert_eq!(
            w.sliding_take(m, 5, t),
            Err(u128::from(9 * S + 1_666_666_667))
        );
        assert!(w.sliding_take(m, 5, 20 * S + 1_666_666_666).is_err());
        assert_eq!(w.sliding_take(m, 5, 20 * S + 1_666_666_667), Ok((2, 5, 6)));
        // The full limit: not before the window after next.
        assert_eq!(w.sliding_take(m, 10, t), Err(u128::from(19 * S)));
        assert!(w.sliding_take(m, 10, 30 * S - 1).is_err());
        assert_eq!(w.sliding_take(m, 10, 30 * S), Ok((3, 10, 0)));
    }

    #[test]
    fn sliding_rounding_never_admits_more() {
        // 3 per 3 ns (one per ns). Previous 1 at 1 ns into the window weighs ⌈2/3⌉ = 1.
        let w = Window::new(&Quota::new(3, Duration::from_nanos(3)));
        let m = Some((1, 2, 1));
        assert_eq!(w.sliding_status(m, 4).remaining, 0);
        assert_eq!(w.sliding_take(m, 1, 4), Err(2));
        assert_eq!(w.sliding_take(m, 1, 6), Ok((2, 1, 2)));
    }

    #[test]
    fn stale_states_count_nothing() {
        let w = window(4, 1);
        assert_eq!(w.fixed_take(Some((3, 4)), 4, 5 * S), Ok((5, 4)));
        assert_eq!(w.sliding_take(Some((3, 4, 4)), 4, 5 * S), Ok((5, 4, 0)));
        // A window index from the future (another period before a quota change) too.
        assert_eq!(w.sliding_take(Some((9, 4, 4)), 4, 5 * S), Ok((5, 4, 0)));
        let s = w.sliding_status(Some((3, 4, 4)), 5 * S);
        assert_eq!(
            (s.remaining, s.reset_ns, s.worthless_at),
            (4, 0, 5 * u128::from(S))
        );
    }

    #[test]
    fn huge_times_neither_overflow_nor_panic() {
        let w = window(7, 400 * 24 * 3600);
        let end = u64::MAX;
        let i = w.index(end);
        let m = w.sliding_take(Some((i, 7, u64::MAX)), 7, end);
        assert!(matches!(m, Err(r) if r > 0));
        let _ = w.sliding_status(Some((i, u64::MAX, u64::MAX)), end);
        let _ = w.fixed_take(Some((i, u64::MAX)), u64::MAX, end);
        let _ = w.fixed_status(Some((i, u64::MAX)), end);
        let bad = Window::new(&Quota::new(u64::MAX, Duration::ZERO));
        let _ = bad.sliding_take(Some((end, end, end)), end, end);
        let _ = bad.fixed_take(Some((end, end)), end, end);
    }
}
