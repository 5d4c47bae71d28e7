//! [`adjust`]: charges and refunds after the fact, for costs known only once the work is done
//! (LLM tokens, bytes, rows). Unlike a check they are not admitted or denied: a charge always
//! counts, even past the limit (the key is then in **debt**, and checks are denied until time
//! has paid it off); a refund gives back what a charge or an admitted check took, never past
//! a full key.

use super::decide::{decide, Algo, Verdict};
use super::quota::Quota;
use super::state::{KeyState, Meter, SlotLog, UnixNanos};

/// An unconditional change of a key's count, decided by [`adjust`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Adjustment {
    /// Counts `n` whatever the key holds. GCRA: the theoretical arrival time moves by `n`
    /// intervals, past the tolerance if need be; windows: the current window's count grows by
    /// `n`, past the limit if need be, and what is over the limit is carried into the next
    /// window, and on.
    Charge(u64),
    /// Gives back `amount` that was taken at `taken_at` (the caller's clock when it asked)
    /// and held the key until `held_until`.
    ///
    /// GCRA: the arrival time moves back by what of `amount` still lies ahead of now, never
    /// before now. The units taken were the last `amount` intervals before `held_until` (the
    /// arrival time their check left, at the earliest); those already past came back by
    /// themselves as time went by, and giving them back again would let a burst through
    /// beyond the burst. So a refund leaves the key where a smaller charge would have left it.
    /// Windows: from the window that took it while it still counts (a fixed window: only
    /// while it lasts; a sliding one: also as the previous window), never below 0.
    Refund {
        /// Units to give back.
        amount: u64,
        /// When they were taken, at the latest (windows).
        taken_at: UnixNanos,
        /// Until when they held the key, at the earliest, when they were taken (GCRA;
        /// `UnixNanos::MAX`: unknown, give back all of `amount` the key holds).
        held_until: UnixNanos,
        /// The key's slot log as the check that took them saw it
        /// ([`Decision`](super::Decision) keeps it; empty: taken before any refund). Refunds
        /// since may have moved those slots back by what they gave back: what is given back
        /// here ends that much before `held_until` at the latest.
        seen: SlotLog,
    },
}

/// Applies `adjustment` to a key whose stored state is `state` (`None`: absent, i.e. full) at
/// `now` (clamped to the state's stamp, as [`decide`] does).
///
/// The verdict's decision is a peek at the key afterwards (whether a check of 1 would be
/// admitted now, `remaining`, a `retry_after` while in debt); its state is `Some` iff the
/// key's count changed. A ban and the fair flows' table are kept as they are: a charge is
/// not a request, so it neither starts a ban nor counts as any flow's demand.
pub fn adjust(
    quota: &Quota,
    state: Option<&KeyState>,
    adjustment: Adjustment,
    now: UnixNanos,
) -> Verdict {
    let now = state.map_or(now, |s| now.max(s.stamp));
    let meter = state
        .map(|s| s.meter)
        .filter(|m| m.algorithm() == quota.algorithm);
    let algo = Algo::new(quota, 0);
    let log = state.map_or_else(SlotLog::default, |s| s.slots);
    let new = match adjustment {
        Adjustment::Charge(0) | Adjustment::Refund { amount: 0, .. } => None,
        // Nothing taken: nothing to give back.
        Adjustment::Refund { .. } if meter.is_none() => None,
        Adjustment::Charge(n) => Some(algo.charge(meter, n, now)),
        Adjustment::Refund {
            amount,
            taken_at,
            held_until,
            seen,
        } => {
            let until = held_until_now(&log, held_until, (&seen, taken_at), now);
            Some(algo.refund(meter, amount, (taken_at, until, log.leased_until), now))
        }
    };
    let brought = algo.charge(meter, 0, now);
    // Unchanged: the same as the stored meter merely brought to `now` (a charge of 0).
    let Some(new) = new.filter(|m| Some(*m) != meter && *m != brought) else {
        return decide(quota, state, 0, now);
    };
    let mut after = KeyState::new(new, state.map_or(0, |s| s.banned_until), now, 0).carrying(state);
    after.slots = log.after(gcra_tat(&brought), gcra_tat(&new), now);
    let peek = decide(quota, Some(&after), 0, now);
    Verdict {
        state: Some(after),
        ..peek
    }
}

/// Until when, at the latest, units taken when the key's log was `seen` (at `taken_at`) and
/// that held it until `held_until` hold it now: earlier by what refunds since gave back; 0
/// when that cannot be known (nothing is given back then).
fn held_until_now(
    log: &SlotLog,
    held_until: UnixNanos,
    (seen, taken_at): (&SlotLog, UnixNanos),
    now: UnixNanos,
) -> UnixNanos {
    if held_until == UnixNanos::MAX {
        return held_until;
    }
    log.moved_since(seen, taken_at, now)
        .map_or(0, |moved| held_until.saturating_sub(moved))
}

/// GCRA's arrival time (`None`: a window).
fn gcra_tat(meter: &Meter) -> Option<UnixNanos> {
    match *meter {
        Meter::Gcra { tat } | Meter::GcraWarmUp { tat, .. } => Some(tat),
        Meter::Fixed { .. } | Meter::Sliding { .. } => None,
    }
}

/// The units `state` owes beyond an empty key at `now` (0: not in debt): GCRA's arrival time
/// past the tolerance, in intervals rounded up; a window's count (sliding: its estimate) over
/// the limit.
pub fn debt(quota: &Quota, state: Option<&KeyState>, now: UnixNanos) -> u64 {
    let now = state.map_or(now, |s| now.max(s.stamp));
    let meter = state
        .map(|s| s.meter)
        .filter(|m| m.algorithm() == quota.algorithm);
    Algo::new(quota, 0).debt(meter, now)
}
