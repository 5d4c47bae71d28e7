//! The coalescing of concurrent checks of one key in one Limiter.
//!
//! Checks of a key that arrive while a write for it is in flight wait and go together in the
//! next write: one compare-and-swap decides the whole batch in arrival order, so a hot key costs
//! one request per batch, not per check. A check the last seen state already denies is answered
//! without a request (the state only moves forward, so a denial it proves is a true denial) as
//! long as that state was confirmed by the store within [`TRUSTED_FOR`]: a `reset` or a more
//! generous quota elsewhere is seen within that time.
//!
//! Cancel-safety: the batch runs in its own task, so dropping a check's future never stalls
//! the others; a dropped check may or may not have consumed its cost.

use super::approx_book::{charges_ahead, Reported, AHEAD_FOR};
use super::approx_report::{start_reporter, SendReport};
use super::approx_usage::Usage;
use super::cell::{Answer, Enqueued, KeyCell};
use super::combine::Sender as WriteSender;
use super::lease_book::{LeaseAsk, LEASE_HOLD};
use super::options::Asker;
use super::registry::{learn, LimitShared};
use crate::backend::{Current, KeyOutcome, KeyWrite, RateStore};
use crate::error::{Error, Result};
use crate::limiter_inner::LimiterInner;
use crate::rate::{
    adjust, count_plain_check, debt, report_usage, return_lease, start_local, take_lease,
    Adjustment, Decision, FlowId, KeyState, Lease, Quota, UnixNanos, Verdict,
};
use crate::spans;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::Instrument as _;

/// Conflicts in a row answered by an immediate retry (the conflict brought the current state);
/// after these, retries pause a little, with jitter, so writers of one key spread out.
const QUICK_RETRIES: u32 = 2;
/// Cap of those pauses.
const MAX_CONFLICT_PAUSE: Duration = Duration::from_millis(20);

/// Decides a check of `cost` by `asker` (its priority class and flow) on `key`: from a lease
/// of this Limiter when `leased` allows it and one covers it (plain checks of a hot key,
/// `lease_book.rs`), locally if the known state proves it, else in the next batch of this
/// key. With a `deadline`, `Timeout` once it passes (the batch goes on: the cost
/// may still be consumed), and pacing never holds the check for more than part of what is left.
pub(crate) async fn check(
    inner: &Arc<LimiterInner>,
    limit: &Arc<LimitShared>,
    key: &str,
    cost: u64,
    asker: Asker,
    leased: Leased,
    deadline: Option<Instant>,
) -> Result<Decision> {
    // A check answered here never waits on anything, so a caller looping on denials would hold
    // its runtime thread (and starve this key's batch task) without this yield point, taken once
    // the task's coop budget is spent, as tokio's own resources do.
    tokio::task::coop::consume_budget().await;
    let cell = limit.cell(key);
    let (quota, _) = limit.quota();
    let now = inner.now_ns();
    let plain = leased == Leased::May && asker == Asker::default() && cost > 0;
    if plain && inner.leasing() {
        if let Some(d) = from_leases(inner, limit, key, &cell, cost, deadline).await {
            return Ok(d);
        }
    }
    if plain && inner.approximating() {
        if let Some(d) = from_local_meter(inner, limit, key, &cell, cost, deadline).await {
            return Ok(d);
        }
    }
    let rx = {
        let life = rate_store(inner)?.version_life();
        if let Some(d) = cell.local_answer(&quota, cost, asker, now, life) {
            inner.rates.count_local_answer();
            return Ok(d);
        }
        let (tx, rx) = oneshot::channel();
        match cell.enqueue(&quota, cost, asker, now, deadline, tx) {
            Enqueued::TurnedAway(d) => {
                inner.rates.count_local_answer();
                return Ok(d);
            }
            queued => start_driver(inner, limit, key, &cell, queued),
        }
        rx
    };
    Ok(answer(inner, limit, key, rx, deadline).await?.decision)
}

/// A plain check of `cost` answered by this Limiter's leases of `key`: admitted from a lease
/// (after waiting, by `deadline`, for a lease being asked), or denied while the key is
/// leased; `None` when the check goes to the store. Asks for a lease when one is due.
async fn from_leases(
    inner: &Arc<LimiterInner>,
    limit: &Arc<LimitShared>,
    key: &str,
    cell: &Arc<KeyCell>,
    cost: u64,
    deadline: Option<Instant>,
) -> Option<Decision> {
    let mut waited = false;
    loop {
        let (quota, quota_version) = limit.quota();
        let now = inner.now_ns();
        let (decision, unspent) = cell.spend_lease(&quota, quota_version, cost, now);
        inner.rates.count_unspent(unspent);
        if let Some(d) = decision {
            inner.rates.count_lease_admitted();
            return Some(d);
        }
        if !waited {
            send_lease_work(inner, limit, key, cell, &quota);
            // A lease on its way: wait for it rather than write for this check alone.
            let by = Instant::now() + inner.request_timeout * 2;
            cell.lease_asked(deadline.map_or(by, |d| d.min(by))).await;
            waited = true;
            continue;
        }
        let d = cell.lease_denial(&quota, cost, now)?;
        inner.rates.count_local_answer();
        return Some(d);
    }
}

/// A plain check of `cost` decided on this Limiter's local meter of `key` in the approximate
/// mode (`approx_book.rs`), after waiting (by `deadline`) for the key's first report if one
/// is on its way; `None` when it goes to the store.
async fn from_local_meter(
    inner: &Arc<LimiterInner>,
    limit: &Arc<LimitShared>,
    key: &str,
    cell: &Arc<KeyCell>,
    cost: u64,
    deadline: Option<Instant>,
) -> Option<Decision> {
    if let Some(d) = decided_here(inner, limit, key, cell, (cost, true)) {
        return Some(d);
    }
    if !cell.approx(|b| b.awaiting_first()) {
        return None;
    }
    let by = Instant::now() + inner.request_timeout * 2;
    cell.first_report(deadline.map_or(by, |d| d.min(by))).await;
    decided_here(inner, limit, key, cell, (cost, false))
}

/// A plain check of `cost` decided on the local meter of `key` now, or `None`; `fresh`: not
/// counted as asked yet. Starts the key's reporter when the key turns hot.
fn decided_here(
    inner: &Arc<LimiterInner>,
    limit: &Arc<LimitShared>,
    key: &str,
    cell: &Arc<KeyCell>,
    (cost, fresh): (u64, bool),
) -> Option<Decision> {
    let (quota, _) = limit.quota();
    let at = (inner.now_ns(), Instant::now());
    let (decision, start) = cell.approx(|b| b.check(&quota, (cost, fresh), at));
    if start {
        start_reporter(inner, limit, cell, report_sender(inner, limit, key, cell));
    }
    let d = decision?;
    if d.allowed {
        inner.rates.count_approx_admitted();
    } else {
        inner.rates.count_local_answer();
    }
    Some(d)
}

/// How `key`'s reporter sends a report: in the key's next batch, waiting for its answer.
fn report_sender(
    inner: &Arc<LimiterInner>,
    limit: &Arc<LimitShared>,
    key: &str,
    cell: &Arc<KeyCell>,
) -> SendReport {
    let (inner, limit, key, cell) = (inner.clone(), limit.clone(), key.to_string(), cell.clone());
    Box::new(move |usage| {
        let (inner, limit, key, cell) = (inner.clone(), limit.clone(), key.clone(), cell.clone());
        Box::pin(async move {
            let (tx, rx) = oneshot::channel();
            let queued = cell.enqueue_report(usage, tx);
            start_driver(&inner, &limit, &key, &cell, queued);
            answer(&inner, &limit, &key, rx, None).await
        })
    })
}

/// Whether a check may be admitted from a lease of this Limiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Leased {
    /// A plain check: yes.
    May,
    /// A reservation: no (its refund would give back leased units elsewhere than the
    /// lease's own end, which `rate/lease.rs` forbids).
    Never,
}

/// Queues what the key's leases need sent (units to give back, a lease due), starting the
/// key's batch task if none runs. Nobody waits for it.
pub(crate) fn send_lease_work(
    inner: &Arc<LimiterInner>,
    limit: &Arc<LimitShared>,
    key: &str,
    cell: &Arc<KeyCell>,
    quota: &Quota,
) {
    let (returns, due) = cell.lease_work(quota, inner.leasing());
    let asks = returns
        .into_iter()
        .map(|(lease, n)| LeaseAsk::Return(lease, n))
        .chain(due.map(LeaseAsk::Take));
    for ask in asks {
        let queued = cell.enqueue_lease(ask);
        start_driver(inner, limit, key, cell, queued);
    }
}

/// Once the lease just granted ends, sets aside what it has left and gives it back (one
/// write), so a key whose demand stopped does not keep its units away from the others.
fn schedule_lease_end(
    inner: &Arc<LimiterInner>,
    limit: &Arc<LimitShared>,
    key: &str,
    cell: &Arc<KeyCell>,
    usable_until: UnixNanos,
) {
    let wait = Duration::from_nanos(usable_until.saturating_sub(inner.now_ns()));
    let (inner, limit, key, cell) = (inner.clone(), limit.clone(), key.to_string(), cell.clone());
    inner.runtime.clone().spawn(async move {
        tokio::time::sleep(wait).await;
        let (quota, version) = limit.quota();
        let unspent = cell.leases_ended(inner.now_ns(), version);
        inner.rates.count_unspent(unspent);
        send_lease_work(&inner, &limit, &key, &cell, &quota);
    });
}

/// Applies a charge or refund to `key` in its next batch (one write, shared with the checks
/// of that batch): the key after it, and its debt. It is applied even if this call is dropped.
pub(crate) async fn adjust_key(
    inner: &Arc<LimiterInner>,
    limit: &Arc<LimitShared>,
    key: &str,
    adjustment: Adjustment,
) -> Result<Answer> {
    rate_store(inner)?;
    let cell = limit.cell(key);
    let (tx, rx) = oneshot::channel();
    let queued = cell.enqueue_adjustment(adjustment, tx);
    start_driver(inner, limit, key, &cell, queued);
    answer(inner, limit, key, rx, None).await
}

/// Starts the key's batch task if `queued` says none runs.
fn start_driver(
    inner: &Arc<LimiterInner>,
    limit: &Arc<LimitShared>,
    key: &str,
    cell: &Arc<KeyCell>,
    queued: Enqueued,
) {
    if let Enqueued::StartDriver = queued {
        let driver = Driver {
            sender: inner.write_sender(),
            inner: inner.clone(),
            limit: limit.clone(),
            key: key.to_string(),
            cell: cell.clone(),
            finished: false,
            parent: tracing::Span::current(),
        };
        inner.runtime.spawn(driver.run());
    }
}

/// The answer the batch task sends on `rx`, by `deadline` (`None`: none).
async fn answer(
    inner: &LimiterInner,
    limit: &LimitShared,
    key: &str,
    rx: oneshot::Receiver<Result<Answer>>,
    deadline: Option<Instant>,
) -> Result<Answer> {
    let answer = match deadline {
        None => rx.await,
        Some(d) => match tokio::time::timeout_at(d, rx).await {
            Ok(answer) => answer,
            Err(_) => return Err(Error::Timeout),
        },
    };
    match answer {
        Ok(result) => result.map_err(|e| at_cluster(inner, &limit.name, key, e)),
        // The batch task was dropped: the runtime is shutting down.
        Err(_) => Err(inner.closed_or(Error::store("the rate-limit batch task ended"))),
    }
}

/// A store error of `key`'s check, naming the cluster that keeps the key when the store has
/// several (a sharded store) and the error does not name it yet.
pub(crate) fn at_cluster(inner: &LimiterInner, limit: &str, key: &str, e: Error) -> Error {
    let Error::Store(s) = &e else { return e };
    let Some(store) = inner.backend.rate_store() else {
        return e;
    };
    match store.part_name(store.part_of(limit, key)) {
        Some(name) if !s.to_string().contains(&name) => Error::store(format!("{name}: {s}")),
        _ => e,
    }
}

/// Runs the batches of one key until none is waiting.
struct Driver {
    inner: Arc<LimiterInner>,
    sender: WriteSender,
    limit: Arc<LimitShared>,
    key: String,
    cell: Arc<KeyCell>,
    /// Set when `run` returns normally; otherwise dropping the driver abandons the key's
    /// queue (see `Drop`).
    finished: bool,
    /// The span of the check that started this task: its first batch's store requests are
    /// that check's children (later batches' are traces of their own).
    parent: tracing::Span,
}

/// A driver dropped before it finished (it panicked, or its runtime shut down before or while
/// running it) fails the checks still queued instead of leaving them waiting forever.
impl Drop for Driver {
    fn drop(&mut self) {
        if !self.finished {
            self.cell.abandon();
        }
    }
}

impl Driver {
    async fn run(mut self) {
        loop {
            // A saturated key's writes are spaced (`pace.rs`): checks gather
            // meanwhile, up to the key's share.
            // (A check whose deadline cannot wait that long cuts the pause short.)
            self.cell.pace_pause().await;
            let Some(mut batch) = self.cell.take_batch() else {
                self.finished = true;
                return;
            };
            // Leases after the checks: a lease taken first would leave our own checks of the
            // batch denied for units we then hold.
            batch.sort_by_key(|p| p.lease.is_some());
            // Charges, refunds and leases alone say nothing of the key's demand: such a write
            // is not paced, and leaves the pace as it was (counted as a paced send, a stream of
            // settlements would push a saturated key's next check write away for ever).
            let adjust_only = batch
                .iter()
                .all(|p| p.adjust.is_some() || p.lease.is_some());
            if !adjust_only {
                self.cell.sent();
            }
            let asks: Vec<Ask> = batch
                .iter()
                .map(|p| Ask {
                    cost: p.cost,
                    asker: p.asker,
                    adjust: p.adjust,
                    lease: p.lease,
                })
                .collect();
            self.inner.rates.count_batch();
            // Due when its oldest check is: a check that waited for the previous batch does
            // not get a whole new bound on top.
            let oldest = batch.iter().map(|p| p.arrived).min();
            let deadline = oldest.unwrap_or_else(Instant::now) + self.inner.request_timeout * 2;
            let parent = std::mem::replace(&mut self.parent, tracing::Span::none());
            match self.decide_batch(&asks, deadline).instrument(parent).await {
                Ok((decisions, requests, quota_version)) => {
                    let (mut admitted, mut denied) = (0, 0);
                    for (a, ask) in decisions.iter().zip(&asks) {
                        if a.decision.allowed {
                            admitted += ask.cost;
                        } else {
                            denied += ask.cost;
                        }
                        self.leases_answered(ask.lease, a.lease, quota_version);
                    }
                    if !adjust_only {
                        self.cell
                            .decided(&self.limit.quota().0, admitted, denied, requests);
                    }
                    for (p, d) in batch.into_iter().zip(decisions) {
                        let _ = p.reply.send(Ok(d));
                    }
                }
                Err(e) => {
                    if !adjust_only {
                        self.cell.batch_failed();
                    }
                    for ask in &asks {
                        self.leases_answered(ask.lease, None, 0);
                    }
                    let e = self.inner.closed_or(e);
                    for p in batch {
                        let _ = p.reply.send(Err(e.copy()));
                    }
                }
            }
        }
    }

    /// Hands a lease asked or given back in the batch its outcome (`got`: `None` when the
    /// write failed, or the key did not take returned units back).
    fn leases_answered(&self, ask: Option<LeaseAsk>, got: Option<Lease>, quota_version: u64) {
        let rates = &self.inner.rates;
        match ask {
            None => {}
            Some(LeaseAsk::Take(_)) => {
                self.cell.lease_answered(got, quota_version);
                if let Some(l) = got.filter(|l| l.granted > 0) {
                    rates.count_lease(l.granted);
                    let (inner, limit, cell) = (&self.inner, &self.limit, &self.cell);
                    schedule_lease_end(inner, limit, &self.key, cell, l.usable_until);
                }
            }
            Some(LeaseAsk::Report(_)) => {}
            Some(LeaseAsk::Return(_, n)) => {
                self.cell.return_answered();
                match got {
                    Some(_) => rates.count_lease_returned(n),
                    None => rates.count_lease_lost(n),
                }
            }
        }
    }

    /// The batch's decisions, the store requests they took, and the quota version they were
    /// decided under.
    async fn decide_batch(
        &self,
        asks: &[Ask],
        deadline: Instant,
    ) -> Result<(Vec<Answer>, u64, u64)> {
        self.inner.check_open()?;
        let store = rate_store(&self.inner)?;
        let mut conflicts = 0u32;
        let mut requests = 0u64;
        let began = Instant::now();
        let lease_only = asks.iter().all(|a| a.lease.is_some());
        let mut read_first = lease_only && self.cell.lease_writes_contended();
        loop {
            if std::mem::take(&mut read_first) {
                requests += 1;
                let read = by(deadline, store.read_key(&self.limit.name, &self.key));
                let current = spans::store("read", read).await?;
                self.learn(current, self.inner.now_ns())?;
            }
            let now = self.inner.now_ns();
            let (quota, quota_version) = self.limit.quota();
            let start = self.cell.start(now, began, store.version_life());
            let (decisions, changed, expires_at) =
                decide_in_order(&quota, start.state, (asks, self.holder()), now);
            let Some(mut new) = changed else {
                if start.trusted {
                    return Ok((decisions, requests, quota_version));
                }
                // Only denials or peeks, from a state the store has not confirmed lately:
                // read it, then decide again from the truth.
                requests += 1;
                let read = by(deadline, store.read_key(&self.limit.name, &self.key));
                let current = spans::store("read", read).await?;
                self.learn(current, now)?;
                continue;
            };
            new.tag = fastrand::u64(1..);
            let value = new.encode();
            let write = KeyWrite {
                limit: self.limit.name.clone(),
                quota_version,
                key: self.key.clone(),
                expected: start.version,
                value: value.clone(),
                expires_at,
            };
            // (A store that reads after a conflict, ZooKeeper, spends one more: not counted
            // here, the retry the conflict causes is.)
            requests += 1;
            // Other keys' writes ready now go in the same request (`combine.rs`).
            let written = self.inner.rates.write(&self.sender, write);
            match spans::store("write", by(deadline, written)).await {
                Ok(KeyOutcome::Written(version)) => {
                    self.cell
                        .set_known(Some(new), Some(version), expires_at, now);
                    return Ok((decisions, requests, quota_version));
                }
                Ok(KeyOutcome::Conflict(current)) => {
                    // A retried request of ours applied after all: the batch is decided.
                    if let Some(k) = current.key.as_ref().filter(|k| k.value == value) {
                        self.cell
                            .set_known(Some(new), Some(k.version), expires_at, now);
                        return Ok((decisions, requests, quota_version));
                    }
                    self.learn(current, now)?;
                    conflicts += 1;
                    if lease_only {
                        self.cell.lease_write_lost();
                    }
                    if pause_after_conflict(conflicts, deadline).await? {
                        // What the conflict brought is as old as the pause: on a hot key
                        // others wrote meanwhile, and a write decided from it would lose
                        // again, pause after pause, until the deadline. Read afresh.
                        requests += 1;
                        let read = by(deadline, store.read_key(&self.limit.name, &self.key));
                        let current = spans::store("read", read).await?;
                        self.learn(current, self.inner.now_ns())?;
                    }
                }
                Err(e) => {
                    self.cell.forget();
                    return Err(e);
                }
            }
        }
    }

    /// This Limiter as a holder of the key's leases, and whether it leases hot keys (then
    /// its plain checks count in the key's holders' table).
    fn holder(&self) -> (FlowId, bool) {
        (self.inner.lease_holder(), self.inner.leasing())
    }

    /// Takes what the store holds now into our knowledge.
    fn learn(&self, current: Current, now: UnixNanos) -> Result<()> {
        learn(&self.limit, &self.cell, current, now)
    }
}

/// A queued check (its cost and asker), or a charge or refund, or a lease to take or give back.
struct Ask {
    cost: u64,
    asker: Asker,
    adjust: Option<Adjustment>,
    lease: Option<LeaseAsk>,
}

/// The batch's checks (cost, asker) and adjustments decided in arrival order from `state`,
/// each against the state the ones before it left (so checks of different classes and flows
/// in one write are decided exactly as one after the other, each flow's counts moving with
/// them): the answers, the state to write if any of them changed it, and when the key's state
/// expires.
fn decide_in_order(
    quota: &Quota,
    mut state: Option<KeyState>,
    (asks, (holder, leasing)): (&[Ask], (FlowId, bool)),
    now: UnixNanos,
) -> (Vec<Answer>, Option<KeyState>, UnixNanos) {
    let mut changed = false;
    let mut expires_at = now;
    let mut answers = Vec::with_capacity(asks.len());
    for ask in asks {
        let mut report = None;
        let (v, lease) = match (ask.adjust, ask.lease) {
            (Some(a), _) => (adjust(quota, state.as_ref(), a, now), None),
            (None, Some(LeaseAsk::Report(usage))) => {
                let (v, r) = reported(quota, state.as_ref(), (holder, usage), now);
                report = Some(r);
                (v, None)
            }
            (None, Some(LeaseAsk::Take(want))) => {
                let t = take_lease(quota, state.as_ref(), (holder, want), LEASE_HOLD, now);
                let peek = crate::rate::decide(quota, t.state.as_ref().or(state.as_ref()), 0, now);
                let v = Verdict {
                    state: t.state,
                    expires_at: t.expires_at,
                    ..peek
                };
                (v, Some(t.lease))
            }
            (None, Some(LeaseAsk::Return(lease, n))) => {
                let v = return_lease(quota, state.as_ref(), &lease, n, now);
                let back = v.state.is_some().then_some(lease);
                (v, back)
            }
            (None, None) => {
                let mut v = ask.asker.decide(quota, state.as_ref(), ask.cost, now);
                if leasing && ask.asker == Asker::default() {
                    count_plain_check(quota, &mut v, (holder, ask.cost), now);
                }
                (v, None)
            }
        };
        if v.state.is_some() {
            state = v.state;
            changed = true;
        }
        answers.push(Answer {
            decision: v.decision,
            debt: debt(quota, state.as_ref(), now),
            lease,
            report,
        });
        expires_at = v.expires_at;
    }
    (answers, state.filter(|_| changed), expires_at)
}

/// A report of the approximate mode by `holder` on a key whose state is `state`
/// (`rate/approximate.rs`): the verdict to write (a peek at the key after it), and what the
/// reporter is told. A first report (on a GCRA quota, every report) also charges its local
/// meter's part of the key ahead.
fn reported(
    quota: &Quota,
    state: Option<&KeyState>,
    (holder, usage): (FlowId, Usage),
    now: UnixNanos,
) -> (Verdict, Reported) {
    let counts = (holder, usage.asked, usage.admitted, usage.projected);
    let r = report_usage(quota, state, counts, now);
    let meter = r.state.meter;
    let (key, ahead) = match r.share.filter(|_| usage.first || charges_ahead(quota)) {
        Some(share) => {
            // (A window's first report takes its whole part: no refill shares the rest.)
            let most = match charges_ahead(quota) {
                true => ahead_most(quota, usage.projected).saturating_sub(usage.held),
                false => u64::MAX,
            };
            let (_, key, ahead) = start_local(quota, &r.state, (share, most), now);
            (key, ahead)
        }
        None => (r.state, 0),
    };
    let peek = crate::rate::decide(quota, Some(&key), 0, now);
    let v = Verdict {
        expires_at: peek.expires_at.max(r.expires_at),
        state: Some(key),
        ..peek
    };
    let told = Reported {
        share: r.share,
        meter,
        ahead,
    };
    (v, told)
}

/// The most a report charges ahead on a GCRA quota for a holder asking `projected` units a
/// period: its demand over [`AHEAD_FOR`] (`rate::start_local`).
fn ahead_most(quota: &Quota, projected: u64) -> u64 {
    let part = AHEAD_FOR.as_secs_f64() / quota.period.as_secs_f64().max(1e-9);
    (projected as f64 * part).ceil() as u64
}

/// After the `conflicts`-th conflict in a row: an immediate retry at first (the conflict
/// brought the current state), then short jittered pauses (true: paused, so that state is
/// stale); past the deadline, an error (never a denial: the limit did not deny, we could not
/// get a decision).
pub(crate) async fn pause_after_conflict(conflicts: u32, deadline: Instant) -> Result<bool> {
    if Instant::now() >= deadline {
        return Err(Error::store(format!(
            "no decision: {conflicts} writes in a row lost to other writers of the key"
        )));
    }
    if conflicts > QUICK_RETRIES {
        let cap =
            Duration::from_millis(1 << (conflicts - QUICK_RETRIES).min(5)).min(MAX_CONFLICT_PAUSE);
        let pause = cap.mul_f64(fastrand::f64());
        tokio::time::sleep_until((Instant::now() + pause).min(deadline)).await;
        return Ok(true);
    }
    Ok(false)
}

/// A store call cut off at the batch's deadline: an error then (a write's outcome unknown, so
/// the caller forgets the key's state), never a decision.
pub(crate) async fn by<T>(
    deadline: Instant,
    call: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    tokio::time::timeout_at(deadline, call)
        .await
        .unwrap_or_else(|_| {
            Err(Error::store(
                "the store did not answer in time (a check is decided within twice the request timeout, or fails)",
            ))
        })
}

/// The backend's rate-limit storage, or a clear error for one that has none.
pub(crate) fn rate_store(inner: &LimiterInner) -> Result<&dyn RateStore> {
    inner.backend.rate_store().ok_or_else(|| {
        Error::invalid("this store does not keep rate limits (memory://, etcd:// and zk:// do)")
    })
}
