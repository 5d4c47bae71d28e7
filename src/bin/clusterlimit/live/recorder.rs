//! What this process decided, per rate limit: admitted and denied hits per second for the
//! last 15 minutes, and the keys being limited now (bounded tables, see `top_keys.rs`). Fed
//! by every answered check (HTTP and RLS); read by the live view, the fleet summary and the
//! quota preview.

use super::picture::{KeyView, RecordedLimit, RlsDomainView, RlsRuleView, SeriesPoint};
use super::top_keys::{Hit, Second, TopKeys, RECENT_SECONDS};
use crate::common::lock;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

/// Seconds of per-limit history (the chart's 15 minutes).
pub const SERIES_SECONDS: usize = 900;
/// Keys tracked per limit by checks, and by denials.
const BUSIEST_KEYS: usize = 32;
const DENIED_KEYS: usize = 32;
/// Limits recorded at most (a limit past this is counted in no chart; the sidecar's limits
/// come from its configuration and the store, so this is a guard, not a working bound).
const MAX_LIMITS: usize = 1024;
/// Keys shown per list.
const SHOWN_KEYS: usize = 20;
/// A key at or under this share of its limit left counts as near the limit (as
/// envoyproxy/ratelimit's 80% `near_limit`).
const NEAR_LIMIT_LEFT: (u64, u64) = (1, 5);

/// One second of a limit.
#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    unix_sec: u64,
    admitted: u64,
    denied: u64,
}

/// One limit's counts.
#[derive(Debug)]
struct LimitCounts {
    series: Vec<Slot>,
    busiest: TopKeys,
    denied: TopKeys,
}

impl LimitCounts {
    fn new() -> LimitCounts {
        LimitCounts {
            series: vec![Slot::default(); SERIES_SECONDS],
            busiest: TopKeys::new(BUSIEST_KEYS, 60_000),
            denied: TopKeys::new(DENIED_KEYS, 10_000),
        }
    }
}

/// Envoy rules counted at most (their number follows the RLS configuration; a guard).
const MAX_RULES: usize = 4096;

/// The recorder of one process.
#[derive(Debug, Default)]
pub struct Recorder {
    limits: Mutex<HashMap<String, LimitCounts>>,
    /// Per (RLS domain, rule): hits and hits over the limit.
    rules: Mutex<BTreeMap<(String, String), (u64, u64)>>,
}

impl Recorder {
    /// Counts one answered check of `key` on `limit`.
    pub fn record(&self, limit: &str, key: &str, hit: Hit) {
        let mut limits = lock(&self.limits);
        if !limits.contains_key(limit) {
            if limits.len() >= MAX_LIMITS {
                return;
            }
            limits.insert(limit.to_string(), LimitCounts::new());
        }
        let Some(c) = limits.get_mut(limit) else {
            return;
        };
        let sec = hit.now_ms / 1000;
        let slot = &mut c.series[(sec % SERIES_SECONDS as u64) as usize];
        if slot.unix_sec != sec {
            *slot = Slot {
                unix_sec: sec,
                ..Slot::default()
            };
        }
        if hit.allowed {
            slot.admitted = slot.admitted.saturating_add(hit.cost);
        } else {
            slot.denied = slot.denied.saturating_add(hit.cost);
        }
        c.busiest.record(key, hit.cost, &hit);
        let denied_weight = if hit.allowed { 0 } else { hit.cost.max(1) };
        c.denied.record(key, denied_weight, &hit);
    }

    /// Counts `hits` answered by `rule` of RLS `domain`.
    pub fn record_rule(&self, domain: &str, rule: &str, hits: u64, over: bool) {
        let mut rules = lock(&self.rules);
        let k = (domain.to_string(), rule.to_string());
        if !rules.contains_key(&k) && rules.len() >= MAX_RULES {
            return;
        }
        let e = rules.entry(k).or_default();
        e.0 = e.0.saturating_add(hits);
        if over {
            e.1 = e.1.saturating_add(hits);
        }
    }

    /// Every RLS domain with the rules that answered, and their hits.
    pub fn rules(&self) -> Vec<RlsDomainView> {
        let mut out: Vec<RlsDomainView> = Vec::new();
        for ((domain, rule), (hits, over)) in lock(&self.rules).iter() {
            if out.last().is_none_or(|d| &d.domain != domain) {
                out.push(RlsDomainView {
                    domain: domain.clone(),
                    rules: Vec::new(),
                });
            }
            if let Some(d) = out.last_mut() {
                d.rules.push(RlsRuleView {
                    rule: rule.clone(),
                    hits: *hits,
                    over_limit: *over,
                });
            }
        }
        out
    }

    /// Names of the limits recorded so far, sorted.
    pub fn limits(&self) -> Vec<String> {
        let mut v: Vec<String> = lock(&self.limits).keys().cloned().collect();
        v.sort();
        v
    }

    /// What the live view shows of `limit` at `now_ms` (zeros if nothing was recorded).
    pub fn view(&self, limit: &str, now_ms: u64) -> RecordedLimit {
        let limits = lock(&self.limits);
        let Some(c) = limits.get(limit) else {
            return RecordedLimit::default();
        };
        let now_sec = now_ms / 1000;
        let first = now_sec.saturating_sub(SERIES_SECONDS as u64 - 1);
        let series: Vec<SeriesPoint> = (first..=now_sec)
            .filter_map(|s| {
                let slot = c.series[(s % SERIES_SECONDS as u64) as usize];
                (slot.unix_sec == s && slot.admitted + slot.denied > 0).then_some(SeriesPoint {
                    unix_sec: s,
                    admitted: slot.admitted,
                    denied: slot.denied,
                })
            })
            .collect();
        // Per second over the last RECENT_SECONDS whole seconds (the current one is partial).
        let recent_from = now_sec.saturating_sub(RECENT_SECONDS);
        let (admitted, denied) = series
            .iter()
            .filter(|p| p.unix_sec >= recent_from && p.unix_sec < now_sec)
            .fold((0, 0), |(a, d), p| (a + p.admitted, d + p.denied));
        let per_s = |n: u64| n as f64 / RECENT_SECONDS as f64;
        let busiest = c.busiest.tracked();
        let key_view = |t: &super::top_keys::Tracked| {
            let (mut checks, denied) = t.recent(now_ms);
            // The denial table counts a key from its first denial on; the busiest table, if it
            // tracks the key too, saw its checks before that.
            if let Some(b) = busiest.iter().find(|b| b.key == t.key) {
                checks = checks.max(b.recent(now_ms).0);
            }
            KeyView {
                key: t.key.clone(),
                checks_per_s: per_s(checks),
                denied_per_s: per_s(denied),
                remaining: t.last.remaining,
                limit: t.last.limit,
                reset_ms: t.last.reset_ms,
                seen_ms_ago: now_ms.saturating_sub(t.last.now_ms),
                sidecars: Vec::new(),
                leased_by: Vec::new(),
            }
        };
        let recent_ms = RECENT_SECONDS * 1000;
        let mut limited_now: Vec<KeyView> = c
            .denied
            .tracked()
            .into_iter()
            .filter(|t| {
                t.last_denied_ms
                    .is_some_and(|d| now_ms.saturating_sub(d) < recent_ms)
            })
            .map(key_view)
            .collect();
        limited_now.sort_by(|a, b| b.denied_per_s.total_cmp(&a.denied_per_s));
        limited_now.truncate(SHOWN_KEYS);
        let mut near_limit: Vec<KeyView> = busiest
            .iter()
            .copied()
            .filter(|t| {
                t.last.allowed
                    && now_ms.saturating_sub(t.last.now_ms) < recent_ms
                    && t.last.remaining * NEAR_LIMIT_LEFT.1 <= t.last.limit * NEAR_LIMIT_LEFT.0
                    && !limited_now.iter().any(|l| l.key == t.key)
            })
            .map(key_view)
            .collect();
        near_limit.sort_by(|a, b| b.checks_per_s.total_cmp(&a.checks_per_s));
        near_limit.truncate(SHOWN_KEYS);
        RecordedLimit {
            admitted_per_s: per_s(admitted),
            denied_per_s: per_s(denied),
            series,
            limited_now,
            near_limit,
        }
    }

    /// The per-second counts of every tracked key of `limit` (for a quota preview).
    pub fn key_seconds(&self, limit: &str) -> Vec<(String, Vec<Second>)> {
        let limits = lock(&self.limits);
        let Some(c) = limits.get(limit) else {
            return Vec::new();
        };
        let mut out: HashMap<String, Vec<Second>> = HashMap::new();
        for t in c.busiest.tracked().into_iter().chain(c.denied.tracked()) {
            let seconds: Vec<Second> = t.seconds.iter().copied().collect();
            // The two tables may both hold a key: they counted the same checks.
            out.entry(t.key.clone()).or_insert(seconds);
        }
        let mut v: Vec<(String, Vec<Second>)> = out.into_iter().collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::top_keys::ClassTag;

    fn hit(now_ms: u64, allowed: bool, remaining: u64) -> Hit {
        Hit {
            cost: 1,
            class: ClassTag::NONE,
            allowed,
            remaining,
            limit: 10,
            reset_ms: 500,
            now_ms,
        }
    }

    #[test]
    fn rates_series_and_limited_keys() {
        let r = Recorder::default();
        let t0 = 1_700_000_000_000;
        for s in 0..12u64 {
            for i in 0..10u64 {
                r.record("api", "calm", hit(t0 + s * 1000 + i, true, 9));
                r.record("api", "hot", hit(t0 + s * 1000 + i, i < 2, 0));
            }
        }
        let v = r.view("api", t0 + 12_000);
        assert_eq!(v.series.len(), 12);
        assert_eq!((v.series[0].admitted, v.series[0].denied), (12, 8));
        assert!(
            (v.admitted_per_s - 12.0).abs() < 1e-9,
            "{}",
            v.admitted_per_s
        );
        assert!((v.denied_per_s - 8.0).abs() < 1e-9);
        assert_eq!(v.limited_now.len(), 1);
        assert_eq!(v.limited_now[0].key, "hot");
        assert!(v.near_limit.is_empty(), "{:?}", v.near_limit);
        // Nothing denied for longer than RECENT_SECONDS: no longer limited now.
        let later = r.view("api", t0 + 30_000);
        assert!(later.limited_now.is_empty());
        assert_eq!(r.view("other", t0).series.len(), 0);
    }

    #[test]
    fn rules_are_counted_per_domain() {
        let r = Recorder::default();
        r.record_rule("edge", "remote_address", 2, false);
        r.record_rule("edge", "remote_address", 1, true);
        r.record_rule("api", "user", 5, false);
        let d = r.rules();
        assert_eq!(d.len(), 2);
        assert_eq!((d[0].domain.as_str(), d[0].rules[0].hits), ("api", 5));
        let edge = &d[1].rules[0];
        assert_eq!((edge.hits, edge.over_limit), (3, 1));
    }

    #[test]
    fn near_limit_keys_are_admitted_with_little_left() {
        let r = Recorder::default();
        let t0 = 1_700_000_000_000;
        r.record("api", "close", hit(t0, true, 1));
        r.record("api", "far", hit(t0, true, 8));
        let v = r.view("api", t0 + 500);
        let keys: Vec<&str> = v.near_limit.iter().map(|k| k.key.as_str()).collect();
        assert_eq!(keys, ["close"]);
    }

    #[test]
    fn memory_is_bounded_by_the_tables_not_the_keys() {
        let r = Recorder::default();
        let t0 = 1_700_000_000_000;
        for i in 0..100_000u64 {
            r.record("api", &format!("k{i}"), hit(t0 + i / 50, i % 3 != 0, 0));
        }
        let seconds = r.key_seconds("api");
        assert!(
            seconds.len() <= BUSIEST_KEYS + DENIED_KEYS,
            "{}",
            seconds.len()
        );
    }
}
