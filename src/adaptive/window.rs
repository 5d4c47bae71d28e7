//! One window of outcomes: what every Limiter sums locally and publishes, and what the
//! controller merges across the cluster. Compact (a fixed log₂ latency histogram), so a window
//! of a million calls costs the same bytes as one of ten.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// What became of the work done under a permit, as the holder reports it on release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The call succeeded, in this long.
    Success(Duration),
    /// The dependency refused or timed out: it is overloaded.
    Dropped,
    /// Say nothing (a client error, a cancelled call): not counted.
    Ignore,
}

/// Latency buckets: bucket `i` holds latencies in `[2^i, 2^(i+1))` microseconds (bucket 0 also
/// holds 0), up to ~36 minutes.
pub const BUCKETS: usize = 32;

/// The outcomes of one window.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowSummary {
    /// Successes.
    pub ok: u64,
    /// Drops (overload signals).
    pub dropped: u64,
    /// Sum of the successes' latencies, in microseconds.
    pub latency_sum_us: u64,
    /// The successes' latencies, log₂ buckets of microseconds (trailing empty ones omitted).
    pub buckets: Vec<u64>,
    /// The most permits held at once by the reporting Limiters during the window (summed over
    /// Limiters when merged: an upper bound of the cluster's peak).
    pub peak_in_flight: u64,
}

fn bucket_of(us: u64) -> usize {
    ((u64::BITS - us.max(1).leading_zeros()) as usize - 1).min(BUCKETS - 1)
}

impl WindowSummary {
    /// Counts one outcome.
    pub fn record(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::Success(latency) => {
                let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
                self.ok = self.ok.saturating_add(1);
                self.latency_sum_us = self.latency_sum_us.saturating_add(us);
                let b = bucket_of(us);
                if self.buckets.len() <= b {
                    self.buckets.resize(b + 1, 0);
                }
                self.buckets[b] = self.buckets[b].saturating_add(1);
            }
            Outcome::Dropped => self.dropped = self.dropped.saturating_add(1),
            Outcome::Ignore => {}
        }
    }

    /// Notes `held` permits in flight at some instant of the window.
    pub fn in_flight(&mut self, held: u64) {
        self.peak_in_flight = self.peak_in_flight.max(held);
    }

    /// Adds another Limiter's summary of the same window.
    pub fn merge(&mut self, other: &WindowSummary) {
        self.ok = self.ok.saturating_add(other.ok);
        self.dropped = self.dropped.saturating_add(other.dropped);
        self.latency_sum_us = self.latency_sum_us.saturating_add(other.latency_sum_us);
        if self.buckets.len() < other.buckets.len() {
            self.buckets.resize(other.buckets.len(), 0);
        }
        for (mine, theirs) in self.buckets.iter_mut().zip(&other.buckets) {
            *mine = mine.saturating_add(*theirs);
        }
        self.peak_in_flight = self.peak_in_flight.saturating_add(other.peak_in_flight);
    }

    /// Outcomes counted (successes and drops).
    pub fn samples(&self) -> u64 {
        self.ok.saturating_add(self.dropped)
    }

    /// Share of the samples that were drops (0 without samples).
    pub fn drop_ratio(&self) -> f64 {
        match self.samples() {
            0 => 0.0,
            n => self.dropped as f64 / n as f64,
        }
    }

    /// The `q` quantile (0..=1) of the successes' latencies: the geometric middle of its
    /// bucket (within a factor √2 of the truth). `None` without successes.
    pub fn latency_quantile(&self, q: f64) -> Option<Duration> {
        if self.ok == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.ok as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (i, n) in self.buckets.iter().enumerate() {
            seen = seen.saturating_add(*n);
            if seen >= rank {
                let low = (1u64 << i) as f64;
                return Some(Duration::from_secs_f64(
                    low * std::f64::consts::SQRT_2 / 1e6,
                ));
            }
        }
        None
    }

    /// The mean latency of the successes.
    pub fn mean_latency(&self) -> Option<Duration> {
        (self.ok > 0).then(|| Duration::from_micros(self.latency_sum_us / self.ok))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_within_a_bucket() {
        let mut w = WindowSummary::default();
        for ms in 1..=100u64 {
            w.record(Outcome::Success(Duration::from_millis(ms)));
        }
        w.record(Outcome::Dropped);
        w.record(Outcome::Ignore);
        assert_eq!((w.ok, w.dropped, w.samples()), (100, 1, 101));
        let p50 = w.latency_quantile(0.5).unwrap_or_default();
        assert!(
            p50 >= Duration::from_millis(25) && p50 <= Duration::from_millis(100),
            "{p50:?}"
        );
        assert_eq!(w.mean_latency(), Some(Duration::from_micros(50_500)));
        assert!((w.drop_ratio() - 1.0 / 101.0).abs() < 1e-12);
        assert_eq!(WindowSummary::default().latency_quantile(0.5), None);
    }

    #[test]
    fn merging_adds_counts_buckets_and_peaks() {
        let mut a = WindowSummary::default();
        a.record(Outcome::Success(Duration::from_micros(3)));
        a.in_flight(4);
        let mut b = WindowSummary::default();
        b.record(Outcome::Success(Duration::from_secs(1)));
        b.record(Outcome::Dropped);
        b.in_flight(2);
        b.in_flight(1);
        a.merge(&b);
        assert_eq!((a.ok, a.dropped, a.peak_in_flight), (2, 1, 6));
        assert_eq!(a.buckets.iter().sum::<u64>(), 2);
        assert_eq!(a.latency_sum_us, 1_000_003);
    }

    #[test]
    fn extreme_latencies_land_in_the_end_buckets() {
        let mut w = WindowSummary::default();
        w.record(Outcome::Success(Duration::ZERO));
        w.record(Outcome::Success(Duration::from_secs(u64::MAX / 4)));
        assert_eq!(w.buckets[0], 1);
        assert_eq!(w.buckets.len(), BUCKETS);
        assert_eq!(w.buckets[BUCKETS - 1], 1);
    }
}
