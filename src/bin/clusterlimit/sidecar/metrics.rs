//! Prometheus metrics of the sidecar (`GET /metrics`, OpenMetrics text).

use super::adaptive_metrics::AdaptiveMetrics;
use super::rate_metrics::RateMetrics;
use super::rls::reload_report::ReloadReport;
use super::sem_label::SemLabel;
use super::settle_metrics::SettleMetrics;
use crate::common::lock;
use clusterlimit::{BreakerStats, RequestStats, StoreDownGuard};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Metric, Registry};
use std::sync::Mutex;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BreakerLabel {
    /// Which guard: `rls` or `http`, and its store-down policy.
    guard: String,
    /// Which cluster of the store: its place in the store URL, from 1 (a store of one
    /// cluster: 1).
    cluster: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TransitionLabel {
    guard: String,
    cluster: String,
    to: String,
}

/// A guard whose store-down breakers (one per cluster) `/metrics` shows, with each one's
/// counts at the last scrape.
struct Watched {
    label: String,
    guard: StoreDownGuard,
    last: Vec<BreakerStats>,
}

type HistogramFamily = Family<SemLabel, Histogram, fn() -> Histogram>;

/// Every metric the sidecar exports; cheap to update from any task.
pub struct Metrics {
    registry: Registry,
    breaker: BreakerMetrics,
    permits: PermitMetrics,
    store: StoreMetrics,
    unauthorized: Counter,
    breakers: Mutex<Vec<Watched>>,
    /// Rate-limit metrics (HTTP API and RLS).
    pub rate: RateMetrics,
    /// Reservations, settlements and charges of the HTTP API.
    pub settle: SettleMetrics,
    /// Adaptive semaphores declared in the config, read at each scrape.
    pub adaptive: AdaptiveMetrics,
    /// Reloads of the RLS rules, and the last one's status for the health routes.
    pub rls_reload: ReloadReport,
    /// Store counters at the last scrape: the exported counters grow by the difference.
    last_stats: Mutex<RequestStats>,
}

/// The store-down circuit breakers of the rate-limit guards.
struct BreakerMetrics {
    open: Family<BreakerLabel, Gauge>,
    transitions: Family<TransitionLabel, Counter>,
    slow_answers: Family<BreakerLabel, Counter>,
}

/// The semaphores' permits as this sidecar hands them out.
struct PermitMetrics {
    held: Family<SemLabel, Gauge>,
    waiting: Family<SemLabel, Gauge>,
    acquire_seconds: HistogramFamily,
    timeouts: Family<SemLabel, Counter>,
    lost: Family<SemLabel, Counter>,
    expired: Family<SemLabel, Counter>,
}

/// The store: requests sent, its health, and the removals it has not confirmed.
struct StoreMetrics {
    requests: Family<KindLabel, Counter>,
    up: Gauge,
    pending_removals: Gauge,
    removal_session_ends: Counter,
    busy_refusals: Counter,
}

fn acquire_histogram() -> Histogram {
    // 0.25 ms .. ~65 s.
    Histogram::new(exponential_buckets(0.000_25, 2.0, 19))
}

/// Registers `metric` as `name` with its `help` text; the metric, to update.
fn registered<M: Metric + Clone>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M {
    registry.register(name, help, metric.clone());
    metric
}

impl BreakerMetrics {
    fn register(registry: &mut Registry) -> BreakerMetrics {
        BreakerMetrics {
            open: registered(
                registry,
                "clusterlimit_store_breaker_open",
                "1 while the store-down circuit breaker of a rate-limit guard is open (its \
                 store-down policy answers), else 0",
                Family::default(),
            ),
            transitions: registered(
                registry,
                "clusterlimit_store_breaker_transitions",
                "Times a rate-limit guard's store-down circuit breaker opened or closed",
                Family::default(),
            ),
            slow_answers: registered(
                registry,
                "clusterlimit_store_slow_answers",
                "Rate-limit checks the store did not decide within the store timeout (each got the \
                 store-down policy's answer)",
                Family::default(),
            ),
        }
    }
}

impl PermitMetrics {
    fn register(registry: &mut Registry) -> PermitMetrics {
        PermitMetrics {
            held: registered(
                registry,
                "clusterlimit_permits_held",
                "Permits held through this sidecar",
                Family::default(),
            ),
            waiting: registered(
                registry,
                "clusterlimit_acquires_waiting",
                "Acquire requests waiting in this sidecar",
                Family::default(),
            ),
            acquire_seconds: registered(
                registry,
                "clusterlimit_acquire_duration_seconds",
                "Time from an acquire request to its grant",
                Family::new_with_constructor(acquire_histogram),
            ),
            timeouts: registered(
                registry,
                "clusterlimit_acquire_timeouts",
                "Acquire requests that timed out (429)",
                Family::default(),
            ),
            lost: registered(
                registry,
                "clusterlimit_permits_lost",
                "Held permits lost (store session ended behind them)",
                Family::default(),
            ),
            expired: registered(
                registry,
                "clusterlimit_permits_expired",
                "Permits released because their client stopped calling keepalive",
                Family::default(),
            ),
        }
    }
}

impl StoreMetrics {
    fn register(registry: &mut Registry) -> StoreMetrics {
        StoreMetrics {
            requests: registered(
                registry,
                "clusterlimit_store_requests",
                "Requests sent to the store, by kind",
                Family::default(),
            ),
            up: registered(
                registry,
                "clusterlimit_store_session_up",
                "1 if the last store health check succeeded, else 0",
                Gauge::default(),
            ),
            pending_removals: registered(
                registry,
                "clusterlimit_pending_removals",
                "Queue entries being removed in the background (released, cancelled or failed \
                 requests whose removal the store has not confirmed yet)",
                Gauge::default(),
            ),
            removal_session_ends: registered(
                registry,
                "clusterlimit_removal_session_ends",
                "Store sessions ended because an entry's removal could not be confirmed within two \
                 session TTLs",
                Counter::default(),
            ),
            busy_refusals: registered(
                registry,
                "clusterlimit_acquires_refused_store_busy",
                "Acquires refused before reaching the store because their timeout would pass before \
                 it could answer: the store, not the capacity, is the limit while this grows",
                Counter::default(),
            ),
        }
    }
}

impl Metrics {
    /// Registers every metric, family by family (the order `/metrics` lists them in).
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        let breaker = BreakerMetrics::register(&mut registry);
        let permits = PermitMetrics::register(&mut registry);
        let store = StoreMetrics::register(&mut registry);
        let unauthorized = registered(
            &mut registry,
            "clusterlimit_http_unauthorized",
            "Requests answered 401: no bearer token or a wrong one",
            Counter::default(),
        );
        let rate = RateMetrics::register(&mut registry);
        let settle = SettleMetrics::register(&mut registry);
        let adaptive = AdaptiveMetrics::register(&mut registry);
        let rls_reload = ReloadReport::register(&mut registry);
        Metrics {
            registry,
            breaker,
            permits,
            store,
            unauthorized,
            rate,
            settle,
            adaptive,
            rls_reload,
            breakers: Mutex::new(Vec::new()),
            last_stats: Mutex::new(RequestStats::default()),
        }
    }

    fn label(semaphore: &str) -> SemLabel {
        SemLabel {
            semaphore: semaphore.to_string(),
        }
    }

    /// Permits held through the sidecar changed by `delta`.
    pub fn held(&self, semaphore: &str, delta: i64) {
        self.permits
            .held
            .get_or_create(&Self::label(semaphore))
            .inc_by(delta);
    }

    /// Waiting acquire requests changed by `delta`.
    pub fn waiting(&self, semaphore: &str, delta: i64) {
        self.permits
            .waiting
            .get_or_create(&Self::label(semaphore))
            .inc_by(delta);
    }

    /// A grant after `seconds` of waiting.
    pub fn acquired(&self, semaphore: &str, seconds: f64) {
        self.permits
            .acquire_seconds
            .get_or_create(&Self::label(semaphore))
            .observe(seconds);
    }

    /// An acquire answered 429.
    pub fn timed_out(&self, semaphore: &str) {
        self.permits
            .timeouts
            .get_or_create(&Self::label(semaphore))
            .inc();
    }

    /// Permits of this sidecar lost so far on `semaphore` (for the live view's rate).
    pub fn lost_so_far(&self, semaphore: &str) -> u64 {
        self.permits
            .lost
            .get_or_create(&Self::label(semaphore))
            .get()
    }

    /// A held permit was lost.
    pub fn lost(&self, semaphore: &str) {
        self.permits
            .lost
            .get_or_create(&Self::label(semaphore))
            .inc();
    }

    /// A permit was released because its client stopped calling keepalive.
    pub fn expired(&self, semaphore: &str) {
        self.permits
            .expired
            .get_or_create(&Self::label(semaphore))
            .inc();
    }

    /// A request was answered 401.
    pub fn unauthorized(&self) {
        self.unauthorized.inc();
    }

    /// Result of the latest store health check.
    pub fn store_up(&self, up: bool) {
        self.store.up.set(i64::from(up));
    }

    /// Shows `guard`'s breakers in `/metrics` under the label `label` (e.g. `rls:fail_open`),
    /// one per cluster of a store of `clusters` clusters (each shown closed from the start).
    pub fn watch_breaker(&self, label: &str, guard: StoreDownGuard, clusters: usize) {
        for position in 0..clusters.max(1) {
            self.breaker
                .open
                .get_or_create(&BreakerLabel {
                    guard: label.to_string(),
                    cluster: (position + 1).to_string(),
                })
                .set(0);
        }
        lock(&self.breakers).push(Watched {
            label: label.to_string(),
            guard,
            last: Vec::new(),
        });
    }

    /// Each watched breaker's name (its guard's label, and its cluster for a store of
    /// several) and counts now (for the live view).
    pub fn breakers(&self) -> Vec<(String, clusterlimit::BreakerStats)> {
        let mut out = Vec::new();
        for w in lock(&self.breakers).iter() {
            let each = w.guard.breakers();
            let several = each.len() > 1;
            out.extend(each.into_iter().map(|b| {
                let name = match (&b.cluster, several) {
                    (Some(c), true) => format!("{} on {c}", w.label),
                    _ => w.label.clone(),
                };
                (name, b.stats)
            }));
        }
        out
    }

    fn render_breakers(&self) {
        for w in lock(&self.breakers).iter_mut() {
            let now = w.guard.breakers();
            w.last.resize(now.len(), BreakerStats::default());
            for (b, last) in now.iter().zip(w.last.iter_mut()) {
                let (guard, cluster) = (w.label.clone(), (b.position + 1).to_string());
                self.breaker
                    .open
                    .get_or_create(&BreakerLabel {
                        guard: guard.clone(),
                        cluster: cluster.clone(),
                    })
                    .set(i64::from(b.stats.open));
                for (to, n) in [
                    ("open", b.stats.opened.saturating_sub(last.opened)),
                    ("closed", b.stats.closed.saturating_sub(last.closed)),
                ] {
                    self.breaker
                        .transitions
                        .get_or_create(&TransitionLabel {
                            guard: guard.clone(),
                            cluster: cluster.clone(),
                            to: to.to_string(),
                        })
                        .inc_by(n);
                }
                self.breaker
                    .slow_answers
                    .get_or_create(&BreakerLabel { guard, cluster })
                    .inc_by(b.stats.slow.saturating_sub(last.slow));
                *last = b.stats;
            }
        }
    }

    /// Brings the store counters up to `now` and renders every metric.
    pub fn render(&self, now: RequestStats) -> String {
        self.render_breakers();
        let mut last = lock(&self.last_stats);
        let d = now.since(&last);
        for (kind, n) in [
            ("put", d.put),
            ("txn", d.txn),
            ("range", d.range),
            ("delete", d.delete),
            ("watch", d.watch),
            ("lease", d.lease),
        ] {
            self.store
                .requests
                .get_or_create(&KindLabel {
                    kind: kind.to_string(),
                })
                .inc_by(n);
        }
        self.store
            .removal_session_ends
            .inc_by(d.removal_session_ends);
        self.store
            .busy_refusals
            .inc_by(d.acquires_refused_store_busy);
        self.rate.cache_answers.inc_by(d.rate_local_answers);
        self.rate.leases.add(&d);
        self.store
            .pending_removals
            .set(i64::try_from(now.pending_removals).unwrap_or(i64::MAX));
        *last = now;
        drop(last); // encoding reads the registry only
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::warn!(error = %e, "encoding metrics");
        }
        out
    }
}
