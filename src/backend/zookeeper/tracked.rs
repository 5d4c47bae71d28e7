//! This Limiter's queue entries, by request id (live, in doubt, abandoned), and what the
//! views' events mean for them: a node of ours deleted behind our back, a node nobody owns.

use super::nodes::{EntryData, EntryName};
use super::view::EntryEvents;
use crate::backend::lock;
use crate::lost::LostSignal;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

/// This Limiter's queue entries, by request id.
#[derive(Default)]
pub(super) struct Entries {
    pub(super) live: Mutex<HashMap<String, LiveEntry>>,
    /// Creates sent whose outcome is unknown (no reply yet, or the reply was lost).
    pub(super) in_doubt: Mutex<HashSet<String>>,
    /// In-doubt requests given up on: their node is deleted if it ever shows up.
    pub(super) abandoned: Mutex<HashSet<String>>,
    /// Set by the backend: deletes an abandoned node (a background task with a client).
    pub(super) reaper: Mutex<Option<Reaper>>,
}

pub(super) struct LiveEntry {
    pub(super) node: String,
    pub(super) lost: LostSignal,
    /// The node's data as last written by us, and its data version (`None`: not known, read
    /// it first): lets a shrink be one conditional `setData`.
    pub(super) data: Option<(EntryData, i32)>,
}

pub(super) type Reaper = Arc<dyn Fn(String) + Send + Sync>;

impl Entries {
    /// Forgets what belonged to a session that ended: its nodes went with it.
    pub(super) fn forget_session(&self) {
        lock(&self.live).retain(|_, e| !e.lost.is_lost());
        lock(&self.in_doubt).clear();
        lock(&self.abandoned).clear();
    }
}

impl EntryEvents for Entries {
    fn appeared(&self, semaphore: &str, node: &str) {
        let Some(e) = EntryName::parse(node) else {
            return;
        };
        // A node of a request given up on, or a second node of a live request (a create
        // retried after a reconnect, whose first attempt was applied late): nobody holds it.
        let orphan = lock(&self.abandoned).remove(&e.id)
            || lock(&self.live).get(&e.id).is_some_and(|l| l.node != node);
        if orphan {
            tracing::debug!(semaphore, node, "deleting the node of an abandoned request");
            if let Some(reap) = lock(&self.reaper).clone() {
                reap(format!("{semaphore}/{node}"));
            }
        }
    }

    fn vanished(&self, node: &str) {
        let Some(e) = EntryName::parse(node) else {
            return;
        };
        let gone = {
            let mut live = lock(&self.live);
            match live.get(&e.id) {
                Some(l) if l.node == node => live.remove(&e.id),
                _ => None,
            }
        };
        if let Some(l) = gone {
            tracing::warn!(node, "permit node deleted behind our back; permit lost");
            l.lost.fire();
        }
    }
}
