//! Announcements ("boards"): each Limiter publishes one small value per board, bound to its
//! session, and any Limiter reads them all. The sidecar's live view is built on it: every
//! sidecar announces its summary, and a value vanishes with the sidecar that wrote it.

/// One value on a board: who announced it and what.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Announcement {
    /// The announcing Limiter's id (unique per Limiter, see [`Limiter::announcer_id`](crate::Limiter::announcer_id)).
    pub id: String,
    /// The bytes it announced.
    pub value: Vec<u8>,
}
