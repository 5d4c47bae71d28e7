//! The HTTP header fields that tell a client about a rate limit's decision: the IETF
//! `RateLimit-Policy` and `RateLimit` fields (draft-ietf-httpapi-ratelimit-headers), or the
//! older `X-RateLimit-*` trio many clients still read, and `Retry-After`. Pure formatting, shared
//! by the sidecar, the RLS answers and the tower layer so they never disagree.

use super::decision::Decision;
use super::quota::{Algorithm, Quota};
use std::time::Duration;

/// Which names the fields go by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum HeaderNames {
    /// `RateLimit-Policy: "api";q=20;w=1` and `RateLimit: "api";r=19;t=1` (the IETF draft's
    /// structured fields: quota `q` per window `w` seconds, remaining `r`, `t` seconds until
    /// the quota is back).
    #[default]
    Ietf,
    /// `X-RateLimit-Limit: 20`, `X-RateLimit-Remaining: 19`, `X-RateLimit-Reset: 1` (seconds).
    Legacy,
}

/// The header fields describing `decision` of the limit `policy` (its name) with `quota`, as
/// lower-case names (ready for `http::HeaderName::from_static`) and values.
///
/// `q` is the decision's `limit` (GCRA's burst, a window's limit); `w` the seconds in which that
/// much refills (GCRA: `burst × period / limit`; windows: the period), rounded up; `r` is
/// `remaining`; `t` the seconds, rounded up, until a request could pass (`retry_after`) when
/// denied, else until the key is back to full (`reset_after`).
///
/// ```
/// use clusterlimit::rate::headers::{rate_limit_headers, HeaderNames};
/// use clusterlimit::{Decision, Quota};
/// # fn f(d: Decision) {
/// let quota = Quota::per_second(100).burst(20);
/// for (name, value) in rate_limit_headers("api", &quota, &d, HeaderNames::Ietf) {
///     println!("{name}: {value}"); // ratelimit-policy: "api";q=20;w=1 / ratelimit: "api";r=19;t=1
/// }
/// # }
/// ```
pub fn rate_limit_headers(
    policy: &str,
    quota: &Quota,
    decision: &Decision,
    names: HeaderNames,
) -> Vec<(&'static str, String)> {
    let q = decision.limit;
    let w = window_secs(quota);
    let r = decision.remaining;
    let t = match decision.retry_after {
        Some(wait) if !decision.allowed => ceil_secs(wait),
        _ => ceil_secs(decision.reset_after),
    };
    match names {
        HeaderNames::Ietf => {
            let name = sf_string(policy);
            vec![
                ("ratelimit-policy", format!("{name};q={q};w={w}")),
                ("ratelimit", format!("{name};r={r};t={t}")),
            ]
        }
        HeaderNames::Legacy => vec![
            ("x-ratelimit-limit", q.to_string()),
            ("x-ratelimit-remaining", r.to_string()),
            ("x-ratelimit-reset", t.to_string()),
        ],
    }
}

/// The `Retry-After` of a denial in whole seconds, rounded up and at least 1 (a client that
/// retries after 0 s would only be denied again); `None` when the decision admitted.
///
/// ```
/// use clusterlimit::rate::headers::retry_after_secs;
/// # fn f(d: clusterlimit::Decision) {
/// if let Some(secs) = retry_after_secs(&d) {
///     println!("429 Too Many Requests, Retry-After: {secs}");
/// }
/// # }
/// ```
pub fn retry_after_secs(decision: &Decision) -> Option<u64> {
    if decision.allowed {
        return None;
    }
    Some(ceil_secs(decision.retry_after.unwrap_or_default()).max(1))
}

/// Seconds, rounded up, in which the quota's whole `limit` (GCRA: `burst`) comes back.
fn window_secs(quota: &Quota) -> u64 {
    let nanos = match quota.algorithm {
        Algorithm::Gcra => quota
            .emission_interval_ns()
            .saturating_mul(u128::from(quota.burst)),
        Algorithm::SlidingWindow | Algorithm::FixedWindow => quota.period.as_nanos(),
    };
    u64::try_from(nanos.div_ceil(1_000_000_000))
        .unwrap_or(u64::MAX)
        .max(1)
}

/// Saturating: a denial's `retry_after` is `Duration::MAX` when the cost can never pass.
fn ceil_secs(d: Duration) -> u64 {
    d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0))
}

/// `s` as a structured-field String (RFC 8941 §3.3.3): quoted, `"` and `\` escaped, and any
/// character outside printable ASCII (which a String cannot hold) replaced by `_`.
fn sf_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push('_'),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(
        allowed: bool,
        limit: u64,
        remaining: u64,
        retry: Option<Duration>,
        reset: Duration,
    ) -> Decision {
        Decision {
            allowed,
            limit,
            remaining,
            retry_after: retry,
            reset_after: reset,
            slots: Default::default(),
        }
    }

    #[test]
    fn ietf_fields_of_an_admission() {
        let quota = Quota::per_second(100).burst(20);
        let d = decision(true, 20, 19, None, Duration::from_millis(10));
        assert_eq!(
            rate_limit_headers("api", &quota, &d, HeaderNames::Ietf),
            vec![
                ("ratelimit-policy", "\"api\";q=20;w=1".to_string()),
                ("ratelimit", "\"api\";r=19;t=1".to_string()),
            ]
        );
    }

    /// `decide` answers `Duration::MAX` for a cost the quota can never pass: no overflow.
    #[test]
    fn a_never_retry_after_saturates() {
        let quota = Quota::per_minute(5);
        let d = decision(false, 5, 0, Some(Duration::MAX), Duration::MAX);
        assert_eq!(retry_after_secs(&d), Some(u64::MAX));
        let ietf = rate_limit_headers("login", &quota, &d, HeaderNames::Ietf);
        assert_eq!(ietf[1].1, format!("\"login\";r=0;t={}", u64::MAX));
    }

    #[test]
    fn a_denial_tells_when_to_retry_rounded_up() {
        let quota = Quota::per_minute(5).algorithm(Algorithm::FixedWindow);
        let d = decision(
            false,
            5,
            0,
            Some(Duration::from_millis(2_100)),
            Duration::from_secs(40),
        );
        assert_eq!(
            rate_limit_headers("login", &quota, &d, HeaderNames::Legacy),
            vec![
                ("x-ratelimit-limit", "5".to_string()),
                ("x-ratelimit-remaining", "0".to_string()),
                ("x-ratelimit-reset", "3".to_string()),
            ]
        );
        assert_eq!(retry_after_secs(&d), Some(3));
        let ietf = rate_limit_headers("login", &quota, &d, HeaderNames::Ietf);
        assert_eq!(ietf[0].1, "\"login\";q=5;w=60");
        assert_eq!(ietf[1].1, "\"login\";r=0;t=3");
    }

    #[test]
    fn retry_after_is_at_least_one_second_and_none_when_allowed() {
        let denied = decision(false, 1, 0, Some(Duration::from_nanos(3)), Duration::ZERO);
        assert_eq!(retry_after_secs(&denied), Some(1));
        let exact = decision(false, 1, 0, Some(Duration::from_secs(2)), Duration::ZERO);
        assert_eq!(retry_after_secs(&exact), Some(2));
        let allowed = decision(true, 1, 0, None, Duration::from_secs(1));
        assert_eq!(retry_after_secs(&allowed), None);
    }

    #[test]
    fn gcra_window_is_the_time_the_burst_takes_to_refill() {
        // 10 per minute, 30 at once: 30 × 6 s = 180 s to refill.
        let quota = Quota::per_minute(10).burst(30);
        let d = decision(true, 30, 29, None, Duration::from_secs(6));
        let h = rate_limit_headers("x", &quota, &d, HeaderNames::Ietf);
        assert_eq!(h[0].1, "\"x\";q=30;w=180");
        // Sub-second windows round up to 1.
        let fast = Quota::new(10, Duration::from_millis(100));
        assert_eq!(window_secs(&fast), 1);
    }

    #[test]
    fn policy_names_are_escaped_as_structured_strings() {
        assert_eq!(sf_string(r#"a"b\c"#), r#""a\"b\\c""#);
        assert_eq!(sf_string("ü\n"), "\"__\"");
    }
}
