//! [`Limiter::check_all`]: several checks (of one or several limits) admitted together or not
//! at all, in one atomic store write. Concurrent calls of one Limiter queue for its next joint
//! write (`joint.rs`) and are decided together, in arrival order.

use super::batch::{by, pause_after_conflict, rate_store};
use super::cell::{KeyCell, Start};
use super::handle::{validate_key, RateLimit};
use super::joint::{JointCall, JointGroup};
use super::registry::{learn, LimitShared};
use crate::backend::{KeyWrite, WriteOutcome};
use crate::error::{Error, Result};
use crate::limiter_inner::LimiterInner;
use crate::rate::{decide, Algorithm, Decision, KeyState, Meter, Quota};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use tokio::sync::oneshot;
use tokio::time::Instant;

/// One check of a [`Limiter::check_all`](crate::Limiter::check_all): `cost` for `key` on a rate limit.
#[derive(Debug, Clone)]
pub struct KeyCheck<'a> {
    limit: &'a RateLimit,
    key: String,
    cost: u64,
}

impl<'a> KeyCheck<'a> {
    /// A check of `cost` for `key` on `limit`.
    pub fn new(limit: &'a RateLimit, key: impl Into<String>, cost: u64) -> KeyCheck<'a> {
        KeyCheck {
            limit,
            key: key.into(),
            cost,
        }
    }

    /// The limit, key and cost of this check.
    pub(crate) fn parts(&self) -> (&'a RateLimit, &str, u64) {
        (self.limit, &self.key, self.cost)
    }
}

/// Most distinct keys plus limits one joint write carries (etcd's `--max-txn-ops` default:
/// each key is a compare and a put, each limit a quota compare).
const JOINT_MAX_OPS: usize = 128;

/// [`Limiter::check_all`]: the checks validated; one check alone is `check_n`'s (coalesced
/// with the key's concurrent checks, paced), several a denial the known states prove or this
/// Limiter's next joint write. `deadline` bounds a lone check (the joint write keeps to the
/// request timeout; a caller with a budget wraps it).
pub(crate) async fn run(
    inner: &Arc<LimiterInner>,
    checks: &[KeyCheck<'_>],
    deadline: Option<Instant>,
) -> Result<Vec<Decision>> {
    validate(inner, checks)?;
    if let [only] = checks {
        return Ok(vec![only.limit.check_by(&only.key, only.cost, deadline).await?]);
    }
    joint(inner, checks).await
}

/// Bad input is an error before any store request: no checks, a limit of another Limiter,
/// a bad key or cost.
pub(crate) fn validate(inner: &Arc<LimiterInner>, checks: &[KeyCheck<'_>]) -> Result<()> {
    if checks.is_empty() {
        return Err(Error::invalid("check_all needs at least one check"));
    }
    for c in checks {
        if !Arc::ptr_eq(c.limit.inner(), inner) {
            return Err(Error::invalid(format!(
                "check_all: rate limit {:?} belongs to another Limiter",
                c.limit.name()
            )));
        }
        validate_key(&c.key)?;
        c.limit.quota().check_cost(c.limit.name(), c.cost)?;
    }
    Ok(())
}

/// Several checks: a denial the known states prove, or this Limiter's next joint write.
async fn joint(inner: &Arc<LimiterInner>, checks: &[KeyCheck<'_>]) -> Result<Vec<Decision>> {
    inner.check_open()?;
    // A store spread over clusters commits keys together only within one cluster.
    let store = rate_store(inner)?;
    let keys: Vec<(&str, &str)> = checks
        .iter()
        .map(|c| (c.limit.name(), c.key.as_str()))
        .collect();
    store.joint_keys(&keys)?;
    let part = keys.first().map_or(0, |(l, k)| store.part_of(l, k));
    let (groups, order) = group(checks);
    if let Some(denied) = local_denial(inner, &groups, &order) {
        inner.rate_counts.local_answers.fetch_add(1, Relaxed);
        return Ok(denied);
    }
    let (tx, rx) = oneshot::channel();
    let call = JointCall {
        part,
        groups,
        checks: order,
        arrived: Instant::now(),
        reply: tx,
    };
    if inner.joint.push(call) {
        let driver = JointDriver {
            inner: inner.clone(),
            finished: false,
        };
        inner.runtime.spawn(driver.run());
    }
    let (limit, key) = keys[0];
    match rx.await {
        Ok(result) => {
            result.map_err(|e| inner.closed_or(super::batch::at_cluster(inner, limit, key, e)))
        }
        Err(_) => Err(inner.closed_or(Error::store("the rate-limit joint task ended"))),
    }
}

/// The distinct (limit, key) pairs of a call, and its checks as (group, cost), in order.
fn group(checks: &[KeyCheck<'_>]) -> (Vec<JointGroup>, Vec<(usize, u64)>) {
    let mut groups: Vec<JointGroup> = Vec::new();
    let mut order = Vec::with_capacity(checks.len());
    for c in checks {
        let same = |g: &JointGroup| Arc::ptr_eq(&g.limit, c.limit.shared()) && g.key == c.key;
        let g = match groups.iter().position(same) {
            Some(g) => g,
            None => {
                groups.push(JointGroup {
                    limit: c.limit.shared().clone(),
                    key: c.key.clone(),
                    cell: c.limit.shared().cell(&c.key),
                });
                groups.len() - 1
            }
        };
        order.push((g, c.cost));
    }
    (groups, order)
}

/// A denial the known states prove (every state trusted, nothing to write): no request, no
/// wait behind the joint write in flight.
fn local_denial(
    inner: &LimiterInner,
    groups: &[JointGroup],
    order: &[(usize, u64)],
) -> Option<Vec<Decision>> {
    let life = rate_store(inner).ok()?.version_life();
    let now = inner.now_ns();
    let at = Instant::now();
    let starts: Vec<Start> = groups.iter().map(|g| g.cell.start(now, at, life)).collect();
    if !starts.iter().all(|s| s.trusted) {
        return None;
    }
    let quotas: Vec<Quota> = groups.iter().map(|g| g.limit.quota().0).collect();
    let states: Vec<Option<KeyState>> = starts.iter().map(|s| s.state).collect();
    let pass = decide_call(order, &quotas, &states, now);
    (!pass.allowed && pass.writes.is_empty()).then_some(pass.decisions)
}

/// Decides the queued `check_all` calls of one Limiter, batch after batch, until none waits.
struct JointDriver {
    inner: Arc<LimiterInner>,
    /// Set when `run` returns normally; otherwise dropping it fails the queued calls.
    finished: bool,
}

impl Drop for JointDriver {
    fn drop(&mut self) {
        if !self.finished {
            self.inner.joint.abandon();
        }
    }
}

impl JointDriver {
    async fn run(mut self) {
        while let Some(batch) = self.inner.joint.take(JOINT_MAX_OPS) {
            self.inner.rate_counts.batches.fetch_add(1, Relaxed);
            match decide_joint(&self.inner, &batch).await {
                Ok(decided) => {
                    for (call, d) in batch.into_iter().zip(decided) {
                        let _ = call.reply.send(Ok(d));
                    }
                }
                Err(e) => {
                    let e = self.inner.closed_or(e);
                    for call in batch {
                        let _ = call.reply.send(Err(e.copy()));
                    }
                }
            }
        }
        self.finished = true;
    }
}

/// One (limit, key) of a joint batch, shared by every call that checks it.
struct Slot {
    limit: Arc<LimitShared>,
    key: String,
    cell: Arc<KeyCell>,
}

/// The batch's calls decided in order from what we know, each all or nothing, and written
/// together in one all-or-nothing store write (a conflict brings the current states and the
/// batch is decided again, as a single call's would be).
async fn decide_joint(inner: &LimiterInner, batch: &[JointCall]) -> Result<Vec<Vec<Decision>>> {
    inner.check_open()?;
    let store = rate_store(inner)?;
    let oldest = batch.iter().map(|c| c.arrived).min();
    let deadline = oldest.unwrap_or_else(Instant::now) + inner.request_timeout * 2;
    let began = Instant::now();
    let mut slots: Vec<Slot> = Vec::new();
    let slot_of: Vec<Vec<usize>> = batch
        .iter()
        .map(|call| {
            call.groups
                .iter()
                .map(|g| {
                    let same = |s: &Slot| Arc::ptr_eq(&s.limit, &g.limit) && s.key == g.key;
                    slots.iter().position(same).unwrap_or_else(|| {
                        slots.push(Slot {
                            limit: g.limit.clone(),
                            key: g.key.clone(),
                            cell: g.cell.clone(),
                        });
                        slots.len() - 1
                    })
                })
                .collect()
        })
        .collect();
    let mut conflicts = 0u32;
    loop {
        let now = inner.now_ns();
        let starts: Vec<Start> = slots
            .iter()
            .map(|s| s.cell.start(now, began, store.version_life()))
            .collect();
        let quotas: Vec<(Quota, u64)> = slots.iter().map(|s| s.limit.quota()).collect();
        let mut work: Vec<Option<KeyState>> = starts.iter().map(|s| s.state).collect();
        let mut written: Vec<Option<u64>> = vec![None; slots.len()];
        let mut to_read = Vec::new();
        let mut decided = Vec::with_capacity(batch.len());
        for (call, mine) in batch.iter().zip(&slot_of) {
            let call_quotas: Vec<Quota> = mine.iter().map(|&s| quotas[s].0).collect();
            let states: Vec<Option<KeyState>> = mine.iter().map(|&s| work[s]).collect();
            let pass = decide_call(&call.checks, &call_quotas, &states, now);
            // A denial from a state the store has not confirmed lately: read it first.
            to_read.extend(
                pass.denied_groups
                    .iter()
                    .map(|&g| mine[g])
                    .filter(|&s| !starts[s].trusted),
            );
            for (g, state, expires_at) in pass.writes {
                work[mine[g]] = Some(state);
                written[mine[g]] = Some(expires_at);
            }
            decided.push(pass.decisions);
        }
        if !to_read.is_empty() {
            to_read.sort_unstable();
            to_read.dedup();
            for s in to_read {
                let current = by(
                    deadline,
                    store.read_key(&slots[s].limit.name, &slots[s].key),
                )
                .await?;
                learn(&slots[s].limit, &slots[s].cell, current, now)?;
            }
            continue;
        }
        let mut changed = Vec::new();
        for (s, expires_at) in written.iter().enumerate() {
            if let (Some(expires_at), Some(state)) = (expires_at, work[s]) {
                changed.push((s, tagged(state), *expires_at));
            }
        }
        if changed.is_empty() {
            return Ok(decided);
        }
        let writes: Vec<KeyWrite> = changed
            .iter()
            .map(|&(s, state, expires_at)| KeyWrite {
                limit: slots[s].limit.name.clone(),
                quota_version: quotas[s].1,
                key: slots[s].key.clone(),
                expected: starts[s].version,
                value: state.encode(),
                expires_at,
            })
            .collect();
        match by(deadline, store.write_keys(&writes)).await? {
            WriteOutcome::Written(versions) => {
                for (&(s, state, expires_at), v) in changed.iter().zip(versions) {
                    slots[s]
                        .cell
                        .set_known(Some(state), Some(v), expires_at, now);
                }
                return Ok(decided);
            }
            WriteOutcome::Conflict(found) => {
                let ours = found.len() == writes.len()
                    && found
                        .iter()
                        .zip(&writes)
                        .all(|(f, w)| f.key.as_ref().is_some_and(|k| k.value == w.value));
                if ours {
                    // A retried request of ours applied after all.
                    for (&(s, state, expires_at), f) in changed.iter().zip(&found) {
                        let v = f.key.as_ref().map(|k| k.version);
                        slots[s].cell.set_known(Some(state), v, expires_at, now);
                    }
                    return Ok(decided);
                }
                for (&(s, _, _), f) in changed.iter().zip(found) {
                    learn(&slots[s].limit, &slots[s].cell, f, now)?;
                }
                conflicts += 1;
                if pause_after_conflict(conflicts, deadline).await? {
                    // What the conflict brought is as old as the pause: read afresh (as the
                    // per-key batch does).
                    let now = inner.now_ns();
                    for &(s, _, _) in &changed {
                        let current = by(
                            deadline,
                            store.read_key(&slots[s].limit.name, &slots[s].key),
                        )
                        .await?;
                        learn(&slots[s].limit, &slots[s].cell, current, now)?;
                    }
                }
            }
        }
    }
}

/// How one call came out against given states.
struct CallPass {
    decisions: Vec<Decision>,
    allowed: bool,
    /// Groups with a denied check.
    denied_groups: Vec<usize>,
    /// (group, new state, its expiry): every changed group when all were admitted; else the
    /// bans a denial started, on the meters as they were.
    writes: Vec<(usize, KeyState, u64)>,
}

/// Decides one call's checks (as (group, cost), in order) from each group's state: all
/// admitted, or all denied (the ones that would have passed with their `remaining` as it is
/// and the longest `retry_after` of the denials) and nothing consumed but the bans denials
/// start.
fn decide_call(
    checks: &[(usize, u64)],
    quotas: &[Quota],
    states: &[Option<KeyState>],
    now: u64,
) -> CallPass {
    let n = quotas.len();
    let mut state: Vec<Option<KeyState>> = states.to_vec();
    let mut ban_state: Vec<Option<KeyState>> = states.to_vec();
    let mut changed = vec![false; n];
    let mut banned = vec![false; n];
    let mut expires = vec![now; n];
    let mut decisions = Vec::with_capacity(checks.len());
    let mut denied_groups = Vec::new();
    for &(g, cost) in checks {
        let quota = &quotas[g];
        let v = decide(quota, state[g].as_ref(), cost, now);
        if v.decision.allowed {
            if v.state.is_some() {
                state[g] = v.state;
                changed[g] = true;
            }
        } else if !denied_groups.contains(&g) {
            denied_groups.push(g);
        }
        if let (false, Some(b)) = (v.decision.allowed, v.state) {
            // A denial that starts a ban: keep the ban, but on the meter as it was before
            // this call (when any check is denied, nothing is consumed).
            ban_state[g] = Some(ban_only(quota, ban_state[g], &b));
            banned[g] = true;
        }
        expires[g] = v.expires_at;
        decisions.push(v.decision);
    }
    let allowed = decisions.iter().all(|d| d.allowed);
    if allowed {
        let writes = (0..n)
            .filter_map(|g| state[g].filter(|_| changed[g]).map(|s| (g, s, expires[g])))
            .collect();
        return CallPass {
            decisions,
            allowed,
            denied_groups,
            writes,
        };
    }
    let retry = decisions.iter().filter_map(|d| d.retry_after).max();
    let decisions = decisions
        .into_iter()
        .zip(checks)
        .map(|(d, &(g, _))| {
            if d.allowed {
                Decision {
                    allowed: false,
                    retry_after: retry,
                    ..peek(&quotas[g], states[g], now)
                }
            } else {
                d
            }
        })
        .collect();
    let writes = (0..n)
        .filter_map(|g| {
            ban_state[g].filter(|_| banned[g]).map(|b| {
                let exp = decide(&quotas[g], Some(&b), 0, now).expires_at;
                (g, b, exp)
            })
        })
        .collect();
    CallPass {
        decisions,
        allowed,
        denied_groups,
        writes,
    }
}

/// `before` (or a full meter) with the ban that `denial` started.
fn ban_only(quota: &Quota, before: Option<KeyState>, denial: &KeyState) -> KeyState {
    let meter = before.map_or(
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
    KeyState {
        meter,
        banned_until: denial
            .banned_until
            .max(before.map_or(0, |s| s.banned_until)),
        stamp: denial.stamp,
        tag: 0,
    }
}

fn tagged(mut s: KeyState) -> KeyState {
    s.tag = fastrand::u64(1..);
    s
}

fn peek(quota: &Quota, state: Option<KeyState>, now: u64) -> Decision {
    decide(quota, state.as_ref(), 0, now).decision
}
