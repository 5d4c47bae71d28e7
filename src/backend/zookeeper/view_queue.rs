//! The semaphore as a view holds it at its current point (`view.rs` keeps it current): the
//! capacity, the queue as the child listing names it, and on a fair semaphore its record, from
//! which holding (marks) and the next grant (`fair_record.rs`) are decided.

use super::fair_record::{Fair, GrantPlan, Tagged};
use super::nodes::EntryName;
use crate::backend::capacity::CapValue;
use crate::backend::waiters::{QueueView, Waiters};
use crate::fair::FairTag;
use crate::queue;
use std::collections::BTreeMap;

/// One queue entry as its node name tells it, with its weight lowered as its data says.
#[derive(Debug, Clone)]
pub(super) struct Queued {
    /// The weight: the name's, or lower once a shrink's data was read (it never rises).
    pub permits: u32,
    pub id: String,
    pub node: String,
    pub tag: Option<FairTag>,
}

/// The semaphore at the view's current point.
#[derive(Debug, Default)]
pub(super) struct Queue {
    /// `None`: the semaphore does not exist.
    pub cap: Option<CapValue>,
    /// Data version the capacity was read at (newer reads win).
    pub cap_version: i32,
    /// token (seq + 1) → the entry
    pub entries: BTreeMap<u64, Queued>,
    /// The creation of every entry with a token below this has been applied.
    pub seen: u64,
    /// The last shrink this view applied in order: `(data version, floor)`, the floor being
    /// exact (the holders of the moment the shrink was written), for the writer to store.
    pub shrink_floor: Option<(i32, u64)>,
    /// The fair record, on a fair semaphore.
    pub fair: Fair,
}

impl Queue {
    /// Adds the entry named `node` (parsed as `e`).
    pub(super) fn insert(&mut self, node: &str, e: EntryName) {
        let token = e.token();
        self.entries.insert(
            token,
            Queued {
                permits: e.permits,
                id: e.id,
                node: node.to_string(),
                tag: e.tag,
            },
        );
    }

    /// Lowers the weight of entry `token` (named `node`) to `weight` if that is lower: read
    /// from its data (see `entry_weights.rs` for what it may be combined with).
    pub(super) fn lower(&mut self, token: u64, node: &str, weight: u32) {
        if let Some(e) = self.entries.get_mut(&token).filter(|e| e.node == node) {
            e.permits = e.permits.min(weight);
        }
    }

    /// The grant the fair rule makes on this view (without entry `without`: a release writes
    /// it with its delete), if any. Always `None` on a plain semaphore.
    pub(super) fn plan(&self, without: Option<u64>) -> Option<GrantPlan> {
        let (Fair::Kept(fair), Some(cap)) = (&self.fair, self.cap) else {
            return None;
        };
        let queue: Vec<Tagged<'_>> = self
            .entries
            .iter()
            .filter(|(&t, _)| Some(t) != without)
            .map(|(&t, e)| (t, e.permits, e.tag.as_ref()))
            .collect();
        fair.plan(&queue, (cap.capacity, self.cap_version), self.seen)
    }

    /// When the fair rule grants one of `waiters` now: the grant to write.
    pub(super) fn plan_for(&self, waiters: &Waiters) -> Option<GrantPlan> {
        if !matches!(self.fair, Fair::Kept(_)) || waiters.is_empty() {
            return None;
        }
        let ours = waiters.tokens();
        self.plan(None)
            .filter(|p| p.grants.iter().any(|t| ours.contains(t)))
    }
}

impl QueueView for Queue {
    fn capacity(&self) -> Option<(u32, u64)> {
        self.cap.map(|c| (c.capacity, c.floor))
    }
    fn entries(&self) -> impl Iterator<Item = queue::Entry> + '_ {
        self.entries.iter().map(|(&token, e)| queue::Entry {
            token,
            permits: e.permits,
        })
    }
    fn contains(&self, token: u64) -> bool {
        self.entries.contains_key(&token)
    }
    fn has_seen(&self, token: u64) -> bool {
        self.seen > token
    }
    fn marked(&self, token: u64) -> Option<bool> {
        self.fair.marked(token)
    }
}

/// If `read` is the very next version after the capacity held and shrinks it, remembers the
/// floor that grandfathers exactly the holders of now (see `SemView::shrink_floor`). A fair
/// semaphore keeps no floor: its holders are its marks.
pub(super) fn note_shrink(q: &mut Queue, read: Option<(Option<CapValue>, i32)>) {
    let (Some(old), Some((Some(new), version))) = (q.cap, read) else {
        return;
    };
    if version == q.cap_version + 1 && new.capacity < old.capacity && q.fair == Fair::Plain {
        let entries: Vec<queue::Entry> = q.entries().collect();
        let floor = queue::floor_after_resize(&entries, old.capacity, new.capacity, old.floor);
        q.shrink_floor = Some((version, floor));
    }
}

/// Installs a capacity read (`None`: the semaphore is gone) unless a newer one is held.
pub(super) fn install_capacity(q: &mut Queue, read: Option<(Option<CapValue>, i32)>) {
    match read {
        Some((value, version)) if version >= q.cap_version => {
            // Unreadable capacity: keep the last good one rather than guess.
            if value.is_some() {
                q.cap = value;
            }
            q.cap_version = version;
        }
        Some(_) => {}
        None => {
            q.cap = None;
            q.cap_version = -1;
            q.entries.clear();
            q.fair = Fair::Plain;
        }
    }
}
