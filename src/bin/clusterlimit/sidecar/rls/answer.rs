//! Decisions → `RateLimitResponse`, field by field as envoyproxy/ratelimit answers: per
//! descriptor `code`, `current_limit`, `limit_remaining`, `duration_until_reset`; the overall
//! code; optionally the RateLimit header fields of the tightest descriptor.

use super::rules::{Rule, Unit};
use crate::sidecar::header_mode::HeaderMode;
use clusterlimit::rate::headers::{rate_limit_headers, HeaderNames};
use clusterlimit::{Algorithm, Balance, Decision};
use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    rate_limit::Unit as PbUnit, Code, DescriptorStatus, RateLimit as PbRateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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
    /// A charge (or refund) on a `charge` rule: OK, with the key's balance afterwards.
    Charged { rule: &'r Rule, balance: Balance },
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
        Outcome::Charged { rule, balance } => DescriptorStatus {
            code: Code::Ok as i32,
            current_limit: Some(current_limit(rule)),
            limit_remaining: u32::try_from(balance.remaining).unwrap_or(u32::MAX),
            duration_until_reset: Some(pb_duration(
                balance.retry_after.unwrap_or(balance.reset_after),
            )),
            quota: None,
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

/// The whole answer, as envoyproxy's `shouldRateLimitWorker`: OVER_LIMIT if a descriptor
/// not in quota mode is over, or if the request has quota-mode descriptors and every one of
/// them is over (a quota-mode descriptor keeps its own OVER_LIMIT status either way). OK
/// anyway under global shadow mode, the statuses still saying which were over.
pub fn response(
    outcomes: &[Outcome<'_>],
    global_shadow: bool,
    headers: HeaderMode,
) -> RateLimitResponse {
    let statuses: Vec<DescriptorStatus> = outcomes.iter().map(status).collect();
    let (mut over, mut quota, mut quota_over) = (false, 0usize, 0usize);
    for (o, s) in outcomes.iter().zip(&statuses) {
        let is_over = s.code == Code::OverLimit as i32;
        if quota_mode(o) {
            quota += 1;
            quota_over += usize::from(is_over);
        } else {
            over |= is_over;
        }
    }
    let over = over || (quota > 0 && quota == quota_over);
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

/// A descriptor on a `quota_mode` rule (`unlimited` ones are not counted there, as envoyproxy).
fn quota_mode(outcome: &Outcome<'_>) -> bool {
    matches!(outcome, Outcome::Decided { rule, .. } if rule.quota_mode)
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

/// envoyproxy's header names (its `LIMIT_LIMIT_HEADER`, `LIMIT_REMAINING_HEADER` and
/// `LIMIT_RESET_HEADER` defaults), spelled as it sends them.
pub const LEGACY_NAMES: [&str; 3] = ["RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"];

/// The response header fields of `mode`: `legacy` as envoyproxy (`LIMIT_RESPONSE_HEADERS_ENABLED`),
/// `ietf` the RateLimit fields of the tightest descriptor (ours).
fn header_fields(
    outcomes: &[Outcome<'_>],
    statuses: &[DescriptorStatus],
    mode: HeaderMode,
) -> Vec<HeaderValue> {
    match mode {
        HeaderMode::Off => Vec::new(),
        HeaderMode::Legacy => legacy_fields(outcomes, statuses),
        HeaderMode::Ietf => ietf_fields(outcomes, statuses),
        // Refused by `rls_response_headers`; both sets, as the HTTP API's `both`.
        HeaderMode::Both => {
            let mut fields = ietf_fields(outcomes, statuses);
            fields.extend(legacy_fields(outcomes, statuses));
            fields
        }
    }
}

/// envoyproxy's three fields of its `minimumDescriptor`: among the statuses with a
/// `current_limit`, the first with the least `limit_remaining`, unless a descriptor not in
/// quota mode is OVER_LIMIT (then the last such). `RateLimit-Limit` is its
/// `requests_per_unit`, `RateLimit-Remaining` its `limit_remaining`, `RateLimit-Reset` its
/// `duration_until_reset` in whole seconds, rounded up (envoyproxy: the seconds left in the
/// unit's window). A store-down policy's made-up answer is never chosen.
fn legacy_fields(outcomes: &[Outcome<'_>], statuses: &[DescriptorStatus]) -> Vec<HeaderValue> {
    let mut min_remaining = u32::MAX;
    let mut minimum: Option<&DescriptorStatus> = None;
    for (o, s) in outcomes.iter().zip(statuses) {
        if matches!(o, Outcome::Decided { store: false, .. }) {
            continue;
        }
        if s.current_limit.is_some() && s.limit_remaining < min_remaining {
            minimum = Some(s);
            min_remaining = s.limit_remaining;
        }
        if s.code == Code::OverLimit as i32 && !quota_mode(o) {
            minimum = Some(s);
            min_remaining = 0;
        }
    }
    let Some(s) = minimum else {
        return Vec::new();
    };
    let Some(limit) = &s.current_limit else {
        return Vec::new();
    };
    let reset = s.duration_until_reset.map_or(0, |d| {
        let secs = u64::try_from(d.seconds).unwrap_or(0);
        if d.nanos > 0 {
            secs + 1
        } else {
            secs
        }
    });
    let [limit_name, remaining_name, reset_name] = LEGACY_NAMES;
    header_values([
        (limit_name, limit.requests_per_unit.to_string()),
        (remaining_name, s.limit_remaining.to_string()),
        (reset_name, reset.to_string()),
    ])
}

/// The RateLimit fields of the tightest descriptor: an over-limit one, else the one with
/// the least remaining.
fn ietf_fields(outcomes: &[Outcome<'_>], statuses: &[DescriptorStatus]) -> Vec<HeaderValue> {
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
    let fields = rate_limit_headers(policy, &quota, &decision, HeaderNames::Ietf);
    header_values(fields)
}

/// (name, value) pairs as the response's header values.
fn header_values(fields: impl IntoIterator<Item = (&'static str, String)>) -> Vec<HeaderValue> {
    fields
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
            quota_mode: false,
            detailed_metric: false,
            charge: false,
            replaces: Vec::new(),
            quota: Some(Quota::per_minute(2).algorithm(Algorithm::FixedWindow)),
            limit_name: "rls.d.k".into(),
            origin: "t.yaml:1".into(),
        }
    }

    /// An admitted check, then a denied one (cost 2 with 1 of 2 left), of a fixed window of 2
    /// a minute on the memory store `store` (each test its own: tests run at once).
    async fn admitted_and_denied(store: &str) -> (Decision, Decision) {
        let limiter = Limiter::connect(&format!("memory://{store}"))
            .await
            .unwrap();
        let rl = limiter
            .rate_limit("k", Quota::per_minute(2).algorithm(Algorithm::FixedWindow))
            .await
            .unwrap();
        let first = rl.check_n("x", 1).await.unwrap();
        let denied = rl.check_n("x", 5 - 3).await.unwrap();
        assert!(!denied.allowed);
        (first, denied)
    }

    #[tokio::test]
    async fn statuses_overall_codes_and_header_fields() {
        let (first, denied) = admitted_and_denied("rls-answer-test").await;
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
        // envoyproxy's three fields, of the descriptor with the least remaining.
        let h: Vec<(&str, &str)> = r
            .response_headers_to_add
            .iter()
            .map(|h| (h.key.as_str(), h.value.as_str()))
            .collect();
        assert_eq!(h.len(), 3, "{h:?}");
        assert_eq!(h[0], ("RateLimit-Limit", "2"));
        assert_eq!(h[1], ("RateLimit-Remaining", "0"));
        assert_eq!(h[2].0, "RateLimit-Reset");
        let reset: u64 = h[2].1.parse().unwrap();
        assert!((1..=60).contains(&reset), "{h:?}");
    }

    /// Enforced and over: OVER_LIMIT, unless global shadow mode answers OK overall.
    #[tokio::test]
    async fn enforced_over_limit_unless_global_shadow_mode() {
        let (_, denied) = admitted_and_denied("rls-answer-test-over").await;
        let plain = rule(false);
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
    }

    /// No decision (requests_per_unit 0): over, the window's reset, no header fields.
    #[test]
    fn no_decision_is_over_with_no_header_fields() {
        let plain = rule(false);
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
    }

    /// A store-down policy's decision (fail_open, fail_closed, local): made up, so no header
    /// fields claim what remains.
    #[tokio::test]
    async fn store_down_decisions_have_no_header_fields() {
        let (first, _) = admitted_and_denied("rls-answer-test-fallback").await;
        let plain = rule(false);
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

    fn quota_rule(requests_per_unit: u32) -> Rule {
        Rule {
            quota_mode: true,
            requests_per_unit,
            name: format!("q{requests_per_unit}"),
            ..rule(false)
        }
    }

    fn within_quota(rule: &Rule) -> Outcome<'_> {
        Outcome::Decided {
            rule,
            decision: None,
            over: false,
            store: true,
        }
    }

    /// envoyproxy's `shouldRateLimitWorker`: quota-mode descriptors keep their OVER_LIMIT
    /// status, but make the whole answer OVER_LIMIT only when every one of them is over; any
    /// other over descriptor does.
    #[test]
    fn quota_mode_overall_code_and_legacy_header_choice() {
        let (q1, q2, plain) = (quota_rule(1), quota_rule(2), rule(false));
        let over = |rule| Outcome::Decided {
            rule,
            decision: None,
            over: true,
            store: true,
        };
        let code = |outcomes: &[Outcome<'_>]| {
            let r = response(outcomes, false, HeaderMode::Off);
            let statuses: Vec<i32> = r.statuses.iter().map(|s| s.code).collect();
            (r.overall_code, statuses)
        };
        let (ok, over_limit) = (Code::Ok as i32, Code::OverLimit as i32);
        // One quota descriptor over, another within: OK overall, its status OVER_LIMIT.
        let within = within_quota(&q2);
        assert_eq!(
            code(&[over(&q1), Outcome::Unlimited, within, Outcome::NoLimit]),
            (ok, vec![over_limit, ok, ok, ok])
        );
        // Every quota descriptor over (unlimited and unmatched ones are not quota ones).
        assert_eq!(code(&[over(&q1), over(&q2)]).0, over_limit);
        assert_eq!(
            code(&[over(&q1), Outcome::Unlimited, Outcome::NoLimit]).0,
            over_limit
        );
        // A descriptor not in quota mode over: OVER_LIMIT.
        assert_eq!(code(&[over(&plain), within_quota(&q2)]).0, over_limit);
        // Global shadow mode: OK anyway.
        assert_eq!(
            response(&[over(&q1)], true, HeaderMode::Off).overall_code,
            ok
        );

        // Legacy fields: an over descriptor in quota mode does not take the choice from a
        // plain over one; the plain one over wins whatever its position.
        let r = response(&[over(&plain), over(&q1)], false, HeaderMode::Legacy);
        let limit = &r.response_headers_to_add[0];
        assert_eq!(
            (limit.key.as_str(), limit.value.as_str()),
            ("RateLimit-Limit", "2")
        );
        let r = response(&[over(&q1), over(&plain)], false, HeaderMode::Legacy);
        assert_eq!(r.response_headers_to_add[0].value, "2");
        // Quota descriptors only: the first with the least remaining.
        let r = response(&[over(&q1), over(&q2)], false, HeaderMode::Legacy);
        assert_eq!(r.response_headers_to_add[0].value, "1");
        // No descriptor with a limit: no fields.
        let r = response(
            &[Outcome::NoLimit, Outcome::Unlimited],
            false,
            HeaderMode::Legacy,
        );
        assert!(r.response_headers_to_add.is_empty());
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
    }
}
