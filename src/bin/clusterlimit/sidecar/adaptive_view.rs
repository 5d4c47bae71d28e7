//! How an adaptive semaphore adapts, as `GET /v1/semaphores/{name}` and `clusterlimit status
//! --json` show it: the semaphore's status with an `"adaptive"` object when it has one (and a
//! `"per_member"` one, `per_member_view.rs`, for a per-member semaphore).

use super::per_member_view::PerMemberView;
use clusterlimit::adaptive::{AdaptiveStatus, CapacityDecision};
use clusterlimit::Status;
use serde::Serialize;
use utoipa::ToSchema;

/// A semaphore's status, with its adaptive or per-member state if its Limiters announce one.
#[derive(Debug, Serialize)]
pub struct StatusView {
    #[serde(flatten)]
    pub status: Status,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adaptive: Option<AdaptiveView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_member: Option<PerMemberView>,
}

/// The `"adaptive"` object.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AdaptiveView {
    /// Limiters announcing outcomes for the semaphore now.
    pub reporters: usize,
    /// The controller's newest step; `null` until one is in control.
    #[schema(required = true)]
    pub last: Option<DecisionView>,
}

/// One step of the controller, in milliseconds.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DecisionView {
    pub from: u32,
    pub to: u32,
    pub reason: String,
    pub ok: u64,
    pub dropped: u64,
    #[schema(required = true)]
    pub p50_ms: Option<f64>,
    pub peak_in_flight: u64,
    #[schema(required = true)]
    pub baseline_ms: Option<f64>,
    pub controller: String,
    pub at_unix_ms: u64,
}

/// Microseconds as milliseconds.
fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

impl From<&CapacityDecision> for DecisionView {
    fn from(d: &CapacityDecision) -> Self {
        DecisionView {
            from: d.from,
            to: d.to,
            reason: d.reason.clone(),
            ok: d.ok,
            dropped: d.dropped,
            p50_ms: d.p50_us.map(ms),
            peak_in_flight: d.peak_in_flight,
            baseline_ms: d.baseline_us.map(ms),
            controller: d.controller.clone(),
            at_unix_ms: d.at_unix_ms,
        }
    }
}

impl From<&AdaptiveStatus> for AdaptiveView {
    fn from(a: &AdaptiveStatus) -> Self {
        AdaptiveView {
            reporters: a.reporters,
            last: a.last.as_ref().map(DecisionView::from),
        }
    }
}

impl DecisionView {
    /// Share of the window's reported outcomes that were drops (0 without any).
    pub fn drop_ratio(&self) -> f64 {
        let all = self.ok.saturating_add(self.dropped);
        if all == 0 {
            0.0
        } else {
            self.dropped as f64 / all as f64
        }
    }
}
