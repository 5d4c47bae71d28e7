//! [`Quota`]: how many per how long, with which algorithm; validated before any store sees it.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

/// Largest `limit` (and `burst`) a quota may have.
pub const MAX_RATE: u64 = 1_000_000_000;
/// Shortest period of a quota.
pub const MIN_PERIOD: Duration = Duration::from_millis(1);
/// Longest period, ban, and GCRA burst window (`burst × period / limit`): 400 days, so every
/// time in the state fits Unix nanoseconds in a `u64` for centuries.
pub const MAX_PERIOD: Duration = Duration::from_secs(400 * 24 * 3600);

/// How a rate limit counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Algorithm {
    /// Generic cell rate algorithm (token bucket / leaky-bucket meter, redis-cell's
    /// `CL.THROTTLE`): `limit` per `period` at an even pace, with up to `burst` at once.
    #[default]
    Gcra,
    /// Two-counter sliding window: the previous window's count weighted by how much of it still
    /// overlaps the last `period`, plus the current window's count, stays within `limit`.
    SlidingWindow,
    /// Fixed windows aligned to the Unix epoch (Envoy's global rate limit semantics): at most
    /// `limit` in each window `[k × period, (k+1) × period)`.
    FixedWindow,
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Algorithm::Gcra => "gcra",
            Algorithm::SlidingWindow => "sliding_window",
            Algorithm::FixedWindow => "fixed_window",
        })
    }
}

/// A rate: at most `limit` per `period`, per key.
///
/// ```
/// use clusterlimit::{Algorithm, Quota};
/// use std::time::Duration;
/// let api = Quota::per_second(100).burst(20);              // GCRA: 100/s, 20 at once
/// let login = Quota::per_minute(5)
///     .algorithm(Algorithm::FixedWindow)
///     .ban(Duration::from_secs(600));                      // over the limit: denied for 10 min
/// assert_eq!(api.limit, 100);
/// assert_eq!(login.burst, 5);                              // windows: burst = limit
/// ```
///
/// The fields can be read; build one with the constructors and the builder methods (a field
/// and the method of the same name are different things: `quota.burst` reads, `.burst(20)`
/// sets). Checked when used: a bad quota gives `InvalidArgument` naming the field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Quota {
    /// Requests admitted per `period` (1 ..= [`MAX_RATE`]).
    pub limit: u64,
    /// The period `limit` applies to ([`MIN_PERIOD`] ..= [`MAX_PERIOD`]).
    pub period: Duration,
    /// GCRA: how many may pass at once from a full bucket (default `limit`); redis-cell's
    /// `max_burst` is `burst − 1`. Windows: always `limit`.
    pub burst: u64,
    /// How requests are counted.
    pub algorithm: Algorithm,
    /// After a denial, the key stays denied for this long (zero: no ban).
    pub ban: Duration,
}

impl Quota {
    /// `limit` per `period`, GCRA, burst `limit`, no ban.
    pub fn new(limit: u64, period: Duration) -> Quota {
        Quota {
            limit,
            period,
            burst: limit,
            algorithm: Algorithm::Gcra,
            ban: Duration::ZERO,
        }
    }
    /// `n` per second.
    pub fn per_second(n: u64) -> Quota {
        Quota::new(n, Duration::from_secs(1))
    }
    /// `n` per minute.
    pub fn per_minute(n: u64) -> Quota {
        Quota::new(n, Duration::from_secs(60))
    }
    /// `n` per hour.
    pub fn per_hour(n: u64) -> Quota {
        Quota::new(n, Duration::from_secs(3600))
    }
    /// `n` per day (24 hours).
    pub fn per_day(n: u64) -> Quota {
        Quota::new(n, Duration::from_secs(86_400))
    }

    /// GCRA only: up to `burst` requests at once from a full bucket (default: `limit`).
    pub fn burst(mut self, burst: u64) -> Quota {
        self.burst = burst;
        self
    }

    /// The counting algorithm (default [`Algorithm::Gcra`]).
    pub fn algorithm(mut self, algorithm: Algorithm) -> Quota {
        self.algorithm = algorithm;
        self
    }

    /// After a denial the key stays denied for `ban` (its `retry_after` says so).
    pub fn ban(mut self, ban: Duration) -> Quota {
        self.ban = ban;
        self
    }

    /// The largest cost one check may have: `burst` for GCRA, `limit` for windows.
    pub fn max_cost(&self) -> u64 {
        match self.algorithm {
            Algorithm::Gcra => self.burst,
            Algorithm::SlidingWindow | Algorithm::FixedWindow => self.limit,
        }
    }

    /// Checks every field; `InvalidArgument` names the first that is wrong.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::invalid(format!("quota {self}: {m}")));
        if self.limit == 0 || self.limit > MAX_RATE {
            return bad(format!("limit must be 1..={MAX_RATE}, got {}", self.limit));
        }
        if self.period < MIN_PERIOD || self.period > MAX_PERIOD {
            return bad(format!(
                "period must be {MIN_PERIOD:?}..={MAX_PERIOD:?}, got {:?}",
                self.period
            ));
        }
        if self.period.as_nanos() < u128::from(self.limit) {
            return bad("limit must be at most one per nanosecond of the period".into());
        }
        if self.ban > MAX_PERIOD {
            return bad(format!("ban must be at most {MAX_PERIOD:?}"));
        }
        match self.algorithm {
            Algorithm::Gcra => {
                if self.burst == 0 || self.burst > MAX_RATE {
                    return bad(format!("burst must be 1..={MAX_RATE}, got {}", self.burst));
                }
                if u128::from(self.burst) * self.emission_interval_ns() > MAX_PERIOD.as_nanos() {
                    return bad(format!(
                        "burst × period / limit must be at most {MAX_PERIOD:?}"
                    ));
                }
            }
            Algorithm::SlidingWindow | Algorithm::FixedWindow => {
                if self.burst != self.limit {
                    return bad(format!(
                        "burst applies to GCRA only ({} counts at most limit per window)",
                        self.algorithm
                    ));
                }
            }
        }
        Ok(())
    }

    /// GCRA's emission interval `period / limit` in nanoseconds, rounded up so that rounding
    /// can only admit less, never more. At least 1 for a valid quota.
    pub fn emission_interval_ns(&self) -> u128 {
        self.period
            .as_nanos()
            .div_ceil(u128::from(self.limit.max(1)))
    }

    /// The quota as stored (JSON, versioned by its `v` field).
    pub fn encode(&self) -> Vec<u8> {
        let stored = Stored { v: 1, quota: *self };
        serde_json::to_vec(&stored).unwrap_or_default()
    }

    /// Parses a stored quota; a value we cannot read is a store error, not a panic.
    pub fn decode(raw: &[u8]) -> Result<Quota> {
        let stored: Stored = serde_json::from_slice(raw).map_err(|e| {
            Error::store(format!(
                "stored quota {:?} is unreadable: {e}",
                String::from_utf8_lossy(raw)
            ))
        })?;
        if stored.v != 1 {
            return Err(Error::store(format!(
                "stored quota has format version {}, this build reads 1",
                stored.v
            )));
        }
        Ok(stored.quota)
    }
}

#[derive(Serialize, Deserialize)]
struct Stored {
    v: u32,
    #[serde(flatten)]
    quota: Quota,
}

impl fmt::Display for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} per {:?} ({}",
            self.limit, self.period, self.algorithm
        )?;
        if self.algorithm == Algorithm::Gcra {
            write!(f, ", burst {}", self.burst)?;
        }
        if !self.ban.is_zero() {
            write!(f, ", ban {:?}", self.ban)?;
        }
        f.write_str(")")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constructors_and_builders() {
        let q = Quota::per_minute(60).burst(5).ban(Duration::from_secs(3));
        assert_eq!(
            (q.limit, q.period, q.burst),
            (60, Duration::from_secs(60), 5)
        );
        assert_eq!(q.ban, Duration::from_secs(3));
        assert_eq!(Quota::per_day(7).period, Duration::from_secs(86_400));
        assert_eq!(Quota::per_hour(1).max_cost(), 1);
        assert!(q.validate().is_ok());
    }

    #[test]
    fn bad_quotas_name_the_field() {
        let cases = [
            (Quota::per_second(0), "limit"),
            (Quota::per_second(MAX_RATE + 1), "limit"),
            (Quota::new(1, Duration::ZERO), "period"),
            (Quota::new(1, MAX_PERIOD * 2), "period"),
            (Quota::new(2_000_000, MIN_PERIOD), "one per nanosecond"),
            (Quota::per_second(5).burst(0), "burst"),
            (Quota::per_day(1).burst(500), "burst × period"),
            (Quota::per_second(1).ban(MAX_PERIOD * 2), "ban"),
            (
                Quota::per_second(10)
                    .burst(3)
                    .algorithm(Algorithm::FixedWindow),
                "GCRA only",
            ),
        ];
        for (q, word) in cases {
            match q.validate() {
                Err(Error::InvalidArgument(m)) => assert!(m.contains(word), "{q}: {m}"),
                other => panic!("{q}: {other:?}"),
            }
        }
    }

    #[test]
    fn emission_interval_rounds_up() {
        assert_eq!(Quota::per_second(500).emission_interval_ns(), 2_000_000);
        assert_eq!(Quota::per_second(3).emission_interval_ns(), 333_333_334);
    }

    #[test]
    fn encoding_round_trips_and_refuses_garbage() {
        let q = Quota::per_minute(7)
            .algorithm(Algorithm::SlidingWindow)
            .ban(Duration::from_millis(1500));
        assert_eq!(Quota::decode(&q.encode()).ok(), Some(q));
        assert!(matches!(Quota::decode(b"{"), Err(Error::Store(_))));
        let future = br#"{"v":2,"limit":1,"period":{"secs":1,"nanos":0},"burst":1,"algorithm":"gcra","ban":{"secs":0,"nanos":0}}"#;
        assert!(matches!(Quota::decode(future), Err(Error::Store(_))));
    }
}
