//! [`decide_as`] and [`decide_flow`]: a check of a priority class and a flow — the meter's
//! decision keeping the class's reserve (`decide.rs`), within the flow's share of the window
//! on a quota with fair flows (`flows.rs`), and the flow's counts.

use super::decide::{clamp_u64, duration, reserving, Algo, Verdict};
use super::decision::Decision;
use super::flows::{FlowId, FlowTable, Share};
use super::quota::Quota;
use super::state::{KeyState, UnixNanos};

/// [`decide`](super::decide) for a check of priority class `class` (`None`: no class, exactly
/// `decide`):
/// admitted only if at least the class's reserve ([`Quota::reserves`]) would still be left
/// after it, so a check of `cost` is admitted exactly when a check of `cost + reserve` without
/// a class would be, and consumes `cost`. `remaining` is what the class can still take
/// (what is left beyond its reserve), `retry_after` when the class could take `cost`.
///
/// A denial the reserve alone makes (the key itself could still take `cost`) never starts a
/// ban: the reserve stays for the checks it is kept for. A class the quota does not name (it
/// was removed since the caller checked) admits nothing: denied with `retry_after =
/// Duration::MAX`, like a cost above the maximum.
pub fn decide_as(
    quota: &Quota,
    state: Option<&KeyState>,
    cost: u64,
    class: Option<&str>,
    now: UnixNanos,
) -> Verdict {
    decide_flow(quota, state, cost, class, None, now)
}

/// [`decide_as`] for a check of flow `flow` (`None`: the anonymous flow all checks without
/// one share) on a quota with fair flows ([`Quota::fair_flows`]; on any other quota the flow
/// is ignored and this is `decide_as`).
///
/// The meter decides as for `decide_as`, and the flow may take at most its share of this
/// fairness window: the quota less what every flow used less what the other flows of the key
/// are due and have not used (`flows.rs`), less the class's reserve. On a fixed window this is
/// exactly a check keeping the class's reserve plus the others' due. A check bigger than the
/// flow's whole share passes only on a full key (so it is never refused for ever). Beyond its
/// share, a check is denied until the window ends, writes nothing and starts no ban.
/// `remaining` and `retry_after` are the flow's. An admitted check counts its cost as asked and used by its flow; a denied one counts
/// as asked while the flow has asked less than its level (`Verdict::state` is then `Some`:
/// the others see the demand), and writes nothing beyond it, so a flow over its share is
/// refused without writes. Peeks and checks during a ban count nothing.
pub fn decide_flow(
    quota: &Quota,
    state: Option<&KeyState>,
    cost: u64,
    class: Option<&str>,
    flow: Option<FlowId>,
    now: UnixNanos,
) -> Verdict {
    let class_reserve = quota.reserves.reserve_of(class);
    if !quota.fair_flows {
        return reserving(quota, state, cost, class_reserve, now);
    }
    let now = state.map_or(now, |s| now.max(s.stamp));
    let period = quota.period.as_nanos().max(1);
    let window = u64::try_from(u128::from(now) / period).unwrap_or(u64::MAX);
    let mut table = state
        .map_or_else(FlowTable::new, |s| s.flows.clone())
        .rolled(window);
    let share = table.share(flow.unwrap_or_else(FlowId::anonymous), quota.limit);
    let v = reserving(quota, state, cost, class_reserve, now);
    let window_left = (u128::from(window) + 1) * period - u128::from(now);
    let ask = Ask {
        quota,
        state,
        cost,
        class_reserve,
        now,
    };
    let mut v = ask.within_share(&share, v, window_left);
    let banned = state.is_some_and(|s| s.banned_until > now);
    let never = cost.saturating_add(class_reserve) > quota.max_cost();
    if cost > 0 && !banned && !never {
        if v.decision.allowed {
            table.count(&share, cost, cost);
        } else if table.below_level(&share) {
            table.count(&share, cost, 0);
            if v.state.is_none() {
                v.state = Some(ask.unchanged_state());
            }
        }
    }
    if let Some(s) = v.state.as_mut() {
        s.flows = table.clone();
    }
    v.expires_at = v
        .expires_at
        .max(clamp_u64(table.worthless_at(period)).max(now));
    v
}

/// One check of a flow, for [`decide_flow`]'s steps.
struct Ask<'a> {
    quota: &'a Quota,
    state: Option<&'a KeyState>,
    cost: u64,
    class_reserve: u64,
    now: UnixNanos,
}

impl Ask<'_> {
    /// The meter's verdict `v` limited to what the flow may take this window (`share.room`,
    /// less the class's reserve): beyond it, denied (nothing written, no ban) until the
    /// window ends. A check bigger than the flow's whole share this window passes only on a
    /// full key, so it is never refused for ever. On a fixed window this is exactly a check
    /// keeping the class's reserve plus what the other flows are due; on GCRA the meter
    /// paces every flow and each takes at most its share of the window (the others' due is
    /// not kept back in the bucket, where it would stall the key).
    fn within_share(&self, share: &Share, mut v: Verdict, window_left: u128) -> Verdict {
        let Some(room) = share.room else { return v };
        let max_cost = self.quota.max_cost();
        let need = self.cost.max(1).saturating_add(self.class_reserve);
        let fits = if need > room.saturating_add(share.used) {
            let full = reserving(self.quota, self.state, 0, 0, self.now);
            full.decision.remaining >= max_cost
        } else {
            need <= room
        };
        let left = room.saturating_sub(self.class_reserve);
        if v.decision.allowed && self.cost > 0 && !fits {
            let peek = reserving(self.quota, self.state, 0, self.class_reserve, self.now);
            return Verdict {
                decision: Decision {
                    allowed: false,
                    remaining: peek.decision.remaining.min(left),
                    retry_after: Some(duration(window_left)),
                    ..peek.decision
                },
                state: None,
                expires_at: peek.expires_at,
            };
        }
        let d = &mut v.decision;
        if !fits {
            d.allowed = false;
            let retry = d.retry_after.map_or(0, |r| r.as_nanos());
            d.retry_after = Some(duration(retry.max(window_left)));
        }
        let taken = if d.allowed { self.cost } else { 0 };
        d.remaining = d.remaining.min(left.saturating_sub(taken));
        v
    }

    /// The key's state as it stands, to write a denial's count on: the meter unchanged (an
    /// absent one as an empty one of the quota's algorithm).
    fn unchanged_state(&self) -> KeyState {
        let meter = self
            .state
            .map(|s| s.meter)
            .filter(|m| m.algorithm() == self.quota.algorithm)
            .unwrap_or_else(|| Algo::new(self.quota, 0).empty(self.now));
        let banned_until = self.state.map_or(0, |s| s.banned_until);
        KeyState::new(meter, banned_until, self.now, 0).carrying(self.state)
    }
}
