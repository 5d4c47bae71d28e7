//! Decisions → `RateLimitResponse`, field by field as envoyproxy/ratelimit answers: per
//! descriptor `code`, `current_limit`, `limit_remaining`, `duration_until_reset`; the overall
//! code; optionally the RateLimit header fields of the tightest descriptor.

use super::config::{Rule, Unit};
use clusterlimit::rate::headers::{rate_limit_headers, HeaderNames};
use clusterlimit::{Algorithm, Decision};
use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    rate_limit::Unit as PbUnit, Code, DescriptorStatus, RateLimit as PbRateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Which RateLimit fields go in `response_headers_to_add` (`rls_response_headers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HeaderMode {
    /// None (Envoy's `enable_x_ratelimit_headers` can make its own from the statuses).
    #[default]
    Off,
    Ietf,
    Legacy,
}

impl std::str::FromStr for HeaderMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" => Ok(HeaderMode::Off),
            "ietf" => Ok(HeaderMode::Ietf),
            "legacy" => Ok(HeaderMode::Legacy),
            _ => Err(format!("must be off, ietf or legacy, got {s:?}")),
        }
    }
}

impl std::fmt::Display for HeaderMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            HeaderMode::Off => "off",
            HeaderMode::Ietf => "ietf",
            HeaderMode::Legacy => "legacy",
        })
    }
}

/// How one descriptor came out.
#[derive(Debug, Clone)]
pub enum Outcome<'r> {
    /// No rule (or its rule was replaced): OK, no current limit.
    NoLimit,
    /// An `unlimited` rule: OK, remaining u32::MAX (as envoyproxy).
    Unlimited,
    /// A decision on `rule` (`over`: this descriptor is over its limit; no decision when the
    /// rule counts nothing: `requests_per_unit: 0`). `store`: the store made the decision; a
    /// store-down policy's is made up, so it gives no RateLimit header fields.
    Decided {
        rule: &'r Rule,
        decision: Option<Decision>,
        over: bool,
        store: bool,
    },
}

/// The status of one descriptor.
pub fn status(outcome: &Outcome<'_>) -> DescriptorStatus {
    match outcome {
        Outcome::NoLimit => DescriptorStatus {
            code: Code::Ok as i32,
            ..Default::default()
        },
        Outcome::Unlimited => DescriptorStatus {
            code: Code::Ok as i32,
            limit_remaining: u32::MAX,
            ..Default::default()
        },
        Outcome::Decided {
            rule,
            decision,
            over,
            ..
        } => {
            // A shadow rule answers OK, with what it would have said otherwise.
            let code = if *over && !rule.shadow {
                Code::OverLimit
            } else {
                Code::Ok
            };
            let remaining = match decision {
                Some(d) if !*over => d.remaining,
                _ => 0,
            };
            DescriptorStatus {
                code: code as i32,
                current_limit: Some(current_limit(rule)),
                limit_remaining: u32::try_from(remaining).unwrap_or(u32::MAX),
                duration_until_reset: Some(pb_duration(until_reset(
                    rule,
                    decision.as_ref(),
                    *over,
                ))),
                quota: None,
            }
        }
    }
}

/// The whole answer: OVER_LIMIT if any descriptor is (OK anyway under global shadow mode,
/// the statuses still saying which were over, as envoyproxy).
pub fn response(
    outcomes: &[Outcome<'_>],
    global_shadow: bool,
    headers: HeaderMode,
) -> RateLimitResponse {
    let statuses: Vec<DescriptorStatus> = outcomes.iter().map(status).collect();
    let over = statuses.iter().any(|s| s.code == Code::OverLimit as i32);
    let overall = if over && !global_shadow {
        Code::OverLimit
    } else {
        Code::Ok
    };
    RateLimitResponse {
        overall_code: overall as i32,
        response_headers_to_add: header_fields(outcomes, &statuses, headers),
        statuses,
        ..Default::default()
    }
}

fn current_limit(rule: &Rule) -> PbRateLimit {
    PbRateLimit {
        name: rule.name.clone(),
        requests_per_unit: rule.requests_per_unit,
        unit: pb_unit(rule.unit) as i32,
    }
}

/// envoyproxy's unit enum.
pub fn pb_unit(unit: Unit) -> PbUnit {
    match unit {
        Unit::Second => PbUnit::Second,
        Unit::Minute => PbUnit::Minute,
        Unit::Hour => PbUnit::Hour,
        Unit::Day => PbUnit::Day,
        Unit::Week => PbUnit::Week,
        Unit::Month => PbUnit::Month,
        Unit::Year => PbUnit::Year,
    }
}

/// Our unit for envoyproxy's (a request's `limit` override); `None` for UNKNOWN.
pub fn from_pb_unit(unit: i32) -> Option<Unit> {
    Some(match PbUnit::try_from(unit).ok()? {
        PbUnit::Second => Unit::Second,
        PbUnit::Minute => Unit::Minute,
        PbUnit::Hour => Unit::Hour,
        PbUnit::Day => Unit::Day,
        PbUnit::Week => Unit::Week,
        PbUnit::Month => Unit::Month,
        PbUnit::Year => Unit::Year,
        PbUnit::Unknown => return None,
    })
}

/// Fixed windows (and rules that count nothing): the time to the end of the current
/// epoch-aligned window, as envoyproxy's `CalculateReset` (to the nanosecond rather than the
/// second). GCRA and sliding windows: when a denied request could pass, or when the key is
/// back to full.
fn until_reset(rule: &Rule, decision: Option<&Decision>, over: bool) -> Duration {
    let windowed = rule
        .quota
        .is_none_or(|q| q.algorithm == Algorithm::FixedWindow);
    match decision {
        Some(d) if !windowed => match d.retry_after {
            Some(wait) if over => wait,
            _ => d.reset_after,
        },
        _ => window_left(rule.unit.period()),
    }
}

/// Time left in the current `[k × period, (k+1) × period)` window of the Unix epoch.
pub fn window_left(period: Duration) -> Duration {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let p = period.as_nanos().max(1);
    let left = p - now % p;
    Duration::from_nanos(u64::try_from(left).unwrap_or(u64::MAX))
}

fn pb_duration(d: Duration) -> PbDuration {
    PbDuration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

/// The RateLimit fields of the tightest descriptor: an over-limit one, else the one with
/// the least remaining (as envoyproxy picks its `minimumDescriptor`).
fn header_fields(
    outcomes: &[Outcome<'_>],
    statuses: &[DescriptorStatus],
    mode: HeaderMode,
) -> Vec<HeaderValue> {
    let names = match mode {
        HeaderMode::Off => return Vec::new(),
        HeaderMode::Ietf => HeaderNames::Ietf,
        HeaderMode::Legacy => HeaderNames::Legacy,
    };
    let tightest = outcomes
        .iter()
        .zip(statuses)
        .filter_map(|(o, s)| match o {
            Outcome::Decided {
                rule,
                decision: Some(d),
                store: true,
                ..
            } => rule.quota.map(|q| {
                (
                    s.code == Code::OverLimit as i32,
                    s.limit_remaining,
                    rule,
                    q,
                    d,
                )
            }),
            _ => None,
        })
        .min_by_key(|(over, remaining, ..)| (!*over, *remaining));
    let Some((_, remaining, rule, quota, decision)) = tightest else {
        return Vec::new();
    };
    // The fields say what the status says (0 left once over).
    let mut decision = *decision;
    decision.remaining = u64::from(remaining);
    let policy = if rule.name.is_empty() {
        &rule.path
    } else {
        &rule.name
    };
    rate_limit_headers(policy, &quota, &decision, names)
        .into_iter()
        .map(|(key, value)| HeaderValue {
            key: key.to_string(),
            value,
            raw_value: Vec::new(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clusterlimit::{Limiter, Quota};

    fn rule(shadow: bool) -> Rule {
        Rule {
            domain: "d".into(),
            path: "k".into(),
            name: String::new(),
            unit: Unit::Minute,
            requests_per_unit: 2,
            unlimited: false,
            shadow,
            detailed_metric: false,
            replaces: Vec::new(),
            quota: Some(Quota::per_minute(2).algorithm(Algorithm::FixedWindow)),
            limit_name: "rls.d.k".into(),
            origin: "t.yaml:1".into(),
        }
    }

    #[tokio::test]
    async fn statuses_overall_codes_and_header_fields() {
        let limiter = Limiter::connect("memory://rls-answer-test").await.unwrap();
        let rl = limiter
            .rate_limit("k", Quota::per_minute(2).algorithm(Algorithm::FixedWindow))
            .await
            .unwrap();
        let first = rl.check_n("x", 1).await.unwrap();
        let denied = rl.check_n("x", 5 - 3).await.unwrap();
        assert!(!denied.allowed);
        let (plain, shadow) = (rule(false), rule(true));
        let outcomes = [
            Outcome::NoLimit,
            Outcome::Unlimited,
            Outcome::Decided {
                rule: &plain,
                decision: Some(first),
                over: false,
                store: true,
            },
            Outcome::Decided {
                rule: &shadow,
                decision: Some(denied),
                over: true,
                store: true,
            },
        ];
        let r = response(&outcomes, false, HeaderMode::Legacy);
        assert_eq!(r.overall_code, Code::Ok as i32, "shadow over is OK");
        let s = &r.statuses;
        assert_eq!(
            (
                s[0].code,
                s[0].limit_remaining,
                s[0].current_limit.is_none()
            ),
            (1, 0, true)
        );
        assert_eq!(
            (s[1].limit_remaining, s[1].current_limit.is_none()),
            (u32::MAX, true)
        );
        assert_eq!((s[2].code, s[2].limit_remaining), (Code::Ok as i32, 1));
        assert_eq!(
            s[2].current_limit.as_ref().unwrap().unit,
            PbUnit::Minute as i32
        );
        let reset = s[2].duration_until_reset.unwrap();
        assert!(reset.seconds <= 60 && (reset.seconds > 0 || reset.nanos > 0));
        assert_eq!((s[3].code, s[3].limit_remaining), (Code::Ok as i32, 0));
        // The tightest (least remaining) descriptor's fields.
        let h: Vec<(&str, &str)> = r
            .response_headers_to_add
            .iter()
            .map(|h| (h.key.as_str(), h.value.as_str()))
            .collect();
        assert_eq!(h[0], ("x-ratelimit-limit", "2"));
        assert_eq!(h[1], ("x-ratelimit-remaining", "0"));

        // Enforced and over: OVER_LIMIT, unless global shadow mode answers OK overall.
        let over = [Outcome::Decided {
            rule: &plain,
            decision: Some(denied),
            over: true,
            store: true,
        }];
        let r = response(&over, false, HeaderMode::Off);
        assert_eq!(r.overall_code, Code::OverLimit as i32);
        assert!(r.response_headers_to_add.is_empty());
        let r = response(&over, true, HeaderMode::Ietf);
        assert_eq!(r.overall_code, Code::Ok as i32);
        assert_eq!(r.statuses[0].code, Code::OverLimit as i32);
        assert_eq!(r.response_headers_to_add[0].key, "ratelimit-policy");
        // No decision (requests_per_unit 0): over, the window's reset, no header fields.
        let never = [Outcome::Decided {
            rule: &plain,
            decision: None,
            over: true,
            store: true,
        }];
        let r = response(&never, false, HeaderMode::Ietf);
        assert_eq!(r.overall_code, Code::OverLimit as i32);
        assert!(r.statuses[0].duration_until_reset.is_some());
        assert!(r.response_headers_to_add.is_empty());
        // A store-down policy's decision (fail_open, fail_closed, local): made up, so no
        // header fields claim what remains.
        let fallback = [Outcome::Decided {
            rule: &plain,
            decision: Some(first),
            over: false,
            store: false,
        }];
        let r = response(&fallback, false, HeaderMode::Ietf);
        assert_eq!(r.overall_code, Code::Ok as i32);
        assert!(r.response_headers_to_add.is_empty(), "{r:?}");
    }

    #[test]
    fn window_left_is_within_the_window() {
        for p in [1, 60, 3600, 30 * 86_400] {
            let period = Duration::from_secs(p);
            let left = window_left(period);
            assert!(left > Duration::ZERO && left <= period, "{p}: {left:?}");
        }
    }

    #[test]
    fn units_round_trip() {
        for u in [
            Unit::Second,
            Unit::Minute,
            Unit::Hour,
            Unit::Day,
            Unit::Week,
            Unit::Month,
            Unit::Year,
        ] {
            assert_eq!(from_pb_unit(pb_unit(u) as i32), Some(u));
        }
        assert_eq!(from_pb_unit(0), None);
        assert_eq!(from_pb_unit(99), None);
        assert_eq!("ietf".parse::<HeaderMode>(), Ok(HeaderMode::Ietf));
        assert!("x".parse::<HeaderMode>().is_err());
    }
}
