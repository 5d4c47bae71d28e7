//! How one `check_all` call comes out against given states (`check_all.rs` decides its
//! calls with it): all admitted, or all denied with nothing consumed but what denials write.

use super::joint::CallCheck;
use super::options::Asker;
use crate::rate::{decide, Algorithm, Decision, KeyState, Meter, Quota};

/// How one call came out against given states.
pub(crate) struct CallPass {
    pub(crate) decisions: Vec<Decision>,
    pub(crate) allowed: bool,
    /// Groups with a denied check.
    pub(crate) denied_groups: Vec<usize>,
    /// (group, new state, its expiry): every changed group when all were admitted; else the
    /// bans a denial started, on the meters as they were.
    pub(crate) writes: Vec<(usize, KeyState, u64)>,
}

/// Decides one call's checks (as (group, cost, asker), in order) from each group's state: all
/// admitted, or all denied (the ones that would have passed with their `remaining` as it is
/// and the longest `retry_after` of the denials) and nothing consumed but what denials write
/// (the bans they start; on a quota with fair flows, their flows' asked counts).
pub(crate) fn decide_call(
    checks: &[CallCheck],
    quotas: &[Quota],
    states: &[Option<KeyState>],
    now: u64,
) -> CallPass {
    let n = quotas.len();
    let mut state: Vec<Option<KeyState>> = states.to_vec();
    let mut ban_state: Vec<Option<KeyState>> = states.to_vec();
    let mut changed = vec![false; n];
    let mut denial_wrote = vec![false; n];
    let mut expires = vec![now; n];
    let mut decisions = Vec::with_capacity(checks.len());
    let mut denied_groups = Vec::new();
    for (g, cost, asker) in checks {
        let g = *g;
        let quota = &quotas[g];
        let v = asker.decide(quota, state[g].as_ref(), *cost, now);
        expires[g] = v.expires_at;
        decisions.push(v.decision);
        if v.decision.allowed {
            if v.state.is_some() {
                state[g] = v.state;
                changed[g] = true;
            }
            continue;
        }
        if !denied_groups.contains(&g) {
            denied_groups.push(g);
        }
        if let Some(b) = v.state {
            // A denial that writes: keep what it writes, but on the state as it was before
            // this call (when any check is denied, nothing is consumed).
            let before = ban_state[g].take();
            match denial_only(quota, asker, *cost, before.clone(), b, now) {
                Some(write) => {
                    ban_state[g] = Some(write);
                    denial_wrote[g] = true;
                }
                None => ban_state[g] = before,
            }
        }
    }
    let allowed = decisions.iter().all(|d| d.allowed);
    if allowed {
        let writes = (0..n)
            .filter_map(|g| {
                let s = state[g].clone().filter(|_| changed[g])?;
                Some((g, s, expires[g]))
            })
            .collect();
        return CallPass {
            decisions,
            allowed,
            denied_groups,
            writes,
        };
    }
    let writes = (0..n)
        .filter_map(|g| {
            ban_state[g].clone().filter(|_| denial_wrote[g]).map(|b| {
                let exp = decide(&quotas[g], Some(&b), 0, now).expires_at;
                (g, b, exp)
            })
        })
        .collect();
    CallPass {
        decisions: all_denied(decisions, checks, quotas, states, now),
        allowed,
        denied_groups,
        writes,
    }
}

/// A denied call's decisions: the checks that would have passed denied too, with their
/// `remaining` as the states stand and the longest `retry_after` of the denials.
fn all_denied(
    decisions: Vec<Decision>,
    checks: &[CallCheck],
    quotas: &[Quota],
    states: &[Option<KeyState>],
    now: u64,
) -> Vec<Decision> {
    let retry = decisions.iter().filter_map(|d| d.retry_after).max();
    decisions
        .into_iter()
        .zip(checks)
        .map(|(d, (g, _, asker))| {
            if d.allowed {
                Decision {
                    allowed: false,
                    retry_after: retry,
                    ..asker
                        .decide(&quotas[*g], states[*g].as_ref(), 0, now)
                        .decision
                }
            } else {
                d
            }
        })
        .collect()
}

/// What a denied check of a denied call writes, on `before` (the state as it was before the
/// call): on a quota with fair flows, the check decided again on `before` (its ban, its
/// flow's asked count); else, or if that writes nothing, `before` with the ban `denial`
/// started (`None`: it started none, nothing to write).
fn denial_only(
    quota: &Quota,
    asker: &Asker,
    cost: u64,
    before: Option<KeyState>,
    denial: KeyState,
    now: u64,
) -> Option<KeyState> {
    if quota.fair_flows {
        let again = asker.decide(quota, before.as_ref(), cost, now);
        if let (false, Some(s)) = (again.decision.allowed, again.state) {
            return Some(s);
        }
        let was = before.as_ref().map_or(0, |s| s.banned_until);
        if denial.banned_until <= was {
            return None;
        }
    }
    Some(ban_only(quota, before, &denial))
}

/// `before` (or a full meter) with the ban that `denial` started.
fn ban_only(quota: &Quota, before: Option<KeyState>, denial: &KeyState) -> KeyState {
    let meter = before.as_ref().map_or(
        match quota.algorithm {
            Algorithm::FixedWindow => Meter::Fixed {
                window: 0,
                count: 0,
            },
            Algorithm::SlidingWindow => Meter::Sliding {
                window: 0,
                count: 0,
                previous: 0,
            },
            _ => Meter::Gcra { tat: 0 },
        },
        |s| s.meter,
    );
    let banned_until = denial
        .banned_until
        .max(before.as_ref().map_or(0, |s| s.banned_until));
    KeyState::new(meter, banned_until, denial.stamp, 0).carrying(before.as_ref())
}
