//! One window of outcomes: what every Limiter sums locally and publishes, and what the
//! controller merges across the cluster. Compact (a fixed log-linear latency histogram, four
//! buckets per doubling), so a window of a million calls costs the same bytes as one of ten.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// What became of the work done under a permit, as the holder reports it on release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// The call succeeded, in this long.
    Success(Duration),
    /// The dependency refused or timed out: it is overloaded.
    Dropped,
    /// Say nothing (a client error, a cancelled call): not counted.
    Ignore,
}

/// Sub-buckets per doubling of the latency, as a power of two: 4 buckets per octave, so a
/// quantile read from the histogram is within 12.5% of the true one (a log₂ histogram's √2 would
/// hide a queue that raises latency by 40%, more than the gradient's tolerance).
const SUB_BITS: u32 = 2;
const SUB: u64 = 1 << SUB_BITS;

/// Number of latency buckets (microseconds, log-linear: exact up to 7 µs, then four buckets per
/// doubling), up to ~2^41 µs (25 days); longer latencies land in the last one.
pub const BUCKETS: usize = 164;

fn bucket_of(us: u64) -> usize {
    if us < SUB {
        return us as usize;
    }
    let v = us;
    let e = u64::BITS - 1 - v.leading_zeros(); // ⌊log₂ v⌋, at least SUB_BITS
    let sub = (v >> (e - SUB_BITS)) & (SUB - 1);
    let i = u64::from(e - SUB_BITS + 1) * SUB + sub;
    (i as usize).min(BUCKETS - 1)
}

/// The lowest latency of bucket `i` and its width, in microseconds.
fn bucket_span(i: usize) -> (u64, u64) {
    let i = i as u64;
    if i < SUB {
        return (i, 1);
    }
    let shift = i / SUB - 1; // e − SUB_BITS
    ((SUB + i % SUB) << shift, 1 << shift)
}

/// The outcomes of one window.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct WindowSummary {
    /// Successes.
    pub ok: u64,
    /// Drops (overload signals).
    pub dropped: u64,
    /// Sum of the successes' latencies, in microseconds.
    pub latency_sum_us: u64,
    /// The successes' latencies, log-linear buckets of microseconds (trailing empty ones
    /// omitted).
    pub buckets: Vec<u64>,
    /// The most permits held at once by the reporting Limiters during the window (summed over
    /// Limiters when merged: an upper bound of the cluster's peak).
    pub peak_in_flight: u64,
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

    /// The `q` quantile (0..=1) of the successes' latencies: the middle of its bucket (within
    /// 12.5% of the truth). `None` without successes.
    pub fn latency_quantile(&self, q: f64) -> Option<Duration> {
        if self.ok == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.ok as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (i, n) in self.buckets.iter().enumerate() {
            seen = seen.saturating_add(*n);
            if seen >= rank {
                let (low, width) = bucket_span(i);
                return Some(Duration::from_secs_f64(
                    (low as f64 + width as f64 / 2.0) / 1e6,
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
            p50 >= Duration::from_millis(44) && p50 <= Duration::from_millis(57),
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

    /// Every latency lands in the bucket whose span holds it, spans tile the axis without gaps,
    /// and the middle of a bucket is within 12.5% of anything in it.
    #[test]
    fn buckets_tile_the_axis_and_are_narrow() {
        let mut next = 0u64;
        for i in 0..BUCKETS - 1 {
            let (low, width) = bucket_span(i);
            assert_eq!(
                low,
                next,
                "bucket {i} starts where {} ends",
                i.saturating_sub(1)
            );
            next = low + width;
            for us in [low, low + width - 1] {
                assert_eq!(bucket_of(us), i, "{us} µs");
                let mid = low as f64 + width as f64 / 2.0;
                assert!(((mid - us as f64).abs() / us.max(1) as f64) <= 0.5, "{us}");
                if us >= 8 {
                    assert!(
                        (mid - us as f64).abs() / us as f64 <= 0.125,
                        "{us} µs vs {mid}"
                    );
                }
            }
        }
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
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
