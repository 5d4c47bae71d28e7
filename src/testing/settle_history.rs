//! Checks of settled reservations as callers saw them ([`Settled`]): each was admitted at an
//! estimate and settled at its real cost, somewhere inside its caller's [reserve start, settle
//! end]. Two promises are checked:
//!
//! - **Refunds give back no more than was taken**: in every interval, what the reservations
//!   wholly inside it kept of their estimates (`min(actual, estimate)`: the estimate less the
//!   refund) stays within GCRA's bound, exactly as admitted checks of that cost would. Charges
//!   above the estimate are not admitted, they are counted (debt), and only make later checks
//!   wait.
//! - **The debt rule**: over the whole run, everything settled (`actual`, extras included)
//!   stays within the bound plus the burst plus the debt the key still owes at the end (what
//!   was charged and not yet paid off by time).

use super::rate_history::{assert_gcra_exact, Admitted, Excess};
use crate::rate::{Algorithm, Quota};

/// One reservation, settled, as its caller saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settled {
    /// Unix ns when `reserve` was called.
    pub start: u64,
    /// Unix ns when `settle` returned.
    pub end: u64,
    /// What was reserved.
    pub estimate: u64,
    /// What it was settled at.
    pub actual: u64,
}

/// Panics unless both promises above hold for `events` on a GCRA `quota`, given the run's
/// length in ns and the key's debt when it ended; returns the worst interval's excess of kept
/// estimates (≤ 0 when exact).
pub fn assert_settlements_exact(
    events: &[Settled],
    quota: &Quota,
    run_ns: u64,
    final_debt: u64,
) -> Excess {
    assert_eq!(quota.algorithm, Algorithm::Gcra, "a GCRA quota");
    let kept: Vec<Admitted> = events
        .iter()
        .map(|e| Admitted {
            start: e.start,
            end: e.end,
            cost: e.actual.min(e.estimate),
        })
        .collect();
    let worst = assert_gcra_exact(&kept, quota, 0.0);
    let settled: u64 = events.iter().map(|e| e.actual).sum();
    let bound = 2.0 * quota.burst as f64
        + run_ns as f64 / quota.emission_interval_ns() as f64
        + final_debt as f64;
    assert!(
        settled as f64 <= bound,
        "{settled} settled in {:.3} s, above {quota} allows with a final debt of {final_debt} ({bound:.0})",
        run_ns as f64 / 1e9
    );
    worst
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64, estimate: u64, actual: u64) -> Settled {
        Settled {
            start: ms * 1_000_000,
            end: ms * 1_000_000 + 1,
            estimate,
            actual,
        }
    }

    #[test]
    fn refunds_that_gave_back_too_much_are_found() {
        let q = Quota::per_second(10).burst(4);
        // 4 reserved at once, 2 kept, then 2 more: what was given back was spent. Exact.
        let ok = [at(0, 4, 2), at(0, 2, 2)];
        assert!(assert_settlements_exact(&ok, &q, 1, 0).over <= 0.0);
        // Each kept 3 of 4 at the same instant: 6 kept where 4 fit.
        let over = [at(0, 4, 3), at(0, 4, 3)];
        let caught = std::panic::catch_unwind(|| assert_settlements_exact(&over, &q, 1, 0));
        assert!(caught.is_err());
        // Extras are debt, not admissions: 4 admitted, 40 settled, owed at the end.
        let debt = [at(0, 4, 40)];
        assert_settlements_exact(&debt, &q, 1, 32);
        let lost = std::panic::catch_unwind(|| assert_settlements_exact(&debt, &q, 1, 0));
        assert!(lost.is_err(), "a debt nobody owes is an over-admission");
    }
}
