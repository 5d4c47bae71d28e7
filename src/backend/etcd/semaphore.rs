//! A semaphore's own records: its capacity (created, opened, resized), its status, and the
//! names of all semaphores.

use super::client::get_kvs;
use super::client::kv;
use super::keys::{queue_of, EntryValue};
use super::EtcdBackend;
use crate::backend::capacity::CapValue;
use crate::backend::retry::Attempts;
use crate::error::{Error, Result};
use crate::queue;
use crate::stats::RequestKind;
use crate::status::{Holder, Status};
use etcd_client::{Compare, CompareOp, GetOptions, SortOrder, SortTarget, Txn, TxnOp};

impl EtcdBackend {
    /// The sorted names of the keys under `prefix` (one keys-only range): semaphores under
    /// `names/`, rate limits under `rq/`.
    pub(super) async fn names_under(&self, prefix: String) -> Result<Vec<String>> {
        let resp = self
            .retry(RequestKind::Range, |mut c| {
                let p = prefix.clone();
                async move {
                    c.get(p, Some(GetOptions::new().with_prefix().with_keys_only()))
                        .await
                }
            })
            .await?;
        let mut names: Vec<String> = resp
            .kvs()
            .iter()
            .filter_map(|kv| kv.key_str().ok())
            .filter_map(|k| k.strip_prefix(prefix.as_str()))
            .map(str::to_string)
            .collect();
        names.sort();
        Ok(names)
    }

    /// Reads the semaphore's prefix sorted by create revision: (revision, kvs).
    pub(super) async fn read_semaphore(
        &self,
        name: &str,
    ) -> Result<(i64, Vec<etcd_client::KeyValue>)> {
        let prefix = self.keys.sem_prefix(name);
        let mut resp = self
            .retry(RequestKind::Range, |c| {
                let prefix = prefix.clone();
                async move { kv(&c).get(prefix, Some(sorted_prefix())).await }
            })
            .await?;
        let revision = resp.header().map_or(0, |h| h.revision());
        Ok((revision, resp.take_kvs()))
    }

    /// Creates the semaphore with `capacity` if absent, or opens it (see
    /// [`Backend::ensure_semaphore`](crate::backend::Backend::ensure_semaphore)).
    pub(super) async fn open_semaphore(&self, name: &str, capacity: Option<u32>) -> Result<u32> {
        let cap_key = self.keys.cap(name);
        let Some(requested) = capacity else {
            let resp = self
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
        let index = self.keys.name_index(name);
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
        let resp = self.txn(txn).await?;
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

    /// The semaphore's holders and waiters, from one read of its prefix.
    pub(super) async fn read_status(&self, name: &str) -> Result<Status> {
        let (_, kvs) = self.read_semaphore(name).await?;
        let cap_key = self.keys.cap(name);
        let cap = kvs
            .iter()
            .find(|kv| kv.key() == cap_key.as_bytes())
            .and_then(|kv| CapValue::parse(kv.value()))
            .ok_or_else(|| Error::NotFound(name.to_string()))?;
        let queue_prefix = self.keys.queue_prefix(name);
        let entries: Vec<_> = queue_of(&queue_prefix, &kvs).collect();
        for (_, kv) in &entries {
            self.strays.check(name, &queue_prefix, kv);
        }
        let n = queue::holders(entries.iter().map(|(e, _)| *e), cap.capacity, cap.floor);
        let mut rows: Vec<Holder> = entries
            .iter()
            .map(|(e, kv)| {
                let v = EntryValue::parse(kv.value());
                Holder {
                    owner: v.as_ref().map_or_else(|| "?".into(), |v| v.owner.clone()),
                    permits: e.permits,
                    fencing_token: e.token,
                    since_unix_ms: v.map_or(0, |v| v.since_unix_ms),
                }
            })
            .collect();
        let waiters = rows.split_off(n);
        Ok(Status::from_queue(name, cap.capacity, rows, waiters))
    }

    /// Changes the capacity for every client; shrinking keeps current holders.
    pub(super) async fn resize(&self, name: &str, capacity: u32) -> Result<()> {
        let cap_key = self.keys.cap(name);
        let queue_prefix = self.keys.queue_prefix(name);
        // Read, compute, compare-and-set; a write that lost a race reads again (a retried
        // write whose first attempt was applied finds its own capacity and writes it again).
        let mut attempts = Attempts::new(self.config.request_timeout);
        loop {
            let (revision, kvs) = self.read_semaphore(name).await?;
            let Some(cap_kv) = kvs.iter().find(|kv| kv.key() == cap_key.as_bytes()) else {
                return Err(Error::NotFound(name.to_string()));
            };
            let old = CapValue::parse(cap_kv.value())
                .ok_or_else(|| Error::store(format!("unreadable capacity at {cap_key}")))?;
            let entries: Vec<_> = queue_of(&queue_prefix, &kvs).collect();
            let queue: Vec<queue::Entry> = entries.iter().map(|(e, _)| *e).collect();
            let floor = queue::floor_after_resize(&queue, old.capacity, capacity, old.floor);
            // Apply only if nothing that decides who holds changed since the read: the
            // capacity, no new entry, and (on a shrink, to grandfather exactly the holders
            // read) every holder and the first waiter still there.
            let mut when = vec![
                Compare::mod_revision(cap_key.clone(), CompareOp::Equal, cap_kv.mod_revision()),
                Compare::create_revision(queue_prefix.clone(), CompareOp::Less, revision + 1)
                    .with_prefix(),
            ];
            if floor != old.floor {
                let n = queue::holders(queue.iter().copied(), old.capacity, old.floor);
                // etcd allows 128 compares per Txn; past that the grandfathering is best effort.
                when.extend(entries.iter().take((n + 1).min(120)).map(|(e, kv)| {
                    Compare::create_revision(kv.key().to_vec(), CompareOp::Equal, e.token as i64)
                }));
            }
            let txn = Txn::new().when(when).and_then([TxnOp::put(
                cap_key.clone(),
                CapValue { capacity, floor }.encode(),
                None,
            )]);
            let resp = self.txn(txn).await?;
            if resp.succeeded() {
                return Ok(());
            }
            if !attempts.again(true).await {
                return Err(Error::store(format!(
                    "semaphore {name:?} kept changing; capacity not set, try again"
                )));
            }
        }
    }
}

pub(super) fn sorted_prefix() -> GetOptions {
    GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
}
