//! The live picture: what the web view and `clusterlimit top` show, as one serializable
//! value (the JSON of `GET /v1/live` and of each server-sent event).

use serde::{Deserialize, Serialize};

/// Everything shown at one instant.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Picture {
    /// When it was taken (the taker's clock).
    pub at_unix_ms: u64,
    /// Who took it: the sidecar's owner label, or `top`.
    pub source: String,
    pub store: StoreView,
    pub semaphores: Vec<SemaphoreView>,
    /// Semaphores in the store; more than `semaphores.len()` when the list was cut.
    pub semaphores_total: usize,
    pub rate_limits: Vec<RateLimitView>,
    /// Envoy domains (RLS) and their rules, with hits since the sidecar started.
    pub rls: Vec<RlsDomainView>,
    /// Every live sidecar's published summary (this one's included), by id.
    pub fleet: Vec<FleetMember>,
    /// Set when the panes above (semaphores, rate limits, members, fleet) could not be read
    /// now and are the last ones read: as of when, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stale: Option<StaleView>,
}

/// Why and since when a picture's panes are the last ones read, not read now.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct StaleView {
    /// When the oldest of the kept panes was read.
    pub as_of_unix_ms: u64,
    /// Why they could not be read now (the store's answer, for people).
    pub why: String,
}

/// One cluster of the store (a store of one cluster has one) and whether it answers.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ClusterView {
    /// Its place in the store URL, from 0.
    pub position: usize,
    /// How messages name it: `cluster 2 of 2 (etcd://…)`, or `the store` for a store of one.
    pub name: String,
    /// Whether it answered the last probe.
    pub reachable: bool,
    /// How long its answer took.
    pub latency_ms: Option<f64>,
    /// Why it did not answer.
    pub error: Option<String>,
    /// Since when it has been in this state (reachable or not), as far as this viewer saw.
    pub since_unix_ms: u64,
}

/// The store and this process's link to it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StoreView {
    /// The store URL, credentials blanked.
    pub url: String,
    /// Whether the last probe got an answer.
    pub reachable: bool,
    /// How long the last probe took.
    pub latency_ms: Option<f64>,
    /// Why the last probe failed.
    pub error: Option<String>,
    pub session_ttl_ms: u64,
    /// The store's servers and who leads, as the store reports them.
    pub members: Vec<clusterlimit::StoreMember>,
    /// Each store-down breaker (`http:fail_closed`, `rls:…`) and its state.
    pub breakers: Vec<BreakerView>,
    /// Recent health events, newest last (probe failures and recoveries, breaker moves).
    pub events: Vec<HealthEvent>,
    /// Each cluster of the store, in the URL's order: one for a store of one cluster.
    #[serde(default)]
    pub clusters: Vec<ClusterView>,
}

/// One breaker.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct BreakerView {
    pub name: String,
    pub open: bool,
    pub opened: u64,
    pub closed: u64,
}

/// One health event.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct HealthEvent {
    pub at_unix_ms: u64,
    pub what: String,
}

/// One semaphore.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SemaphoreView {
    pub name: String,
    pub capacity: u32,
    pub used: u32,
    pub holders: Vec<HolderView>,
    /// In queue order.
    pub waiters: Vec<HolderView>,
    /// Grants and releases per second seen between two pictures (holders that appeared or
    /// went: a permit held and released in between is not seen), and this sidecar's own
    /// permits lost per second (sidecar only).
    pub grants_per_s: f64,
    pub releases_per_s: f64,
    pub losses_per_s: f64,
    /// Why its status could not be read, if it could not.
    pub error: Option<String>,
    /// An adaptive semaphore's controller seat (`NAME.controller`), shown here instead of as
    /// a semaphore of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller: Option<ControllerView>,
    /// A fair semaphore's classes in priority order: each one's guaranteed permits, permits
    /// held (above guaranteed: borrowing), requests waiting and their flows. Empty on a plain
    /// semaphore.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub classes: Vec<ClassView>,
}

/// One class of a fair semaphore.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ClassView {
    pub name: String,
    pub guaranteed: u32,
    pub held: u32,
    pub waiting: usize,
    /// Flows with requests waiting in it, sorted.
    pub waiting_flows: Vec<String>,
}

impl ClassView {
    /// Permits held beyond the class's guaranteed share (lent by idle classes).
    pub fn borrowing(&self) -> u32 {
        self.held.saturating_sub(self.guaranteed)
    }
}

/// Who controls an adaptive semaphore: the holder of its controller seat.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ControllerView {
    /// The seat's holder: the controller; `None` while nobody holds it.
    pub holder: Option<HolderView>,
    /// Limiters queued to take over.
    pub waiting: usize,
}

/// A holder or a waiter.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HolderView {
    pub owner: String,
    pub permits: u32,
    pub fencing_token: u64,
    /// Held (or waiting) for this long, by the taker's clock against the holder's.
    pub for_ms: u64,
    /// On a fair semaphore, the request's flow and class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
}

/// One rate limit.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RateLimitView {
    pub name: String,
    /// The quota as `clusterlimit rate set-quota` takes it (`100 per 1s (gcra, burst 100)`).
    pub quota: String,
    pub algorithm: String,
    pub limit: u64,
    pub period_ms: u64,
    pub burst: u64,
    /// What this process decided.
    #[serde(flatten)]
    pub recorded: RecordedLimit,
    /// Over every sidecar's summary (this one's included).
    pub fleet_admitted_per_s: f64,
    pub fleet_denied_per_s: f64,
    /// How many sidecars published rates of this limit: only sidecars do, so with none the
    /// fleet rates above are unknown (checks by the CLI or the library are not seen), not 0.
    #[serde(default)]
    pub fleet_reporters: usize,
    /// Keys denied recently (the last 10 s) anywhere in the fleet, merged.
    pub fleet_limited_now: Vec<KeyView>,
    /// Why its quota could not be read, if it could not.
    pub error: Option<String>,
}

/// What one process recorded of one limit.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RecordedLimit {
    /// Hits per second over the last 10 s.
    pub admitted_per_s: f64,
    pub denied_per_s: f64,
    /// The last 15 minutes, seconds with hits only, oldest first.
    pub series: Vec<SeriesPoint>,
    /// Keys denied in the last 10 s, most denied first.
    pub limited_now: Vec<KeyView>,
    /// Keys admitted with a fifth or less of their limit left, busiest first.
    pub near_limit: Vec<KeyView>,
}

/// One second of a limit.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct SeriesPoint {
    pub unix_sec: u64,
    pub admitted: u64,
    pub denied: u64,
}

/// One key of a limit.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct KeyView {
    pub key: String,
    pub checks_per_s: f64,
    pub denied_per_s: f64,
    /// At its last check.
    pub remaining: u64,
    pub limit: u64,
    pub reset_ms: u64,
    pub seen_ms_ago: u64,
    /// The sidecars that report it (fleet lists only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sidecars: Vec<String>,
    /// The sidecars holding leased units of it now, by name (fleet lists only; hot keys
    /// served from leases).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub leased_by: Vec<LeaseHolderView>,
}

/// A sidecar holding leased units of a key: what it may still admit with no store request.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct LeaseHolderView {
    /// The sidecar, as the fleet list names it (its owner label).
    pub holder: String,
    pub units_left: u64,
}

/// A key one sidecar holds leased units of (in its fleet summary).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct LeasedUnitsView {
    pub key: String,
    pub units_left: u64,
}

/// One Envoy domain.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RlsDomainView {
    pub domain: String,
    pub rules: Vec<RlsRuleView>,
}

/// One rule of a domain.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RlsRuleView {
    /// The descriptor path (`remote_address`, `generic_key=api → user`).
    pub rule: String,
    pub hits: u64,
    pub over_limit: u64,
}

/// One sidecar's published summary.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct FleetMember {
    pub id: String,
    pub owner: String,
    pub at_unix_ms: u64,
    pub limits: Vec<FleetLimit>,
}

/// One limit in a sidecar's summary.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct FleetLimit {
    pub name: String,
    pub admitted_per_s: f64,
    pub denied_per_s: f64,
    pub limited_now: Vec<KeyView>,
    /// Keys this sidecar holds leased units of, most units first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub leased: Vec<LeasedUnitsView>,
}
