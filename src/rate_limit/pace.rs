//! How one Limiter paces the writes of a hot key (pure: the cell holds one, `batch.rs` follows
//! it).
//!
//! On a key whose demand exceeds its quota, every process sees "a token might be free" a few
//! hundred µs after its last write (a new one is made every emission interval, shorter than a
//! round trip), so without pacing each process writes back to back and N processes pay N
//! requests, mostly conflicts, for each admitted check. Pacing keeps the store's answer the only
//! source of admissions (exactness is untouched) and changes two things while a key is
//! *saturated* (its last write denied something, or checks were turned away before it):
//!
//! * **Spacing:** the next write goes at least `gap` after the last one was sent, so tokens
//!   gather in the store's bucket between writes and each write takes several. What a write
//!   costs is its requests (a write that lost to another writer is retried, a store may read):
//!   the gap doubles while a write the bucket limited admits fewer than [`FEW`] per request it
//!   took, halves when it admits [`MANY`] or more per request, and never exceeds a quarter of
//!   the quota's burst window (the bucket must not overflow while it waits; see [`max_gap`])
//!   nor [`MAX_GAP`]. Each gap is drawn ±25% around its value, so the processes pacing one key
//!   drift apart instead of writing in the same instant (and conflicting).
//! * **A share:** the next write carries at most `allowance` of cost, gathered in the last
//!   [`JOIN_WINDOW`] before it is sent (so no check waits on pacing for longer); checks before
//!   that window or beyond the share are denied at once, without a request, with `retry_after`
//!   the time until the window opens (or, past it, until the write). The
//!   allowance follows what the store gave: twice the last admitted cost (plus slack), doubled
//!   (and the gap halved) while writes admit everything they carry — the bucket may be full
//!   after a lull or a stall —, and never less than half what the quota makes during one gap:
//!   when every Limiter of a key lost its last writes at once, their shares together still
//!   take what the bucket gathers, and a lone Limiter's share doubles back up within a few
//!   writes (its writes then pass whole).
//!
//! A write that admits every check it carried, with none turned away, ends the saturation: the
//! key goes back to writing as soon as checks come. When it turns saturated again, the gap
//! starts at half the last one, not at [`MIN_GAP`]: a hot key whose writes sometimes pass whole
//! (every caller of the process was in the batch) would otherwise climb from 1 ms again, a
//! write per step. Under-admission is bounded: tokens not taken stay in the bucket for the next
//! write (this Limiter's or another's) as long as the gap is shorter than the bucket's window.

use std::time::Duration;
use tokio::time::Instant;

/// Writes admitting fewer than this per request they took (the write, its retries and reads)
/// widen the gap.
pub(crate) const FEW: u64 = 4;
/// Writes admitting this many or more per request narrow it.
pub(crate) const MANY: u64 = 16;
/// The first gap of a key that turns saturated, and the shortest.
pub(crate) const MIN_GAP: Duration = Duration::from_millis(1);
/// The longest gap. No admitted check waits for it (checks join a write only in its
/// [`JOIN_WINDOW`]); checks turned away are told to come back within it. 8 processes on a
/// 1,000/s key gather ~25 tokens per write at this gap: a write's cost spread over many.
pub(crate) const MAX_GAP: Duration = Duration::from_millis(200);
/// How long before a paced write checks may join it (and so the longest a check waits for
/// pacing, besides the write itself).
pub(crate) const JOIN_WINDOW: Duration = Duration::from_millis(10);
/// The smallest share a saturated key's next write may carry.
const MIN_ALLOWANCE: u64 = 4;
/// The largest share (a bound on one write's batch while saturated).
const MAX_ALLOWANCE: u64 = 1 << 16;

/// The pacing of one key in one Limiter.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Pace {
    /// Not saturated: write whenever checks come, carry them all.
    saturated: bool,
    /// Pause between the sends of two writes while saturated.
    gap: Duration,
    /// Cost the next write may carry while saturated.
    allowance: u64,
    /// When the last write was sent.
    last_sent: Option<Instant>,
    /// The gap after it, drawn around `gap` (see the module's doc).
    drawn: Duration,
    /// Cost turned away since the last write.
    turned_away: u64,
    /// When the write now waiting for the store was sent (`None`: none is).
    in_flight: Option<Instant>,
}

/// The longest gap for a quota whose bucket holds `window` (GCRA: burst × emission interval;
/// windows: the period): a quarter of it (with the jitter, at most 5/16), at most [`MAX_GAP`].
pub(crate) fn max_gap(window: Duration) -> Duration {
    (window / 4).min(MAX_GAP)
}

impl Pace {
    pub(crate) fn saturated(&self) -> bool {
        self.saturated
    }

    /// Whether a check of `cost` arriving `now` may join the next write, which already carries
    /// `queued`: `None` if it may, else the `retry_after` of its denial (it is turned away and
    /// counted). A check joins only within [`JOIN_WINDOW`] of the next send, so pacing keeps no
    /// check waiting longer than that plus the write (callers bound their checks: the RLS's
    /// store timeout is 50 ms by default); earlier ones are told when the window opens.
    pub(crate) fn turn_away(&mut self, queued: u64, cost: u64, now: Instant) -> Option<Duration> {
        if !self.saturated {
            return None;
        }
        let next = self.next_send().unwrap_or(now);
        let opens = next.checked_sub(JOIN_WINDOW).unwrap_or(now);
        let retry = if opens > now {
            opens - now
        } else if queued > 0 && queued.saturating_add(cost) > self.allowance {
            // The first check of a write always joins it, whatever its cost: a cost above
            // the share (a reservation of an LLM call's max_tokens) would otherwise be turned
            // away write after write while no write ran to let the share grow.
            next.saturating_duration_since(now)
        } else {
            return None;
        };
        self.turned_away = self.turned_away.saturating_add(cost);
        Some(retry)
    }

    /// When the next write may be sent (`None`: now).
    pub(crate) fn next_send(&self) -> Option<Instant> {
        if !self.saturated() {
            return None;
        }
        self.last_sent.map(|t| t + self.drawn)
    }

    /// A write is being sent now.
    pub(crate) fn sent(&mut self, now: Instant) {
        self.last_sent = Some(now);
        self.in_flight = Some(now);
    }

    /// The write in flight ended without a decision (an error): nothing is in flight.
    pub(crate) fn failed(&mut self) {
        self.in_flight = None;
    }

    /// Whether the write in flight has waited for the store longer than `patience`: then a
    /// check with that much budget is not turned away (a share and a gap mean nothing while
    /// the store does not answer); it waits, and its deadline, not pacing, gives its answer.
    pub(crate) fn store_overdue(&self, patience: Duration, now: Instant) -> bool {
        self.in_flight
            .is_some_and(|since| now.saturating_duration_since(since) > patience)
    }

    /// The store decided a write's batch: `admitted` and `denied` cost of what it carried;
    /// `cap` is [`max_gap`] of the quota, `per_sec` its rate (cost per second).
    pub(crate) fn decided(
        &mut self,
        admitted: u64,
        denied: u64,
        requests: u64,
        cap: Duration,
        per_sec: f64,
    ) {
        self.in_flight = None;
        let turned_away = std::mem::take(&mut self.turned_away);
        if denied == 0 && turned_away == 0 {
            self.saturated = false;
            return;
        }
        // A bucket shorter than MIN_GAP (a burst of 1 at a high rate) is paced by its own
        // window: waiting longer would let its tokens spill.
        self.gap = if !self.saturated || denied == 0 {
            // Saturated again after a write that took all it carried (the key was paced
            // before: start near that pace, not from the shortest gap, each step of which
            // costs a write), or the bucket had at least what we asked (it may be full after a
            // lull or a stall of this process): come back sooner, with more.
            (self.gap / 2).max(MIN_GAP)
        } else if admitted < FEW.saturating_mul(requests.max(1)) {
            self.gap * 2
        } else if admitted >= MANY.saturating_mul(requests.max(1)) {
            (self.gap / 2).max(MIN_GAP)
        } else {
            self.gap
        }
        .min(cap);
        self.drawn = self.gap.mul_f64(0.75 + fastrand::f64() / 2.0);
        self.saturated = true;
        let made_in_gap = (per_sec * self.drawn.as_secs_f64() / 2.0).ceil();
        // `as` saturates: a huge rate gives MAX_ALLOWANCE below.
        let floor = (made_in_gap as u64).max(MIN_ALLOWANCE);
        self.allowance = if denied == 0 {
            // All it carried passed, and more were turned away: ask for all we saw, at least
            // twice as much as before.
            self.allowance
                .max(admitted)
                .saturating_mul(2)
                .max(admitted.saturating_add(turned_away))
        } else {
            admitted.saturating_mul(2).saturating_add(2)
        }
        .max(floor)
        .min(MAX_ALLOWANCE);
    }

    /// Forget the pacing (the key's state is unknown again, e.g. after an error).
    pub(crate) fn reset(&mut self) {
        *self = Pace::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAP: Duration = Duration::from_millis(25);

    #[test]
    fn a_key_that_is_not_saturated_is_never_paced_nor_shared() {
        let mut p = Pace::default();
        let now = Instant::now();
        assert_eq!(p.turn_away(1_000, 1, now), None);
        p.sent(now);
        p.decided(10, 0, 1, CAP, 0.0);
        assert!(!p.saturated());
        assert_eq!(p.next_send(), None);
        assert_eq!(p.turn_away(1_000_000, 5, now), None);
    }

    #[test]
    fn a_denial_by_the_store_starts_pacing_with_a_share_of_what_passed() {
        let mut p = Pace::default();
        let t = Instant::now();
        p.sent(t);
        p.decided(3, 29, 1, CAP, 0.0);
        assert!(p.saturated());
        let next = p.next_send().unwrap_or(t);
        assert!(
            next >= t + MIN_GAP * 3 / 4 && next <= t + MIN_GAP * 5 / 4,
            "{:?}",
            next - t
        );
        // twice what passed, plus 2; beyond it, told to come back at the write
        assert_eq!(p.turn_away(7, 1, t), None);
        assert_eq!(p.turn_away(8, 1, t), Some(next - t));
    }

    #[test]
    fn a_check_dearer_than_the_share_joins_a_write_that_carries_nothing_yet() {
        let mut p = Pace::default();
        let t = Instant::now();
        p.sent(t);
        p.decided(3, 29, 1, CAP, 0.0);
        // The share is 8; a reservation of 1,000 alone still goes with the next write (turned
        // away, it would be turned away at every write, none of which would run).
        assert_eq!(p.turn_away(0, 1_000, t), None);
        assert!(p.turn_away(1, 1_000, t).is_some());
    }

    #[test]
    fn the_gap_doubles_while_writes_take_few_and_stops_at_the_cap() {
        let mut p = Pace::default();
        p.decided(0, 32, 1, CAP, 0.0);
        let mut gaps = Vec::new();
        for _ in 0..8 {
            p.decided(1, 10, 1, CAP, 0.0);
            gaps.push(p.gap);
        }
        assert_eq!(gaps[0], 2 * MIN_GAP);
        assert_eq!(gaps[1], 4 * MIN_GAP);
        assert_eq!(*gaps.last().unwrap_or(&Duration::ZERO), CAP);
    }

    #[test]
    fn the_gap_halves_when_writes_take_many_and_holds_in_between() {
        let mut p = Pace::default();
        p.decided(0, 32, 1, CAP, 0.0);
        for _ in 0..4 {
            p.decided(0, 10, 1, CAP, 0.0);
        }
        let wide = p.gap;
        p.decided(FEW, 10, 1, CAP, 0.0);
        assert_eq!(p.gap, wide);
        p.decided(MANY, 10, 1, CAP, 0.0);
        assert_eq!(p.gap, wide / 2);
    }

    #[test]
    fn a_write_that_passed_everything_with_none_turned_away_ends_saturation() {
        let mut p = Pace::default();
        p.decided(2, 30, 1, CAP, 0.0);
        assert!(p.saturated());
        p.decided(4, 0, 1, CAP, 0.0);
        assert!(!p.saturated());
    }

    #[test]
    fn saturated_again_it_starts_from_half_the_last_gap() {
        let mut p = Pace::default();
        p.decided(0, 32, 1, CAP, 0.0);
        for _ in 0..6 {
            p.decided(1, 10, 1, CAP, 0.0);
        }
        assert_eq!(p.gap, CAP);
        p.decided(20, 0, 1, CAP, 0.0);
        assert!(!p.saturated());
        p.decided(3, 29, 1, CAP, 0.0);
        assert!(p.saturated());
        assert_eq!(p.gap, CAP / 2);
    }

    #[test]
    fn a_write_that_took_several_requests_must_admit_more_to_hold_the_gap() {
        let mut p = Pace::default();
        p.decided(0, 32, 1, CAP, 0.0);
        p.decided(1, 10, 1, CAP, 0.0);
        let gap = p.gap;
        // FEW per request holds with one request…
        p.decided(FEW, 10, 1, CAP, 0.0);
        assert_eq!(p.gap, gap);
        // …and widens when the write lost once and was retried
        p.decided(FEW, 10, 2, CAP, 0.0);
        assert_eq!(p.gap, gap * 2);
        // MANY per request narrows
        p.decided(MANY * 2, 10, 2, CAP, 0.0);
        assert_eq!(p.gap, gap);
    }

    #[test]
    fn turned_away_checks_keep_it_saturated_and_grow_the_share() {
        let mut p = Pace::default();
        p.decided(2, 30, 1, CAP, 0.0);
        for _ in 0..3 {
            p.decided(1, 10, 1, CAP, 0.0);
        }
        let wide = p.gap;
        assert!(wide >= MIN_GAP * 4, "{wide:?}");
        let before = p.allowance;
        let now = Instant::now();
        assert!(p.turn_away(before, 1, now).is_some());
        p.decided(before, 0, 1, CAP, 0.0);
        assert!(p.saturated());
        assert_eq!(p.allowance, before * 2);
        // the bucket had more than asked: the next write comes sooner
        assert_eq!(p.gap, wide / 2);
        // and asks for everything turned away meanwhile
        assert!(p.turn_away(p.allowance, 100, now).is_some());
        assert!(p.turn_away(p.allowance, 100, now).is_some());
        let asked = p.allowance;
        p.decided(asked, 0, 1, CAP, 0.0);
        assert_eq!(p.allowance, asked + 200);
    }

    #[test]
    fn the_share_covers_half_of_what_the_quota_makes_in_one_gap() {
        let mut p = Pace::default();
        // 100,000/s: a gap of about 1 ms makes about 100; the share is at least half of that
        p.decided(0, 32, 1, CAP, 100_000.0);
        let floor = (100_000.0 * p.drawn.as_secs_f64() / 2.0).ceil() as u64;
        assert!(floor >= 37, "{floor}");
        let now = Instant::now();
        assert_eq!(p.turn_away(floor - 1, 1, now), None);
        assert!(p.turn_away(floor, 1, now).is_some());
    }

    #[test]
    fn checks_join_only_in_the_last_window_before_the_write_and_are_told_when_it_opens() {
        let mut p = Pace::default();
        p.decided(0, 32, 1, CAP, 0.0);
        for _ in 0..5 {
            p.decided(0, 10, 1, CAP, 0.0);
        }
        let t = Instant::now();
        p.sent(t);
        let next = p.next_send().unwrap_or(t);
        assert!(next - t > JOIN_WINDOW, "{:?}", next - t);
        // right after a send: come back when the window opens
        assert_eq!(p.turn_away(0, 1, t), Some(next - JOIN_WINDOW - t));
        // inside the window: join
        assert_eq!(p.turn_away(0, 1, next - JOIN_WINDOW), None);
        assert_eq!(p.turn_away(0, 1, next), None);
    }

    #[test]
    fn the_store_is_overdue_only_for_budgets_the_write_in_flight_has_outlived() {
        let mut p = Pace::default();
        let t = Instant::now();
        let ms = Duration::from_millis;
        assert!(!p.store_overdue(Duration::ZERO, t), "nothing in flight");
        p.decided(0, 32, 1, CAP, 0.0);
        p.sent(t);
        assert!(p.store_overdue(ms(20), t + ms(30)));
        assert!(
            !p.store_overdue(ms(30), t + ms(30)),
            "not longer than the budget"
        );
        assert!(!p.store_overdue(ms(100), t + ms(30)));
        // A clock read before the send (another thread's `now`) is not overdue.
        assert!(!p.store_overdue(Duration::ZERO, t.checked_sub(ms(1)).unwrap_or(t)));
        // The write returned: nothing in flight, whatever the time.
        p.decided(0, 10, 1, CAP, 0.0);
        assert!(!p.store_overdue(Duration::ZERO, t + ms(1_000)));
        // A reset key forgets the write in flight too.
        p.sent(t);
        p.reset();
        assert!(!p.store_overdue(Duration::ZERO, t + ms(1_000)));
    }

    #[test]
    fn the_cap_is_a_quarter_of_the_window_at_most_max_gap() {
        assert_eq!(
            max_gap(Duration::from_millis(40)),
            Duration::from_millis(10)
        );
        assert_eq!(max_gap(Duration::from_secs(60)), MAX_GAP);
        // a window shorter than MIN_GAP paces by its own quarter
        let mut p = Pace::default();
        let tiny = max_gap(Duration::from_micros(400));
        p.decided(0, 5, 1, tiny, 0.0);
        assert!(p.saturated());
        assert_eq!(p.gap, Duration::from_micros(100));
    }
}
