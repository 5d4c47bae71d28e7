//! Rate-limit metrics of the sidecar, shared by the HTTP API and the RLS answers: per
//! (domain, limit) what envoyproxy/ratelimit reports (total hits, over limit, near limit,
//! shadow mode, failure mode allowed), the store's latency, and the keys cached.

use super::lease_metrics::LeaseMetrics;
use super::registered::registered;
use clusterlimit::{DecisionSource, GuardedDecision};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::time::Duration;

/// Which limit: the RLS domain (`http` for the HTTP API) and the limit's name.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RateLabel {
    pub domain: String,
    pub limit: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DomainLabel {
    domain: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LimitLabel {
    limit: String,
}

type LatencyFamily = Family<DomainLabel, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 50 µs .. ~6.5 s.
    Histogram::new(exponential_buckets(0.000_05, 2.0, 18))
}

/// Share of the limit used from which an admitted hit also counts as near the limit (as
/// envoyproxy/ratelimit's `near_limit`).
const NEAR_LIMIT_RATIO: (u64, u64) = (4, 5);

/// The rate-limit metric families.
pub struct RateMetrics {
    hits: Family<RateLabel, Counter>,
    over_limit: Family<RateLabel, Counter>,
    near_limit: Family<RateLabel, Counter>,
    shadow_mode: Family<RateLabel, Counter>,
    failure_mode_allowed: Family<RateLabel, Counter>,
    store_down_denied: Family<RateLabel, Counter>,
    store_seconds: LatencyFamily,
    keys_cached: Family<LimitLabel, Gauge>,
    /// HTTP rate waits in flight, by limit.
    waits_in_flight: Family<LimitLabel, Gauge>,
    /// Checks answered from a cached state, no store request (set at each scrape).
    pub(super) cache_answers: Counter,
    /// Hot keys' leases (set at each scrape): checks admitted from them, leases taken, units
    /// leased, given back, and lost (the under-admission they cost); and the approximate
    /// mode's checks admitted locally and its reports.
    pub(super) leases: LeaseMetrics,
    /// Per key and per second, for the live view (`/ui`, the fleet summary).
    pub live: std::sync::Arc<crate::live::recorder::Recorder>,
}

impl RateMetrics {
    /// Registers every family in `registry`.
    pub fn register(registry: &mut Registry) -> RateMetrics {
        RateMetrics {
            hits: registered(
                registry,
                "clusterlimit_rate_hits",
                "Rate-limit hits checked (the cost of each check), by domain and limit",
                Family::default(),
            ),
            over_limit: registered(
                registry,
                "clusterlimit_rate_over_limit",
                "Hits denied because they were over the limit (shadow mode included)",
                Family::default(),
            ),
            near_limit: registered(
                registry,
                "clusterlimit_rate_near_limit",
                "Admitted hits that left the key with 80% or more of its limit used",
                Family::default(),
            ),
            shadow_mode: registered(
                registry,
                "clusterlimit_rate_shadow_mode",
                "Hits over the limit that were admitted because the limit is in shadow mode",
                Family::default(),
            ),
            failure_mode_allowed: registered(
                registry,
                "clusterlimit_rate_failure_mode_allowed",
                "Hits admitted without the store while it was down (fail_open, or a local share)",
                Family::default(),
            ),
            store_down_denied: registered(
                registry,
                "clusterlimit_rate_store_down_denied",
                "Hits denied without the store while it was down (fail_closed, or a local share)",
                Family::default(),
            ),
            store_seconds: registered(
                registry,
                "clusterlimit_rate_store_duration_seconds",
                "Time the store took to decide a rate-limit check (answers it gave only)",
                Family::new_with_constructor(latency_histogram),
            ),
            keys_cached: registered(
                registry,
                "clusterlimit_rate_keys_cached",
                "Key states held in this sidecar's memory, by limit",
                Family::default(),
            ),
            waits_in_flight: registered(
                registry,
                "clusterlimit_rate_waits_in_flight",
                "Rate waits of the HTTP API in flight, by limit",
                Family::default(),
            ),
            cache_answers: registered(
                registry,
                "clusterlimit_rate_cache_answers",
                "Rate-limit checks answered from a cached state without a store request",
                Counter::default(),
            ),
            leases: LeaseMetrics::new(registry),
            live: Default::default(),
        }
    }

    /// One answered check of `key` (of priority class `class`, if any) on rate limit `limit`
    /// for the live view and quota previews.
    pub fn record_key(
        &self,
        limit: &str,
        key: &str,
        class: Option<&str>,
        g: &GuardedDecision,
        cost: u64,
    ) {
        let d = &g.decision;
        self.live.record(
            limit,
            key,
            crate::live::top_keys::Hit {
                cost,
                class: crate::live::top_keys::ClassTag::of(class),
                allowed: d.allowed,
                remaining: d.remaining,
                limit: d.limit,
                reset_ms: d.reset_after.as_millis() as u64,
                now_ms: crate::live::clock::unix_ms(),
            },
        );
    }

    /// One answered check of `cost` hits on `limit` of `domain`. `shadow`: the limit is in
    /// shadow mode (a denial was answered as an admission); `store_latency`: how long the store
    /// took, when it decided.
    pub fn record(
        &self,
        domain: &str,
        limit: &str,
        g: &GuardedDecision,
        cost: u64,
        shadow: bool,
        store_latency: Option<Duration>,
    ) {
        let d = &g.decision;
        let from_store = g.source == DecisionSource::Store;
        self.record_answer(domain, limit, d.allowed, !from_store, cost, shadow);
        if d.allowed {
            let used = d.limit.saturating_sub(d.remaining);
            let (num, den) = NEAR_LIMIT_RATIO;
            if d.limit > 0 && used.saturating_mul(den) >= d.limit.saturating_mul(num) {
                self.near_limit
                    .get_or_create(&RateLabel {
                        domain: domain.to_string(),
                        limit: limit.to_string(),
                    })
                    .inc_by(cost);
            }
        }
        if let (true, Some(t)) = (from_store, store_latency) {
            self.store_seconds
                .get_or_create(&DomainLabel {
                    domain: domain.to_string(),
                })
                .observe(t.as_secs_f64());
        }
    }

    /// One answer of `cost` hits on `limit` of `domain` with no decision to show (a limit that
    /// is over by its config, or one the store could not open): `allowed` or over the limit;
    /// `store_down`: a store-down policy gave the answer.
    pub fn record_answer(
        &self,
        domain: &str,
        limit: &str,
        allowed: bool,
        store_down: bool,
        cost: u64,
        shadow: bool,
    ) {
        // Envoy's rules (the HTTP API has none: its limits are in the per-key view).
        if domain != "http" {
            self.live.record_rule(domain, limit, cost, !allowed);
        }
        let label = RateLabel {
            domain: domain.to_string(),
            limit: limit.to_string(),
        };
        self.hits.get_or_create(&label).inc_by(cost);
        if store_down {
            if allowed {
                self.failure_mode_allowed.get_or_create(&label).inc_by(cost);
            } else {
                self.store_down_denied.get_or_create(&label).inc_by(cost);
            }
        }
        if !allowed {
            self.over_limit.get_or_create(&label).inc_by(cost);
            if shadow {
                self.shadow_mode.get_or_create(&label).inc_by(cost);
            }
        }
    }

    /// `limit` holds `n` key states in this sidecar's memory.
    pub fn keys_cached(&self, limit: &str, n: usize) {
        self.keys_cached
            .get_or_create(&LimitLabel {
                limit: limit.to_string(),
            })
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// The gauge of `limit`'s HTTP rate waits in flight (the caller increments and decrements).
    pub fn waits_in_flight(&self, limit: &str) -> Gauge {
        self.waits_in_flight
            .get_or_create(&LimitLabel {
                limit: limit.to_string(),
            })
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clusterlimit::{Limiter, Quota, StoreDownGuard, StoreDownPolicy};

    fn render(registry: &Registry) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, registry).unwrap();
        out
    }

    #[tokio::test]
    async fn counts_hits_near_and_over_the_limit() {
        let mut registry = Registry::default();
        let m = RateMetrics::register(&mut registry);
        let limiter = Limiter::connect("memory://rate-metrics-test")
            .await
            .unwrap();
        let rl = limiter
            .rate_limit("api", Quota::per_minute(5))
            .await
            .unwrap();
        let guard = StoreDownGuard::new(StoreDownPolicy::FailOpen);
        // 5 admitted (the 4th and 5th leave 80% or more used), then 1 denied in shadow mode.
        for _ in 0..6 {
            let g = guard.check_n(&rl, "k", 1).await.unwrap();
            m.record(
                "d",
                "api",
                &g,
                1,
                !g.decision.allowed,
                Some(Duration::from_millis(1)),
            );
        }
        m.keys_cached("api", 3);
        let text = render(&registry);
        for line in [
            r#"clusterlimit_rate_hits_total{domain="d",limit="api"} 6"#,
            r#"clusterlimit_rate_over_limit_total{domain="d",limit="api"} 1"#,
            r#"clusterlimit_rate_shadow_mode_total{domain="d",limit="api"} 1"#,
            r#"clusterlimit_rate_near_limit_total{domain="d",limit="api"} 2"#,
            r#"clusterlimit_rate_store_duration_seconds_count{domain="d"} 6"#,
            r#"clusterlimit_rate_keys_cached{limit="api"} 3"#,
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
        assert!(!text.contains("failure_mode_allowed_total{"), "{text}");
    }
}
