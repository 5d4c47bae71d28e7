//! The store's members as a client sees them (for status pages and `clusterlimit top`):
//! which servers make up the store and which one leads, where the store says so.

use crate::error::Result;
use crate::Limiter;

/// One server of the store.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StoreMember {
    /// The member's name (etcd's member name, ZooKeeper's `server.N`).
    pub name: String,
    /// Where clients reach it (its first client URL or address), if the store says.
    pub address: String,
    /// `leader`, `follower`, `participant`/`observer` (ZooKeeper, which does not say who
    /// leads to a client), or `embedded` (memory://).
    pub role: String,
}

impl Limiter {
    /// The store's members, as the store reports them now: etcd's member list with the
    /// leader marked; ZooKeeper's configuration (`/zookeeper/config`; who leads is not told to
    /// clients); one `embedded` member for memory://; every cluster's members for a sharded
    /// store. Empty for a backend that cannot tell. Bounded by the request timeout.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> clusterlimit::Result<()> {
    /// let limiter = clusterlimit::Limiter::connect("memory://members-doc").await?;
    /// let members = limiter.store_members().await?;
    /// assert_eq!(members[0].role, "embedded");
    /// # Ok(()) }
    /// ```
    pub async fn store_members(&self) -> Result<Vec<StoreMember>> {
        self.inner.check_open()?;
        let read = self.inner.backend.members().await;
        self.inner.closed_or_result(read)
    }
}
