//! What can be wrong with a [`Quota`] (its fields, a cost checked against it) and its stored
//! form, kept apart from the type: the crate's `Error` names a `Quota` (`QuotaMismatch`), so
//! the type sits below `error.rs` and what returns errors above it.

use super::quota::{
    Algorithm, Quota, COLD_FACTORS, DEFAULT_COLD_FACTOR, MAX_PERIOD, MAX_RATE, MIN_PERIOD,
};
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

impl Quota {
    /// Whether one check of `cost` could ever be admitted (`cost` ≤ [`max_cost`](Self::max_cost)):
    /// the one cost check every surface makes before asking the store. `InvalidArgument` says
    /// why not, naming `limit` (the rate limit's name).
    ///
    /// ```
    /// use clusterlimit::Quota;
    /// let q = Quota::per_second(100).burst(20);
    /// assert!(q.check_cost("api", 20).is_ok());
    /// assert!(q.check_cost("api", 21).is_err());
    /// ```
    pub fn check_cost(&self, limit: &str, cost: u64) -> Result<()> {
        if cost <= self.max_cost() {
            return Ok(());
        }
        let what = match self.algorithm {
            Algorithm::Gcra => "burst",
            Algorithm::SlidingWindow | Algorithm::FixedWindow => "limit",
        };
        Err(Error::invalid(format!(
            "cost {cost} is above what rate limit {limit:?} can ever admit at once: its {what} {} ({self})",
            self.max_cost()
        )))
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
                if !self.warmup.is_zero() {
                    return bad(format!(
                        "warm-up applies to GCRA only ({} has no pace to slow down: it admits \
                         up to limit at any moment of a window)",
                        self.algorithm
                    ));
                }
            }
        }
        self.validate_reserves()?;
        if self.warmup.is_zero() {
            if self.cold_factor != DEFAULT_COLD_FACTOR {
                return bad("cold factor applies with a warm-up only".into());
            }
            return Ok(());
        }
        if !COLD_FACTORS.contains(&self.cold_factor) {
            return bad(format!(
                "cold factor must be {}..={}, got {}",
                COLD_FACTORS.start(),
                COLD_FACTORS.end(),
                self.cold_factor
            ));
        }
        if self.warmup > MAX_PERIOD {
            return bad(format!("warm-up must be at most {MAX_PERIOD:?}"));
        }
        if self.warmup < self.min_warmup() {
            return bad(format!(
                "warm-up must be at least cold factor × period / limit ({:?}), the time of one \
                 admission from cold",
                self.min_warmup()
            ));
        }
        Ok(())
    }

    /// The reserves: well formed, each below what one check may take, not with a warm-up.
    fn validate_reserves(&self) -> Result<()> {
        let bad = |m: String| Err(Error::invalid(format!("quota {self}: {m}")));
        if let Some(p) = self.reserves.problem() {
            return bad(p);
        }
        if !self.reserves.is_empty() && !self.warmup.is_zero() {
            return bad(
                "reserves apply to a quota without a warm-up (a cold key's units cost more, so \
                 a reserve counted in units would not be exact)"
                    .into(),
            );
        }
        if self.fair_flows && !self.warmup.is_zero() {
            return bad(
                "fair flows apply to a quota without a warm-up (a flow's share is kept in \
                 units, and a cold key's units cost more, so the share would not be exact)"
                    .into(),
            );
        }
        let (what, most) = match self.algorithm {
            Algorithm::Gcra => ("burst", self.burst),
            Algorithm::SlidingWindow | Algorithm::FixedWindow => ("limit", self.limit),
        };
        if let Some((class, units)) = self.reserves.iter().find(|(_, r)| *r >= most) {
            return bad(format!(
                "the reserve of class {class:?} ({units}) must be below the {what} ({most}), \
                 or that class could never be admitted"
            ));
        }
        Ok(())
    }

    /// The reserve a check of `class` must leave (`None`: no class, 0), or `InvalidArgument`
    /// when this quota has no such class. The class check every surface makes before asking
    /// the store, with [`check_cost`](Self::check_cost).
    ///
    /// ```
    /// use clusterlimit::Quota;
    /// let q = Quota::per_second(100).reserve("batch", 20);
    /// assert_eq!(q.check_class("api", Some("batch"), 80).ok(), Some(20));
    /// assert!(q.check_class("api", Some("batch"), 81).is_err()); // 81 + 20 > 100
    /// assert!(q.check_class("api", Some("bulk"), 1).is_err());
    /// assert_eq!(q.check_class("api", None, 100).ok(), Some(0));
    /// ```
    pub fn check_class(&self, limit: &str, class: Option<&str>, cost: u64) -> Result<u64> {
        self.check_cost(limit, cost)?;
        let Some(class) = class else { return Ok(0) };
        let Some(reserve) = self.reserves.get(class) else {
            let known = if self.reserves.is_empty() {
                "it has no classes".to_string()
            } else {
                format!(
                    "its classes are {}",
                    self.reserves
                        .iter()
                        .map(|(n, _)| n)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            return Err(Error::invalid(format!(
                "rate limit {limit:?} has no class {class:?}: {known} (or check without a class)"
            )));
        };
        if cost.saturating_add(reserve) > self.max_cost() {
            return Err(Error::invalid(format!(
                "cost {cost} of class {class:?} is above what rate limit {limit:?} can ever \
                 admit at once for it: {} less its reserve {reserve} ({self})",
                self.max_cost()
            )));
        }
        Ok(reserve)
    }

    /// The quota as stored (JSON, versioned by its `v` field): version 1 without a warm-up
    /// or reserves (byte for byte what builds before warm-ups wrote), version 2 with a
    /// warm-up, 3 with reserves, 4 with fair flows, so that an older build refuses it (a
    /// store error naming the version) instead of applying the quota without them.
    pub fn encode(&self) -> Vec<u8> {
        let v = if self.fair_flows {
            4
        } else if !self.reserves.is_empty() {
            3
        } else if self.warmup.is_zero() {
            1
        } else {
            2
        };
        let stored = Stored { v, quota: *self };
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
        if !(1..=4).contains(&stored.v) {
            return Err(Error::store(format!(
                "stored quota has format version {}, this build reads 1 to 4",
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
