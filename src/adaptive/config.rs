//! `Adaptive`: how an adaptive semaphore adapts (algorithm, bounds, first capacity, window).

use super::algorithm::{Aimd, Bounds, CapacityAlgorithm, Gradient};
use super::names::CONTROLLER_SUFFIX;
use crate::error::{Error, Result};
use crate::validate::MAX_CAPACITY;
use std::time::Duration;

/// Shortest window accepted: each window costs every Limiter one announcement and one read.
pub const MIN_WINDOW: Duration = Duration::from_millis(100);
/// Longest window accepted.
pub const MAX_WINDOW: Duration = Duration::from_secs(600);

/// How an adaptive semaphore adapts, for [`Limiter::adaptive_semaphore`](crate::Limiter::adaptive_semaphore).
///
/// ```
/// use clusterlimit::adaptive::Adaptive;
/// use std::time::Duration;
/// let db = Adaptive::gradient().min(2).max(200).initial(20).window(Duration::from_secs(1));
/// let api = Adaptive::aimd().max(50);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[must_use]
pub struct Adaptive {
    pub(crate) algorithm: CapacityAlgorithm,
    pub(crate) bounds: Bounds,
    pub(crate) initial: Option<u32>,
    pub(crate) window: Duration,
}

impl Adaptive {
    /// The latency gradient (the default): the capacity follows the ratio of the dependency's
    /// unloaded latency (a protected baseline) to its latency now.
    pub fn gradient() -> Self {
        Self::with(CapacityAlgorithm::Gradient(Gradient::default()))
    }

    /// AIMD: grows by one permit per window that used at least half the capacity, shrinks by
    /// 10% per window with more than 1% of drops or a median latency over 1.5 × the
    /// dependency's unloaded latency (learnt as the gradient's baseline is).
    pub fn aimd() -> Self {
        Self::with(CapacityAlgorithm::Aimd(Aimd::default()))
    }

    /// Any algorithm with its own settings.
    pub fn with(algorithm: CapacityAlgorithm) -> Self {
        Adaptive {
            algorithm,
            bounds: Bounds {
                min: 1,
                max: 1000,
                max_step: 0.5,
            },
            initial: None,
            window: Duration::from_secs(1),
        }
    }

    /// Never below `min` permits (default 1).
    pub fn min(mut self, min: u32) -> Self {
        self.bounds.min = min;
        self
    }

    /// Never above `max` permits (default 1,000).
    pub fn max(mut self, max: u32) -> Self {
        self.bounds.max = max;
        self
    }

    /// One window changes the capacity by at most this share of it, at least one permit
    /// (default 0.5; between 0 and 1).
    pub fn max_step(mut self, share: f64) -> Self {
        self.bounds.max_step = share;
        self
    }

    /// The capacity a semaphore that does not exist yet is created with (default: `min`, so a
    /// new pool starts careful and grows as the dependency shows it can take more).
    pub fn initial(mut self, capacity: u32) -> Self {
        self.initial = Some(capacity);
        self
    }

    /// How often outcomes are summed and the capacity reconsidered (default 1 s; 100 ms to
    /// 10 min). Each window costs every Limiter one announcement and one read of the others'.
    pub fn window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// The capacity to create the semaphore with.
    pub(crate) fn first_capacity(&self) -> u32 {
        self.initial.unwrap_or(self.bounds.min)
    }

    /// Checks these settings and `name` as
    /// [`Limiter::adaptive_semaphore`](crate::Limiter::adaptive_semaphore) does, without a
    /// store: `InvalidArgument` naming what is wrong (for a configuration checked at start).
    ///
    /// ```
    /// use clusterlimit::adaptive::Adaptive;
    /// assert!(Adaptive::gradient().max(50).check("db").is_ok());
    /// let e = Adaptive::gradient().min(10).max(5).check("db").unwrap_err();
    /// assert!(e.to_string().contains("adaptive max must be between min (10)"));
    /// ```
    pub fn check(&self, name: &str) -> Result<()> {
        crate::validate::name(name)?;
        if name.len() + CONTROLLER_SUFFIX.len() > crate::validate::MAX_NAME_LEN {
            return Err(Error::invalid(format!(
                "an adaptive semaphore's name must be at most {} characters (room for {CONTROLLER_SUFFIX:?}), got {}",
                crate::validate::MAX_NAME_LEN - CONTROLLER_SUFFIX.len(),
                name.len()
            )));
        }
        self.validate()
    }

    /// Checks every setting, naming the one that is wrong.
    fn validate(&self) -> Result<()> {
        let b = &self.bounds;
        if b.min == 0 || b.min > MAX_CAPACITY {
            return Err(Error::invalid(format!(
                "adaptive min must be between 1 and {MAX_CAPACITY}, got {}",
                b.min
            )));
        }
        if b.max < b.min || b.max > MAX_CAPACITY {
            return Err(Error::invalid(format!(
                "adaptive max must be between min ({}) and {MAX_CAPACITY}, got {}",
                b.min, b.max
            )));
        }
        if !(b.max_step > 0.0 && b.max_step <= 1.0) {
            return Err(Error::invalid(format!(
                "adaptive max_step must be above 0 and at most 1, got {}",
                b.max_step
            )));
        }
        let first = self.first_capacity();
        if first < b.min || first > b.max {
            return Err(Error::invalid(format!(
                "adaptive initial capacity must be between min ({}) and max ({}), got {first}",
                b.min, b.max
            )));
        }
        if self.window < MIN_WINDOW || self.window > MAX_WINDOW {
            return Err(Error::invalid(format!(
                "adaptive window must be between {MIN_WINDOW:?} and {MAX_WINDOW:?}, got {:?}",
                self.window
            )));
        }
        match &self.algorithm {
            CapacityAlgorithm::Aimd(a) => {
                if !(a.backoff > 0.0 && a.backoff < 1.0) {
                    return Err(Error::invalid(format!(
                        "AIMD backoff must be between 0 and 1 (exclusive), got {}",
                        a.backoff
                    )));
                }
                if !(0.0..=1.0).contains(&a.drop_threshold) {
                    return Err(Error::invalid(format!(
                        "AIMD drop threshold must be between 0 and 1, got {}",
                        a.drop_threshold
                    )));
                }
                if let Some(t) = a.latency_tolerance {
                    if !(t >= 1.0 && t.is_finite()) {
                        return Err(Error::invalid(format!(
                            "AIMD latency tolerance must be at least 1, got {t}"
                        )));
                    }
                }
            }
            CapacityAlgorithm::Gradient(g) => {
                if !(g.tolerance >= 1.0 && g.tolerance.is_finite()) {
                    return Err(Error::invalid(format!(
                        "gradient tolerance must be at least 1, got {}",
                        g.tolerance
                    )));
                }
                if !(g.smoothing > 0.0 && g.smoothing <= 1.0) {
                    return Err(Error::invalid(format!(
                        "gradient smoothing must be above 0 and at most 1, got {}",
                        g.smoothing
                    )));
                }
                if !(g.quantile > 0.0 && g.quantile < 1.0) {
                    return Err(Error::invalid(format!(
                        "gradient quantile must be between 0 and 1 (exclusive), got {}",
                        g.quantile
                    )));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bad_settings_are_named() {
        assert!(Adaptive::gradient().validate().is_ok());
        assert!(Adaptive::aimd().validate().is_ok());
        let cases = [
            (Adaptive::gradient().min(0), "adaptive min"),
            (Adaptive::gradient().min(5).max(4), "adaptive max"),
            (Adaptive::gradient().max_step(0.0), "max_step"),
            (
                Adaptive::with(CapacityAlgorithm::Aimd(Aimd {
                    latency_tolerance: Some(0.5),
                    ..Aimd::default()
                })),
                "latency tolerance",
            ),
            (Adaptive::gradient().max(10).initial(11), "initial capacity"),
            (
                Adaptive::gradient().window(Duration::from_millis(10)),
                "window",
            ),
        ];
        for (config, word) in cases {
            let e = config.validate().expect_err(word).to_string();
            assert!(e.contains(word), "{e}");
        }
    }
}
