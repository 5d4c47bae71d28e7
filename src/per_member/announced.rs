//! What a member of a per-member semaphore announces on its board: who it is and, from the
//! controller, its latest count; shared by the task that writes it and the status that reads it.

use serde::{Deserialize, Serialize};

/// One Limiter's announcement on a per-member board (JSON; unknown fields ignored, so a later
/// version may add some).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Member {
    /// The Limiter's owner label.
    pub owner: String,
    /// The controller's latest count (only the controller's announcement has one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<Count>,
}

/// One count of the controller: how many members it saw and the capacity that makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Count {
    pub members: usize,
    pub capacity: u32,
}
