//! What one Limiter keeps of one hot key in the approximate mode
//! (`LimiterBuilder::approximate_hot_keys`; what a report means is `rate/approximate.rs`): the
//! local meter its checks are decided on, its share of the quota, and what it admitted and was
//! asked since its last report.
//!
//! A key is hot as for leases (`lease_book.rs`: [`MIN_LEASE`] units of demand in a lease
//! period, a quota of at least [`MIN_LEASED_RATE`]); a reporter task then writes one report
//! every ~[`REPORT_EVERY`] (`approx_report.rs`). Checks are decided here once a report
//! answered (the first one gives the share; before it, checks go to the store), and for at
//! most [`LOCAL_GRACE`] after the last report answered: past that (the store does not take
//! reports) they go to the store again until one does.

use super::approx_usage::Usage;
use super::lease_book::{Demand, LEASE_PERIOD, MIN_LEASE, MIN_LEASED_RATE};
use crate::rate::{approximable, decide, local_after_report, local_start, scaled, Decision};
use crate::rate::{KeyState, Meter};
use crate::rate::{Quota, UnixNanos};
use std::time::Duration;
use tokio::time::Instant;

/// How often a hot key's usage is reported (±20%).
pub(crate) const REPORT_EVERY: Duration = Duration::from_millis(100);
/// How much of its demand a report charges ahead at most, with what it holds already
/// (`rate::start_local`).
pub(crate) const AHEAD_FOR: Duration = Duration::from_millis(200);
/// Whether every report (not only a first one) charges the holder's part of what the key
/// has left ahead, its local meter then starting empty (`rate::start_local`): GCRA, whose
/// burst would otherwise be handed to each holder from a key that does not count yet what
/// the others took since their last report.
pub(crate) fn charges_ahead(quota: &Quota) -> bool {
    quota.algorithm == crate::rate::Algorithm::Gcra
}

/// How long checks are decided locally after the last report the store answered.
pub(crate) const LOCAL_GRACE: Duration = Duration::from_secs(1);

/// A Limiter's approximate view of one key.
#[derive(Debug, Default)]
pub(crate) struct ApproxBook {
    demand: Demand,
    /// The local meter, on the quota scaled to `share`.
    local: Option<KeyState>,
    /// This Limiter's share of the quota (`None`: not decided here).
    share: Option<f64>,
    /// When a report was last answered.
    confirmed: Option<Instant>,
    /// Cost asked since the last report was taken (decided here or not).
    asked: u64,
    /// Cost admitted here since the last report was taken: not yet charged to the key.
    admitted: u64,
    /// Units charged ahead by reports (a first one; on GCRA, every one) and not admitted yet.
    ahead: u64,
    /// A reporter task runs for the key.
    reporting: bool,
    /// A first report is on its way (checks wait for it).
    first_pending: bool,
    /// When the last usage was taken for a report (`asked` counts from then).
    taken_at: Option<Instant>,
}

/// What the store answered a report.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Reported {
    /// The share for the next interval (`None`: the quota is decided per check).
    pub(crate) share: Option<f64>,
    /// The key's meter after the report's charge (before its charge ahead).
    pub(crate) meter: Meter,
    /// Units the report charged ahead: admitted here without being reported again.
    pub(crate) ahead: u64,
}

impl ApproxBook {
    /// A check of `cost` at `now` (`at` on the monotonic clock): decided on the local meter if
    /// the key is decided here, else `None` (it goes to the store). Counts it as asked when
    /// `fresh` (not counted before). The second value says a reporter must be started (the
    /// key just turned hot).
    pub(crate) fn check(
        &mut self,
        quota: &Quota,
        (cost, fresh): (u64, bool),
        (now, at): (UnixNanos, Instant),
    ) -> (Option<Decision>, bool) {
        if fresh {
            self.demand.add(cost, at);
            self.asked = self.asked.saturating_add(cost);
        }
        let start = !self.reporting && self.hot(quota, at);
        self.reporting |= start;
        let Some(share) = self.share.filter(|_| self.usable(quota, at)) else {
            return (None, start);
        };
        let local = scaled(quota, share);
        if self.ahead >= cost {
            // Units reports charged ahead: spent first, apart from the meter.
            self.ahead -= cost;
            let peek = decide(&local, self.local.as_ref(), 0, now).decision;
            let decision = Decision {
                allowed: true,
                limit: quota.max_cost(),
                remaining: peek.remaining.saturating_add(self.ahead),
                retry_after: None,
                ..peek
            };
            return (Some(decision), start);
        }
        if cost > local.max_cost() {
            return (None, start);
        }
        let v = decide(&local, self.local.as_ref(), cost, now);
        if let Some(s) = v.state {
            self.local = Some(s);
        }
        if v.decision.allowed {
            self.admitted = self.admitted.saturating_add(cost);
        }
        let decision = Decision {
            limit: quota.max_cost(),
            ..v.decision
        };
        (Some(decision), start)
    }

    /// Whether checks are decided here now: a share, a report answered within
    /// [`LOCAL_GRACE`], and a quota that can be.
    fn usable(&self, quota: &Quota, at: Instant) -> bool {
        self.confirmed.is_some_and(|t| at < t + LOCAL_GRACE) && approximable(quota)
    }

    /// Whether the key is hot: as leases see it (`lease_book.rs`).
    fn hot(&mut self, quota: &Quota, at: Instant) -> bool {
        let rate = quota.limit as f64 / quota.period.as_secs_f64().max(1e-9);
        let per_period = self.demand.per_second(at) * LEASE_PERIOD.as_secs_f64();
        approximable(quota) && rate >= MIN_LEASED_RATE && per_period >= MIN_LEASE as f64
    }

    /// The usage to report now, reset (`asked`, `admitted`), or `None` when the reporter
    /// stops: the key is no longer hot (or `stopping`: the Limiter closes) and nothing is
    /// left to report. Stopping drops the local meter: the key's checks go to the store.
    pub(crate) fn usage_due(
        &mut self,
        quota: &Quota,
        stopping: bool,
        at: Instant,
    ) -> Option<Usage> {
        let going_on = !stopping && self.hot(quota, at);
        if !going_on {
            self.share = None;
            self.local = None;
            self.ahead = 0;
            if self.admitted == 0 {
                self.reporting = false;
                self.asked = 0;
                return None;
            }
        }
        let first = going_on && self.local.is_none();
        self.first_pending = first;
        let pace = self.pace(at) * quota.period.as_secs_f64();
        Some(Usage {
            asked: std::mem::take(&mut self.asked),
            admitted: std::mem::take(&mut self.admitted),
            projected: if going_on { pace as u64 } else { 0 },
            first,
            held: self.ahead,
        })
    }

    /// The demand per second at `at`: the demand meter's (over ~250 ms), or what was asked
    /// since the last report when more (a key just decided here asks much faster than
    /// while its checks went to the store: the others must see it at the next report, not
    /// a quarter second later, or their shares add up to more than the quota meanwhile).
    fn pace(&mut self, at: Instant) -> f64 {
        let meter = self.demand.per_second(at);
        let since = self
            .taken_at
            .replace(at)
            .map(|t| at.saturating_duration_since(t).as_secs_f64());
        match since {
            Some(secs) if secs >= 0.01 => meter.max(self.asked as f64 / secs),
            _ => meter,
        }
    }

    /// A report was answered at `now`: the share for the next interval, and the local meter
    /// set where the key stands, what was admitted here since the report was taken charged
    /// on it (`rate/approximate.rs`).
    pub(crate) fn reported(&mut self, quota: &Quota, r: Reported, (now, at): (UnixNanos, Instant)) {
        self.confirmed = Some(at);
        self.first_pending = false;
        let Some(share) = r.share.filter(|_| self.reporting) else {
            self.share = None;
            self.local = None;
            return;
        };
        let key = KeyState::new(r.meter, 0, now, 0);
        self.ahead = self.ahead.saturating_add(r.ahead);
        let local = match &self.local {
            Some(l) if !charges_ahead(quota) => {
                let mine = (Some(l), self.admitted);
                local_after_report(quota, (Some(&key), share), mine, now)
            }
            _ => local_start(quota, (&key, share), r.ahead, now),
        };
        self.local = Some(local);
        self.share = Some(share);
    }

    /// A report failed: its usage goes with the next one (a report whose outcome is unknown
    /// may so be charged twice: the key under-admits by it, never over). Checks go on being
    /// decided here until [`LOCAL_GRACE`] after the last answer.
    pub(crate) fn report_failed(&mut self, usage: Usage) {
        self.first_pending = false;
        self.asked = self.asked.saturating_add(usage.asked);
        self.admitted = self.admitted.saturating_add(usage.admitted);
    }

    /// A reporter runs and no report was answered yet since the local meter (re)started.
    pub(crate) fn awaiting_first(&self) -> bool {
        self.reporting && self.local.is_none() && self.first_pending
    }

    /// Nothing reported or to report: the cell may be forgotten.
    pub(crate) fn is_idle(&self) -> bool {
        !self.reporting && self.admitted == 0
    }

    /// This Limiter's share of the key while its checks are decided here.
    #[cfg(test)]
    pub(crate) fn local(&self) -> Option<f64> {
        self.share
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_700_000_040 * 1_000_000_000;

    fn usage(asked: u64, admitted: u64, first: bool) -> Usage {
        Usage {
            held: 0,
            asked,
            admitted,
            projected: 0,
            first,
        }
    }

    /// The usage due, its projection left out.
    fn due(book: &mut ApproxBook, q: &Quota, at: Instant) -> Option<Usage> {
        book.usage_due(q, false, at)
            .map(|u| Usage { projected: 0, ..u })
    }

    fn hammer(book: &mut ApproxBook, q: &Quota, n: u64, at: Instant) -> (u64, bool) {
        let mut admitted = 0;
        let mut started = false;
        for i in 0..n {
            let (d, start) = book.check(q, (1, true), (T0 + i, at));
            started |= start;
            admitted += u64::from(d.is_some_and(|d| d.allowed));
        }
        (admitted, started)
    }

    #[tokio::test(start_paused = true)]
    async fn a_hot_key_is_decided_here_once_a_report_gives_its_share() {
        let q = Quota::per_second(10_000);
        let mut book = ApproxBook::default();
        let t0 = Instant::now();
        let (admitted, started) = hammer(&mut book, &q, 1_000, t0);
        assert_eq!(admitted, 0, "no share yet: every check goes to the store");
        assert!(started, "hot: a reporter starts");
        assert_eq!(due(&mut book, &q, t0), Some(usage(1_000, 0, true)));
        let r = Reported {
            share: Some(0.5),
            meter: Meter::Gcra { tat: T0 },
            ahead: 4_000,
        };
        book.reported(&q, r, (T0, t0));
        let (admitted, started) = hammer(&mut book, &q, 6_000, t0);
        assert!(!started);
        assert_eq!(
            admitted, 4_000,
            "what was charged ahead: a GCRA meter starts empty, the rest of its part stays in the key"
        );
        let now_due = book.usage_due(&q, false, t0).expect("due");
        let counts = Usage {
            projected: 0,
            ..now_due
        };
        assert_eq!(counts, usage(6_000, 0, false), "4,000 were charged ahead");
        // A failed report's usage goes with the next one.
        book.report_failed(now_due);
        assert_eq!(due(&mut book, &q, t0), Some(usage(6_000, 0, false)));
        // Past the grace with no answer: back to the store.
        let late = t0 + LOCAL_GRACE;
        assert_eq!(hammer(&mut book, &q, 10, late).0, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_cooling_down_reports_what_is_left_then_stops() {
        let q = Quota::per_second(10_000);
        let mut book = ApproxBook::default();
        let t0 = Instant::now();
        hammer(&mut book, &q, 1_000, t0);
        book.usage_due(&q, false, t0);
        let r = Reported {
            share: Some(1.0),
            meter: Meter::Gcra { tat: T0 },
            ahead: 0,
        };
        book.reported(&q, r, (T0, t0));
        // A GCRA meter starts empty (what the key had is charged ahead); 10 ms later 100 units
        // have come back at 10,000/s: 10 checks admitted here, to be reported.
        let later = T0 + 10_000_000;
        let admitted = (0..10)
            .filter(|i| {
                let (d, _) = book.check(&q, (1, true), (later + i, t0));
                d.is_some_and(|d| d.allowed)
            })
            .count();
        assert_eq!(admitted, 10);
        assert_eq!(book.local(), Some(1.0));
        let cold = t0 + Duration::from_secs(2);
        assert_eq!(
            book.usage_due(&q, false, cold),
            Some(usage(10, 10, false)),
            "the last report"
        );
        assert_eq!(book.local(), None, "its checks go to the store");
        assert_eq!(book.usage_due(&q, false, cold), None, "stops");
        assert!(book.is_idle());
    }
}
