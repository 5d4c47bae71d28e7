//! [`Quota`]: how many per how long, with which algorithm; validated before any store sees it.

use super::reserves::Reserves;
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
/// The cold factor a warm-up uses unless told otherwise (Sentinel's and Guava's).
pub const DEFAULT_COLD_FACTOR: u32 = 3;
/// The cold factors a warm-up may have: a fully cold key admits `rate / cold_factor`.
pub const COLD_FACTORS: std::ops::RangeInclusive<u32> = 2..=10;

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
/// let db = Quota::per_second(100)
///     .warmup(Duration::from_secs(30));                    // after idling: 100/3 up to 100/s
/// assert_eq!(db.cold_factor, 3);
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
    /// GCRA only: the warm-up period (zero: none, the default). A key idle for this long is
    /// fully cold and admits at `limit / cold_factor` per `period`; sustained traffic warms it
    /// back to the full rate within this period (docs/rate-limits.md, "Warm-up").
    #[serde(default, skip_serializing_if = "Duration::is_zero")]
    pub warmup: Duration,
    /// With a warm-up: how much slower a fully cold key goes ([`COLD_FACTORS`], default
    /// [`DEFAULT_COLD_FACTOR`]). Without one it must stay the default.
    #[serde(
        default = "default_cold_factor",
        skip_serializing_if = "is_default_cold_factor"
    )]
    pub cold_factor: u32,
    /// Priority classes and the units each must leave to the others (none by default): a
    /// check of a class is admitted only if at least its reserve would still be left after
    /// it; a check without a class may use everything. Not with a warm-up.
    #[serde(default, skip_serializing_if = "Reserves::is_empty")]
    pub reserves: Reserves,
    /// Each key is shared max-min fairly among the flows checking it (`CheckOptions::flow`;
    /// off by default): a check must leave what the other active flows are due. See
    /// [`fair_flows`](Self::fair_flows). Not with a warm-up.
    #[serde(default, skip_serializing_if = "is_false")]
    pub fair_flows: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn default_cold_factor() -> u32 {
    DEFAULT_COLD_FACTOR
}

fn is_default_cold_factor(f: &u32) -> bool {
    *f == DEFAULT_COLD_FACTOR
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
            warmup: Duration::ZERO,
            cold_factor: DEFAULT_COLD_FACTOR,
            reserves: Reserves::new(),
            fair_flows: false,
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

    /// GCRA only: after the key has been idle, ramp its rate up from `limit / cold_factor`
    /// to `limit` over `warmup` instead of admitting the full rate at once (zero: no warm-up).
    pub fn warmup(mut self, warmup: Duration) -> Quota {
        self.warmup = warmup;
        self
    }

    /// With a warm-up: a fully cold key admits `limit / cold_factor` (default 3).
    pub fn cold_factor(mut self, cold_factor: u32) -> Quota {
        self.cold_factor = cold_factor;
        self
    }

    /// Declares the priority class `class`, whose checks must leave `units` for the others
    /// (below the burst, or the limit for windows; 0: a class that may use everything).
    ///
    /// ```
    /// use clusterlimit::Quota;
    /// // Batch jobs stop when 20 are left; those 20 stay for checks without a class.
    /// let q = Quota::per_second(100).reserve("batch", 20);
    /// assert_eq!(q.reserves.get("batch"), Some(20));
    /// ```
    ///
    /// A bad or repeated name is reported by [`validate`](Self::validate).
    pub fn reserve(mut self, class: &str, units: u64) -> Quota {
        self.reserves = self.reserves.with(class, units);
        self
    }

    /// Replaces every class and reserve (an empty [`Reserves`]: none).
    pub fn reserves(mut self, reserves: Reserves) -> Quota {
        self.reserves = reserves;
        self
    }

    /// Shares each key max-min fairly among the flows checking it now (tenants, users:
    /// `CheckOptions::flow`). Per period, each flow is due its demand (what it asked this
    /// period or the one before, the larger) up to a level that the flows' dues fill the
    /// quota; a check must leave the other flows what they are due and have not used yet.
    /// So a flow alone gets everything, a light flow gets all it asks, and heavy flows split
    /// the rest evenly. Checks without a flow count as one flow together; beyond 64 flows
    /// seen in two periods, the rest share one flow's share.
    ///
    /// ```
    /// use clusterlimit::Quota;
    /// let q = Quota::per_minute(100).fair_flows();
    /// assert!(q.fair_flows);
    /// assert_eq!(q.to_string(), "100 per 60s (gcra, burst 100, fair flows)");
    /// ```
    ///
    /// To switch it off, set the field: `quota.fair_flows = false`.
    pub fn fair_flows(mut self) -> Quota {
        self.fair_flows = true;
        self
    }

    /// The shortest warm-up this quota may have: `cold_factor` emission intervals (one
    /// admission from cold), rounded up to a whole nanosecond.
    pub fn min_warmup(&self) -> Duration {
        let ns = self
            .emission_interval_ns()
            .saturating_mul(u128::from(self.cold_factor));
        Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }

    /// The largest cost one check may have: `burst` for GCRA, `limit` for windows.
    pub fn max_cost(&self) -> u64 {
        match self.algorithm {
            Algorithm::Gcra => self.burst,
            Algorithm::SlidingWindow | Algorithm::FixedWindow => self.limit,
        }
    }

    /// GCRA's emission interval `period / limit` in nanoseconds, rounded up so that rounding
    /// can only admit less, never more. At least 1 for a valid quota.
    pub fn emission_interval_ns(&self) -> u128 {
        self.period
            .as_nanos()
            .div_ceil(u128::from(self.limit.max(1)))
    }
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
        if !self.warmup.is_zero() {
            write!(f, ", warm-up {:?} ×{}", self.warmup, self.cold_factor)?;
        }
        if !self.reserves.is_empty() {
            write!(f, ", reserve {}", self.reserves)?;
        }
        if self.fair_flows {
            f.write_str(", fair flows")?;
        }
        f.write_str(")")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

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
            (
                Quota::per_second(10)
                    .algorithm(Algorithm::SlidingWindow)
                    .warmup(Duration::from_secs(10)),
                "warm-up applies to GCRA only",
            ),
            (Quota::per_second(10).cold_factor(4), "with a warm-up only"),
            (
                Quota::per_second(10)
                    .warmup(Duration::from_secs(10))
                    .cold_factor(1),
                "cold factor must be 2..=10, got 1",
            ),
            (
                Quota::per_second(10)
                    .warmup(Duration::from_secs(10))
                    .cold_factor(11),
                "cold factor",
            ),
            (
                Quota::per_second(10).warmup(MAX_PERIOD * 2),
                "warm-up must be at most",
            ),
            (
                Quota::per_second(10).warmup(Duration::from_millis(299)),
                "warm-up must be at least cold factor × period / limit (300ms)",
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
    fn warm_up_builders_and_display() {
        let q = Quota::per_second(100)
            .warmup(Duration::from_secs(30))
            .cold_factor(4);
        assert_eq!((q.warmup, q.cold_factor), (Duration::from_secs(30), 4));
        assert!(q.validate().is_ok());
        assert_eq!(
            q.to_string(),
            "100 per 1s (gcra, burst 100, warm-up 30s ×4)"
        );
        assert_eq!(Quota::per_second(1).cold_factor, DEFAULT_COLD_FACTOR);
        assert_eq!(
            Quota::per_second(10).min_warmup(),
            Duration::from_millis(300)
        );
        assert!(Quota::per_second(10)
            .warmup(Duration::from_millis(300))
            .validate()
            .is_ok());
        assert!(Quota::per_second(10).warmup(MAX_PERIOD).validate().is_ok());
    }

    #[test]
    fn a_quota_without_warm_up_encodes_as_before_one_with_is_version_2() {
        // Byte for byte what builds before warm-ups wrote and read.
        let q = Quota::per_second(5).burst(2);
        let old = br#"{"v":1,"limit":5,"period":{"secs":1,"nanos":0},"burst":2,"algorithm":"gcra","ban":{"secs":0,"nanos":0}}"#;
        assert_eq!(q.encode(), old.to_vec());
        assert_eq!(Quota::decode(old).ok(), Some(q));
        let warm = q.warmup(Duration::from_secs(30));
        let text = String::from_utf8(warm.encode()).unwrap();
        assert!(text.starts_with(r#"{"v":2,"#), "{text}");
        assert!(text.contains(r#""warmup":{"secs":30,"nanos":0}"#), "{text}");
        assert!(
            !text.contains("cold_factor"),
            "the default is left out: {text}"
        );
        assert_eq!(Quota::decode(text.as_bytes()).ok(), Some(warm));
        let five = warm.cold_factor(5);
        let text = String::from_utf8(five.encode()).unwrap();
        assert!(text.contains(r#""cold_factor":5"#), "{text}");
        assert_eq!(Quota::decode(text.as_bytes()).ok(), Some(five));
    }

    #[test]
    fn a_quota_with_reserves_is_version_3_and_round_trips() {
        let q = Quota::per_second(5)
            .burst(4)
            .reserve("batch", 2)
            .reserve("critical", 0);
        let text = String::from_utf8(q.encode()).unwrap();
        assert_eq!(
            text,
            r#"{"v":3,"limit":5,"period":{"secs":1,"nanos":0},"burst":4,"algorithm":"gcra","ban":{"secs":0,"nanos":0},"reserves":{"batch":2,"critical":0}}"#
        );
        assert_eq!(Quota::decode(text.as_bytes()).ok(), Some(q));
        assert_eq!(
            q.to_string(),
            "5 per 1s (gcra, burst 4, reserve batch 2, critical 0)"
        );
        // A stored quota with a bad class is a store error, not a quota without it.
        let bad = br#"{"v":3,"limit":5,"period":{"secs":1,"nanos":0},"burst":4,"algorithm":"gcra","ban":{"secs":0,"nanos":0},"reserves":{"":2}}"#;
        assert!(matches!(Quota::decode(bad), Err(Error::Store(_))));
    }

    #[test]
    fn bad_reserves_say_why() {
        let cases = [
            (
                Quota::per_second(10).reserve("batch", 10),
                "reserve of class \"batch\" (10) must be below the burst (10)",
            ),
            (
                Quota::per_second(10).burst(4).reserve("batch", 4),
                "below the burst (4)",
            ),
            (
                Quota::per_minute(10)
                    .algorithm(Algorithm::FixedWindow)
                    .reserve("batch", 11),
                "below the limit (10)",
            ),
            (Quota::per_second(10).reserve("", 1), "must not be empty"),
            (
                Quota::per_second(10).reserve("a", 1).reserve("a", 2),
                "given a reserve twice",
            ),
            (
                Quota::per_second(10)
                    .warmup(Duration::from_secs(10))
                    .reserve("batch", 1),
                "without a warm-up",
            ),
        ];
        for (q, word) in cases {
            match q.validate() {
                Err(Error::InvalidArgument(m)) => assert!(m.contains(word), "{q}: {m}"),
                other => panic!("{q}: {other:?}"),
            }
        }
        let q = Quota::per_minute(10).reserve("batch", 3);
        let m = q
            .check_class("jobs", Some("bulk"), 1)
            .err()
            .map(|e| e.to_string());
        assert!(
            m.as_deref()
                .is_some_and(|m| m.contains(r#"no class "bulk": its classes are batch"#)),
            "{m:?}"
        );
        let m = q
            .check_class("jobs", Some("batch"), 8)
            .err()
            .map(|e| e.to_string());
        assert!(
            m.as_deref()
                .is_some_and(|m| m.contains("10 less its reserve 3")),
            "{m:?}"
        );
        let m = Quota::per_minute(10)
            .check_class("jobs", Some("batch"), 1)
            .err()
            .map(|e| e.to_string());
        assert!(
            m.as_deref()
                .is_some_and(|m| m.contains("it has no classes")),
            "{m:?}"
        );
        assert_eq!(q.check_class("jobs", Some("batch"), 7).ok(), Some(3));
        assert_eq!(q.check_class("jobs", None, 10).ok(), Some(0));
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
        let future = br#"{"v":5,"limit":1,"period":{"secs":1,"nanos":0},"burst":1,"algorithm":"gcra","ban":{"secs":0,"nanos":0}}"#;
        assert!(matches!(Quota::decode(future), Err(Error::Store(_))));
    }
}
