//! `Semaphore::per_member_status`: a per-member semaphore's members and the capacity its
//! controller computed, as read from its board.

use super::announced::Member;
use super::names::board_of;
use crate::error::Result;
use crate::semaphore::Semaphore;

/// A per-member semaphore's members now, as their announcements show them.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PerMemberStatus {
    /// Live Limiters that have it open as a per-member semaphore (a Limiter that died without
    /// closing counts until its session expires).
    pub members: usize,
    /// The owner label of the controlling Limiter, once it has counted (`None` right after a
    /// controller went, until the next one's first count).
    pub controller: Option<String>,
    /// How many members the controller counted last (at most a third of a session TTL ago).
    pub counted: Option<usize>,
    /// The capacity that count makes, as the controller stored it.
    pub capacity: Option<u32>,
}

impl Semaphore {
    /// This semaphore's members and computed capacity, as the Limiters that have it open as a
    /// per-member semaphore ([`Limiter::per_member_semaphore`](crate::Limiter::per_member_semaphore))
    /// announce them: `None` if none does. One store read. Cancel-safe.
    pub async fn per_member_status(&self) -> Result<Option<PerMemberStatus>> {
        let inner = self.limiter();
        inner.check_open()?;
        let read = inner.backend.announcements(&board_of(self.name())).await;
        let all = inner.closed_or_result(read)?;
        if all.is_empty() {
            return Ok(None);
        }
        let controller = all
            .iter()
            .filter_map(|(_, v)| serde_json::from_slice::<Member>(v).ok())
            .find_map(|m| m.count.map(|c| (m.owner, c)));
        Ok(Some(PerMemberStatus {
            members: all.len(),
            counted: controller.as_ref().map(|(_, c)| c.members),
            capacity: controller.as_ref().map(|(_, c)| c.capacity),
            controller: controller.map(|(owner, _)| owner),
        }))
    }
}
