//! `PerMember`: how a semaphore's capacity follows the number of live Limiters that have it
//! open (`ceil(per_member × members)`, clamped to `[min, max]`), and its checks.

use super::names::BOARD_PREFIX;
use crate::adaptive::names::CONTROLLER_SUFFIX;
use crate::error::{Error, Result};
use crate::validate::{MAX_CAPACITY, MAX_NAME_LEN};

/// How a per-member semaphore sizes itself: `capacity = ceil(per_member × members)`, where
/// `members` is the number of live Limiters that have it open through
/// [`Limiter::per_member_semaphore`](crate::Limiter::per_member_semaphore), clamped to
/// `[min, max]` (by default `[1, Semaphore::MAX_CAPACITY]`).
///
/// "Each replica's worth of connections to the database": with `per_member` 10, three
/// replicas share 30 permits, five share 50, without editing a number on every deploy.
///
/// ```
/// use clusterlimit::PerMember;
/// let config = PerMember::new(2.5).min(4).max(100);
/// assert_eq!(config.capacity_for(1), 4); // ceil(2.5) = 3, raised to min 4
/// assert_eq!(config.capacity_for(3), 8); // ceil(7.5)
/// assert_eq!(config.capacity_for(60), 100); // 150, lowered to max
/// ```
// Not `Copy`: it may grow a field that is not.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
#[must_use]
pub struct PerMember {
    per_member: f64,
    min: u32,
    max: u32,
}

impl PerMember {
    /// Permits per live member (may be fractional: 0.5 is one permit per two members,
    /// rounded up), bounded by min 1 and max [`Semaphore::MAX_CAPACITY`](crate::Semaphore::MAX_CAPACITY)
    /// unless set. Checked when the semaphore is opened: it must be finite and above 0.
    pub fn new(per_member: f64) -> Self {
        PerMember {
            per_member,
            min: 1,
            max: MAX_CAPACITY,
        }
    }

    /// The least capacity, whatever the members (at least 1; default 1).
    pub fn min(mut self, min: u32) -> Self {
        self.min = min;
        self
    }

    /// The most capacity, whatever the members (at least `min`, at most
    /// [`Semaphore::MAX_CAPACITY`](crate::Semaphore::MAX_CAPACITY), the default).
    pub fn max(mut self, max: u32) -> Self {
        self.max = max;
        self
    }

    /// Permits per live member, as given to [`new`](Self::new).
    pub fn per_member(&self) -> f64 {
        self.per_member
    }

    /// The capacity for `members` live members: `ceil(per_member × members)` clamped to
    /// `[min, max]` and to [`Semaphore::MAX_CAPACITY`](crate::Semaphore::MAX_CAPACITY). Pure;
    /// for a config that [`check`](Self::check) refuses, still some number in `[1, MAX_CAPACITY]`.
    pub fn capacity_for(&self, members: usize) -> u32 {
        let raw = (self.per_member * members as f64).ceil();
        let hi = self.max.clamp(1, MAX_CAPACITY);
        let lo = self.min.clamp(1, hi);
        if raw.is_nan() || raw < f64::from(lo) {
            lo
        } else if raw >= f64::from(hi) {
            hi
        } else {
            // In (lo, hi): a whole number that fits.
            raw as u32
        }
    }

    /// `InvalidArgument`, with the reason, for a config that cannot size a semaphore or a
    /// name with no room for its store objects (the board `per-member.<name>` and the
    /// controller seat `<name>.controller`): the checks
    /// [`Limiter::per_member_semaphore`](crate::Limiter::per_member_semaphore) makes before
    /// any store request.
    pub fn check(&self, name: &str) -> Result<()> {
        crate::validate::name(name)?;
        let room = CONTROLLER_SUFFIX.len().max(BOARD_PREFIX.len());
        if name.len() + room > MAX_NAME_LEN {
            return Err(Error::invalid(format!(
                "a per-member semaphore's name must be at most {} characters (room for {CONTROLLER_SUFFIX:?}), got {}",
                MAX_NAME_LEN - room,
                name.len()
            )));
        }
        self.validate()
    }

    fn validate(&self) -> Result<()> {
        let p = self.per_member;
        if !p.is_finite() || p <= 0.0 || p > f64::from(MAX_CAPACITY) {
            return Err(Error::invalid(format!(
                "permits per member must be a number above 0 and at most {MAX_CAPACITY}, got {p}"
            )));
        }
        if self.max == 0 || self.max > MAX_CAPACITY {
            return Err(Error::invalid(format!(
                "per-member max must be between 1 and {MAX_CAPACITY}, got {}",
                self.max
            )));
        }
        if self.min == 0 || self.min > self.max {
            return Err(Error::invalid(format!(
                "per-member min must be between 1 and max ({}), got {}",
                self.max, self.min
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_follows_members_within_bounds() {
        let c = PerMember::new(2.0);
        assert_eq!(
            [3, 5, 2].map(|m| c.capacity_for(m)),
            [6, 10, 4],
            "2 per member"
        );
        assert_eq!(c.capacity_for(0), 1, "never below 1");
        let half = PerMember::new(0.5);
        assert_eq!([1, 2, 3].map(|m| half.capacity_for(m)), [1, 1, 2]);
        let bounded = PerMember::new(2.0).min(5).max(8);
        assert_eq!([1, 3, 4, 9].map(|m| bounded.capacity_for(m)), [5, 6, 8, 8]);
        let huge = PerMember::new(f64::from(MAX_CAPACITY));
        assert_eq!(huge.capacity_for(usize::MAX), MAX_CAPACITY);
    }

    #[test]
    fn bad_configs_are_refused_with_the_reason() {
        let cases = [
            (PerMember::new(f64::NAN), "above 0"),
            (PerMember::new(f64::INFINITY), "above 0"),
            (PerMember::new(0.0), "above 0"),
            (PerMember::new(-1.0), "above 0"),
            (PerMember::new(2_000_000.0), "at most 1000000"),
            (PerMember::new(1.0).max(0), "max must be between 1"),
            (
                PerMember::new(1.0).max(MAX_CAPACITY + 1),
                "max must be between 1",
            ),
            (PerMember::new(1.0).min(0), "min must be between 1 and max"),
            (
                PerMember::new(1.0).min(5).max(4),
                "min must be between 1 and max (4)",
            ),
        ];
        for (config, reason) in cases {
            match config.check("db") {
                Err(Error::InvalidArgument(m)) => {
                    assert!(m.contains(reason), "{config:?}: {m:?} lacks {reason:?}")
                }
                other => panic!("{config:?} should be refused, got {other:?}"),
            }
        }
        let long = "x".repeat(MAX_NAME_LEN - 10);
        assert!(
            PerMember::new(1.0).check(&long).is_err(),
            "no room for the seat"
        );
        assert!(PerMember::new(1.0).min(3).max(3).check("db").is_ok());
    }
}
