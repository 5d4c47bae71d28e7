//! The `"per_member"` object of a semaphore's status (`GET /v1/semaphores/{name}`, `status
//! NAME --json`): its live members and the capacity its controller computed.

use clusterlimit::PerMemberStatus;
use serde::Serialize;

/// The `"per_member"` object.
#[derive(Debug, Clone, Serialize)]
pub struct PerMemberView {
    /// Live Limiters that have the semaphore open as a per-member semaphore.
    pub members: usize,
    /// The controlling Limiter's owner label; `null` until one has counted.
    pub controller: Option<String>,
    /// How many members the controller counted last.
    pub counted: Option<usize>,
    /// The capacity that count makes.
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
