//! Rate-limit quotas and decisions as both front ends print them: a quota for people
//! (`5 per 1s (gcra, burst 5)`), and the JSON of a quota and of a decision that the sidecar
//! answers and `clusterlimit rate … --json` prints, and a key's balance (with its debt).

use super::duration::format_duration;
use clusterlimit::{Algorithm, Balance, Decision, Quota};
use serde_json::{json, Value};
use std::time::Duration;

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A quota for people: `5 per 1s (gcra, burst 5)`, `5 per 400d (fixed_window, ban 10m)`,
/// `100 per 1s (gcra, burst 100, warm-up 30s ×3)`, its durations as `format_duration` prints
/// them (the library's `Display` prints seconds).
pub fn quota_text(quota: &Quota) -> String {
    let mut s = format!(
        "{} per {} ({}",
        quota.limit,
        format_duration(quota.period),
        quota.algorithm
    );
    if quota.algorithm == Algorithm::Gcra {
        s.push_str(&format!(", burst {}", quota.burst));
    }
    if !quota.ban.is_zero() {
        s.push_str(&format!(", ban {}", format_duration(quota.ban)));
    }
    if !quota.warmup.is_zero() {
        s.push_str(&format!(
            ", warm-up {} ×{}",
            format_duration(quota.warmup),
            quota.cold_factor
        ));
    }
    if !quota.reserves.is_empty() {
        s.push_str(&format!(", reserve {}", quota.reserves));
    }
    if quota.fair_flows {
        s.push_str(", fair flows");
    }
    s.push(')');
    s
}

/// The JSON of a rate limit's quota, as the sidecar answers and `rate status --json` prints;
/// `warmup`, `warmup_ms` and `cold_factor` only for a quota with a warm-up, `reserves` only for
/// one with priority classes, `fair_flows` only for one that shares by flow.
pub fn quota_json(name: &str, quota: &Quota) -> Value {
    let mut v = json!({
        "name": name,
        "limit": quota.limit,
        "period": format_duration(quota.period),
        "period_ms": millis(quota.period),
        "burst": quota.burst,
        "algorithm": quota.algorithm.to_string(),
        "ban_ms": millis(quota.ban),
    });
    if !quota.warmup.is_zero() {
        v["warmup"] = json!(format_duration(quota.warmup));
        v["warmup_ms"] = json!(millis(quota.warmup));
        v["cold_factor"] = json!(quota.cold_factor);
    }
    if !quota.reserves.is_empty() {
        v["reserves"] = json!(quota.reserves);
    }
    if quota.fair_flows {
        v["fair_flows"] = json!(true);
    }
    v
}

/// The JSON of one decision on `key` of rate limit `name`, with where it came from.
pub fn decision_json(name: &str, key: &str, cost: u64, d: &Decision, source: &str) -> Value {
    json!({
        "name": name,
        "key": key,
        "cost": cost,
        "allowed": d.allowed,
        "limit": d.limit,
        "remaining": d.remaining,
        "retry_after_ms": d.retry_after.map(millis_up),
        "reset_after_ms": millis_up(d.reset_after),
        "source": source,
    })
}

/// A key's balance after a charge, refund or settlement (or as it stands) as JSON: what a
/// check could take now, and what the key owes.
pub fn balance_json(name: &str, key: &str, b: &Balance) -> Value {
    json!({
        "name": name,
        "key": key,
        "limit": b.limit,
        "remaining": b.remaining,
        "debt": b.debt,
        "retry_after_ms": b.retry_after.map(millis_up),
        "reset_after_ms": millis_up(b.reset_after),
    })
}

/// Milliseconds rounded up: a client that waits this long is never early.
fn millis_up(d: Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quota_text_prints_durations_as_typed() {
        let q = Quota::new(5, Duration::from_secs(400 * 86_400))
            .algorithm(Algorithm::FixedWindow)
            .ban(Duration::from_secs(90));
        assert_eq!(quota_text(&q), "5 per 400d (fixed_window, ban 1m30s)");
        assert_eq!(
            quota_text(&Quota::per_second(5)),
            "5 per 1s (gcra, burst 5)"
        );
        let classes = Quota::per_second(5).reserve("batch", 2);
        assert_eq!(
            quota_text(&classes),
            "5 per 1s (gcra, burst 5, reserve batch 2)"
        );
        assert_eq!(quota_json("q", &classes)["reserves"], json!({"batch": 2}));
        assert!(quota_json("q", &classes).get("fair_flows").is_none());
        let fair = Quota::per_second(5).fair_flows();
        assert_eq!(quota_text(&fair), "5 per 1s (gcra, burst 5, fair flows)");
        assert_eq!(quota_json("q", &fair)["fair_flows"], json!(true));
    }
}
