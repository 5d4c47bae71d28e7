//! Leased tokens (issue 43): a Limiter takes a slice of a hot key's units in one write and
//! admits from it locally, in memory, until the slice is spent or its time is up. Pure: what
//! a lease takes ([`take_lease`]), until when it may be spent, and giving back what is left
//! ([`return_lease`]).
//!
//! Exact by construction, for any mix of leases and plain checks:
//!
//! - **GCRA.** A leased unit is spent at some instant between the lease's take `t0` and
//!   `t0 + hold`. The lease takes its slots as a check arriving at `t0 + hold` would (from
//!   `max(tat, t0 + hold)`), and only as many as end by `t0 + τ` (what a check at `t0` may
//!   take). So each leased unit's slot starts no earlier than the instant it is spent and ends
//!   within `τ` of it, exactly as a plain admission's does: the bound `burst + len / T` holds
//!   in every interval. The price: a key idle until the lease gives up the time up to
//!   `t0 + hold` (units nobody was using), and only a quota whose tolerance exceeds `hold`
//!   can be leased.
//! - **Windows.** The lease counts in the current window and is spent within it (its time
//!   ends with the window), so every unit spent in a window is counted in it.
//!
//! Giving back: a window takes the unused units back while the window lasts. GCRA takes them
//! back only while the lease is still the key's last write (`tat` where the lease left it):
//! moving `tat` back under slots someone took after the lease would move *their* slots
//! earlier, before units they may still spend. Otherwise the unused units stay taken (the
//! key under-admits by them, never over-admits).

use super::decide::{decide, Algo, Verdict};
use super::flows::{FlowId, FlowTable, Share};
use super::quota::{Algorithm, Quota};
use super::state::{KeyState, Meter, SlotLog, UnixNanos};
use std::time::Duration;

/// How far ahead of its pace a holder may take a GCRA key's units: `hold / PACE_AHEAD`.
const PACE_AHEAD: u128 = 4;

/// A slice of a key's units taken by [`take_lease`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Lease {
    /// Units taken (0: none could be).
    pub granted: u64,
    /// When they were taken (the caller's clock).
    pub taken_at: UnixNanos,
    /// Spend them before this instant, never at or after it.
    pub usable_until: UnixNanos,
    /// Where the lease left the key: GCRA's `tat` after it, a window's index. A return
    /// compares it with the key as it is then.
    pub end: UnixNanos,
    /// The key's slot log after the lease: a GCRA return also needs no refund to have moved
    /// the key since.
    pub slots: SlotLog,
}

/// The outcome of [`take_lease`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseVerdict {
    /// What was taken.
    pub lease: Lease,
    /// The state to store (`None`: nothing taken).
    pub state: Option<KeyState>,
    /// When the key's state is worth nothing (as [`Verdict::expires_at`]).
    pub expires_at: UnixNanos,
}

/// Whether keys of `quota` can be leased for `hold`: plain GCRA whose tolerance exceeds
/// `hold` by at least one interval, or a window; no ban (a ban starts with a denial the store
/// makes), no warm-up (a unit's price depends on when it is admitted), no priority classes or
/// fair flows (their shares are decided per check in the store).
pub fn leasable(quota: &Quota, hold: Duration) -> bool {
    let plain = quota.ban.is_zero()
        && quota.warmup.is_zero()
        && quota.reserves.is_empty()
        && !quota.fair_flows;
    plain
        && match quota.algorithm {
            Algorithm::Gcra => hold_units(quota, hold) < quota.burst,
            Algorithm::FixedWindow | Algorithm::SlidingWindow => true,
        }
}

/// `hold` in GCRA intervals, rounded up.
fn hold_units(quota: &Quota, hold: Duration) -> u64 {
    let t = quota.emission_interval_ns().max(1);
    u64::try_from(hold.as_nanos().div_ceil(t)).unwrap_or(u64::MAX)
}

/// Takes up to `want` units of a key whose stored state is `state` for `holder` (the
/// Limiter asking), at `now`, to be spent before `now + hold` (sooner on a window that ends
/// first): as many as fit and the holders' fair shares allow, 0 when none do or the quota
/// cannot be leased ([`leasable`]).
///
/// Fair shares: the key's state counts, per holder and per window of the quota's period,
/// what it asked and was granted ([`FlowTable`], as fair flows do for checks), and a holder
/// takes at most what max-min fairness leaves it this window given the others' demands,
/// and on GCRA leaves the others what they are due by now (their allocations paced through
/// the window). A
/// holder below its level that gets nothing still has what it asked written, so the others
/// see its demand.
pub fn take_lease(
    quota: &Quota,
    state: Option<&KeyState>,
    (holder, want): (FlowId, u64),
    hold: Duration,
    now: UnixNanos,
) -> LeaseVerdict {
    let now = state.map_or(now, |s| now.max(s.stamp));
    let none = |expires_at| LeaseVerdict {
        lease: Lease {
            granted: 0,
            taken_at: now,
            usable_until: now,
            end: 0,
            slots: SlotLog::default(),
        },
        state: None,
        expires_at,
    };
    let peek_expiry = decide(quota, state, 0, now).expires_at;
    if want == 0 || !leasable(quota, hold) || state.is_some_and(|s| s.banned_until > now) {
        return none(peek_expiry);
    }
    let meter = state
        .map(|s| s.meter)
        .filter(|m| m.algorithm() == quota.algorithm);
    let (algo, at, usable_until) = match quota.algorithm {
        Algorithm::Gcra => {
            // Seen from `now + h` with a tolerance `h` shorter: the slots start at or after
            // `now + h` and end by `now + τ`.
            let units = hold_units(quota, hold);
            let h = u64::try_from(
                quota
                    .emission_interval_ns()
                    .saturating_mul(u128::from(units)),
            )
            .unwrap_or(u64::MAX);
            let at = now.saturating_add(h);
            (Algo::new(quota, units), at, at)
        }
        Algorithm::FixedWindow | Algorithm::SlidingWindow => {
            let period = u64::try_from(quota.period.as_nanos())
                .unwrap_or(u64::MAX)
                .max(1);
            let window_end = (now / period).saturating_add(1).saturating_mul(period);
            let until = now
                .saturating_add(u64::try_from(hold.as_nanos()).unwrap_or(u64::MAX))
                .min(window_end);
            (Algo::new(quota, 0), now, until)
        }
    };
    let (mut table, share) = holders(quota, state, holder, now);
    let there = algo.status(meter, at).remaining;
    let paced = match quota.algorithm {
        Algorithm::Gcra => paced(&table, quota, (holder, there), (now, hold)),
        Algorithm::FixedWindow | Algorithm::SlidingWindow => there,
    };
    let granted = want.min(paced).min(share.room.unwrap_or(u64::MAX));
    let new = (granted > 0)
        .then(|| algo.take(meter, granted, at).ok())
        .flatten();
    if new.is_none() && !table.below_level(&share) {
        return none(peek_expiry);
    }
    let granted = if new.is_some() { granted } else { 0 };
    table.count(&share, want, granted);
    let new = new.or(meter).unwrap_or_else(|| algo.empty(now));
    // The stamp stays `now`: a stamp in the future would decide others' checks as of then.
    let mut after = KeyState::new(new, state.map_or(0, |s| s.banned_until), now, 0).carrying(state);
    after.flows = table;
    if granted > 0 && quota.algorithm == Algorithm::Gcra {
        // A refund must not move the lease's slots before units of it may be spent.
        after.slots.leased_until = after.slots.leased_until.max(usable_until);
    }
    LeaseVerdict {
        lease: Lease {
            granted,
            taken_at: now,
            usable_until,
            end: meter_end(&new),
            slots: after.slots,
        },
        expires_at: decide(quota, Some(&after), 0, now).expires_at,
        state: Some(after),
    }
}

/// Counts a plain check of `holder` (its Limiter leases hot keys) that asked `cost` units in
/// the holders' table of the state `verdict` writes, when the key has one (some Limiter
/// leases it): a Limiter still on the per-check path while the key warms up here is then seen
/// by the leasing ones, asking and using, and the first to lease does not take the key as if
/// it were alone. A key nobody leases gets no table (its state's bytes stay as they were).
pub fn count_plain_check(
    quota: &Quota,
    verdict: &mut Verdict,
    (holder, cost): (FlowId, u64),
    now: UnixNanos,
) {
    let admitted = if verdict.decision.allowed { cost } else { 0 };
    let Some(state) = verdict.state.as_mut() else {
        return;
    };
    if state.flows.is_empty() || !leasable(quota, Duration::ZERO) {
        return;
    }
    let (mut table, share) = holders(quota, Some(state), holder, now);
    table.count(&share, cost, admitted);
    state.flows = table;
}

/// The key's lease holders in the window of `now` (its flow table, rolled), and what
/// `holder` may take of the window's limit.
fn holders(
    quota: &Quota,
    state: Option<&KeyState>,
    holder: FlowId,
    now: UnixNanos,
) -> (FlowTable, Share) {
    let period = quota.period.as_nanos().max(1);
    let window = u64::try_from(u128::from(now) / period).unwrap_or(u64::MAX);
    let table = state
        .map_or_else(FlowTable::new, |s| s.flows.clone())
        .rolled(window);
    let share = table.share(holder, quota.limit);
    (table, share)
}

/// What of the `there` units a GCRA key has now `holder` may take at `now`, paced: the
/// holders' allocations accrue through the window as the key's units do, so the holder
/// takes at most what is left of its own pace a little ahead (`hold / PACE_AHEAD`, its
/// demand until its next lease), plus the units beyond every holder's pace (a burst the key
/// stored), and always leaves the others what they are due by now.
///
/// Unpaced (the room alone), a window would go first come, first served until each holder
/// reached its level — a window the holders meet part of (the first, or the last before
/// they stop) would be split by who asked first, and a holder that asks for more each time
/// would take more.
fn paced(
    table: &FlowTable,
    quota: &Quota,
    (holder, there): (FlowId, u64),
    (now, hold): (UnixNanos, Duration),
) -> u64 {
    let period = quota.period.as_nanos().max(1);
    let into = u128::from(now) % period;
    let ahead = (into + hold.as_nanos() / PACE_AHEAD).min(period);
    let due_now = table.pace_left(holder, quota.limit, (into, period)).others;
    let soon = table.pace_left(holder, quota.limit, (ahead, period));
    let spare = there.saturating_sub(soon.mine.saturating_add(soon.others));
    there
        .saturating_sub(due_now)
        .min(soon.mine.saturating_add(spare))
}

/// What a lease records of where it left the key.
fn meter_end(meter: &Meter) -> UnixNanos {
    match *meter {
        Meter::Gcra { tat } | Meter::GcraWarmUp { tat, .. } => tat,
        Meter::Fixed { window, .. } | Meter::Sliding { window, .. } => window,
    }
}

/// Gives back `unused` units of `lease` (never spent, and never to be) to a key whose stored
/// state is `state`, at `now`: a window takes them back while it lasts; GCRA only while the
/// lease is still the key's last write, and only what of them lies ahead of `now`. The
/// verdict's state is `Some` iff the key changed; its decision is a peek.
pub fn return_lease(
    quota: &Quota,
    state: Option<&KeyState>,
    lease: &Lease,
    unused: u64,
    now: UnixNanos,
) -> Verdict {
    let now = state.map_or(now, |s| now.max(s.stamp));
    let meter = state
        .map(|s| s.meter)
        .filter(|m| m.algorithm() == quota.algorithm);
    let unused = unused.min(lease.granted);
    let ours = match (meter, quota.algorithm) {
        // Still the last write, and no refund moved the key since (it would have moved the
        // lease's slots, and whatever came after them onto `lease.end`).
        (Some(m), Algorithm::Gcra) => {
            let moved = state.is_some_and(|s| {
                (s.slots.since, s.slots.given_back) != (lease.slots.since, lease.slots.given_back)
            });
            meter_end(&m) == lease.end && !moved
        }
        (Some(_), _) => true,
        (None, _) => false,
    };
    if unused == 0 || !ours {
        return decide(quota, state, 0, now);
    }
    let algo = Algo::new(quota, 0);
    // Nothing of the key lies after the lease's slots: moving them back moves nobody else's.
    let new = algo.refund(meter, unused, (lease.taken_at, lease.end, 0), now);
    if Some(new) == meter {
        return decide(quota, state, 0, now);
    }
    let after = KeyState::new(new, state.map_or(0, |s| s.banned_until), now, 0).carrying(state);
    let peek = decide(quota, Some(&after), 0, now);
    Verdict {
        state: Some(after),
        ..peek
    }
}
