//! The approximate mode for hot keys (issue 43, item 3): a Limiter decides a hot key's checks
//! **locally**, from an in-memory meter holding its share of the quota, and reports every
//! ~100 ms what it admitted and was asked. Pure: what one report does to the key
//! ([`report_usage`]), the quota a holder's local meter runs on ([`scaled`]), where that
//! meter starts ([`start_local`]) and where it stands after a report
//! ([`local_after_report`]).
//!
//! Unlike leases (`lease.rs`), nothing is taken before it is spent: units admitted locally
//! are charged to the key afterwards, as [`Adjustment::Charge`](super::Adjustment::Charge)
//! does, past the limit if need be (the key is then in debt: its other users see it and are
//! denied until it is paid). So the mode may over-admit, and by how much is bounded:
//!
//! - **Shares.** Each holder's share is its max-min level among the holders' demands (the
//!   key's [`FlowTable`], counted per window of the quota's period as leases are), as a
//!   fraction of the quota. Settled shares add up to at most the quota's rate and burst; a
//!   holder that joins (or whose demand grows) takes its share at once, while the others
//!   still run on theirs until their next report: about `quota × report interval ×
//!   (holders joining ÷ holders)` too much per join.
//! - **Debt.** A local meter runs on the quota scaled to the share (rate × share, burst ×
//!   share: the same tolerance in time), so a GCRA meter's arrival time means the same
//!   instant as the key's. After each report the local meter is set where the key stands
//!   (GCRA: at its arrival time, then emptied, see below; windows: its counts × share, unless
//!   the holder's own meter is further on), so whatever the holders admitted beyond the
//!   quota makes each of them wait its part of it: the long-run total converges to the quota.
//! - **Bursts.** A report charges the holder's part of what the key has left ahead (GCRA:
//!   every report, at most the holder's demand over ~200 ms; windows: the first one), as a
//!   lease takes it, and the local meter holds none of it: the key's burst is only handed out
//!   from a state that counts what the others took, so holders that start together share it
//!   exactly, and a light holder cannot sit on it; the overshoot above comes from rates only.
//!   Demands: a holder's demand in the table is its pace over a window (not its pace plus what
//!   it asked so far: light holders would seem heavier with every report, and the heavy
//!   ones' shares too small). Until the holders' paces are known (their first ~100–250 ms
//!   deciding locally), shares can add up to more than 1: that is the join overshoot above.

use super::adjust::{adjust, debt, Adjustment};
use super::decide::decide;
use super::flows::{FlowId, FlowTable};
use super::lease::leasable;
use super::quota::{Algorithm, Quota};
use super::state::{KeyState, Meter, UnixNanos};
use std::time::Duration;

/// What [`report_usage`] did to a key and what it tells the holder.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Report {
    /// The state to store (the charge and the holder's counts). Its `tag` is 0.
    pub state: KeyState,
    /// The holder's share of the quota for the next interval, in (0, 1]; `None`: the quota
    /// cannot be decided locally ([`approximable`]): the key's checks go to the store.
    pub share: Option<f64>,
    /// What the key owes beyond empty after the report ([`debt`]).
    pub debt: u64,
    /// When the key's state is worth nothing (as [`Verdict::expires_at`](super::Verdict)).
    pub expires_at: UnixNanos,
}

/// Whether keys of `quota` can be decided locally: GCRA quotas leases accept ([`leasable`]:
/// no ban, warm-up, priority classes or fair flows, whose decisions the store makes per
/// check; no hold is needed, nothing is taken ahead). Not windows: a window's units are all
/// there at its start, so shares that settle after it started let it admit up to `(Σ shares
/// − 1) × limit` (1.8 × the limit in one loaded contract run) — far past the mode's bound.
/// Window quotas keep the per-check path (or exact leases).
pub fn approximable(quota: &Quota) -> bool {
    quota.algorithm == Algorithm::Gcra && leasable(quota, Duration::ZERO)
}

/// One report of `holder` on a key whose stored state is `state`, at `now`: charges the
/// `admitted` units it admitted locally since its last report (debt allowed), counts them
/// and the `asked` units (admitted or not; at least `admitted`) in the key's holders' table
/// for the window of `now` (the quota's period), and returns the holder's max-min share of
/// the quota for the next interval and the key's debt. On a quota that cannot be decided
/// locally, only the charge is made.
///
/// `projected`: the holder's demand over a whole window at its present pace. When not 0, it
/// is what the holder asked this window (at least what it used), so that holders starting
/// together (or at the start of a window, with no demand counted in the one before) see each
/// other's demand at once rather than the few units asked so far, and a holder's demand is
/// its pace, not its pace plus what it asked since (which would make a light holder seem
/// heavier with every report, and the heavy ones' shares too small).
pub fn report_usage(
    quota: &Quota,
    state: Option<&KeyState>,
    (holder, asked, admitted, projected): (FlowId, u64, u64, u64),
    now: UnixNanos,
) -> Report {
    let now = state.map_or(now, |s| now.max(s.stamp));
    let charged = adjust(quota, state, Adjustment::Charge(admitted), now);
    let mut after = charged
        .state
        .or_else(|| state.cloned())
        .unwrap_or_else(|| KeyState::new(empty(quota, now), 0, now, 0));
    after.stamp = now;
    after.tag = 0;
    let share = approximable(quota).then(|| {
        let period = quota.period.as_nanos().max(1);
        let window = u64::try_from(u128::from(now) / period).unwrap_or(u64::MAX);
        let mut table: FlowTable = after.flows.rolled(window);
        let share = table.share(holder, quota.limit);
        table.count(&share, asked.max(admitted), admitted);
        if projected > 0 {
            // The pace stands for the whole window's demand: it replaces what was asked so
            // far (adding both would count the window's asks twice, and a light holder
            // would seem to ask more and more as the window goes on).
            let used = table
                .iter()
                .find(|e| e.id == share.id)
                .map_or(0, |e| e.used);
            table.set_asked(&share, projected.max(used));
        }
        after.flows = table;
        fraction(share.level(), quota.limit)
    });
    Report {
        debt: debt(quota, Some(&after), now),
        expires_at: decide(quota, Some(&after), 0, now).expires_at,
        state: after,
        share,
    }
}

/// A full key's meter at `now` (what an absent key reads as).
fn empty(quota: &Quota, now: UnixNanos) -> Meter {
    match quota.algorithm {
        Algorithm::Gcra => Meter::Gcra { tat: now },
        Algorithm::FixedWindow => Meter::Fixed {
            window: window_of(quota, now),
            count: 0,
        },
        Algorithm::SlidingWindow => Meter::Sliding {
            window: window_of(quota, now),
            count: 0,
            previous: 0,
        },
    }
}

fn window_of(quota: &Quota, now: UnixNanos) -> u64 {
    let period = quota.period.as_nanos().max(1);
    u64::try_from(u128::from(now) / period).unwrap_or(u64::MAX)
}

/// A level `L` (numerator, denominator) of a quota of `limit` units as a fraction of it, in
/// (0, 1] (never 0: a holder always keeps a little, its meter at least one unit).
fn fraction((num, den): (u128, u128), limit: u64) -> f64 {
    let share = num as f64 / (den.max(1) as f64 * limit.max(1) as f64);
    share.clamp(f64::MIN_POSITIVE, 1.0)
}

/// The quota a holder's local meter runs on: `quota` with its limit and burst times `share`
/// (at least 1 each), the burst scaled as the limit was so that GCRA's tolerance in time is
/// the key's.
pub fn scaled(quota: &Quota, share: f64) -> Quota {
    let limit = ((quota.limit as f64 * share).round() as u64).clamp(1, quota.limit.max(1));
    let burst = match quota.algorithm {
        Algorithm::Gcra => {
            let b = u128::from(quota.burst) * u128::from(limit) / u128::from(quota.limit.max(1));
            u64::try_from(b).unwrap_or(u64::MAX).max(1)
        }
        Algorithm::FixedWindow | Algorithm::SlidingWindow => limit,
    };
    Quota {
        limit,
        burst,
        ..*quota
    }
}

/// A holder's local meter (on `quota` scaled to `share`, [`scaled`]) after a report that
/// left the key at `key` (the state written) and gave it `share`, the holder's meter being
/// `local` and having admitted `since` units after the report was taken (not in the key yet).
///
/// GCRA: the key's arrival time, `since` charged on it, so that the holder may admit its
/// share of what the key has left and waits its part of the key's debt. Never the local
/// meter's own when it is further on: a local meter runs on a part of the quota, so each
/// unit moves it further than it moves the key, and a holder kept at its own position would
/// lose what the others leave unused (a heavy holder beside light ones would never get the
/// burst they do not spend).
///
/// Windows: the key's counts × share, or the local meter where it is further on in the same
/// window (a newer window of the key's replaces an older local one): what the holder
/// admitted this window is its own.
pub fn local_after_report(
    quota: &Quota,
    (key, share): (Option<&KeyState>, f64),
    (local, since): (Option<&KeyState>, u64),
    now: UnixNanos,
) -> KeyState {
    let local_quota = scaled(quota, share);
    let meter = key
        .map(|s| s.meter)
        .filter(|m| m.algorithm() == quota.algorithm)
        .map(|m| scale_meter(m, share))
        .unwrap_or_else(|| empty(quota, now));
    let now = key.map_or(now, |s| now.max(s.stamp));
    let at_key = KeyState::new(meter, 0, now, 0);
    let at_key = match since {
        0 => at_key,
        n => adjust(&local_quota, Some(&at_key), Adjustment::Charge(n), now)
            .state
            .unwrap_or(at_key),
    };
    let mine = local
        .map(|s| s.meter)
        .filter(|m| m.algorithm() == quota.algorithm && quota.algorithm != Algorithm::Gcra);
    match mine {
        Some(m) => KeyState::new(further(m, at_key.meter), 0, now, 0),
        None => at_key,
    }
}

/// A key's meter as seen by a holder with `share` of it: GCRA's arrival time as it is (a
/// scaled meter's tolerance in time is the key's), windows' counts times the share (rounded
/// up).
fn scale_meter(meter: Meter, share: f64) -> Meter {
    let part = |n: u64| (n as f64 * share).ceil() as u64;
    match meter {
        Meter::Gcra { .. } | Meter::GcraWarmUp { .. } => meter,
        Meter::Fixed { window, count } => Meter::Fixed {
            window,
            count: part(count),
        },
        Meter::Sliding {
            window,
            count,
            previous,
        } => Meter::Sliding {
            window,
            count: part(count),
            previous: part(previous),
        },
    }
}

/// A holder's first report (its local meter starts): the local meter where the key stands,
/// scaled to `share`, and the units it can admit at once — its part of what the key has left,
/// at most `most` (what it will ask before its next reports) — charged to the key now, ahead
/// of their use (as a lease takes them), so that holders starting together cannot each spend
/// the key's burst at once. Returns the local meter (on the scaled quota, the units charged
/// ahead taken from it: [`local_start`]), the key's state after the charge, and the units
/// charged ahead (admitted locally first, apart from the meter, without being reported
/// again).
///
/// `most` keeps a light holder that happens to report first (alone, so with the whole
/// quota as its share) from holding the key's burst for seconds while the others wait on
/// it: what it did not take stays in the key for all holders.
pub fn start_local(
    quota: &Quota,
    key: &KeyState,
    (share, most): (f64, u64),
    now: UnixNanos,
) -> (KeyState, KeyState, u64) {
    let now = now.max(key.stamp);
    let local = local_after_report(quota, (Some(key), share), (None, 0), now);
    let ahead = decide(&scaled(quota, share), Some(&local), 0, now)
        .decision
        .remaining
        .min(most);
    let charged = adjust(quota, Some(key), Adjustment::Charge(ahead), now);
    let key_after = charged.state.unwrap_or_else(|| key.clone());
    (
        local_start(quota, (key, share), ahead, now),
        key_after,
        ahead,
    )
}

/// The local meter a first report starts (the key as it was before the report charged
/// `ahead` units of it, the share it gave): where the key stood, scaled, less the `ahead`
/// units taken from it (they are spent apart, first, whatever the share becomes). GCRA: less
/// its whole part of what the key had left (the local meter starts empty), even where fewer
/// were charged ahead: the rest stays in the key, and the holder's next report gives it its
/// share of it (holders starting together, each alone with the whole key in its first
/// report or seeing the others' demands small yet, would otherwise each spend the burst
/// before their second). Windows: a first report charges the whole part ahead (the
/// caller's `most` is unbounded there).
pub fn local_start(
    quota: &Quota,
    (key, share): (&KeyState, f64),
    ahead: u64,
    now: UnixNanos,
) -> KeyState {
    let local_quota = scaled(quota, share);
    let local = local_after_report(quota, (Some(key), share), (None, 0), now);
    let taken = match quota.algorithm {
        Algorithm::Gcra => {
            let part = decide(&local_quota, Some(&local), 0, now)
                .decision
                .remaining;
            ahead.max(part)
        }
        Algorithm::FixedWindow | Algorithm::SlidingWindow => ahead,
    };
    if taken == 0 {
        return local;
    }
    decide(&local_quota, Some(&local), taken, now)
        .state
        .unwrap_or(local)
}

/// The meter further on of two of one algorithm.
fn further(a: Meter, b: Meter) -> Meter {
    match (a, b) {
        (Meter::Gcra { tat: x }, Meter::Gcra { tat: y }) => Meter::Gcra { tat: x.max(y) },
        (
            Meter::Fixed {
                window: wa,
                count: ca,
            },
            Meter::Fixed {
                window: wb,
                count: cb,
            },
        ) if wa == wb => Meter::Fixed {
            window: wa,
            count: ca.max(cb),
        },
        (
            Meter::Sliding {
                window: wa,
                count: ca,
                previous: pa,
            },
            Meter::Sliding {
                window: wb,
                count: cb,
                previous: pb,
            },
        ) if wa == wb => Meter::Sliding {
            window: wa,
            count: ca.max(cb),
            previous: pa.max(pb),
        },
        _ => newer(a, b),
    }
}

/// Of two window meters of different windows, the newer; anything else: the first.
fn newer(a: Meter, b: Meter) -> Meter {
    let window = |m: &Meter| match *m {
        Meter::Fixed { window, .. } | Meter::Sliding { window, .. } => Some(window),
        Meter::Gcra { .. } | Meter::GcraWarmUp { .. } => None,
    };
    match (window(&a), window(&b)) {
        (Some(wa), Some(wb)) if wb > wa => b,
        _ => a,
    }
}
