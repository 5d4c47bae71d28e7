//! The `"per_member"` object of a semaphore's status (`GET /v1/semaphores/{name}`, `status
//! NAME --json`): its live members and the capacity its controller computed.

use clusterlimit::PerMemberStatus;
use serde::Serialize;
use utoipa::ToSchema;

/// The `"per_member"` object.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PerMemberView {
    /// Live Limiters that have the semaphore open as a per-member semaphore.
    pub members: usize,
    /// The controlling Limiter's owner label; `null` until one has counted.
    #[schema(required = true)]
    pub controller: Option<String>,
    /// How many members the controller counted last.
    #[schema(required = true)]
    pub counted: Option<usize>,
    /// The capacity that count makes.
    #[schema(required = true)]
    pub capacity: Option<u32>,
}

impl From<&PerMemberStatus> for PerMemberView {
    fn from(p: &PerMemberStatus) -> Self {
        PerMemberView {
            members: p.members,
            controller: p.controller.clone(),
            counted: p.counted,
            capacity: p.capacity,
        }
    }
}
