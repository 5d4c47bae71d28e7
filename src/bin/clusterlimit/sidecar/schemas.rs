//! The OpenAPI schemas of the JSON the sidecar answers with types it does not own: the
//! library's `Status`, the quota, decision and balance JSON that `common/quota_print.rs` shares
//! with the CLI, and the quota preview of `live/replay.rs`. Each mirrors that JSON field for
//! field; tests/sidecar_openapi.rs validates real answers against them (unknown fields
//! refused), so a field added there without its schema here fails the tests.
//!
//! Nothing here is built: the types only carry their schemas.
#![allow(dead_code)]

use std::collections::BTreeMap;
use utoipa::ToSchema;

/// One holder of permits, or one request waiting for them.
#[derive(ToSchema)]
pub struct Holder {
    /// Owner label of the holder's sidecar or acquire call.
    owner: String,
    permits: u32,
    /// Fencing token of the grant (the one a waiter's grant will carry).
    fencing_token: u64,
    /// When the request was made, in milliseconds since the Unix epoch (holder's clock).
    since_unix_ms: u64,
    /// On a fair semaphore, the request's flow.
    #[schema(nullable = false)]
    flow: Option<String>,
    /// On a fair semaphore, the request's class.
    #[schema(nullable = false)]
    class: Option<String>,
}

/// One class of a fair semaphore.
#[derive(ToSchema)]
pub struct ClassUsage {
    name: String,
    /// Permits guaranteed to it at the current capacity.
    guaranteed: u32,
    /// Permits its requests hold.
    held: u32,
    /// Its requests waiting.
    waiting: u64,
    /// Flows with requests waiting in it, sorted.
    waiting_flows: Vec<String>,
}

/// A semaphore's status.
#[derive(ToSchema)]
pub struct SemaphoreStatus {
    name: String,
    capacity: u32,
    /// Permits held (may exceed `capacity` right after a shrink).
    used: u32,
    /// Holders in grant order.
    holders: Vec<Holder>,
    /// Requests waiting.
    waiting: u64,
    /// Permits those waiting requests ask for in total.
    waiting_permits: u64,
    /// The waiting requests in FIFO order.
    waiters: Vec<Holder>,
    /// On a fair semaphore, each class's usage (absent on a plain one).
    #[schema(nullable = false)]
    classes: Option<Vec<ClassUsage>>,
}

/// A semaphore's status with its adaptive or per-member state, if its Limiters announce one.
#[derive(ToSchema)]
pub struct SemaphoreView {
    name: String,
    capacity: u32,
    used: u32,
    holders: Vec<Holder>,
    waiting: u64,
    waiting_permits: u64,
    waiters: Vec<Holder>,
    #[schema(nullable = false)]
    classes: Option<Vec<ClassUsage>>,
    /// How an adaptive semaphore adapts.
    #[schema(nullable = false)]
    adaptive: Option<crate::sidecar::adaptive_view::AdaptiveView>,
    /// A per-member semaphore's members and computed capacity.
    #[schema(nullable = false)]
    per_member: Option<crate::sidecar::per_member_view::PerMemberView>,
}

/// A rate limit's quota.
#[derive(ToSchema)]
pub struct Quota {
    name: String,
    limit: u64,
    /// The period as text (`1s`, `1m30s`).
    period: String,
    period_ms: u64,
    burst: u64,
    /// `gcra`, `sliding_window` or `fixed_window`.
    algorithm: String,
    ban_ms: u64,
    /// Only for a quota with a warm-up.
    #[schema(nullable = false)]
    warmup: Option<String>,
    #[schema(nullable = false)]
    warmup_ms: Option<u64>,
    #[schema(nullable = false)]
    cold_factor: Option<u64>,
    /// Only for a quota with priority classes: each class's reserve.
    #[schema(nullable = false)]
    reserves: Option<BTreeMap<String, u64>>,
    /// Only for a quota that shares each key among its flows (always `true` when present).
    #[schema(nullable = false)]
    fair_flows: Option<bool>,
}

/// A rate-limit decision on one key.
#[derive(ToSchema)]
pub struct Decision {
    name: String,
    key: String,
    cost: u64,
    allowed: bool,
    limit: u64,
    remaining: u64,
    /// When a denied request could pass (rounded up); `null` when allowed.
    #[schema(required)]
    retry_after_ms: Option<u64>,
    /// When the key is full again (rounded up).
    reset_after_ms: u64,
    /// Who decided: `store`, `fail_open`, `fail_closed` or `local`.
    source: String,
}

/// A key's balance after a charge, refund or settlement, or as it stands.
#[derive(ToSchema)]
pub struct Balance {
    name: String,
    key: String,
    limit: u64,
    /// What a check could take now.
    remaining: u64,
    /// What the key owes (charged beyond what it had).
    debt: u64,
    #[schema(required)]
    retry_after_ms: Option<u64>,
    reset_after_ms: u64,
}

/// A denied check or wait: the decision's fields with the problem's (RFC 9457).
#[derive(ToSchema, serde::Serialize)]
pub struct RateLimitedProblem {
    #[schema(rename = "type")]
    kind: String,
    title: String,
    status: u16,
    detail: String,
    /// `rate_limited` (429), `store_unavailable` (503: the fail_closed policy denied it).
    code: String,
    name: String,
    key: String,
    cost: u64,
    allowed: bool,
    limit: u64,
    remaining: u64,
    #[schema(required)]
    retry_after_ms: Option<u64>,
    reset_after_ms: u64,
    source: String,
}

/// A denied reservation: the reservation's fields with the problem's (RFC 9457).
#[derive(ToSchema)]
pub struct ReservationProblem {
    #[schema(rename = "type")]
    kind: String,
    title: String,
    status: u16,
    detail: String,
    /// `rate_limited`.
    code: String,
    name: String,
    key: String,
    allowed: bool,
    estimate: u64,
    limit: u64,
    remaining: u64,
    #[schema(required)]
    retry_after_ms: Option<u64>,
    reset_after_ms: u64,
    settle_within_ms: u64,
}

/// The body of `PUT /v1/ratelimits/{name}` and of its preview: a quota. A duration is given
/// as text (`period`: `"1s"`, `"1m 30s"`) or in milliseconds (`period_ms`), not both.
#[derive(ToSchema, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaBody {
    limit: Option<i64>,
    period: Option<String>,
    period_ms: Option<i64>,
    burst: Option<i64>,
    /// `gcra` (the default), `sliding_window` or `fixed_window`.
    algorithm: Option<String>,
    ban: Option<String>,
    ban_ms: Option<i64>,
    warmup: Option<String>,
    warmup_ms: Option<i64>,
    cold_factor: Option<i64>,
    /// `{"class": reserve, …}` (`{}`: none).
    reserves: Option<BTreeMap<String, u64>>,
    /// Each key shared max-min fairly among its flows.
    fair_flows: Option<bool>,
}

/// What a proposed quota would have denied of the last minutes' checks.
#[derive(ToSchema)]
pub struct Preview {
    /// Keys replayed (the busiest and the most denied).
    keys: u64,
    /// Seconds the replay covers.
    seconds: u64,
    /// Checks replayed.
    checks: u64,
    /// Checks actually denied, as recorded.
    denied_recorded: u64,
    /// Checks the current quota denies in the replay.
    denied_current: u64,
    /// Checks the proposed quota would have denied.
    denied_proposed: u64,
    /// The keys whose outcome changes most.
    changed: Vec<KeyChange>,
}

/// One key's replayed denials.
#[derive(ToSchema)]
pub struct KeyChange {
    key: String,
    checks: u64,
    denied_current: u64,
    denied_proposed: u64,
}

/// A check's or wait's 503: the decision's fields with the problem's when the fail_closed
/// policy denied it, a plain problem when the store did not answer otherwise.
#[derive(ToSchema, serde::Serialize)]
#[serde(untagged)]
pub enum StoreDownProblem {
    Denied(RateLimitedProblem),
    Unanswered(crate::sidecar::problem::Problem),
}
