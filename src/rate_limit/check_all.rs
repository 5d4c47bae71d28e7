//! [`Limiter::check_all`]: several checks (of one or several limits) admitted together or not
//! at all, in one atomic store write. Concurrent calls of one Limiter queue for its next joint
//! write (`joint.rs`) and are decided together, in arrival order.

use super::batch::{by, pause_after_conflict, rate_store};
use super::call::decide_call;
use super::cell::{KeyCell, Start};
use super::handle::{validate_key, RateLimit};
use super::joint::{CallCheck, JointCall, JointGroup};
use super::options::Asker;
use super::registry::{learn, LimitShared};
use crate::backend::{KeyWrite, RateStore, WriteOutcome};
use crate::error::{Error, Result};
use crate::limiter_inner::LimiterInner;
use crate::rate::reserves::ClassName;
use crate::rate::{Decision, FlowId, KeyState, Quota};
use crate::spans;
use std::sync::Arc;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::Instrument as _;

/// One check of a [`Limiter::check_all`](crate::Limiter::check_all): `cost` for `key` on a rate
/// limit, of a priority class if [`class`](Self::class) says so, of a flow if
/// [`flow`](Self::flow) does.
#[derive(Debug, Clone)]
pub struct KeyCheck<'a> {
    limit: &'a RateLimit,
    key: String,
    cost: u64,
    class: Option<String>,
    flow: Option<String>,
}

impl<'a> KeyCheck<'a> {
    /// A check of `cost` for `key` on `limit`.
    pub fn new(limit: &'a RateLimit, key: impl Into<String>, cost: u64) -> KeyCheck<'a> {
        KeyCheck {
            limit,
            key: key.into(),
            cost,
            class: None,
            flow: None,
        }
    }

    /// This check belongs to priority class `class`: admitted only if at least the class's
    /// reserve ([`Quota::reserve`]) is left on its key after it, as
    /// [`RateLimit::check_with`] with that class.
    #[must_use]
    pub fn class(mut self, class: impl Into<String>) -> KeyCheck<'a> {
        self.class = Some(class.into());
        self
    }

    /// This check belongs to flow `flow`: on a quota with fair flows it must leave the other
    /// flows of its key their due, as [`RateLimit::check_with`] with that flow (ignored on
    /// other quotas).
    #[must_use]
    pub fn flow(mut self, flow: impl Into<String>) -> KeyCheck<'a> {
        self.flow = Some(flow.into());
        self
    }

    /// Its class and flow, as validated (`validate` refuses names that are not ones).
    fn asker(&self) -> Asker {
        Asker {
            class: self.class.as_deref().and_then(|c| ClassName::new(c).ok()),
            flow: self.flow.as_deref().and_then(|f| FlowId::of(f).ok()),
        }
    }

    /// The class of this check, as given.
    pub(crate) fn class_of(&self) -> Option<&str> {
        self.class.as_deref()
    }

    /// The flow of this check, as given.
    pub(crate) fn flow_of(&self) -> Option<&str> {
        self.flow.as_deref()
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
        return Ok(vec![
            only.limit
                .check_as_by(&only.key, only.cost, only.asker(), deadline)
                .await?,
        ]);
    }
    joint(inner, checks)
        .instrument(spans::check_all(checks.len()))
        .await
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
        c.limit
            .quota()
            .check_class(c.limit.name(), c.class.as_deref(), c.cost)?;
        Asker::new(c.class.as_deref(), c.flow.as_deref())?;
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
        inner.rates.count_local_answer();
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
    if inner.rates.joint().push(call) {
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

/// The distinct (limit, key) pairs of a call, and its checks as (group, cost, asker), in order.
fn group(checks: &[KeyCheck<'_>]) -> (Vec<JointGroup>, Vec<CallCheck>) {
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
        order.push((g, c.cost, c.asker()));
    }
    (groups, order)
}

/// A denial the known states prove (every state trusted, nothing to write): no request, no
/// wait behind the joint write in flight.
fn local_denial(
    inner: &LimiterInner,
    groups: &[JointGroup],
    order: &[CallCheck],
) -> Option<Vec<Decision>> {
    let life = rate_store(inner).ok()?.version_life();
    let now = inner.now_ns();
    let at = Instant::now();
    let starts: Vec<Start> = groups.iter().map(|g| g.cell.start(now, at, life)).collect();
    if !starts.iter().all(|s| s.trusted) {
        return None;
    }
    let quotas: Vec<Quota> = groups.iter().map(|g| g.limit.quota().0).collect();
    let states: Vec<Option<KeyState>> = starts.iter().map(|s| s.state.clone()).collect();
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
            self.inner.rates.joint().abandon();
        }
    }
}

impl JointDriver {
    async fn run(mut self) {
        while let Some(batch) = self.inner.rates.joint().take(JOINT_MAX_OPS) {
            self.inner.rates.count_batch();
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
    let (slots, slot_of) = slots_of(batch);
    let joint = Joint {
        inner,
        store,
        slots,
        deadline: oldest.unwrap_or_else(Instant::now) + inner.request_timeout * 2,
        began: Instant::now(),
    };
    let mut conflicts = 0u32;
    loop {
        let now = inner.now_ns();
        let pass = joint.pass(batch, &slot_of, now);
        if !pass.to_read.is_empty() {
            joint.read(&pass.to_read, now).await?;
            continue;
        }
        if joint.write(&pass, now, &mut conflicts).await? {
            return Ok(pass.decided);
        }
    }
}

/// The distinct (limit, key) pairs of a batch, and each call's groups as slots.
fn slots_of(batch: &[JointCall]) -> (Vec<Slot>, Vec<Vec<usize>>) {
    let mut slots: Vec<Slot> = Vec::new();
    let slot_of = batch
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
    (slots, slot_of)
}

/// One joint batch being decided: its slots, and the deadline of its store requests.
struct Joint<'a> {
    inner: &'a LimiterInner,
    store: &'a dyn RateStore,
    slots: Vec<Slot>,
    deadline: Instant,
    /// States confirmed since then count as fresh.
    began: Instant,
}

/// The batch decided once against the slots' known states.
struct JointPass {
    starts: Vec<Start>,
    quotas: Vec<(Quota, u64)>,
    /// Each slot's state after the admitted calls.
    work: Vec<Option<KeyState>>,
    /// The expiry of each slot a call changed.
    written: Vec<Option<u64>>,
    /// Slots to read before deciding again: a denial from a state the store has not
    /// confirmed lately.
    to_read: Vec<usize>,
    decided: Vec<Vec<Decision>>,
}

impl Joint<'_> {
    /// Decides every call of `batch` in order, each on the states the calls before it left.
    fn pass(&self, batch: &[JointCall], slot_of: &[Vec<usize>], now: u64) -> JointPass {
        let life = self.store.version_life();
        let starts: Vec<Start> = self
            .slots
            .iter()
            .map(|s| s.cell.start(now, self.began, life))
            .collect();
        let quotas: Vec<(Quota, u64)> = self.slots.iter().map(|s| s.limit.quota()).collect();
        let mut work: Vec<Option<KeyState>> = starts.iter().map(|s| s.state.clone()).collect();
        let mut written: Vec<Option<u64>> = vec![None; self.slots.len()];
        let mut to_read = Vec::new();
        let mut decided = Vec::with_capacity(batch.len());
        for (call, mine) in batch.iter().zip(slot_of) {
            let call_quotas: Vec<Quota> = mine.iter().map(|&s| quotas[s].0).collect();
            let states: Vec<Option<KeyState>> = mine.iter().map(|&s| work[s].clone()).collect();
            let pass = decide_call(&call.checks, &call_quotas, &states, now);
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
        to_read.sort_unstable();
        to_read.dedup();
        JointPass {
            starts,
            quotas,
            work,
            written,
            to_read,
            decided,
        }
    }

    /// Reads the current states of `slots` from the store into their cells.
    async fn read(&self, slots: &[usize], now: u64) -> Result<()> {
        for &s in slots {
            let slot = &self.slots[s];
            let current = by(
                self.deadline,
                self.store.read_key(&slot.limit.name, &slot.key),
            )
            .await?;
            learn(&slot.limit, &slot.cell, current, now)?;
        }
        Ok(())
    }

    /// Writes what `pass` changed in one all-or-nothing write: true when it is stored (or
    /// nothing changed); false after a conflict, whose states the cells then know.
    async fn write(&self, pass: &JointPass, now: u64, conflicts: &mut u32) -> Result<bool> {
        let changed: Vec<(usize, KeyState, u64)> = pass
            .written
            .iter()
            .enumerate()
            .filter_map(|(s, exp)| {
                let expires_at = (*exp)?;
                Some((s, tagged(pass.work[s].clone()?), expires_at))
            })
            .collect();
        if changed.is_empty() {
            return Ok(true);
        }
        let writes: Vec<KeyWrite> = changed
            .iter()
            .map(|(s, state, expires_at)| (*s, state, *expires_at))
            .map(|(s, state, expires_at)| KeyWrite {
                limit: self.slots[s].limit.name.clone(),
                quota_version: pass.quotas[s].1,
                key: self.slots[s].key.clone(),
                expected: pass.starts[s].version,
                value: state.encode(),
                expires_at,
            })
            .collect();
        let found = match by(self.deadline, self.store.write_keys(&writes)).await? {
            WriteOutcome::Written(versions) => {
                for ((s, state, expires_at), v) in changed.into_iter().zip(versions) {
                    self.slots[s]
                        .cell
                        .set_known(Some(state), Some(v), expires_at, now);
                }
                return Ok(true);
            }
            WriteOutcome::Conflict(found) => found,
        };
        let ours = found.len() == writes.len()
            && found
                .iter()
                .zip(&writes)
                .all(|(f, w)| f.key.as_ref().is_some_and(|k| k.value == w.value));
        if ours {
            // A retried request of ours applied after all.
            for ((s, state, expires_at), f) in changed.into_iter().zip(&found) {
                let v = f.key.as_ref().map(|k| k.version);
                self.slots[s]
                    .cell
                    .set_known(Some(state), v, expires_at, now);
            }
            return Ok(true);
        }
        for (&(s, _, _), f) in changed.iter().zip(found) {
            learn(&self.slots[s].limit, &self.slots[s].cell, f, now)?;
        }
        *conflicts += 1;
        if pause_after_conflict(*conflicts, self.deadline).await? {
            // What the conflict brought is as old as the pause: read afresh (as the per-key
            // batch does).
            let now = self.inner.now_ns();
            let slots: Vec<usize> = changed.iter().map(|&(s, _, _)| s).collect();
            self.read(&slots, now).await?;
        }
        Ok(false)
    }
}

fn tagged(mut s: KeyState) -> KeyState {
    s.tag = fastrand::u64(1..);
    s
}
