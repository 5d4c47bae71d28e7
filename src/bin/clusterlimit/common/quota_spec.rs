//! A rate-limit quota as people write it — the sidecar's `PUT /v1/ratelimits/{name}` body, its
//! `[[rate_limits]]` config entries, `clusterlimit rate set-quota` flags — checked field by
//! field so that an error names the field at fault (the library's own check names the quota).
//! Printed back by `quota_print.rs`.

use super::duration::{format_duration, parse_duration};
use clusterlimit::rate::{COLD_FACTORS, DEFAULT_COLD_FACTOR, MAX_PERIOD, MAX_RATE, MIN_PERIOD};
use clusterlimit::{Algorithm, Quota, Reserves};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

/// A field of a quota that is wrong, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// `limit`, `period`, `burst`, `algorithm`, `ban`, `warmup`, `cold_factor`, `reserves` or
    /// `fair_flows` (or the `_ms` form given).
    pub field: &'static str,
    pub message: String,
}

fn fail<T>(field: &'static str, message: String) -> Result<T, FieldError> {
    Err(FieldError { field, message })
}

/// The parts of a quota, durations already parsed. Numbers are `i64` so that a negative one is
/// reported as out of range for its field.
#[derive(Debug, Default, Clone)]
pub struct QuotaParts {
    pub limit: Option<i64>,
    pub period: Option<Duration>,
    pub burst: Option<i64>,
    pub algorithm: Option<Algorithm>,
    pub ban: Option<Duration>,
    pub warmup: Option<Duration>,
    pub cold_factor: Option<i64>,
    /// Priority classes and their reserves (`None`: none, or kept by [`over`](Self::over)).
    pub reserves: Option<Reserves>,
    /// Each key shared max-min fairly among its flows (`None`: off, or kept by
    /// [`over`](Self::over)).
    pub fair_flows: Option<bool>,
}

impl QuotaParts {
    /// The quota, or the first field at fault. `limit` and `period` are required; the
    /// algorithm defaults to GCRA, the burst to the limit, the ban and the warm-up to none,
    /// the cold factor to 3.
    pub fn to_quota(&self) -> Result<Quota, FieldError> {
        let (limit, period) = self.limit_and_period()?;
        let ban = self.ban.unwrap_or(Duration::ZERO);
        if ban > MAX_PERIOD {
            return fail(
                "ban",
                format!(
                    "ban must be at most {}, got {}",
                    format_duration(MAX_PERIOD),
                    format_duration(ban)
                ),
            );
        }
        let algorithm = self.algorithm.unwrap_or_default();
        let quota = Quota::new(limit, period).algorithm(algorithm).ban(ban);
        let quota = self.with_warmup(self.with_burst(quota, algorithm)?, algorithm)?;
        // What is left for the library's check: GCRA's burst window (burst × period / limit).
        if let Err(e) = quota.validate() {
            return fail("burst", e.to_string());
        }
        // Then the reserves: names, each below the burst (limit for windows), no warm-up.
        let mut quota = quota.reserves(self.reserves.unwrap_or_default());
        if let Err(e) = quota.validate() {
            return fail("reserves", e.to_string());
        }
        // Last the fair flows: not with a warm-up.
        quota.fair_flows = self.fair_flows.unwrap_or(false);
        match quota.validate() {
            Ok(()) => Ok(quota),
            Err(e) => fail("fair_flows", e.to_string()),
        }
    }

    /// The limit and the period, both required, within range, and at most one per nanosecond.
    fn limit_and_period(&self) -> Result<(u64, Duration), FieldError> {
        let max_rate = i64::try_from(MAX_RATE).unwrap_or(i64::MAX);
        let Some(limit) = self.limit else {
            return fail("limit", "limit is required".into());
        };
        if !(1..=max_rate).contains(&limit) {
            return fail(
                "limit",
                format!("limit must be a whole number from 1 to {MAX_RATE}, got {limit}"),
            );
        }
        let limit = u64::try_from(limit).unwrap_or(1);
        let Some(period) = self.period else {
            return fail("period", "period is required (e.g. \"1s\", \"1m\")".into());
        };
        if !(MIN_PERIOD..=MAX_PERIOD).contains(&period) {
            return fail(
                "period",
                format!(
                    "period must be from {} to {}, got {}",
                    format_duration(MIN_PERIOD),
                    format_duration(MAX_PERIOD),
                    format_duration(period)
                ),
            );
        }
        if period.as_nanos() < u128::from(limit) {
            return fail(
                "limit",
                format!(
                    "limit {limit} is more than one per nanosecond of {}",
                    format_duration(period)
                ),
            );
        }
        Ok((limit, period))
    }

    /// `quota` with the burst given (GCRA's only).
    fn with_burst(&self, quota: Quota, algorithm: Algorithm) -> Result<Quota, FieldError> {
        let Some(burst) = self.burst else {
            return Ok(quota);
        };
        if algorithm != Algorithm::Gcra {
            return fail(
                "burst",
                format!("burst applies to gcra only ({algorithm} admits at most limit per window)"),
            );
        }
        let max_rate = i64::try_from(MAX_RATE).unwrap_or(i64::MAX);
        if !(1..=max_rate).contains(&burst) {
            return fail(
                "burst",
                format!("burst must be a whole number from 1 to {MAX_RATE}, got {burst}"),
            );
        }
        Ok(quota.burst(u64::try_from(burst).unwrap_or(1)))
    }

    /// `quota` with the warm-up and cold factor given (GCRA's only; the factor needs a
    /// warm-up, and a warm-up must be at least the time one admission takes from cold).
    fn with_warmup(&self, mut quota: Quota, algorithm: Algorithm) -> Result<Quota, FieldError> {
        let warmup = self.warmup.unwrap_or(Duration::ZERO);
        if !warmup.is_zero() {
            if algorithm != Algorithm::Gcra {
                return fail(
                    "warmup",
                    format!(
                        "warmup applies to gcra only ({algorithm} has no pace to slow down: it \
                         admits up to limit at any moment of a window)"
                    ),
                );
            }
            if warmup > MAX_PERIOD {
                return fail(
                    "warmup",
                    format!(
                        "warmup must be at most {}, got {}",
                        format_duration(MAX_PERIOD),
                        format_duration(warmup)
                    ),
                );
            }
        }
        if let Some(factor) = self.cold_factor {
            quota = quota.cold_factor(checked_cold_factor(factor, warmup)?);
        }
        quota = quota.warmup(warmup);
        if !warmup.is_zero() && warmup < quota.min_warmup() {
            return fail(
                "warmup",
                format!(
                    "warmup must be at least cold_factor × period / limit ({}: the time one \
                     admission takes from cold), got {}",
                    format_duration(quota.min_warmup()),
                    format_duration(warmup)
                ),
            );
        }
        Ok(quota)
    }
}

/// A cold factor within range, given only with a warm-up (or at its default).
fn checked_cold_factor(factor: i64, warmup: Duration) -> Result<u32, FieldError> {
    let (lo, hi) = (COLD_FACTORS.start(), COLD_FACTORS.end());
    let factor = match u32::try_from(factor) {
        Ok(f) if COLD_FACTORS.contains(&f) => f,
        _ => {
            return fail(
                "cold_factor",
                format!("cold_factor must be a whole number from {lo} to {hi}, got {factor}"),
            )
        }
    };
    if warmup.is_zero() && factor != DEFAULT_COLD_FACTOR {
        return fail(
            "cold_factor",
            "cold_factor applies with a warmup only (give warmup too)".into(),
        );
    }
    Ok(factor)
}

impl QuotaParts {
    /// These parts over a stored quota: a field not given keeps the stored value, so
    /// `set-quota --limit 10` changes only the limit. The burst is the one field that depends
    /// on another: one not given follows the new limit when the stored burst was the default
    /// (equal to its limit; a window's is always), and is kept when it was set on purpose.
    /// The cold factor is kept with the warm-up, and back to its default when the warm-up is
    /// set to zero (or when the algorithm becomes a window, which drops the warm-up). The
    /// reserves are kept unless given (an empty set removes them), and so are the fair flows.
    pub fn over(&self, stored: &Quota) -> QuotaParts {
        let num = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let algorithm = self.algorithm.unwrap_or(stored.algorithm);
        let set_on_purpose = stored.algorithm == Algorithm::Gcra && stored.burst != stored.limit;
        let burst = match self.burst {
            Some(b) => Some(b),
            None if algorithm == Algorithm::Gcra && set_on_purpose => Some(num(stored.burst)),
            None => None,
        };
        let warmup = match self.warmup {
            Some(w) => w,
            None if algorithm == Algorithm::Gcra => stored.warmup,
            None => Duration::ZERO,
        };
        let cold_factor = match self.cold_factor {
            Some(f) => Some(f),
            None if !warmup.is_zero() => Some(i64::from(stored.cold_factor)),
            None => None,
        };
        QuotaParts {
            limit: self.limit.or(Some(num(stored.limit))),
            period: self.period.or(Some(stored.period)),
            burst,
            algorithm: Some(algorithm),
            ban: self.ban.or(Some(stored.ban)),
            warmup: Some(warmup),
            cold_factor,
            reserves: self.reserves.or(Some(stored.reserves)),
            fair_flows: self.fair_flows.or(Some(stored.fair_flows)),
        }
    }
}

impl QuotaParts {
    /// These parts over a stored quota for the sidecar's `PUT`, which gives the whole quota:
    /// only the reserves and the fair flows are kept unless given (they are not part of the
    /// pace, and a client setting a new limit should not switch them off unknowingly).
    pub fn keeping_shares(&self, stored: &Quota) -> QuotaParts {
        QuotaParts {
            reserves: self.reserves.or(Some(stored.reserves)),
            fair_flows: self.fair_flows.or(Some(stored.fair_flows)),
            ..self.clone()
        }
    }
}

/// The JSON body of `PUT /v1/ratelimits/{name}`: durations as text (`"1m"`) or milliseconds.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaBody {
    pub limit: Option<i64>,
    pub period: Option<String>,
    pub period_ms: Option<i64>,
    pub burst: Option<i64>,
    pub algorithm: Option<Algorithm>,
    pub ban: Option<String>,
    pub ban_ms: Option<i64>,
    pub warmup: Option<String>,
    pub warmup_ms: Option<i64>,
    pub cold_factor: Option<i64>,
    /// `{"class": reserve, …}` (`{}`: none).
    pub reserves: Option<BTreeMap<String, u64>>,
    /// Each key shared max-min fairly among its flows (`false`: not).
    pub fair_flows: Option<bool>,
}

impl QuotaBody {
    /// The parts, with the durations parsed.
    pub fn parts(&self) -> Result<QuotaParts, FieldError> {
        Ok(QuotaParts {
            limit: self.limit,
            period: either("period", &self.period, "period_ms", self.period_ms)?,
            burst: self.burst,
            algorithm: self.algorithm,
            ban: either("ban", &self.ban, "ban_ms", self.ban_ms)?,
            warmup: either("warmup", &self.warmup, "warmup_ms", self.warmup_ms)?,
            cold_factor: self.cold_factor,
            reserves: self.reserves.as_ref().map(|m| {
                m.iter()
                    .fold(Reserves::new(), |r, (class, units)| r.with(class, *units))
            }),
            fair_flows: self.fair_flows,
        })
    }
}

/// A duration given as text under `field` or as milliseconds under `ms_field` (not both).
fn either(
    field: &'static str,
    text: &Option<String>,
    ms_field: &'static str,
    ms: Option<i64>,
) -> Result<Option<Duration>, FieldError> {
    match (text, ms) {
        (Some(_), Some(_)) => fail(ms_field, format!("give {field} or {ms_field}, not both")),
        (Some(t), None) => duration_text(field, t).map(Some),
        (None, Some(ms)) => match u64::try_from(ms) {
            Ok(ms) => Ok(Some(Duration::from_millis(ms))),
            Err(_) => fail(
                ms_field,
                format!("{ms_field} must not be negative, got {ms}"),
            ),
        },
        (None, None) => Ok(None),
    }
}

/// `text` as a duration (`"1s"`, `"1m 30s"`, `"500ms"`), the error naming `field`.
pub fn duration_text(field: &'static str, text: &str) -> Result<Duration, FieldError> {
    parse_duration(text).map_err(|e| FieldError {
        field,
        message: format!("{field} {text:?}: {e}"),
    })
}

/// `gcra`, `sliding_window` or `fixed_window` (also with `-`), for the command line.
pub fn parse_algorithm(text: &str) -> Result<Algorithm, String> {
    serde_json::from_value(Value::String(text.replace('-', "_"))).map_err(|_| {
        format!("unknown algorithm {text:?} (expected gcra, sliding_window or fixed_window)")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::quota_print::{quota_json, quota_text};
    use serde_json::json;

    fn field(parts: QuotaParts) -> &'static str {
        parts.to_quota().unwrap_err().field
    }

    fn base() -> QuotaParts {
        QuotaParts {
            limit: Some(10),
            period: Some(Duration::from_secs(60)),
            ..QuotaParts::default()
        }
    }

    #[test]
    fn over_a_stored_quota_keeps_what_is_not_given() {
        let day = Duration::from_secs(86_400);
        let stored = Quota::new(5, Duration::from_secs(1)).ban(day);
        let only_limit = QuotaParts {
            limit: Some(10),
            ..QuotaParts::default()
        };
        // A default burst follows the limit; the period and the ban are kept.
        let q = only_limit.over(&stored).to_quota().unwrap();
        assert_eq!(q, Quota::new(10, Duration::from_secs(1)).ban(day));
        // A burst set on purpose is kept.
        let q = only_limit.over(&stored.burst(2)).to_quota().unwrap();
        assert_eq!(q.burst, 2);
        // A window's burst is its limit; moving to GCRA starts from the default.
        let window = Quota::per_minute(5).algorithm(Algorithm::FixedWindow);
        let to_gcra = QuotaParts {
            algorithm: Some(Algorithm::Gcra),
            ..QuotaParts::default()
        };
        assert_eq!(
            to_gcra.over(&window).to_quota().unwrap(),
            Quota::per_minute(5)
        );
        let to_window = QuotaParts {
            algorithm: Some(Algorithm::SlidingWindow),
            ..QuotaParts::default()
        };
        let q = to_window.over(&stored.burst(2)).to_quota().unwrap();
        assert_eq!((q.algorithm, q.burst), (Algorithm::SlidingWindow, 5));
    }

    #[test]
    fn builds_and_names_the_field_at_fault() {
        let q = base().to_quota().unwrap();
        assert_eq!((q.limit, q.burst, q.algorithm), (10, 10, Algorithm::Gcra));
        let q = QuotaParts {
            burst: Some(3),
            ban: Some(Duration::from_secs(5)),
            ..base()
        }
        .to_quota()
        .unwrap();
        assert_eq!((q.burst, q.ban), (3, Duration::from_secs(5)));
        assert_eq!(
            field(QuotaParts {
                limit: None,
                ..base()
            }),
            "limit"
        );
        assert_eq!(
            field(QuotaParts {
                limit: Some(0),
                ..base()
            }),
            "limit"
        );
        assert_eq!(
            field(QuotaParts {
                limit: Some(-1),
                ..base()
            }),
            "limit"
        );
        assert_eq!(
            field(QuotaParts {
                period: None,
                ..base()
            }),
            "period"
        );
        assert_eq!(
            field(QuotaParts {
                period: Some(Duration::ZERO),
                ..base()
            }),
            "period"
        );
        assert_eq!(
            field(QuotaParts {
                burst: Some(2),
                algorithm: Some(Algorithm::FixedWindow),
                ..base()
            }),
            "burst"
        );
        assert_eq!(
            field(QuotaParts {
                burst: Some(0),
                ..base()
            }),
            "burst"
        );
        assert_eq!(
            field(QuotaParts {
                ban: Some(MAX_PERIOD * 2),
                ..base()
            }),
            "ban"
        );
        assert_eq!(
            field(QuotaParts {
                burst: Some(1_000_000_000),
                period: Some(Duration::from_secs(3600)),
                limit: Some(1),
                ..base()
            }),
            "burst"
        );
    }

    /// A warm-up of 10 minutes with a cold factor of 4 over `base()`.
    fn warm() -> Quota {
        QuotaParts {
            warmup: Some(Duration::from_secs(600)),
            cold_factor: Some(4),
            ..base()
        }
        .to_quota()
        .unwrap()
    }

    #[test]
    fn warm_up_fields() {
        let q = warm();
        assert_eq!((q.warmup, q.cold_factor), (Duration::from_secs(600), 4));
        assert_eq!(quota_text(&q), "10 per 1m (gcra, burst 10, warm-up 10m ×4)");
        let j = quota_json("api", &q);
        assert_eq!(
            (&j["warmup"], &j["warmup_ms"], &j["cold_factor"]),
            (&json!("10m"), &json!(600_000), &json!(4))
        );
        assert!(quota_json("api", &base().to_quota().unwrap())
            .get("warmup")
            .is_none());
    }

    #[test]
    fn warm_up_refusals() {
        let err = |p: QuotaParts| p.to_quota().unwrap_err();
        let e = err(QuotaParts {
            warmup: Some(Duration::from_secs(1)),
            ..base()
        });
        assert_eq!(e.field, "warmup");
        assert!(
            e.message
                .contains("at least cold_factor × period / limit (18s"),
            "{}",
            e.message
        );
        for (parts, field, text) in [
            (
                QuotaParts {
                    warmup: Some(MAX_PERIOD * 2),
                    ..base()
                },
                "warmup",
                "at most 400d",
            ),
            (
                QuotaParts {
                    warmup: Some(Duration::from_secs(60)),
                    algorithm: Some(Algorithm::SlidingWindow),
                    ..base()
                },
                "warmup",
                "gcra only",
            ),
            (
                QuotaParts {
                    warmup: Some(Duration::from_secs(600)),
                    cold_factor: Some(1),
                    ..base()
                },
                "cold_factor",
                "from 2 to 10, got 1",
            ),
            (
                QuotaParts {
                    cold_factor: Some(4),
                    ..base()
                },
                "cold_factor",
                "with a warmup only",
            ),
        ] {
            let e = err(parts);
            assert_eq!(e.field, field, "{}", e.message);
            assert!(e.message.contains(text), "{}", e.message);
        }
    }

    /// Over a stored warm-up: kept with its factor; zero drops both; a window drops it.
    #[test]
    fn warm_up_over_a_stored_one() {
        let stored = warm();
        let only_limit = QuotaParts {
            limit: Some(20),
            ..QuotaParts::default()
        };
        let q = only_limit.over(&stored).to_quota().unwrap();
        assert_eq!((q.warmup, q.cold_factor), (stored.warmup, 4));
        let off = QuotaParts {
            warmup: Some(Duration::ZERO),
            ..QuotaParts::default()
        };
        assert_eq!(off.over(&stored).to_quota().unwrap(), Quota::per_minute(10));
        let to_window = QuotaParts {
            algorithm: Some(Algorithm::FixedWindow),
            ..QuotaParts::default()
        };
        let q = to_window.over(&stored).to_quota().unwrap();
        assert_eq!((q.warmup, q.cold_factor), (Duration::ZERO, 3));
    }

    /// Fair flows: set, kept over a stored quota unless given, refused with a warm-up.
    #[test]
    fn fair_flows_are_kept_unless_given() {
        let body: QuotaBody =
            serde_json::from_str(r#"{"limit":5,"period":"1m","fair_flows":true}"#).unwrap();
        let fair = body.parts().unwrap().to_quota().unwrap();
        assert!(fair.fair_flows);
        let only_limit = QuotaParts {
            limit: Some(20),
            ..QuotaParts::default()
        };
        assert!(only_limit.over(&fair).to_quota().unwrap().fair_flows);
        let off = QuotaParts {
            fair_flows: Some(false),
            ..QuotaParts::default()
        };
        assert_eq!(off.over(&fair).to_quota().unwrap(), Quota::per_minute(5));
        let e = QuotaParts {
            warmup: Some(Duration::from_secs(600)),
            fair_flows: Some(true),
            ..base()
        }
        .to_quota()
        .unwrap_err();
        assert_eq!(e.field, "fair_flows");
        assert!(e.message.contains("without a warm-up"), "{}", e.message);
    }

    #[test]
    fn warm_up_in_a_body() {
        let body: QuotaBody =
            serde_json::from_str(r#"{"limit":5,"period":"1m","warmup_ms":60000,"cold_factor":2}"#)
                .unwrap();
        let p = body.parts().unwrap();
        assert_eq!(
            (p.warmup, p.cold_factor),
            (Some(Duration::from_secs(60)), Some(2))
        );
        let both: QuotaBody =
            serde_json::from_str(r#"{"limit":5,"period":"1m","warmup":"1m","warmup_ms":60000}"#)
                .unwrap();
        assert_eq!(both.parts().unwrap_err().field, "warmup_ms");
    }

    #[test]
    fn body_durations() {
        let b: QuotaBody =
            serde_json::from_str(r#"{"limit":5,"period":"1m","ban_ms":250}"#).unwrap();
        let p = b.parts().unwrap();
        assert_eq!(p.period, Some(Duration::from_secs(60)));
        assert_eq!(p.ban, Some(Duration::from_millis(250)));
        let both: QuotaBody =
            serde_json::from_str(r#"{"limit":5,"period":"1m","period_ms":1}"#).unwrap();
        assert_eq!(both.parts().unwrap_err().field, "period_ms");
        let bad: QuotaBody = serde_json::from_str(r#"{"limit":5,"period":"soon"}"#).unwrap();
        assert_eq!(bad.parts().unwrap_err().field, "period");
        assert_eq!(
            parse_algorithm("sliding-window"),
            Ok(Algorithm::SlidingWindow)
        );
        assert!(parse_algorithm("leaky").is_err());
    }
}
