//! Metrics of the adaptive semaphores declared in the config: the stored capacity, the inputs
//! of the controller's newest step, and the capacity changes seen. Read from the store at each
//! scrape (`routes/adaptive.rs` bounds the reads by the request timeout).

use super::adaptive_view::DecisionView;
use super::registered::registered;
use super::sem_label::SemLabel;
use crate::common::lock;
use clusterlimit::adaptive::AdaptiveStatus;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DirectionLabel {
    semaphore: String,
    /// `up` or `down`.
    direction: String,
}

type FloatGauge = Gauge<f64, AtomicU64>;

/// The adaptive families.
pub struct AdaptiveMetrics {
    capacity: Family<SemLabel, Gauge>,
    p50_seconds: Family<SemLabel, FloatGauge>,
    baseline_seconds: Family<SemLabel, FloatGauge>,
    drop_ratio: Family<SemLabel, FloatGauge>,
    reporters: Family<SemLabel, Gauge>,
    changes: Family<DirectionLabel, Counter>,
    /// The step last counted in `changes`, per semaphore (window, time): a step is seen by
    /// many scrapes and counted once.
    counted: Mutex<HashMap<String, (u64, u64)>>,
}

impl AdaptiveMetrics {
    /// Registers every family in `registry`.
    pub fn register(registry: &mut Registry) -> AdaptiveMetrics {
        AdaptiveMetrics {
            capacity: registered(
                registry,
                "clusterlimit_adaptive_capacity",
                "Stored capacity of an adaptive semaphore, read at the scrape",
                Family::default(),
            ),
            p50_seconds: registered(
                registry,
                "clusterlimit_adaptive_latency_p50_seconds",
                "Median latency of the successes in the controller's newest window (NaN: none)",
                Family::default(),
            ),
            baseline_seconds: registered(
                registry,
                "clusterlimit_adaptive_baseline_seconds",
                "The gradient's baseline: the dependency's unloaded latency as learnt (NaN: none)",
                Family::default(),
            ),
            drop_ratio: registered(
                registry,
                "clusterlimit_adaptive_drop_ratio",
                "Share of drops among the outcomes of the controller's newest window",
                Family::default(),
            ),
            reporters: registered(
                registry,
                "clusterlimit_adaptive_reporters",
                "Limiters (sidecars, services, runs) announcing outcomes for the semaphore",
                Family::default(),
            ),
            changes: registered(
                registry,
                "clusterlimit_adaptive_capacity_changes",
                "Capacity changes of the controller seen at scrapes, by direction (a scrape sees \
                 the newest step only: with windows shorter than the scrape interval some are missed)",
                Family::default(),
            ),
            counted: Mutex::new(HashMap::new()),
        }
    }

    /// Records what a scrape read of `semaphore`: its stored capacity and how it adapts.
    pub fn observe(&self, semaphore: &str, capacity: u32, adaptive: Option<&AdaptiveStatus>) {
        let label = SemLabel {
            semaphore: semaphore.to_string(),
        };
        self.capacity.get_or_create(&label).set(i64::from(capacity));
        let Some(a) = adaptive else {
            self.reporters.get_or_create(&label).set(0);
            return;
        };
        self.reporters
            .get_or_create(&label)
            .set(i64::try_from(a.reporters).unwrap_or(i64::MAX));
        let Some(d) = &a.last else {
            return;
        };
        let view = DecisionView::from(d);
        let seconds = |ms: Option<f64>| ms.map_or(f64::NAN, |ms| ms / 1000.0);
        self.p50_seconds
            .get_or_create(&label)
            .set(seconds(view.p50_ms));
        self.baseline_seconds
            .get_or_create(&label)
            .set(seconds(view.baseline_ms));
        self.drop_ratio.get_or_create(&label).set(view.drop_ratio());
        let step = (d.window, d.at_unix_ms);
        let new = lock(&self.counted).insert(semaphore.to_string(), step) != Some(step);
        if new && d.to != d.from {
            let direction = if d.to > d.from { "up" } else { "down" };
            self.changes
                .get_or_create(&DirectionLabel {
                    semaphore: semaphore.to_string(),
                    direction: direction.to_string(),
                })
                .inc();
        }
    }
}
