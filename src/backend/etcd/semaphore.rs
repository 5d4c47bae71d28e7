//! A semaphore's own records: its capacity (created, opened, resized) and its status (the
//! names of all semaphores are one keys-only range: `Link::names_under`). [`Semaphores`] keeps no state of its own: the link, and the stray
//! finder that every queue it reads is checked with (`strays.rs`).

use super::calls::Link;
use super::client::get_kvs;
use super::client::kv;
use super::fair_record::{FairRead, FairRecord};
use super::keys::{queue_of, EntryValue};
use super::strays::Strays;
use crate::backend::capacity::CapValue;
use crate::backend::fair_checks;
use crate::backend::retry::Attempts;
use crate::error::{Error, Result};
use crate::fair::Classes;
use crate::queue;
use crate::stats::RequestKind;
use crate::status::{Holder, Status};
use etcd_client::{Compare, CompareOp, GetOptions, SortOrder, SortTarget, Txn, TxnOp};
use std::sync::Arc;

/// The semaphores of a backend: their capacities and statuses.
pub(super) struct Semaphores {
    link: Arc<Link>,
    strays: Strays,
}

impl Semaphores {
    pub(super) fn new(link: Arc<Link>, strays: Strays) -> Semaphores {
        Semaphores { link, strays }
    }

    /// Creates the semaphore with `capacity` if absent, or opens it (see
    /// [`Backend::ensure_semaphore`](crate::backend::Backend::ensure_semaphore)).
    pub(super) async fn open(&self, name: &str, capacity: Option<u32>) -> Result<u32> {
        let cap_key = self.link.keys.cap(name);
        let Some(requested) = capacity else {
            let resp = self
                .link
                .retry(RequestKind::Range, |mut c| {
                    let k = cap_key.clone();
                    async move { c.get(k, None).await }
                })
                .await?;
            return match resp.kvs().first() {
                Some(kv) => CapValue::parse(kv.value())
                    .map(|c| c.capacity)
                    .ok_or_else(|| Error::store(format!("unreadable capacity at {cap_key}"))),
                None => Err(Error::NotFound(name.to_string())),
            };
        };
        let value = CapValue::new(requested).encode();
        let index = self.link.keys.name_index(name);
        let txn = Txn::new()
            .when([Compare::create_revision(
                cap_key.clone(),
                CompareOp::Equal,
                0,
            )])
            .and_then([
                TxnOp::put(cap_key.clone(), value, None),
                TxnOp::put(index, "", None),
            ])
            .or_else([TxnOp::get(cap_key.clone(), None)]);
        let resp = self.link.txn(txn).await?;
        if resp.succeeded() {
            return Ok(requested);
        }
        let ops = resp.op_responses();
        let stored = get_kvs(ops.first())
            .first()
            .and_then(|kv| CapValue::parse(kv.value()))
            .ok_or_else(|| Error::store(format!("unreadable capacity at {cap_key}")))?;
        if stored.capacity != requested {
            return Err(Error::CapacityMismatch {
                stored: stored.capacity,
                requested,
            });
        }
        Ok(stored.capacity)
    }

    /// Creates the fair semaphore with `capacity` and `classes` if absent (its capacity key,
    /// its fair record and its name in one Txn), or opens it (see
    /// [`Backend::ensure_fair_semaphore`](crate::backend::Backend::ensure_fair_semaphore)).
    pub(super) async fn open_fair(
        &self,
        name: &str,
        capacity: Option<u32>,
        classes: Option<&Classes>,
    ) -> Result<u32> {
        let (cap_key, fair_key) = (self.link.keys.cap(name), self.link.keys.fair(name));
        if let (Some(requested), Some(classes)) = (capacity, classes) {
            let txn = Txn::new()
                .when([Compare::create_revision(
                    cap_key.clone(),
                    CompareOp::Equal,
                    0,
                )])
                .and_then([
                    TxnOp::put(cap_key.clone(), CapValue::new(requested).encode(), None),
                    TxnOp::put(fair_key.clone(), FairRecord::new(classes).encode(), None),
                    TxnOp::put(self.link.keys.name_index(name), "", None),
                ]);
            if self.link.txn(txn).await?.succeeded() {
                return Ok(requested);
            }
        }
        let (_, kvs) = read_semaphore(&self.link, name).await?;
        let read =
            FairRead::of(&self.link, name, &kvs)?.ok_or_else(|| fair_checks::not_fair(name))?;
        if let Some(asked) = classes.filter(|c| **c != read.fair.classes) {
            return Err(fair_checks::classes_differ(name, &read.fair.classes, asked));
        }
        match capacity {
            Some(c) if c != read.capacity => Err(Error::CapacityMismatch {
                stored: read.capacity,
                requested: c,
            }),
            _ => Ok(read.capacity),
        }
    }

    /// The semaphore's holders and waiters, from one read of its prefix.
    pub(super) async fn status(&self, name: &str) -> Result<Status> {
        let (_, kvs) = read_semaphore(&self.link, name).await?;
        if let Some(read) = FairRead::of(&self.link, name, &kvs)? {
            return Ok(self.fair_status(name, &kvs, &read));
        }
        let cap_key = self.link.keys.cap(name);
        let cap = kvs
            .iter()
            .find(|kv| kv.key() == cap_key.as_bytes())
            .and_then(|kv| CapValue::parse(kv.value()))
            .ok_or_else(|| Error::NotFound(name.to_string()))?;
        let queue_prefix = self.link.keys.queue_prefix(name);
        let entries: Vec<_> = queue_of(&queue_prefix, &kvs).collect();
        for (_, kv) in &entries {
            self.strays.check(name, &queue_prefix, kv);
        }
        let n = queue::holders(entries.iter().map(|(e, _)| *e), cap.capacity, cap.floor);
        let mut rows: Vec<Holder> = entries
            .iter()
            .map(|(e, kv)| {
                let v = EntryValue::parse(kv.value());
                Holder::new(
                    v.as_ref().map_or("?", |v| &v.owner),
                    e.permits,
                    e.token,
                    v.as_ref().map_or(0, |v| v.since_unix_ms),
                )
            })
            .collect();
        let waiters = rows.split_off(n);
        Ok(Status::from_queue(name, cap.capacity, rows, waiters))
    }

    /// A fair semaphore's status: the marked entries hold, the others wait.
    fn fair_status(&self, name: &str, kvs: &[etcd_client::KeyValue], read: &FairRead) -> Status {
        let queue_prefix = self.link.keys.queue_prefix(name);
        let first = read.fair.classes.name(0).unwrap_or_default();
        let (mut holders, mut waiters) = (Vec::new(), Vec::new());
        for (e, kv) in queue_of(&queue_prefix, kvs) {
            self.strays.check(name, &queue_prefix, kv);
            let v = EntryValue::parse(kv.value());
            let tag = v.as_ref().and_then(EntryValue::tag).unwrap_or_default();
            let row = Holder::new(
                v.as_ref().map_or("?", |v| &v.owner),
                e.permits,
                e.token,
                v.as_ref().map_or(0, |v| v.since_unix_ms),
            )
            .in_flow(&tag.flow, tag.class.as_deref().unwrap_or(first));
            if read.fair.marks.contains(&e.token) {
                holders.push(row);
            } else {
                waiters.push(row);
            }
        }
        Status::from_queue(name, read.capacity, holders, waiters).with_classes(&read.fair.classes)
    }

    /// Changes the capacity for every client; shrinking keeps current holders.
    ///
    /// The write compares the capacity key alone, so acquires and releases never make it fail:
    /// only another capacity write does (docs/design.md §7b). On a shrink the floor written is
    /// the one of the read, which can only be too low (entries granted since the read are not
    /// grandfathered yet, never a waiter); the same Txn reads the queue at the write's revision,
    /// and if that shows more holders, one more compare-and-set on the capacity key raises it.
    pub(super) async fn resize(&self, name: &str, capacity: u32) -> Result<()> {
        let cap_key = self.link.keys.cap(name);
        let queue_prefix = self.link.keys.queue_prefix(name);
        let mut attempts = Attempts::new(self.link.config.request_timeout);
        loop {
            let (_, kvs) = read_semaphore(&self.link, name).await?;
            let Some(cap_kv) = kvs.iter().find(|kv| kv.key() == cap_key.as_bytes()) else {
                return Err(Error::NotFound(name.to_string()));
            };
            let old = CapValue::parse(cap_kv.value())
                .ok_or_else(|| Error::store(format!("unreadable capacity at {cap_key}")))?;
            if old.capacity == capacity {
                // Already so (also a retry whose first write was applied): nothing to change.
                return Ok(());
            }
            let queue: Vec<queue::Entry> = queue_of(&queue_prefix, &kvs).map(|(e, _)| e).collect();
            // A fair semaphore's holders are its marks, which a shrink keeps: no floor.
            let fair = FairRead::of(&self.link, name, &kvs)?;
            if let Some(read) = &fair {
                read.fair.classes.check(capacity)?;
            }
            let floor = match fair {
                Some(_) => old.floor,
                None => queue::floor_after_resize(&queue, old.capacity, capacity, old.floor),
            };
            let shrink = capacity < old.capacity && fair.is_none();
            let mut then = vec![TxnOp::put(
                cap_key.clone(),
                CapValue { capacity, floor }.encode(),
                None,
            )];
            if shrink {
                then.push(TxnOp::get(queue_prefix.clone(), Some(sorted_prefix())));
            }
            let txn = Txn::new()
                .when([Compare::mod_revision(
                    cap_key.clone(),
                    CompareOp::Equal,
                    cap_kv.mod_revision(),
                )])
                .and_then(then);
            let resp = self.link.txn(txn).await?;
            if resp.succeeded() {
                if shrink {
                    let written = resp.header().map_or(0, |h| h.revision());
                    let at_write: Vec<queue::Entry> =
                        queue_of(&queue_prefix, get_kvs(resp.op_responses().get(1)))
                            .map(|(e, _)| e)
                            .collect();
                    let exact =
                        queue::floor_after_resize(&at_write, old.capacity, capacity, old.floor);
                    if exact > floor {
                        self.raise_floor(
                            name,
                            CapValue {
                                capacity,
                                floor: exact,
                            },
                            written,
                        )
                        .await;
                    }
                }
                return Ok(());
            }
            // Another capacity write came first: read it and decide again.
            if !attempts.again(true).await {
                return Err(Error::store(format!(
                    "the capacity of semaphore {name:?} kept being changed by other writers; \
                     capacity not set, try again"
                )));
            }
        }
    }

    /// Writes the exact floor of a shrink written at revision `written`, unless the capacity
    /// changed since (that writer read our floor and decided from it). Best effort: the floor
    /// already stored is safe, it only reports some holders as waiters until they leave.
    async fn raise_floor(&self, name: &str, exact: CapValue, written: i64) {
        let cap_key = self.link.keys.cap(name);
        let txn = Txn::new()
            .when([Compare::mod_revision(
                cap_key.clone(),
                CompareOp::Equal,
                written,
            )])
            .and_then([TxnOp::put(cap_key, exact.encode(), None)]);
        if let Err(e) = self.link.txn(txn).await {
            tracing::debug!(semaphore = %name, error = %e, "raising the floor of a shrink failed; the stored floor stays (safe, lower)");
        }
    }
}

pub(super) fn sorted_prefix() -> GetOptions {
    GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
}

/// Reads the semaphore's prefix sorted by create revision: (revision, kvs).
pub(super) async fn read_semaphore(
    link: &Link,
    name: &str,
) -> Result<(i64, Vec<etcd_client::KeyValue>)> {
    let prefix = link.keys.sem_prefix(name);
    let mut resp = link
        .retry(RequestKind::Range, |c| {
            let prefix = prefix.clone();
            async move { kv(&c).get(prefix, Some(sorted_prefix())).await }
        })
        .await?;
    let revision = resp.header().map_or(0, |h| h.revision());
    Ok((revision, resp.take_kvs()))
}
