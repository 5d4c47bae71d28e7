//! A fair semaphore's record in etcd (`<root>/s/<name>/fair`): its classes and the tokens of
//! the entries granted. It exists only for a fair semaphore, is created with the capacity key,
//! and every grant is a compare-and-swap on its `mod_revision` (`fair_grants.rs`), so two
//! Limiters never grant from the same marks. A mark whose entry is gone is dropped by the next
//! grant: holding is "queued and marked".

use super::calls::Link;
use super::keys::{queue_of, EntryValue};
use crate::backend::capacity::CapValue;
pub(super) use crate::backend::fair_record::FairRecord;
use crate::error::{Error, Result};
use crate::fair::{Classes, FairTag, NamedEntry, VTimes};
use etcd_client::KeyValue;
use std::collections::HashSet;

/// A fair record as read, at its `mod_revision`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct FairState {
    pub classes: Classes,
    pub marks: HashSet<u64>,
    pub vtimes: VTimes,
    pub mod_revision: i64,
}

impl FairState {
    /// Parses the record's key-value; `None` for bytes that are not a fair record (a foreign
    /// value: the semaphore is then treated as granting nothing more, never as plain).
    pub(super) fn parse(kv: &KeyValue) -> Option<FairState> {
        let rec: FairRecord = serde_json::from_slice(kv.value()).ok()?;
        Some(FairState {
            classes: rec.classes.parse().ok()?,
            marks: rec.granted.into_iter().collect(),
            vtimes: rec.vtimes,
            mod_revision: kv.mod_revision(),
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
        FairRecord {
            classes: self.classes.to_string(),
            granted,
            vtimes,
        }
    }
}

/// One entry as the fair rule needs it: token, weight and tag.
pub(super) type Tagged = (u64, u32, Option<FairTag>);

/// The entries the fair rule grants now, and the flows' virtual times to record with them.
pub(super) fn next_grants(queue: &[Tagged], capacity: u32, fair: &FairState) -> (Vec<u64>, VTimes) {
    let named: Vec<NamedEntry<'_>> = queue
        .iter()
        .map(|(t, p, tag)| NamedEntry::tagged(*t, *p, tag.as_ref(), fair.marks.contains(t)))
        .collect();
    crate::fair::next_grants_recorded(&named, capacity, &fair.classes, &fair.vtimes)
}

/// A fair semaphore as one read shows it.
pub(super) struct FairRead {
    pub capacity: u32,
    /// The capacity key's `mod_revision` in this read.
    pub cap_revision: i64,
    pub fair: FairState,
    pub queue: Vec<Tagged>,
}

impl FairRead {
    /// What a read of the semaphore's prefix shows; `Ok(None)` for a plain semaphore,
    /// `NotFound` for none.
    pub(super) fn of(link: &Link, name: &str, kvs: &[KeyValue]) -> Result<Option<FairRead>> {
        let (cap_key, fair_key) = (link.keys.cap(name), link.keys.fair(name));
        let find = |key: &str| kvs.iter().find(|kv| kv.key() == key.as_bytes());
        let Some((cap, cap_revision)) = find(&cap_key)
            .and_then(|kv| CapValue::parse(kv.value()).map(|c| (c, kv.mod_revision())))
        else {
            return Err(Error::NotFound(name.to_string()));
        };
        let Some(kv) = find(&fair_key) else {
            return Ok(None);
        };
        let fair = FairState::parse(kv)
            .ok_or_else(|| Error::store(format!("unreadable fair record at {fair_key}")))?;
        let queue_prefix = link.keys.queue_prefix(name);
        let queue = queue_of(&queue_prefix, kvs)
            .map(|(e, kv)| {
                let tag = EntryValue::parse(kv.value()).and_then(|v| v.tag());
                (e.token, e.permits, tag)
            })
            .collect();
        Ok(Some(FairRead {
            capacity: cap.capacity,
            cap_revision,
            fair,
            queue,
        }))
    }
}
