//! What one Limiter holds of one hot key's leases (issue 43; what a lease means is
//! `rate/lease.rs`): the slices it took, spent here with no request, the demand that sizes
//! the next one, and what it owes back.
//!
//! Sizing: a lease covers [`LEASE_PERIOD`] of this Limiter's own demand on the key (cost
//! asked per second, admitted or not, over the last quarter second or so), never more than a
//! quarter of what the key can lease at once (so one Limiter cannot take the key from the
//! others, and a Limiter's share follows its demand), and is asked for again when less than
//! half a period of demand is left, so checks rarely meet an empty slice while the key has
//! units. Keys of quotas slower than [`MIN_LEASED_RATE`] are never leased. Its units may be spent for [`LEASE_HOLD`] (two periods: the next lease arrives
//! well before). Lease writes are at most one per [`MIN_ASK_GAP`] per key and Limiter — 10
//! a second whatever the quota (20 requests with a conflict each). A check no lease covers
//! waits for a lease being asked; past that, while the key is leased, it is denied here until
//! the next lease (which its demand sizes). A key whose demand is below [`MIN_LEASE`] units a period
//! is not leased: today's per-check path serves it. Between Limiters the key's state keeps
//! the shares max-min fair (`rate/lease.rs`). A lease write that lost a compare-and-swap makes
//! the key's lease writes read first for [`CONTENDED_FOR`]: others write it between two of
//! ours, and a write decided from what we knew would lose again (two writes for one).

use crate::rate::{leasable, Algorithm, Lease, Quota, UnixNanos};
use std::collections::VecDeque;
use std::time::Duration;
use tokio::time::Instant;

/// The demand one lease covers.
pub(crate) const LEASE_PERIOD: Duration = Duration::from_millis(150);
/// How long a lease's units may be spent.
pub(crate) const LEASE_HOLD: Duration = Duration::from_millis(300);
/// The smallest lease worth a write (200 checks a second of demand): below it, checks take
/// the per-check path, which costs at most a few hundred writes a second.
pub(crate) const MIN_LEASE: u64 = 30;
/// The slowest quota leased: one moving at least this many units a second (slower ones are
/// never hot enough to need it, and a lease of them would hold units for long).
pub(crate) const MIN_LEASED_RATE: f64 = 100.0;
/// The shortest time between two lease writes of one key by one Limiter.
pub(crate) const MIN_ASK_GAP: Duration = Duration::from_millis(100);
/// How long lease writes read the key first after one lost a compare-and-swap.
const CONTENDED_FOR: Duration = Duration::from_secs(2);
/// Demand is measured over windows this long.
const DEMAND_WINDOW: Duration = Duration::from_millis(250);

/// What a key's write does for its leases, besides its checks.
#[derive(Debug, Clone, Copy)]
pub(crate) enum LeaseAsk {
    /// Take a lease of up to this many units.
    Take(u64),
    /// Give back this many unspent units of this lease.
    Return(Lease, u64),
    /// The approximate mode's report (`approx_report.rs`).
    Report(super::approx_usage::Usage),
}

/// A Limiter's leases of one key.
#[derive(Debug, Default)]
pub(crate) struct LeaseBook {
    /// Leases with units left, oldest (soonest to end) first.
    held: VecDeque<Held>,
    demand: Demand,
    /// A lease is asked for and not answered yet.
    asking: bool,
    /// When the last lease was asked, and the gap drawn after it.
    last_ask: Option<Instant>,
    gap: Duration,

    /// Units of ended leases to give back (sent with the key's next write).
    to_return: Vec<(Lease, u64)>,
    /// When a lease write last lost a compare-and-swap: others write the key between two of
    /// ours, so what we know of it is stale by then, and lease writes read first for a while
    /// (a read instead of a losing write: half the writes on a key leased by many).
    lost_at: Option<Instant>,
    /// Returns queued or being written, not answered yet.
    pub(crate) returning: u32,
}

#[derive(Debug, Clone, Copy)]
struct Held {
    lease: Lease,
    left: u64,
    /// The quota version it was taken under: a lease of another quota is not spent.
    quota_version: u64,
}

/// What leases were not spent: units given back, and units lost (not returnable).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Unspent {
    pub(crate) to_return: u64,
    pub(crate) lost: u64,
}

impl LeaseBook {
    /// Counts `cost` asked for the key at `at`. A check dearer than a lease may take is not
    /// demand for leases (it goes to the store whole).
    pub(crate) fn asked(&mut self, cost: u64, quota: &Quota, at: Instant) {
        if cost <= cap(quota) {
            self.demand.add(cost, at);
        }
    }

    /// Spends `cost` from a lease usable at `now` under `quota_version`: the units left in
    /// all leases after it, or `None` when no lease covers it. Leases that ended, or were
    /// taken under another quota, are set aside first (what they have left is returned or
    /// lost, as the returned [`Unspent`] says).
    pub(crate) fn spend(
        &mut self,
        cost: u64,
        now: UnixNanos,
        quota_version: u64,
    ) -> (Option<u64>, Unspent) {
        let unspent = self.set_aside(now, quota_version);
        let Some(h) = self.held.iter_mut().find(|h| h.left >= cost) else {
            return (None, unspent);
        };
        h.left -= cost;
        self.held.retain(|h| h.left > 0);
        (Some(self.left()), unspent)
    }

    /// Units left in every held lease, and how many leases are held.
    pub(crate) fn holding(&self) -> (u64, usize) {
        (self.left(), self.held.len())
    }

    /// Units left in every held lease.
    pub(crate) fn left(&self) -> u64 {
        self.held.iter().map(|h| h.left).sum()
    }

    /// Moves the leases that ended by `now` or belong to another quota out of `held`: units of
    /// the same quota to give back (windows while they last, GCRA if still the key's last
    /// write: `rate/lease.rs` decides), units of another quota lost.
    pub(crate) fn set_aside(&mut self, now: UnixNanos, quota_version: u64) -> Unspent {
        let mut unspent = Unspent::default();
        let (keep, gone): (VecDeque<Held>, VecDeque<Held>) = self
            .held
            .drain(..)
            .partition(|h| h.quota_version == quota_version && now < h.lease.usable_until);
        self.held = keep;
        for h in gone {
            if h.quota_version == quota_version {
                unspent.to_return += h.left;
                self.to_return.push((h.lease, h.left));
            } else {
                unspent.lost += h.left;
            }
        }
        unspent
    }

    /// Units owed back, to send now.
    pub(crate) fn take_returns(&mut self) -> Vec<(Lease, u64)> {
        std::mem::take(&mut self.to_return)
    }

    /// The size of the lease to ask for now, if one is due: the key is hot enough, the quota
    /// can be leased, none is being asked, the last ask is [`MIN_ASK_GAP`] old, and less than
    /// half a period of demand is left. Marks it asked.
    pub(crate) fn due(&mut self, quota: &Quota, at: Instant) -> Option<u64> {
        if self.asking || self.last_ask.is_some_and(|t| at < t + self.gap) {
            return None;
        }
        let rate = quota.limit as f64 / quota.period.as_secs_f64().max(1e-9);
        if rate < MIN_LEASED_RATE || !leasable(quota, LEASE_HOLD) {
            return None;
        }
        let per_period = self.demand.per_second(at) * LEASE_PERIOD.as_secs_f64();
        if per_period < MIN_LEASE as f64 || self.left() as f64 >= per_period / 2.0 {
            return None;
        }
        let want = (per_period.ceil() as u64).min(cap(quota)).max(1);
        self.asking = true;
        self.last_ask = Some(at);
        // ±20%: Limiters that start together do not keep writing the key together (each
        // collision costs a retry).
        self.gap = MIN_ASK_GAP.mul_f64(0.8 + 0.4 * fastrand::f64());
        Some(want)
    }

    /// A lease is asked and not answered yet: a check no lease covers waits for it.
    pub(crate) fn is_asking(&self) -> bool {
        self.asking
    }

    /// While the key is leased (a lease asked within a lease's time), a check no lease covers
    /// (after waiting for one being asked) is denied here until the next lease may be asked:
    /// the next lease is sized to the demand, denials included, so a key's units reach its
    /// Limiters at a few writes a second whatever the rate. The price: when demand jumps above
    /// the slice, checks are denied for up to one gap though the key may have units. `None`:
    /// not leased, or the check of `cost` costs more than a lease may take: it goes to the
    /// store whole.
    pub(crate) fn leased_until(&self, at: Instant, cost: u64, quota: &Quota) -> Option<Instant> {
        let asked = self.last_ask?;
        (at < asked + LEASE_HOLD && cost <= cap(quota)).then(|| (asked + self.gap).max(at))
    }

    /// The asked lease was answered: held if it took anything.
    pub(crate) fn granted(&mut self, lease: Lease, quota_version: u64) {
        self.asking = false;
        if lease.granted > 0 {
            self.held.push_back(Held {
                lease,
                left: lease.granted,
                quota_version,
            });
        }
    }

    /// The asked lease was not answered (the write failed or was dropped).
    pub(crate) fn ask_failed(&mut self) {
        self.asking = false;
    }

    /// A lease write lost a compare-and-swap at `at`.
    pub(crate) fn write_lost(&mut self, at: Instant) {
        self.lost_at = Some(at);
    }

    /// Whether lease writes read the key first at `at`: one lost within [`CONTENDED_FOR`].
    pub(crate) fn contended(&self, at: Instant) -> bool {
        self.lost_at.is_some_and(|t| at < t + CONTENDED_FOR)
    }

    /// Nothing held, asked or owed: the cell may be forgotten.
    pub(crate) fn is_idle(&self) -> bool {
        self.held.is_empty() && !self.asking && self.to_return.is_empty() && self.returning == 0
    }
}

/// The most one lease may take: a quarter of what the key can lease at once (GCRA: the
/// tolerance beyond the hold; windows: the limit).
fn cap(quota: &Quota) -> u64 {
    let room = match quota.algorithm {
        Algorithm::Gcra => {
            let t = quota.emission_interval_ns().max(1);
            let hold = u64::try_from(LEASE_HOLD.as_nanos().div_ceil(t)).unwrap_or(u64::MAX);
            quota.burst.saturating_sub(hold)
        }
        Algorithm::FixedWindow | Algorithm::SlidingWindow => quota.limit,
    };
    (room / 4).max(1)
}

/// Cost asked per second, over the current window and the one before it.
#[derive(Debug, Default)]
pub(crate) struct Demand {
    since: Option<Instant>,
    this: u64,
    last: u64,
}

impl Demand {
    fn roll(&mut self, at: Instant) -> Instant {
        let since = *self.since.get_or_insert(at);
        let elapsed = at.saturating_duration_since(since);
        if elapsed < DEMAND_WINDOW {
            return since;
        }
        // One window on: this one becomes the last; more: both are old.
        self.last = if elapsed < DEMAND_WINDOW * 2 {
            self.this
        } else {
            0
        };
        self.this = 0;
        self.since = Some(at);
        at
    }

    pub(crate) fn add(&mut self, cost: u64, at: Instant) {
        self.roll(at);
        self.this = self.this.saturating_add(cost);
    }

    pub(crate) fn per_second(&mut self, at: Instant) -> f64 {
        let since = self.roll(at);
        let span = DEMAND_WINDOW + at.saturating_duration_since(since);
        (self.this + self.last) as f64 / span.as_secs_f64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn lease(granted: u64, until: UnixNanos) -> Lease {
        let mut l = crate::rate::take_lease(
            &Quota::per_second(1_000_000),
            None,
            (crate::rate::FlowId::anonymous(), granted),
            LEASE_HOLD,
            0,
        )
        .lease;
        l.usable_until = until;
        l
    }

    #[tokio::test(start_paused = true)]
    async fn a_hot_key_asks_for_a_period_of_its_demand_and_not_twice_at_once() {
        let q = Quota::per_second(1_000_000);
        let mut book = LeaseBook::default();
        let t0 = Instant::now();
        assert_eq!(book.due(&q, t0), None, "no demand yet");
        // 10,000 asked over a quarter second: 40,000/s, so 6,000 a period.
        for i in 0..100 {
            book.asked(100, &q, t0 + Duration::from_micros(2_500 * i));
        }
        let at = t0 + Duration::from_millis(250);
        let want = book.due(&q, at).expect("hot");
        assert!((5_900..=6_100).contains(&want), "{want}");
        assert_eq!(book.due(&q, at), None, "already asking");
        book.granted(lease(want, 300 * MS), 1);
        assert_eq!(book.left(), want);
        assert_eq!(book.due(&q, at + MIN_ASK_GAP * 2), None, "plenty left");
    }

    #[test]
    fn spends_until_the_lease_ends_then_owes_the_rest_back() {
        let mut book = LeaseBook::default();
        book.granted(lease(10, 100 * MS), 1);
        assert_eq!(book.spend(4, 50 * MS, 1).0, Some(6));
        assert_eq!(book.spend(7, 50 * MS, 1).0, None, "only 6 left");
        let (spent, unspent) = book.spend(1, 100 * MS, 1);
        assert_eq!(spent, None, "ended");
        assert_eq!(unspent.to_return, 6);
        assert_eq!(book.take_returns().len(), 1);
        assert!(book.is_idle());
    }

    #[test]
    fn a_lease_of_another_quota_is_lost_not_spent() {
        let mut book = LeaseBook::default();
        book.granted(lease(10, 100 * MS), 1);
        let (spent, unspent) = book.spend(1, 10 * MS, 2);
        assert_eq!((spent, unspent.lost, unspent.to_return), (None, 10, 0));
        assert!(book.take_returns().is_empty());
    }

    #[test]
    fn a_lease_is_at_most_a_quarter_of_what_the_key_can_lease() {
        // 1,000/s, burst 1,000: 300 intervals are the hold, 700 can be leased.
        assert_eq!(cap(&Quota::per_second(1_000)), 175);
        assert_eq!(
            cap(&Quota::per_minute(600).algorithm(Algorithm::FixedWindow)),
            150
        );
    }
}
