//! Announcements ("boards"): each Limiter publishes one small value per board, bound to its
//! session, and any Limiter reads them all. The sidecar's live view is built on it: every
//! sidecar announces its summary, and a value vanishes with the sidecar that wrote it.

use crate::error::Result;
use crate::limiter::Limiter;
use crate::validate;

/// One value on a board: who announced it and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Announcement {
    /// The announcing Limiter's id (unique per Limiter, see [`Limiter::announcer_id`]).
    pub id: String,
    /// The bytes it announced.
    pub value: Vec<u8>,
}

impl Limiter {
    /// Publishes `value` on `board` under this Limiter's own id (one value per Limiter and
    /// board; a second call replaces it). Bound to the Limiter's store session: it vanishes when
    /// the Limiter closes, its process dies (within the session TTL) or its session is lost;
    /// after a lost session call it again (it is not re-published by itself).
    ///
    /// Errors: `InvalidArgument` for a board name the semaphore names' rules refuse or a value
    /// over [`MAX_ANNOUNCEMENT_BYTES`](crate::validate::MAX_ANNOUNCEMENT_BYTES) (64 KiB),
    /// checked before any store request.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> clusterlimit::Result<()> {
    /// use clusterlimit::Limiter;
    /// let a = Limiter::connect("memory://announce-doc").await?;
    /// let b = Limiter::connect("memory://announce-doc").await?;
    /// a.announce("sidecars", br#"{"permits":3}"#).await?;
    /// b.announce("sidecars", br#"{"permits":1}"#).await?;
    /// assert_eq!(b.announcements("sidecars").await?.len(), 2);
    /// a.close().await?; // a's value goes with its session
    /// let left = b.announcements("sidecars").await?;
    /// assert_eq!((left.len(), left[0].id.as_str()), (1, b.announcer_id()));
    /// # Ok(()) }
    /// ```
    pub async fn announce(&self, board: &str, value: &[u8]) -> Result<()> {
        validate::name(board)?;
        validate::announcement(value)?;
        self.inner.check_open()?;
        let put = self
            .inner
            .backend
            .announce(board, &self.inner.id, value)
            .await;
        self.inner.closed_or_result(put)
    }

    /// Every value on `board` now, one per live announcer, sorted by id (empty for a board
    /// nobody announced on). `InvalidArgument` for a bad board name.
    pub async fn announcements(&self, board: &str) -> Result<Vec<Announcement>> {
        validate::name(board)?;
        self.inner.check_open()?;
        let read = self.inner.backend.announcements(board).await;
        let mut all: Vec<Announcement> = self
            .inner
            .closed_or_result(read)?
            .into_iter()
            .map(|(id, value)| Announcement { id, value })
            .collect();
        all.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(all)
    }

    /// Removes this Limiter's value from `board`; absent counts as removed.
    pub async fn withdraw(&self, board: &str) -> Result<()> {
        validate::name(board)?;
        self.inner.check_open()?;
        let removed = self.inner.backend.withdraw(board, &self.inner.id).await;
        self.inner.closed_or_result(removed)
    }

    /// The id this Limiter announces under (the [`Announcement::id`] of its values).
    pub fn announcer_id(&self) -> &str {
        &self.inner.id
    }
}
