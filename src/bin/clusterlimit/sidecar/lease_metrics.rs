//! The sidecar's counters of hot keys served without a store request per check: their leases
//! (`LimiterBuilder::hot_key_leases`) and the approximate mode's local decisions
//! (`LimiterBuilder::approximate_hot_keys`), set from the Limiter's counts at each scrape.

use super::registered::registered;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;

/// The counters of hot keys' leases (`LimiterBuilder::hot_key_leases`) and local decisions
/// (`LimiterBuilder::approximate_hot_keys`).
pub struct LeaseMetrics {
    pub(super) admitted: Counter,
    pub(super) taken: Counter,
    pub(super) units: Counter,
    pub(super) returned: Counter,
    pub(super) lost: Counter,
    pub(super) approximate_admitted: Counter,
    pub(super) approximate_reports: Counter,
}

impl LeaseMetrics {
    pub(super) fn new(registry: &mut Registry) -> LeaseMetrics {
        let mut counter =
            |name: &str, help: &str| registered(registry, name, help, Counter::default());
        LeaseMetrics {
            admitted: counter(
                "clusterlimit_rate_lease_admitted",
                "Rate-limit checks admitted from a lease of a hot key, without a store request",
            ),
            taken: counter(
                "clusterlimit_rate_leases",
                "Leases of hot keys taken (one store write each)",
            ),
            units: counter(
                "clusterlimit_rate_leased_units",
                "Units the leases of hot keys took",
            ),
            returned: counter(
                "clusterlimit_rate_lease_returned_units",
                "Leased units given back unspent",
            ),
            lost: counter(
                "clusterlimit_rate_lease_lost_units",
                "Leased units neither spent nor given back (the quota admitted that much less)",
            ),
            approximate_admitted: counter(
                "clusterlimit_rate_approximate_admitted",
                "Rate-limit checks of hot keys admitted locally, approximately, without a store request",
            ),
            approximate_reports: counter(
                "clusterlimit_rate_approximate_reports",
                "Reports of hot keys' local decisions the store answered (one write of the key each)",
            ),
        }
    }

    /// Adds what the Limiter counted since the last scrape.
    pub(super) fn add(&self, d: &clusterlimit::RequestStats) {
        self.admitted.inc_by(d.rate_lease_admitted);
        self.taken.inc_by(d.rate_leases);
        self.units.inc_by(d.rate_leased_units);
        self.returned.inc_by(d.rate_lease_returned_units);
        self.lost.inc_by(d.rate_lease_lost_units);
        self.approximate_admitted
            .inc_by(d.rate_approximate_admitted);
        self.approximate_reports.inc_by(d.rate_approximate_reports);
    }
}
