//! Metrics of costs known afterwards on the HTTP API: reservations (admitted, denied, open),
//! how they were settled and the units settling gave back or charged, and direct charges and
//! refunds.

use super::registered::registered;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// A limit and what happened (`admitted`, `settled`, `refunded`, …).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    limit: String,
    outcome: &'static str,
}

/// How a reservation ended.
#[derive(Debug, Clone, Copy)]
pub enum Ending {
    /// Settled at a real cost (`POST …/settle`).
    Settled,
    /// Settled at its estimate on request (`DELETE`).
    Kept,
    /// Its time limit passed unsettled: settled at its estimate.
    Expired,
}

impl Ending {
    fn name(self) -> &'static str {
        match self {
            Ending::Settled => "settled",
            Ending::Kept => "kept",
            Ending::Expired => "expired",
        }
    }
}

/// The settlement metric families.
pub struct SettleMetrics {
    reservations: Family<OutcomeLabel, Counter>,
    open: Gauge,
    endings: Family<OutcomeLabel, Counter>,
    units: Family<OutcomeLabel, Counter>,
}

impl SettleMetrics {
    /// Registers every family in `registry`.
    pub fn register(registry: &mut Registry) -> SettleMetrics {
        SettleMetrics {
            reservations: registered(
                registry,
                "clusterlimit_rate_reservations",
                "Reservations asked over HTTP, by limit and outcome (admitted, denied)",
                Family::default(),
            ),
            open: registered(
                registry,
                "clusterlimit_rate_reservations_open",
                "Admitted reservations not settled yet, held in this sidecar's table",
                Gauge::default(),
            ),
            endings: registered(
                registry,
                "clusterlimit_rate_reservations_ended",
                "Reservations ended, by limit and how (settled, kept, expired)",
                Family::default(),
            ),
            units: registered(
                registry,
                "clusterlimit_rate_adjusted_units",
                "Units moved after the fact, by limit and how (settle_refunded, settle_charged, \
                 charged, refunded)",
                Family::default(),
            ),
        }
    }

    /// A reservation on `limit` was admitted or denied.
    pub fn reserved(&self, limit: &str, allowed: bool) {
        let outcome = if allowed { "admitted" } else { "denied" };
        self.count(&self.reservations, limit, outcome, 1);
    }

    /// The number of open reservations is now `n`.
    pub fn open(&self, n: usize) {
        self.open.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// A reservation on `limit` ended as `ending`.
    pub fn ended(&self, limit: &str, ending: Ending) {
        self.count(&self.endings, limit, ending.name(), 1);
    }

    /// Settling a reservation of `estimate` at `actual` gave back or charged the difference.
    pub fn settled(&self, limit: &str, estimate: u64, actual: u64) {
        if actual < estimate {
            self.count(&self.units, limit, "settle_refunded", estimate - actual);
        } else if actual > estimate {
            self.count(&self.units, limit, "settle_charged", actual - estimate);
        }
    }

    /// A direct charge (`refund` false) or refund of `n` units on `limit`.
    pub fn adjusted(&self, limit: &str, refund: bool, n: u64) {
        let outcome = if refund { "refunded" } else { "charged" };
        self.count(&self.units, limit, outcome, n);
    }

    fn count(
        &self,
        family: &Family<OutcomeLabel, Counter>,
        limit: &str,
        outcome: &'static str,
        n: u64,
    ) {
        family
            .get_or_create(&OutcomeLabel {
                limit: limit.to_string(),
                outcome,
            })
            .inc_by(n);
    }
}
