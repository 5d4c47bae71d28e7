//! Node layout and values in ZooKeeper. A semaphore is one persistent node whose data is the
//! capacity record and whose children are the queue, so one `getChildren` sees the whole queue
//! with every weight and position, and one recursive watch sees every change:
//!
//! ```text
//! <root>/s/<name>                          {"capacity":N,"floor":F}  (persistent)
//! <root>/s/<name>/<permits>-<id>-<seq>     {"owner":"…","since_unix_ms":T}  (ephemeral sequential)
//! ```
//!
//! * `<seq>` is ZooKeeper's sequence suffix, strictly increasing in creation order from 0. The
//!   entry's token (queue position and fencing token) is `seq + 1`: tokens start at 1, as
//!   [`crate::queue`] requires.
//! * `<id>` is the request id (32 hex digits, chosen before the first attempt): a create whose
//!   reply was lost is found again by it after a reconnect, and never created twice.
//! * `<permits>` is in the name so that a child listing alone decides who holds.
//!
//! Names are validated to `[A-Za-z0-9._-]` and ids are hex, so a name never reaches outside
//! its parent.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone)]
pub(super) struct Paths {
    root: String,
}

impl Paths {
    /// `root` is an absolute path without a trailing slash (see `StoreUrl`).
    pub(super) fn new(root: &str) -> Self {
        Paths {
            root: root.to_string(),
        }
    }
    pub(super) fn root(&self) -> &str {
        &self.root
    }
    pub(super) fn semaphores(&self) -> String {
        format!("{}/s", self.root)
    }
    pub(super) fn semaphore(&self, name: &str) -> String {
        format!("{}/s/{name}", self.root)
    }
    /// Path given to a sequential create; ZooKeeper appends `<seq>`.
    pub(super) fn entry_prefix(&self, name: &str, permits: u32, id: &str) -> String {
        format!("{}/s/{name}/{permits}-{id}-", self.root)
    }
    pub(super) fn entry(&self, name: &str, node: &str) -> String {
        format!("{}/s/{name}/{node}", self.root)
    }
}

/// A queue entry as its node name tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct EntryName {
    pub seq: u64,
    pub permits: u32,
    pub id: String,
}

impl EntryName {
    /// Queue position and fencing token.
    pub(super) fn token(&self) -> u64 {
        self.seq + 1
    }

    /// The node name of entry `token` of request `id`.
    pub(super) fn node(permits: u32, id: &str, token: u64) -> String {
        let seq = token.saturating_sub(1);
        // ZooKeeper's own suffix format: 10 digits, 19 once past i32.
        if seq <= i32::MAX as u64 {
            format!("{permits}-{id}-{seq:010}")
        } else {
            format!("{permits}-{id}-{seq:019}")
        }
    }

    /// Parses `<permits>-<id>-<seq>`. `None` if there is no sequence suffix (not a queue entry).
    /// An unreadable weight counts as `u32::MAX`: a node written by something else blocks
    /// everything behind it, since never granting too much beats granting on a guess.
    pub(super) fn parse(node: &str) -> Option<EntryName> {
        let (rest, seq) = node.rsplit_once('-')?;
        if seq.is_empty() || !seq.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let seq = seq.parse::<u64>().ok()?;
        let (permits, id) = rest.split_once('-').unwrap_or((rest, ""));
        Some(EntryName {
            seq,
            permits: permits.parse().ok().filter(|&p| p > 0).unwrap_or(u32::MAX),
            id: id.to_string(),
        })
    }
}

/// Data of a queue entry node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct EntryData {
    pub owner: String,
    pub since_unix_ms: u64,
}

impl EntryData {
    pub(super) fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }
    pub(super) fn parse(raw: &[u8]) -> Option<EntryData> {
        serde_json::from_slice(raw).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        let p = Paths::new("/cl");
        assert_eq!(p.entry_prefix("jobs", 2, "ab12"), "/cl/s/jobs/2-ab12-");
        assert_eq!(
            EntryName::parse("2-ab12-0000000042"),
            Some(EntryName {
                seq: 42,
                permits: 2,
                id: "ab12".into()
            })
        );
        // Foreign nodes: a sequence but no readable weight blocks; no sequence is ignored.
        assert_eq!(
            EntryName::parse("x-0000000007").map(|e| e.permits),
            Some(u32::MAX)
        );
        assert_eq!(
            EntryName::parse("0-a-0000000007").map(|e| e.permits),
            Some(u32::MAX)
        );
        assert_eq!(EntryName::parse("lock"), None);
        assert_eq!(EntryName::parse("1-a-"), None);
        assert_eq!(EntryName::parse("1-a-12x"), None);
    }
}
