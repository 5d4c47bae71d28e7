//! [`Limiter::check_all`]: several checks (of one or several limits) admitted together or not
//! at all, in one atomic store write.

use super::batch::{by, pause_after_conflict, rate_store};
use super::{validate_key, RateLimit};
use crate::backend::{KeyWrite, WriteOutcome};
use crate::error::{Error, Result};
use crate::limiter::Limiter;
use crate::rate::{decide, Algorithm, Decision, KeyState, Meter, Quota};
use crate::rate_known::{learn, KeyCell, LimitShared};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// One check of a [`Limiter::check_all`]: `cost` for `key` on a rate limit.
#[derive(Debug, Clone)]
pub struct Check<'a> {
    limit: &'a RateLimit,
    key: String,
    cost: u64,
}

impl<'a> Check<'a> {
    /// A check of `cost` for `key` on `limit`.
    pub fn new(limit: &'a RateLimit, key: impl Into<String>, cost: u64) -> Check<'a> {
        Check {
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

/// The checks of one (limit, key), in the order given.
struct Group {
    limit: Arc<LimitShared>,
    key: String,
    cell: Arc<KeyCell>,
    checks: Vec<usize>,
}

/// One pass over every group from what we know.
struct Pass {
    decisions: Vec<Decision>,
    /// (group, new state, its expiry, the version it was computed from).
    writes: Vec<(usize, KeyState, u64, Option<u64>)>,
    untrusted_denial: Vec<usize>,
    quota_versions: Vec<u64>,
}

impl Limiter {
    /// Checks several keys, of one or several rate limits of this Limiter, all or nothing:
    /// every check is admitted (and consumed) in one atomic store write, or none is, and then
    /// nothing is consumed.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> clusterlimit::Result<()> {
    /// use clusterlimit::{Check, Limiter, Quota};
    /// let limiter = Limiter::connect("memory://check-all-doc").await?;
    /// let per_user = limiter.rate_limit("per-user", Quota::per_second(10)).await?;
    /// let global = limiter.rate_limit("global", Quota::per_second(1)).await?;
    /// let ds = limiter
    ///     .check_all(&[Check::new(&per_user, "user-42", 1), Check::new(&global, "all", 1)])
    ///     .await?;
    /// assert!(ds.iter().all(|d| d.allowed));
    /// let ds = limiter
    ///     .check_all(&[Check::new(&per_user, "user-42", 1), Check::new(&global, "all", 1)])
    ///     .await?;
    /// assert!(ds.iter().all(|d| !d.allowed)); // global is spent, so user-42 is not charged
    /// assert_eq!(ds[0].remaining, 9);
    /// # Ok(()) }
    /// ```
    ///
    /// Returns one decision per check, in order. When any is denied, all are: the ones that
    /// would have passed say `allowed: false`, their `remaining` as it is, and the longest
    /// `retry_after` of the denials. Checks of the same key are decided in order, in one write.
    ///
    /// Errors: `InvalidArgument` for no checks, a bad key or cost, or a limit of another
    /// Limiter; the rest as [`RateLimit::check_n`]. No coalescing with other calls: one
    /// request when admitted (a provable denial takes none), one more per conflict.
    pub async fn check_all(&self, checks: &[Check<'_>]) -> Result<Vec<Decision>> {
        if checks.is_empty() {
            return Err(Error::invalid("check_all needs at least one check"));
        }
        for c in checks {
            if !Arc::ptr_eq(c.limit.inner(), &self.inner) {
                return Err(Error::invalid(format!(
                    "check_all: rate limit {:?} belongs to another Limiter",
                    c.limit.name()
                )));
            }
            validate_key(&c.key)?;
            let quota = c.limit.quota();
            if c.cost > quota.max_cost() {
                return Err(Error::invalid(format!(
                    "check_all: cost {} for {:?} is above {} ({quota}), so it could never be admitted",
                    c.cost,
                    c.key,
                    quota.max_cost()
                )));
            }
        }
        self.inner.check_open()?;
        let groups = group(checks);
        let result = self.decide_all(checks, &groups).await;
        result.map_err(|e| self.inner.closed_or(e))
    }

    async fn decide_all(&self, checks: &[Check<'_>], groups: &[Group]) -> Result<Vec<Decision>> {
        let store = rate_store(&self.inner)?;
        let deadline = Instant::now() + self.inner.request_timeout * 2;
        let mut conflicts = 0u32;
        let began = Instant::now();
        loop {
            let now = self.inner.now_ns();
            let pass = one_pass(checks, groups, now, began, store.version_life());
            if !pass.untrusted_denial.is_empty() {
                // A denial from a state the store has not confirmed lately: read it first.
                for &g in &pass.untrusted_denial {
                    let key = &groups[g].key;
                    let current = by(deadline, store.read_key(&groups[g].limit.name, key)).await?;
                    learn(&groups[g].limit, &groups[g].cell, current, now)?;
                }
                continue;
            }
            let writes: Vec<KeyWrite> = pass
                .writes
                .iter()
                .map(|&(g, state, expires_at, expected)| KeyWrite {
                    limit: groups[g].limit.name.clone(),
                    quota_version: pass.quota_versions[g],
                    key: groups[g].key.clone(),
                    expected,
                    value: state.encode(),
                    expires_at,
                })
                .collect();
            if writes.is_empty() {
                return Ok(pass.decisions);
            }
            match by(deadline, store.write_keys(&writes)).await? {
                WriteOutcome::Written(versions) => {
                    for (&(g, state, expires_at, _), v) in pass.writes.iter().zip(versions) {
                        groups[g]
                            .cell
                            .set_known(Some(state), Some(v), expires_at, now);
                    }
                    return Ok(pass.decisions);
                }
                WriteOutcome::Conflict(found) => {
                    let ours = found.len() == writes.len()
                        && found
                            .iter()
                            .zip(&writes)
                            .all(|(f, w)| f.key.as_ref().is_some_and(|k| k.value == w.value));
                    if ours {
                        // A retried request of ours applied after all.
                        for (&(g, state, expires_at, _), f) in pass.writes.iter().zip(&found) {
                            let v = f.key.as_ref().map(|k| k.version);
                            groups[g].cell.set_known(Some(state), v, expires_at, now);
                        }
                        return Ok(pass.decisions);
                    }
                    for (&(g, _, _, _), f) in pass.writes.iter().zip(found) {
                        learn(&groups[g].limit, &groups[g].cell, f, now)?;
                    }
                    conflicts += 1;
                    if pause_after_conflict(conflicts, deadline).await? {
                        // What the conflict brought is as old as the pause: read afresh (as
                        // the batch does).
                        let now = self.inner.now_ns();
                        for &(g, _, _, _) in &pass.writes {
                            let key = &groups[g].key;
                            let current =
                                by(deadline, store.read_key(&groups[g].limit.name, key)).await?;
                            learn(&groups[g].limit, &groups[g].cell, current, now)?;
                        }
                    }
                }
            }
        }
    }
}

fn group(checks: &[Check<'_>]) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    for (i, c) in checks.iter().enumerate() {
        let same = |g: &&mut Group| Arc::ptr_eq(&g.limit, c.limit.shared()) && g.key == c.key;
        match groups.iter_mut().find(|g| same(g)) {
            Some(g) => g.checks.push(i),
            None => groups.push(Group {
                limit: c.limit.shared().clone(),
                key: c.key.clone(),
                cell: c.limit.shared().cell(&c.key),
                checks: vec![i],
            }),
        }
    }
    groups
}

/// Decides every check from what we know. All admitted: the writes of every changed group.
/// Any denied: every check denied, and the writes of bans only.
fn one_pass(
    checks: &[Check<'_>],
    groups: &[Group],
    now: u64,
    began: Instant,
    version_life: Duration,
) -> Pass {
    let mut decisions: Vec<Option<Decision>> = vec![None; checks.len()];
    let mut group_of = vec![0; checks.len()];
    let mut admitted_writes = Vec::new();
    let mut ban_writes = Vec::new();
    let mut untrusted_denial = Vec::new();
    let mut quota_versions = Vec::new();
    let mut peeks = Vec::new();
    for (g, group) in groups.iter().enumerate() {
        let (quota, version) = group.limit.quota();
        quota_versions.push(version);
        let start = group.cell.start(now, began, version_life);
        let (mut state, mut ban_state) = (start.state, start.state);
        let (mut changed, mut banned) = (false, false);
        let mut expires = now;
        let mut denied = false;
        for &i in &group.checks {
            let v = decide(&quota, state.as_ref(), checks[i].cost, now);
            if v.decision.allowed {
                if v.state.is_some() {
                    state = v.state;
                    changed = true;
                }
            } else {
                denied = true;
                // A denial that starts a ban: keep the ban, but on the meter as it was before
                // this call (when any check is denied, nothing is consumed).
                if let Some(b) = v.state {
                    ban_state = Some(ban_only(&quota, ban_state, &b));
                    banned = true;
                }
            }
            expires = v.expires_at;
            decisions[i] = Some(v.decision);
            group_of[i] = g;
        }
        if denied && !start.trusted {
            untrusted_denial.push(g);
        }
        if let Some(s) = state.filter(|_| changed) {
            admitted_writes.push((g, tagged(s), expires, start.version));
        }
        if let Some(b) = ban_state.filter(|_| banned) {
            let exp = decide(&quota, Some(&b), 0, now).expires_at;
            ban_writes.push((g, tagged(b), exp, start.version));
        }
        peeks.push(peek(&quota, start.state, now));
    }
    // Every check is in exactly one group, so every slot is filled.
    let decisions: Vec<Decision> = decisions.into_iter().flatten().collect();
    let all_allowed = decisions.iter().all(|d| d.allowed);
    let decisions = if all_allowed {
        decisions
    } else {
        let retry = decisions.iter().filter_map(|d| d.retry_after).max();
        decisions
            .into_iter()
            .zip(group_of)
            .map(|(d, g)| {
                if d.allowed {
                    Decision {
                        allowed: false,
                        retry_after: retry,
                        ..peeks[g]
                    }
                } else {
                    d
                }
            })
            .collect()
    };
    Pass {
        decisions,
        writes: if all_allowed {
            admitted_writes
        } else {
            ban_writes
        },
        untrusted_denial,
        quota_versions,
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
