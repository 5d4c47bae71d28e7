//! A fair semaphore's record in ZooKeeper (`<root>/s/<name>/fair`): its classes and the tokens
//! of the entries granted, as etcd keeps it. It exists only for a fair semaphore, is created
//! with the semaphore's node in one `multi`, and every grant is a `setData` expecting the data
//! version the decision was read at (`fair_grants.rs`), so two Limiters never grant from the
//! same marks. A mark whose entry is gone is dropped by the next grant: holding is "queued and
//! marked".
//!
//! Reads that are not atomic: a grant decision combines the record with a child listing. The
//! record must be the older of the two, or be checked against what the listing has seen: a mark
//! refers to an entry created before the mark was written, so once the listing has seen every
//! creation up to the highest mark, a marked entry absent from it is truly gone. A record newer
//! than the listing (a mark of an entry the listing has not seen yet) decides nothing: dropping
//! that mark would revoke a fresh holder, and not counting it would over-grant.

pub(super) use crate::backend::fair_record::FairRecord;
use crate::fair::{Classes, FairTag, NamedEntry, VTimes};
use std::collections::HashSet;

/// A fair record as read, at its data version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct FairState {
    pub classes: Classes,
    pub marks: HashSet<u64>,
    pub vtimes: VTimes,
    pub version: i32,
}

impl FairState {
    /// Parses the record's data; `None` for bytes that are not a fair record.
    pub(super) fn parse(data: &[u8], version: i32) -> Option<FairState> {
        let rec: FairRecord = serde_json::from_slice(data).ok()?;
        Some(FairState {
            classes: rec.classes.parse().ok()?,
            marks: rec.granted.into_iter().collect(),
            vtimes: rec.vtimes,
            version,
        })
    }

    /// The record after granting `grants` (with the flows' virtual times `vtimes`), keeping
    /// only the marks of entries in `queued`.
    pub(super) fn with_grants(
        &self,
        queued: &HashSet<u64>,
        grants: &[u64],
        vtimes: VTimes,
    ) -> FairRecord {
        let mut granted: Vec<u64> = self
            .marks
            .iter()
            .copied()
            .filter(|t| queued.contains(t))
            .chain(grants.iter().copied())
            .collect();
        granted.sort_unstable();
        granted.dedup();
        FairRecord {
            classes: self.classes.to_string(),
            granted,
            vtimes,
        }
    }

    /// The grant the fair rule makes on `queue` (in token order) now, given that every entry
    /// created with a token below `seen` is reflected in it; `None` when nothing is granted,
    /// or when a mark refers to an entry not seen yet (see the module doc).
    pub(super) fn plan(
        &self,
        queue: &[Tagged<'_>],
        (capacity, cap_version): (u32, i32),
        seen: u64,
    ) -> Option<GrantPlan> {
        if self.marks.iter().any(|&t| t >= seen) {
            return None;
        }
        let named: Vec<NamedEntry<'_>> = queue
            .iter()
            .map(|&(t, p, tag)| NamedEntry::tagged(t, p, tag, self.marks.contains(&t)))
            .collect();
        let (grants, vtimes) =
            crate::fair::next_grants_recorded(&named, capacity, &self.classes, &self.vtimes);
        if grants.is_empty() {
            return None;
        }
        let queued = queue.iter().map(|e| e.0).collect();
        Some(GrantPlan {
            version: self.version,
            cap_version,
            record: self.with_grants(&queued, &grants, vtimes),
            grants,
        })
    }
}

/// One entry as the fair rule needs it: token, weight and tag.
pub(super) type Tagged<'a> = (u64, u32, Option<&'a FairTag>);

/// A grant decided from a view: the record to write if it is still at data `version` and the
/// capacity at `cap_version`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct GrantPlan {
    pub version: i32,
    pub cap_version: i32,
    pub record: FairRecord,
    pub grants: Vec<u64>,
}

/// What a semaphore's view knows about its fair record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) enum Fair {
    /// No record: a plain FIFO semaphore.
    #[default]
    Plain,
    /// The record, at a data version.
    Kept(FairState),
    /// A record that is unreadable (foreign bytes) or was deleted under a semaphore that had
    /// one: nobody is granted from it and new acquires are refused, never a FIFO guess.
    Broken,
}

impl Fair {
    /// The marks, on a fair semaphore (`None`: a plain one; empty when broken).
    pub(super) fn marked(&self, token: u64) -> Option<bool> {
        match self {
            Fair::Plain => None,
            Fair::Kept(f) => Some(f.marks.contains(&token)),
            Fair::Broken => Some(false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(marks: &[u64]) -> FairState {
        FairState {
            classes: Classes::single(),
            marks: marks.iter().copied().collect(),
            vtimes: VTimes::new(),
            version: 7,
        }
    }

    #[test]
    fn a_plan_keeps_live_marks_and_waits_for_unseen_ones() {
        let (a, b) = (FairTag::new("a"), FairTag::new("b"));
        let queue = [(1, 1, Some(&a)), (2, 1, Some(&a)), (3, 1, Some(&b))];
        // Marks 1 and 9 (9 is gone: seen past it), capacity 2: the next grant is flow b's head.
        let plan = state(&[1, 9]).plan(&queue, (2, 4), 10).unwrap();
        assert_eq!((plan.version, plan.cap_version), (7, 4));
        assert_eq!(plan.grants, vec![3]);
        assert_eq!(plan.record.granted, vec![1, 3]);
        // A mark of an entry the listing has not seen yet: no decision.
        assert_eq!(state(&[1, 12]).plan(&queue, (3, 4), 10), None);
        // Full: nothing to grant.
        assert_eq!(state(&[1, 2]).plan(&queue, (2, 4), 10), None);
        let text = FairRecord::new(&Classes::single()).encode();
        assert_eq!(FairState::parse(&text, 3).map(|s| s.version), Some(3));
        assert_eq!(FairState::parse(b"{\"capacity\":3}", 3), None);
        assert_eq!(Fair::Broken.marked(1), Some(false));
        assert_eq!(Fair::Plain.marked(1), None);
    }
}
