//! The store's members as a client sees them (for status pages and `clusterlimit top`):
//! which servers make up the store and which one leads, where the store says so.

/// One server of the store.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct StoreMember {
    /// The member's name (etcd's member name, ZooKeeper's `server.N`).
    pub name: String,
    /// Where clients reach it (its first client URL or address), if the store says.
    pub address: String,
    /// `leader`, `follower`, `participant`/`observer` (ZooKeeper, which does not say who
    /// leads to a client), `primary`/`replica` (Redis; `(failing)` or a replication state may
    /// follow), `embedded` (memory://), or `unreachable` (a cluster of a sharded store that
    /// did not answer: named by its URL, its members unknown).
    pub role: String,
}
