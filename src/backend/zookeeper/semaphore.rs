//! A semaphore's own records: its node and capacity (created, opened, resized), its queue read
//! for a status, and the names of all semaphores. [`Semaphores`] keeps no state of its own:
//! it reads and writes through the link, and learns from the session's views.

use super::calls::{is_zk, not_found_as, Link};
use super::entry_weights;
use super::nodes::{EntryData, EntryName};
use super::semaphore_fair::{open_fair, read_fair};
use crate::backend::capacity::CapValue;
use crate::backend::retry::Attempts;
use crate::error::{Error, Result};
use crate::queue;
use crate::stats::RequestKind;
use crate::status::{Holder, Status};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::time::Instant;
use zookeeper_client::{self as zk, CreateMode};

/// The longest a shrink waits for this session's view to apply it before raising its floor.
const RAISE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Each entry's data and stat, as `entry_weights::read` gives them (`None`: gone).
type EntryRows = Vec<Option<(Vec<u8>, zk::Stat)>>;

/// The semaphores of a backend: their nodes, capacities, statuses and names.
pub(super) struct Semaphores {
    link: Arc<Link>,
}

impl Semaphores {
    pub(super) fn new(link: Arc<Link>) -> Semaphores {
        Semaphores { link }
    }

    /// Creates the semaphore with `capacity` if absent, or opens it (see
    /// [`Backend::ensure_semaphore`](crate::backend::Backend::ensure_semaphore)).
    pub(super) async fn open(&self, name: &str, capacity: Option<u32>) -> Result<u32> {
        let session = self.link.session().await?;
        let known = {
            let views = session.views.lock().await;
            views.get(name).filter(|v| v.is_live()).cloned()
        };
        let view = match known {
            // The watch keeps it current: no request.
            Some(v) if v.capacity().is_some() => v,
            _ => {
                let mut denied = None;
                if let Some(c) = capacity {
                    let client = session.client()?;
                    let path = self.link.paths.semaphore(name);
                    let data = CapValue::new(c).encode();
                    let created = self
                        .link
                        .call(
                            RequestKind::Put,
                            client.create(
                                &path,
                                &data,
                                &CreateMode::Persistent.with_acls(self.link.acls),
                            ),
                        )
                        .await;
                    match created {
                        Ok(_) => {}
                        Err(e) if is_zk(&e, &zk::Error::NodeExists) => {
                            self.link.warn_if_open(&client, &path).await;
                        }
                        // It may exist (ZooKeeper checks the ACL first): the view tells.
                        Err(e) if is_zk(&e, &zk::Error::NoAuth) => denied = Some(e),
                        Err(e) => return Err(e),
                    }
                }
                let view = self.link.view(&session, name).await?;
                if let (Some(e), None) = (denied, view.capacity()) {
                    return Err(self
                        .link
                        .denied_as(e, || format!("creating semaphore {name:?}")));
                }
                if capacity.is_some() && view.capacity().is_none() {
                    // A view that watched the absent semaphore learns of our create from its
                    // event, which precedes the create's reply: wait for it to be applied.
                    let limit = Instant::now() + self.link.config.request_timeout;
                    view.wait_progress(limit, |_| view.capacity().is_some())
                        .await;
                }
                view
            }
        };
        let stored = view
            .capacity()
            .ok_or_else(|| Error::NotFound(name.to_string()))?;
        match capacity {
            Some(c) if c != stored => Err(Error::CapacityMismatch {
                stored,
                requested: c,
            }),
            _ => Ok(stored),
        }
    }

    /// Creates or opens a fair semaphore (see `semaphore_fair.rs`).
    pub(super) async fn open_fair(
        &self,
        name: &str,
        capacity: Option<u32>,
        classes: Option<&crate::fair::Classes>,
    ) -> Result<u32> {
        open_fair(&self.link, name, capacity, classes).await
    }

    /// The semaphore's holders and waiters: its queue, then its entries' data (owners, lowered
    /// weights) with its capacity in one multi-read (`entry_weights.rs`). On a fair semaphore
    /// the record is read first (a mark always refers to an entry created before it), and the
    /// marked entries hold.
    pub(super) async fn status(&self, name: &str) -> Result<Status> {
        let session = self.link.session().await?;
        let client = session.client()?;
        let fair = read_fair(&self.link, &client, name).await?;
        let (mut entries, nodes) = self.read_queue(&client, name).await?;
        let node = |token: u64| nodes.get(&token).map(String::as_str).unwrap_or_default();
        let paths: Vec<String> = entries
            .iter()
            .map(|e| self.link.paths.entry(name, node(e.token)))
            .collect();
        let (data, cap) = self.read_entries(&client, name, &paths).await?;
        for (e, d) in entries.iter_mut().zip(&data) {
            if let Some((raw, _)) = d {
                e.permits = EntryData::weight_of(raw, e.permits);
            }
        }
        let n = queue::holders(entries.iter().copied(), cap.capacity, cap.floor);
        let holds = |i: usize, token: u64| match &fair {
            Some(f) => f.marks.contains(&token),
            None => i < n,
        };
        let first = fair
            .as_ref()
            .and_then(|f| f.classes.name(0))
            .unwrap_or_default();
        let mut holders = Vec::with_capacity(n);
        let mut waiters = Vec::with_capacity(entries.len().saturating_sub(n));
        for (i, (e, d)) in entries.iter().zip(data).enumerate() {
            // An entry released or withdrawn since the listing is no longer there.
            let Some((data, stat)) = d else {
                continue;
            };
            let v = EntryData::parse(&data);
            let mut row = Holder::new(
                v.as_ref().map_or("?", |v| &v.owner),
                e.permits,
                e.token,
                v.as_ref()
                    .map_or(u64::try_from(stat.ctime).unwrap_or(0), |v| v.since_unix_ms),
            );
            if fair.is_some() {
                let tag = EntryName::parse(node(e.token))
                    .and_then(|n| n.tag)
                    .unwrap_or_default();
                row = row.in_flow(&tag.flow, tag.class.as_deref().unwrap_or(first));
            }
            if holds(i, e.token) {
                holders.push(row);
            } else {
                waiters.push(row);
            }
        }
        let status = Status::from_queue(name, cap.capacity, holders, waiters);
        Ok(match &fair {
            Some(f) => status.with_classes(&f.classes),
            None => status,
        })
    }

    /// The data of the entries at `paths` (each `None` if gone) and then the capacity, read at
    /// once (bounded by the request timeout).
    async fn read_entries(
        &self,
        client: &zk::Client,
        name: &str,
        paths: &[String],
    ) -> Result<(EntryRows, CapValue)> {
        let path = self.link.paths.semaphore(name);
        let read = entry_weights::read(client, &self.link.stats, &path, paths);
        let read = match tokio::time::timeout(self.link.config.request_timeout, read).await {
            Ok(Ok(read)) => read,
            Ok(Err(e)) => return Err(self.link.map_error(e)),
            Err(_) => return Err(Error::store("ZooKeeper did not answer in time")),
        };
        let Some((data, _)) = read.capacity else {
            return Err(Error::NotFound(name.to_string()));
        };
        let cap = CapValue::parse(&data)
            .ok_or_else(|| Error::store(format!("unreadable capacity at {path}")))?;
        Ok((read.entries, cap))
    }

    /// Changes the capacity for every client; shrinking keeps current holders.
    ///
    /// The write checks the capacity's data version alone, so acquires and releases never make
    /// it fail: only another capacity write does (docs/design.md §7b). On a shrink the floor
    /// written is the one of the read, which can only be too low; this session's view applies
    /// the change in order with the queue's events, knows the exact floor, and one more
    /// versioned write raises it.
    pub(super) async fn resize(&self, name: &str, capacity: u32) -> Result<()> {
        let session = self.link.session().await?;
        let client = session.client()?;
        let path = self.link.paths.semaphore(name);
        // A fair semaphore's holders are its marks, which a shrink keeps: no floor.
        let fair = read_fair(&self.link, &client, name).await?;
        if let Some(f) = &fair {
            f.classes.check(capacity)?;
        }
        let mut attempts = Attempts::new(self.link.config.request_timeout);
        loop {
            let (old, version) = self.read_capacity(&client, name).await?;
            if old.capacity == capacity {
                // Already so (also a retry whose first write was applied): nothing to change.
                return Ok(());
            }
            let shrink = capacity < old.capacity && fair.is_none();
            let mut floor = old.floor;
            if shrink {
                let (entries, _) = self.read_queue(&client, name).await?;
                floor = queue::floor_after_resize(&entries, old.capacity, capacity, old.floor);
            }
            let data = CapValue { capacity, floor }.encode();
            let written = self
                .link
                .call(
                    RequestKind::Put,
                    client.set_data(&path, &data, Some(version)),
                )
                .await;
            match written {
                Ok(stat) => {
                    if shrink {
                        self.raise_floor(name, CapValue { capacity, floor }, stat.version)
                            .await;
                    }
                    return Ok(());
                }
                // Another capacity write came first: read it and decide again.
                Err(e) if is_zk(&e, &zk::Error::BadVersion) => {}
                Err(e) => {
                    let e = self
                        .link
                        .denied_as(e, || format!("setting the capacity of {name:?}"));
                    return Err(not_found_as(e, name));
                }
            }
            if !attempts.again(true).await {
                return Err(Error::store(format!(
                    "the capacity of semaphore {name:?} kept being changed by other writers; \
                     capacity not set, try again"
                )));
            }
        }
    }

    /// Stores the exact floor of the shrink written as data `version` once this session's view
    /// has applied it (bounded by the request timeout), unless the capacity changed since.
    /// Best effort: the floor already stored is safe, it only reports some holders as waiters
    /// until they leave.
    async fn raise_floor(&self, name: &str, written: CapValue, version: i32) {
        let Ok(session) = self.link.session().await else {
            return;
        };
        let Some(view) = session.views.lock().await.get(name).cloned() else {
            return;
        };
        // The view applies the change a round trip after the write; a view that lags longer
        // (reconnecting) leaves the safe floor in place rather than hold the caller.
        let limit = Instant::now() + self.link.config.request_timeout.min(RAISE_WAIT);
        view.wait_progress(limit, |_| view.capacity_version() >= version)
            .await;
        let Some(exact) = view.shrink_floor(version).filter(|f| *f > written.floor) else {
            return;
        };
        let Ok(client) = session.client() else {
            return;
        };
        let data = CapValue {
            floor: exact,
            ..written
        }
        .encode();
        let path = self.link.paths.semaphore(name);
        if let Err(e) = self
            .link
            .call(
                RequestKind::Put,
                client.set_data(&path, &data, Some(version)),
            )
            .await
        {
            tracing::debug!(semaphore = %name, error = %e, "raising the floor of a shrink failed; the stored floor stays (safe, lower)");
        }
    }

    /// Names of all semaphores, sorted.
    pub(super) async fn list(&self) -> Result<Vec<String>> {
        let session = self.link.session().await?;
        let client = session.client()?;
        let dir = self.link.paths.semaphores();
        let mut names = match self
            .link
            .call(RequestKind::Range, client.list_children(&dir))
            .await
        {
            Ok(names) => names,
            Err(e) if is_zk(&e, &zk::Error::NoNode) => Vec::new(),
            Err(e) => return Err(e),
        };
        names.sort();
        Ok(names)
    }

    /// Reads the semaphore's children: `(entries in order, node names by token)`, each entry
    /// with its name's weight. A shrink may have lowered one since (in its data): a floor
    /// computed from these weights is then lower than exact, which is safe (see `resize`).
    async fn read_queue(
        &self,
        client: &zk::Client,
        name: &str,
    ) -> Result<(Vec<queue::Entry>, HashMap<u64, String>)> {
        let path = self.link.paths.semaphore(name);
        let (children, _) = self
            .link
            .call(RequestKind::Range, client.get_children(&path))
            .await
            .map_err(|e| not_found_as(e, name))?;
        let mut entries = Vec::new();
        let mut nodes = HashMap::new();
        for node in children {
            if let Some(e) = EntryName::parse(&node) {
                entries.push(queue::Entry {
                    token: e.token(),
                    permits: e.permits,
                });
                nodes.insert(e.token(), node);
            }
        }
        entries.sort_by_key(|e| e.token);
        Ok((entries, nodes))
    }

    /// Reads the capacity record and its data version.
    async fn read_capacity(&self, client: &zk::Client, name: &str) -> Result<(CapValue, i32)> {
        let path = self.link.paths.semaphore(name);
        let (data, stat) = self
            .link
            .call(RequestKind::Range, client.get_data(&path))
            .await
            .map_err(|e| not_found_as(e, name))?;
        let cap = CapValue::parse(&data)
            .ok_or_else(|| Error::store(format!("unreadable capacity at {path}")))?;
        Ok((cap, stat.version))
    }
}
