//! Fair semaphores in the embedded store: the class table, the grant marks, and the one step
//! that marks what [`crate::fair::next_grants_named`] grants, run under the store's lock after
//! every change of a fair queue (enqueue, removal, session end, resize).

use crate::fair::{next_grants_recorded, Classes, FairTag, NamedEntry, VTimes};
use crate::status::{Holder, Status};
use std::collections::HashSet;

/// What a fair semaphore keeps beside its queue.
#[derive(Debug)]
pub(super) struct MemFair {
    pub(super) classes: Classes,
    /// Tokens of the entries granted (only of entries still queued).
    pub(super) marks: HashSet<u64>,
    /// The flows' virtual times at the last grant (only of flows with entries).
    vtimes: VTimes,
}

impl MemFair {
    pub(super) fn new(classes: Classes) -> MemFair {
        MemFair {
            classes,
            marks: HashSet::new(),
            vtimes: VTimes::new(),
        }
    }
}

impl MemFair {
    /// Marks every entry of `entries` (the whole queue) that the fair rule grants now, after
    /// forgetting the marks of entries gone.
    pub(super) fn grant(&mut self, entries: &[(u64, u32, Option<&FairTag>)], capacity: u32) {
        let queued: HashSet<u64> = entries.iter().map(|e| e.0).collect();
        self.marks.retain(|t| queued.contains(t));
        let named: Vec<NamedEntry<'_>> = entries
            .iter()
            .map(|&(t, p, tag)| NamedEntry::tagged(t, p, tag, self.marks.contains(&t)))
            .collect();
        let (grants, vtimes) = next_grants_recorded(&named, capacity, &self.classes, &self.vtimes);
        if !grants.is_empty() {
            self.vtimes = vtimes;
        }
        self.marks.extend(grants);
    }

    /// The status of a fair semaphore from its queue as (token, row, tag): the marked entries
    /// hold, the others wait; each row shows its flow and class.
    pub(super) fn status(
        &self,
        name: &str,
        capacity: u32,
        queue: impl Iterator<Item = (u64, Holder, Option<FairTag>)>,
    ) -> Status {
        let (mut holders, mut waiters) = (Vec::new(), Vec::new());
        let first = self.classes.name(0).unwrap_or_default();
        for (token, row, tag) in queue {
            let tag = tag.unwrap_or_default();
            let row = row.in_flow(&tag.flow, tag.class.as_deref().unwrap_or(first));
            if self.marks.contains(&token) {
                holders.push(row);
            } else {
                waiters.push(row);
            }
        }
        Status::from_queue(name, capacity, holders, waiters).with_classes(&self.classes)
    }
}
