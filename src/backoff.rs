//! Capped exponential backoff with jitter, for retries that may run for a long time (background
//! removals): many of them failing together, as when a store comes back, do not retry in
//! lockstep.

use std::time::Duration;

/// Pauses that double from `first` up to `max`, each drawn between half and all of its value.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    next: Duration,
    max: Duration,
}

impl Backoff {
    pub(crate) fn new(first: Duration, max: Duration) -> Self {
        Backoff { next: first, max }
    }

    /// The pause before the next attempt.
    pub(crate) fn pause(&mut self) -> Duration {
        let pause = self.next.mul_f64(0.5 + fastrand::f64() / 2.0);
        self.next = (self.next * 2).min(self.max);
        pause
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap_with_jitter() {
        let ms = Duration::from_millis;
        let mut b = Backoff::new(ms(100), ms(400));
        for expected in [100, 200, 400, 400, 400] {
            let p = b.pause();
            assert!(
                p >= ms(expected / 2) && p <= ms(expected),
                "{p:?} for {expected} ms"
            );
        }
    }
}
