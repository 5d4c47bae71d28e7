//! What one Limiter last saw of one rate-limit key, and the checks queued for its next write
//! (the coalescing itself is `rate_limit/batch.rs`).

use super::approx_book::{ApproxBook, Reported};
use super::approx_usage::Usage;
use super::lease_book::{LeaseAsk, LeaseBook, Unspent};
use super::options::Asker;
use super::pace::{max_gap, Pace, JOIN_WINDOW};
use crate::backend::lock;
use crate::error::{Error, Result};
use crate::rate::{decide, Adjustment, Decision, KeyState, Lease, Quota, UnixNanos};
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::time::Instant;

/// How long a state confirmed by the store may answer denials and peeks without a request.
pub(crate) const TRUSTED_FOR: Duration = Duration::from_secs(1);
/// The shortest `retry_after` of a check turned away on a saturated key.
const MIN_RETRY: Duration = Duration::from_millis(1);

/// A check (or a charge or refund) waiting for the next write of its key.
#[derive(Debug)]
pub(crate) struct Pending {
    /// The check's cost (0 for an adjustment: it is not a request).
    pub(crate) cost: u64,
    /// A charge or refund instead of a check: applied whatever the key holds, and even if
    /// its caller has gone (it was asked for; dropping the wait for its answer does not
    /// take it back).
    pub(crate) adjust: Option<Adjustment>,
    /// A lease to take or give back instead of a check (`lease_book.rs`): decided after the
    /// batch's checks, kept like an adjustment when nobody waits for its answer.
    pub(crate) lease: Option<LeaseAsk>,
    /// Its priority class and flow, decided against the quota's reserve for the class and
    /// the other flows' due.
    pub(crate) asker: Asker,
    /// When the check came: its answer is due within twice the request timeout from here.
    pub(crate) arrived: Instant,
    /// The latest its key's write may be sent for it: [`JOIN_WINDOW`] after it came, or
    /// sooner for a check whose deadline cannot wait that long (1/[`HURRY_SHARE`] of its
    /// budget).
    pub(crate) send_by: Instant,
    pub(crate) reply: oneshot::Sender<Result<Answer>>,
}

/// What a queued check or adjustment is answered.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Answer {
    /// The check's decision; for an adjustment, a peek at the key after it.
    pub(crate) decision: Decision,
    /// What the key owes beyond empty after it (`rate::debt`).
    pub(crate) debt: u64,
    /// For a lease asked: what it took; for one given back: `Some` iff the key took the
    /// units back.
    pub(crate) lease: Option<Lease>,
    /// For a report of the approximate mode: the share and the key after it.
    pub(crate) report: Option<Reported>,
}

/// A check may wait on pacing for at most this fraction of the budget it has left: one
/// whose deadline is nearer is sent sooner (with whatever else waits), so pacing never turns a
/// short deadline into a missed one.
const HURRY_SHARE: u32 = 2;

#[derive(Debug, Default)]
pub(crate) struct KeyCell {
    inner: Mutex<CellInner>,
    /// Wakes the key's batch task from a pacing pause: a check joined, whose `send_by` may
    /// come before the paced send.
    joined: tokio::sync::Notify,
    /// Wakes checks waiting for a lease being asked (`lease_answered`), or for the first
    /// report of the approximate mode (`report_came`).
    lease_came: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct CellInner {
    known: Option<Known>,
    pending: Vec<Pending>,
    driving: bool,
    /// How writes of this key are paced while it is saturated (`pace.rs`).
    pace: Pace,
    /// This Limiter's leases of the key (`lease_book.rs`).
    leases: LeaseBook,
    /// The key in the approximate mode (`approx_book.rs`).
    approx: ApproxBook,
}

/// What became of a check handed to [`KeyCell::enqueue`].
#[derive(Debug)]
pub(crate) enum Enqueued {
    /// Queued for the next write; no batch task runs: the caller starts one.
    StartDriver,
    /// Queued for the next write of the running batch task.
    Joined,
    /// The key is saturated and the next write's share is taken: denied here, no request.
    TurnedAway(Decision),
}

/// The key as the store last showed it to us.
#[derive(Debug, Clone)]
struct Known {
    /// `None`: absent.
    state: Option<KeyState>,
    /// `None`: absent.
    version: Option<u64>,
    /// When the store confirmed it.
    confirmed: Instant,
    /// When the state is worth nothing (Unix ns, the caller's clock).
    expires_at: UnixNanos,
    /// The same instant on the monotonic clock, for sweeping idle cells.
    idle_at: Instant,
}

/// What a decision starts from: a state and its version, read together.
#[derive(Debug, Clone)]
pub(crate) struct Start {
    pub(crate) state: Option<KeyState>,
    pub(crate) version: Option<u64>,
    /// Confirmed by the store within [`TRUSTED_FOR`]: may answer denials and peeks.
    pub(crate) trusted: bool,
}

impl CellInner {
    /// The key as last seen, at `now`.
    fn peek(&self, quota: &Quota, now: UnixNanos) -> Decision {
        let state = self.known.as_ref().and_then(|k| k.state.as_ref());
        decide(quota, state, 0, now).decision
    }
}

impl KeyCell {
    /// No check waits, no batch runs, and what we know is worth nothing: the cell may go.
    pub(crate) fn is_idle(&self) -> bool {
        let c = lock(&self.inner);
        c.pending.is_empty()
            && !c.driving
            && c.leases.is_idle()
            && c.approx.is_idle()
            && c.known.as_ref().is_none_or(|k| k.idle_at <= Instant::now())
    }

    /// Queues a check for the next write of its key, or, on a saturated key, denies it at once
    /// when the next write is not due soon or already carries its share (see `pace.rs`). Quotas with a ban are never
    /// turned away (a ban starts with a denial the store makes), nor, on a quota with fair
    /// flows, a check the known state admits for its flow: a light flow on a key the heavy
    /// ones saturate still gets its share.
    /// A queued check waits on pacing at most [`JOIN_WINDOW`], and at most 1/[`HURRY_SHARE`]
    /// of what is left of its budget when it has a `deadline` (see [`KeyCell::pace_pause`]).
    pub(crate) fn enqueue(
        &self,
        quota: &Quota,
        cost: u64,
        asker: Asker,
        now: UnixNanos,
        deadline: Option<Instant>,
        reply: oneshot::Sender<Result<Answer>>,
    ) -> Enqueued {
        let mut c = lock(&self.inner);
        let queued: u64 = c.pending.iter().map(|p| p.cost).sum();
        let arrived = Instant::now();
        // A check with a deadline is not turned away while the store keeps the last write
        // longer than its budget: a hot key then answers by its callers' deadlines (and their
        // store-down policy), not with denials nobody made.
        let overdue = deadline.is_some_and(|d| {
            c.pace
                .store_overdue(d.saturating_duration_since(arrived), arrived)
        });
        let turned_away = if quota.ban.is_zero() && !overdue {
            c.pace.turn_away(queued, cost, arrived)
        } else {
            None
        };
        if let Some(wait) = turned_away {
            let state = c.known.as_ref().and_then(|k| k.state.as_ref());
            let base = asker.decide(quota, state, cost, now).decision;
            if !(quota.fair_flows && base.allowed) {
                // A denial the known state makes says how long at least (states only move
                // forward, but for a refund or reset elsewhere): callers that honour
                // `retry_after` do not come back every millisecond to a spent window.
                let known = base.retry_after.unwrap_or_default();
                return Enqueued::TurnedAway(Decision {
                    allowed: false,
                    remaining: 0,
                    retry_after: Some(wait.max(known).max(MIN_RETRY)),
                    ..base
                });
            }
        }
        let patience = deadline.map_or(JOIN_WINDOW, |d| {
            (d.saturating_duration_since(arrived) / HURRY_SHARE).min(JOIN_WINDOW)
        });
        self.push(
            &mut c,
            Pending {
                cost,
                adjust: None,
                lease: None,
                asker,
                arrived,
                send_by: arrived + patience,
                reply,
            },
        )
    }

    /// Queues a charge or refund for the next write of its key: never turned away (it is not a
    /// request to admit), never dropped for a caller that has gone.
    pub(crate) fn enqueue_adjustment(
        &self,
        adjustment: Adjustment,
        reply: oneshot::Sender<Result<Answer>>,
    ) -> Enqueued {
        let mut c = lock(&self.inner);
        self.push_unconditional(&mut c, (Some(adjustment), None), reply)
    }

    /// Queues what is not a check (an adjustment, a lease ask or return, a report) for the
    /// next write of its key, within the join window: never turned away.
    fn push_unconditional(
        &self,
        c: &mut CellInner,
        (adjust, lease): (Option<Adjustment>, Option<LeaseAsk>),
        reply: oneshot::Sender<Result<Answer>>,
    ) -> Enqueued {
        let arrived = Instant::now();
        self.push(
            c,
            Pending {
                cost: 0,
                adjust,
                lease,
                asker: Asker::default(),
                arrived,
                send_by: arrived + JOIN_WINDOW,
                reply,
            },
        )
    }

    /// Runs `f` on the key's approximate-mode book (`approx_book.rs`).
    pub(crate) fn approx<R>(&self, f: impl FnOnce(&mut ApproxBook) -> R) -> R {
        f(&mut lock(&self.inner).approx)
    }

    /// Waits (at most until `by`) for the key's first report of the approximate mode to be
    /// answered, if one is on its way: its checks are then decided here rather than each
    /// written to the store.
    pub(crate) async fn first_report(&self, by: Instant) {
        let came = self.lease_came.notified();
        tokio::pin!(came);
        came.as_mut().enable();
        if lock(&self.inner).approx.awaiting_first() {
            let _ = tokio::time::timeout_at(by, came).await;
        }
    }

    /// A report of the approximate mode was answered (or failed): wakes the checks waiting.
    pub(crate) fn report_came(&self) {
        self.lease_came.notify_waiters();
    }

    /// Queues a report of the approximate mode, the usage since the last one, for
    /// the next write of its key: applied even if nobody waits for its answer any more.
    pub(crate) fn enqueue_report(
        &self,
        usage: Usage,
        reply: oneshot::Sender<Result<Answer>>,
    ) -> Enqueued {
        let mut c = lock(&self.inner);
        self.push_unconditional(&mut c, (None, Some(LeaseAsk::Report(usage))), reply)
    }

    /// Queues a lease to take or give back for the next write of its key (nobody waits for
    /// its answer: the batch task hands it to [`KeyCell::lease_answered`]).
    pub(crate) fn enqueue_lease(&self, ask: LeaseAsk) -> Enqueued {
        let mut c = lock(&self.inner);
        if let LeaseAsk::Return(..) = ask {
            c.leases.returning += 1;
        }
        let (reply, _) = oneshot::channel();
        self.push_unconditional(&mut c, (None, Some(ask)), reply)
    }

    /// A plain check of `cost` at `now` spent from this Limiter's leases of the key, if one
    /// covers it (`remaining`: what the leases have left, never more than the key has; the
    /// rest as a peek at the key as last seen says). Counts the check as demand either way.
    pub(crate) fn spend_lease(
        &self,
        quota: &Quota,
        quota_version: u64,
        cost: u64,
        now: UnixNanos,
    ) -> (Option<Decision>, Unspent) {
        let mut c = lock(&self.inner);
        c.leases.asked(cost, quota, Instant::now());
        let (left, unspent) = c.leases.spend(cost, now, quota_version);
        let decision = left.map(|left| Decision {
            allowed: true,
            remaining: left,
            retry_after: None,
            ..c.peek(quota, now)
        });
        (decision, unspent)
    }

    /// Waits (at most until `by`) for the lease being asked to be answered; at once when none
    /// is being asked.
    pub(crate) async fn lease_asked(&self, by: Instant) {
        let came = self.lease_came.notified();
        tokio::pin!(came);
        came.as_mut().enable();
        if lock(&self.inner).leases.is_asking() {
            let _ = tokio::time::timeout_at(by, came).await;
        }
    }

    /// A check no lease covers, on a key this Limiter leases: denied here until the next lease
    /// may be asked (see [`LeaseBook::leased_until`]); `None` when the key is not leased.
    pub(crate) fn lease_denial(
        &self,
        quota: &Quota,
        cost: u64,
        now: UnixNanos,
    ) -> Option<Decision> {
        let c = lock(&self.inner);
        let at = Instant::now();
        let until = c.leases.leased_until(at, cost, quota)?;
        let peek = c.peek(quota, now);
        let wait = (until - at).max(peek.retry_after.unwrap_or_default());
        Some(Decision {
            allowed: false,
            remaining: 0,
            retry_after: Some(wait.max(MIN_RETRY)),
            ..peek
        })
    }

    /// Leases that ended by `now` (or belong to another quota) set aside: see
    /// [`LeaseBook::set_aside`].
    pub(crate) fn leases_ended(&self, now: UnixNanos, quota_version: u64) -> Unspent {
        lock(&self.inner).leases.set_aside(now, quota_version)
    }

    /// What to send for the key's leases now: units to give back, and the size of a lease to
    /// ask for if one is due (and `asking` allows: not while the Limiter closes).
    pub(crate) fn lease_work(
        &self,
        quota: &Quota,
        asking: bool,
    ) -> (Vec<(Lease, u64)>, Option<u64>) {
        let mut c = lock(&self.inner);
        let returns = c.leases.take_returns();
        let due = asking
            .then(|| c.leases.due(quota, Instant::now()))
            .flatten();
        (returns, due)
    }

    /// Units left in the key's leases held now, and how many leases.
    pub(crate) fn lease_holding(&self) -> (u64, usize) {
        lock(&self.inner).leases.holding()
    }

    /// Nothing of the key's leases held, asked, owed back or on its way to the store.
    pub(crate) fn leases_settled(&self) -> bool {
        lock(&self.inner).leases.is_idle()
    }

    /// Whether a lease write of this key lost a compare-and-swap to another Limiter's write
    /// lately: the next one reads the key first (`batch.rs`).
    pub(crate) fn lease_writes_contended(&self) -> bool {
        lock(&self.inner).leases.contended(Instant::now())
    }

    /// Records that a lease write lost a compare-and-swap.
    pub(crate) fn lease_write_lost(&self) {
        lock(&self.inner).leases.write_lost(Instant::now());
    }

    /// Units given back were answered (taken back or not).
    pub(crate) fn return_answered(&self) {
        let mut c = lock(&self.inner);
        c.leases.returning = c.leases.returning.saturating_sub(1);
    }

    /// The lease asked was answered (`None`: its write failed).
    pub(crate) fn lease_answered(&self, lease: Option<Lease>, quota_version: u64) {
        {
            let mut c = lock(&self.inner);
            match lease {
                Some(l) => c.leases.granted(l, quota_version),
                None => c.leases.ask_failed(),
            }
        }
        self.lease_came.notify_waiters();
    }

    /// Adds `pending` to the queue: whether a batch task must be started for it.
    fn push(&self, c: &mut CellInner, pending: Pending) -> Enqueued {
        c.pending.push(pending);
        if c.pace.next_send().is_some() {
            // The batch task may be pausing: it looks at the new `send_by`.
            self.joined.notify_one();
        }
        if std::mem::replace(&mut c.driving, true) {
            Enqueued::Joined
        } else {
            Enqueued::StartDriver
        }
    }

    /// Waits until the key's next paced write is due, but never past the `send_by` of a check
    /// that waits (the gap after a write is drawn when it returns, and may be longer than the
    /// gap the checks that joined meanwhile saw).
    pub(crate) async fn pace_pause(&self) {
        loop {
            let at = {
                let c = lock(&self.inner);
                let Some(next) = c.pace.next_send() else {
                    return;
                };
                c.pending.iter().map(|p| p.send_by).fold(next, Instant::min)
            };
            if at <= Instant::now() {
                return;
            }
            tokio::select! {
                () = tokio::time::sleep_until(at) => return,
                () = self.joined.notified() => {}
            }
        }
    }

    /// The key's batch ended in an error: its write is no longer in flight.
    pub(crate) fn batch_failed(&self) {
        lock(&self.inner).pace.failed();
    }

    /// A write of this key is being sent now.
    pub(crate) fn sent(&self) {
        lock(&self.inner).pace.sent(Instant::now());
    }

    /// The store decided a write's batch (`admitted` and `denied` cost of what it carried),
    /// in `requests` writes and reads.
    pub(crate) fn decided(&self, quota: &Quota, admitted: u64, denied: u64, requests: u64) {
        let window = match quota.algorithm {
            crate::rate::Algorithm::Gcra => {
                let ns = quota.emission_interval_ns() * u128::from(quota.burst);
                Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
            }
            _ => quota.period,
        };
        let per_sec = quota.limit as f64 / quota.period.as_secs_f64().max(1e-9);
        lock(&self.inner)
            .pace
            .decided(admitted, denied, requests, max_gap(window), per_sec);
    }

    /// Every queued check, or `None` (and the batch task ends) when none waits.
    /// Checks whose caller is gone (dropped, or past its deadline) are left out: a write
    /// does not spend the key's tokens on answers nobody reads. Adjustments stay.
    pub(crate) fn take_batch(&self) -> Option<Vec<Pending>> {
        let mut c = lock(&self.inner);
        c.pending
            .retain(|p| p.adjust.is_some() || p.lease.is_some() || !p.reply.is_closed());
        if c.pending.is_empty() {
            c.driving = false;
            return None;
        }
        Some(std::mem::take(&mut c.pending))
    }

    /// The batch task ended without finishing (a panic, or its runtime shut down): every
    /// queued check gets an error and the next check starts a new task, so no check of this
    /// key waits forever.
    pub(crate) fn abandon(&self) {
        let pending = {
            let mut c = lock(&self.inner);
            c.driving = false;
            std::mem::take(&mut c.pending)
        };
        for p in pending {
            let _ = p.reply.send(Err(Error::store(
                "the rate-limit batch task of this key ended before deciding",
            )));
        }
    }

    pub(crate) fn forget(&self) {
        let mut c = lock(&self.inner);
        c.known = None;
        c.pace.reset();
    }

    /// The state to start from at `now`. A version is used only while the store cannot have
    /// deleted the key and re-created it at the same version: for `version_life` after its
    /// state expired (`RateStore::version_life`; forever on stores that never reuse a
    /// version), or whenever the store showed it during this decision (since `fresh_since`).
    /// Past that, the state is dropped (it is worth nothing anyway) and the next write expects
    /// the key absent.
    pub(crate) fn start(
        &self,
        now: UnixNanos,
        fresh_since: Instant,
        version_life: Duration,
    ) -> Start {
        let life = u64::try_from(version_life.as_nanos()).unwrap_or(u64::MAX);
        let mut c = lock(&self.inner);
        if c.known.as_ref().is_some_and(|k| {
            k.version.is_some()
                && k.expires_at.saturating_add(life) <= now
                && k.confirmed < fresh_since
        }) {
            c.known = None;
        }
        match &c.known {
            Some(k) => Start {
                state: k.state.clone(),
                version: k.version,
                trusted: k.confirmed.elapsed() < TRUSTED_FOR,
            },
            None => Start {
                state: None,
                version: None,
                trusted: false,
            },
        }
    }

    pub(crate) fn set_known(
        &self,
        state: Option<KeyState>,
        version: Option<u64>,
        expires_at: u64,
        now: u64,
    ) {
        let left = Duration::from_nanos(expires_at.saturating_sub(now));
        lock(&self.inner).known = Some(Known {
            state,
            version,
            confirmed: Instant::now(),
            expires_at,
            idle_at: Instant::now() + left,
        });
    }

    /// A decision from what we know, if it needs no request: a trusted state that denies, or
    /// a peek on a trusted state.
    pub(crate) fn local_answer(
        &self,
        quota: &Quota,
        cost: u64,
        asker: Asker,
        now: UnixNanos,
        version_life: Duration,
    ) -> Option<Decision> {
        let start = self.start(now, Instant::now(), version_life);
        if !start.trusted {
            return None;
        }
        let verdict = asker.decide(quota, start.state.as_ref(), cost, now);
        (cost == 0 || (!verdict.decision.allowed && verdict.state.is_none()))
            .then_some(verdict.decision)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rate::Quota;

    /// 1/s with a burst of 60: a bucket window of a minute, so pacing may reach `MAX_GAP`.
    fn slow() -> Quota {
        Quota::per_minute(60).burst(60)
    }

    /// A cell whose key is saturated with the widest gap (every write admitted nothing).
    fn saturated() -> KeyCell {
        let cell = KeyCell::default();
        for _ in 0..12 {
            cell.decided(&slow(), 0, 10, 1);
        }
        assert!(lock(&cell.inner).pace.saturated());
        cell
    }

    fn next_send(cell: &KeyCell) -> Instant {
        lock(&cell.inner)
            .pace
            .next_send()
            .expect("a saturated key has a next send")
    }

    /// Queues a check of 1 (`budget`: its deadline from now); its receiver, or the denial.
    fn enqueue(
        cell: &KeyCell,
        quota: &Quota,
        budget: Option<Duration>,
    ) -> std::result::Result<oneshot::Receiver<Result<Answer>>, Decision> {
        let (tx, rx) = oneshot::channel();
        let deadline = budget.map(|b| Instant::now() + b);
        match cell.enqueue(quota, 1, Asker::default(), 0, deadline, tx) {
            Enqueued::TurnedAway(d) => Err(d),
            Enqueued::StartDriver | Enqueued::Joined => Ok(rx),
        }
    }

    /// How long `pace_pause` held the batch task.
    async fn paused_for(cell: &KeyCell) -> Duration {
        let t = Instant::now();
        cell.pace_pause().await;
        t.elapsed()
    }

    #[tokio::test(start_paused = true)]
    async fn a_check_that_joined_waits_at_most_the_join_window_when_a_longer_gap_is_drawn() {
        let cell = saturated();
        let t0 = Instant::now();
        // The write in flight was sent with a gap after it drawn in the lower part of its
        // range (±25% around 200 ms), so a longer one can be drawn when it returns.
        let mut draws = 0;
        let next = loop {
            cell.sent();
            let next = next_send(&cell);
            if next - t0 <= ms(190) {
                break next;
            }
            draws += 1;
            assert!(draws < 200, "no gap under 190 ms drawn in {draws} draws");
            cell.decided(&slow(), 0, 10, 1);
        };
        assert!(next - t0 > JOIN_WINDOW * 2, "{:?}", next - t0);
        // Inside the window before the paced send: the check joins.
        tokio::time::sleep_until(next - JOIN_WINDOW / 2).await;
        let joined = Instant::now();
        let _rx = enqueue(&cell, &slow(), None).expect("inside the window, the check joins");
        // The write in flight returns and draws a gap after it longer than the one the check
        // saw (drawn ±25% around the same gap: redraw until it is).
        let mut draws = 0;
        loop {
            cell.decided(&slow(), 0, 10, 1);
            draws += 1;
            if next_send(&cell) > joined + JOIN_WINDOW * 2 {
                break;
            }
            assert!(draws < 200, "no longer gap drawn in {draws} draws");
        }
        let held = paused_for(&cell).await;
        println!(
            "joined {:?} before the send it saw; the next one is {:?} away; held {held:?}",
            next - joined,
            next_send(&cell) - joined
        );
        assert_eq!(
            Instant::now(),
            joined + JOIN_WINDOW,
            "the pause ends at the check's send_by"
        );
        assert!(held <= JOIN_WINDOW, "{held:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_check_with_a_short_budget_is_sent_within_half_of_it() {
        let cell = saturated();
        cell.sent();
        let next = next_send(&cell);
        // Inside the window, `next - now` is 8 ms away; a budget of 6 ms waits at most 3.
        tokio::time::sleep_until(next - ms(8)).await;
        let arrived = Instant::now();
        let budget = ms(6);
        let _rx = enqueue(&cell, &slow(), Some(budget)).expect("joins");
        let send_by = lock(&cell.inner).pending[0].send_by;
        assert_eq!(send_by, arrived + budget / 2);
        let held = paused_for(&cell).await;
        assert_eq!(
            held,
            budget / 2,
            "sent at half its budget, before the paced send"
        );
        assert!(Instant::now() < next);

        // A long budget waits on pacing for the window at most, not half of it.
        let cell = saturated();
        cell.sent();
        let next = next_send(&cell);
        tokio::time::sleep_until(next - JOIN_WINDOW).await;
        let _rx = enqueue(&cell, &slow(), Some(Duration::from_secs(10))).expect("joins");
        assert_eq!(paused_for(&cell).await, JOIN_WINDOW, "the paced send");
    }

    #[tokio::test(start_paused = true)]
    async fn a_check_before_the_window_with_a_ban_quota_is_sent_by_the_window_not_the_gap() {
        // Quotas with a ban are never turned away: a check right after a send waits for its
        // send_by, not for the paced send 150-250 ms later.
        let banning = slow().ban(Duration::from_secs(30));
        let cell = saturated();
        cell.sent();
        let next = next_send(&cell);
        let _rx = enqueue(&cell, &banning, None).expect("a ban quota is never turned away");
        assert_eq!(paused_for(&cell).await, JOIN_WINDOW);
        assert!(Instant::now() + JOIN_WINDOW < next);
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_in_flight_past_a_checks_budget_stops_turning_it_away() {
        let cell = saturated();
        cell.sent();
        // 30 ms into a write that has not returned: outside the window before the next send.
        tokio::time::sleep(ms(30)).await;
        assert!(next_send(&cell) - Instant::now() > JOIN_WINDOW);
        let denial = enqueue(&cell, &slow(), None).expect_err("no deadline: paced");
        assert!(
            !denial.allowed && denial.retry_after.is_some(),
            "{denial:?}"
        );
        let denial = enqueue(&cell, &slow(), Some(ms(100)))
            .expect_err("a budget the write in flight has not outlived: paced");
        assert!(!denial.allowed, "{denial:?}");
        assert!(
            enqueue(&cell, &slow(), Some(ms(30))).is_err(),
            "a budget exactly as long as the wait so far: still paced"
        );
        let rx = enqueue(&cell, &slow(), Some(ms(20)));
        assert!(
            rx.is_ok(),
            "the write in flight outlived its 20 ms: it waits"
        );
        assert_eq!(lock(&cell.inner).pending.len(), 1);
        // Once the write returns, nothing is in flight: the same budget is paced again.
        cell.decided(&slow(), 0, 10, 1);
        cell.sent();
        cell.decided(&slow(), 0, 10, 1);
        tokio::time::sleep(ms(30)).await;
        assert!(next_send(&cell) - Instant::now() > JOIN_WINDOW);
        assert!(
            enqueue(&cell, &slow(), Some(ms(20))).is_err(),
            "no write in flight: paced"
        );
    }

    #[test]
    fn take_batch_leaves_out_checks_whose_caller_is_gone() {
        let cell = KeyCell::default();
        let q = slow();
        let (tx1, rx1) = oneshot::channel();
        let (tx2, rx2) = oneshot::channel();
        let (tx3, rx3) = oneshot::channel();
        assert!(matches!(
            cell.enqueue(&q, 1, Asker::default(), 0, None, tx1),
            Enqueued::StartDriver
        ));
        assert!(matches!(
            cell.enqueue(&q, 2, Asker::default(), 0, None, tx2),
            Enqueued::Joined
        ));
        assert!(matches!(
            cell.enqueue(&q, 3, Asker::default(), 0, None, tx3),
            Enqueued::Joined
        ));
        drop(rx2);
        let batch = cell.take_batch().expect("two callers wait");
        let costs: Vec<u64> = batch.iter().map(|p| p.cost).collect();
        assert_eq!(costs, [1, 3], "the dropped check is left out");
        drop((rx1, rx3, batch));

        // Only gone callers queued: no batch, and the driver ends (the next check starts one).
        let (tx4, rx4) = oneshot::channel();
        assert!(matches!(
            cell.enqueue(&q, 4, Asker::default(), 0, None, tx4),
            Enqueued::Joined
        ));
        drop(rx4);
        assert!(cell.take_batch().is_none());
        assert!(lock(&cell.inner).pending.is_empty());
        let (tx5, _rx5) = oneshot::channel();
        assert!(matches!(
            cell.enqueue(&q, 5, Asker::default(), 0, None, tx5),
            Enqueued::StartDriver
        ));
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }
}
