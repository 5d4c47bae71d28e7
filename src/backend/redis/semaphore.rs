//! A semaphore's own record on Redis: created, opened, read, resized, listed.

use super::fair_record::FairState;
use super::permits::Permits;
use super::sem_keys;
use super::sem_reply::{Resize, SemState};
use crate::backend::fair_checks;
use crate::backend::retry::Attempts;
use crate::error::{Error, Result};
use crate::fair::Classes;
use crate::queue;
use crate::stats::RequestKind;
use crate::status::Status;

impl Permits {
    /// Creates the semaphore with `capacity` if absent, or opens it (see
    /// [`Backend::ensure_semaphore`](crate::backend::Backend::ensure_semaphore)).
    pub(super) async fn open(&self, name: &str, capacity: Option<u32>) -> Result<u32> {
        let keys = self.keys(name);
        let arg = capacity.map_or(String::new(), |c| c.to_string());
        let kind = match capacity {
            Some(_) => RequestKind::Txn,
            None => RequestKind::Range,
        };
        let stored: i64 = self.call(kind, &self.scripts.open, &keys, &[arg]).await?;
        let Ok(stored) = u32::try_from(stored) else {
            return Err(Error::NotFound(name.to_string()));
        };
        if let Some(requested) = capacity.filter(|c| *c != stored) {
            return Err(Error::CapacityMismatch { stored, requested });
        }
        if capacity.is_some() {
            self.index_name(name).await?;
        }
        Ok(stored)
    }

    /// Creates the fair semaphore with `capacity` and `classes` if absent (its record, marked
    /// fair, and its fair record in one script call), or opens it (see
    /// [`Backend::ensure_fair_semaphore`](crate::backend::Backend::ensure_fair_semaphore)).
    pub(super) async fn open_fair(
        &self,
        name: &str,
        capacity: Option<u32>,
        classes: Option<&Classes>,
    ) -> Result<u32> {
        let create = capacity.zip(classes);
        let args = match create {
            Some((c, classes)) => [c.to_string(), classes.to_string()],
            None => [String::new(), String::new()],
        };
        let kind = match create {
            Some(_) => RequestKind::Txn,
            None => RequestKind::Range,
        };
        let items: Vec<String> = self
            .call(kind, &self.scripts.open_fair, &self.keys(name), &args)
            .await?;
        let (stored, fair) = match items.as_slice() {
            [tag] if tag == "nosem" => return Err(Error::NotFound(name.to_string())),
            [tag, stored, fair] if tag == "ok" => (stored.parse::<u32>().ok(), fair),
            _ => (None, &String::new()),
        };
        let stored = stored.ok_or_else(|| {
            self.unreadable(name, format!("an open answer of {} items", items.len()))
        })?;
        let fair = FairState::parse(fair)
            .map_err(|e| self.unreadable(name, e))?
            .ok_or_else(|| fair_checks::not_fair(name))?;
        if let Some(asked) = classes.filter(|c| **c != fair.classes) {
            return Err(fair_checks::classes_differ(name, &fair.classes, asked));
        }
        if let Some(requested) = capacity.filter(|c| *c != stored) {
            return Err(Error::CapacityMismatch { stored, requested });
        }
        if create.is_some() {
            self.index_name(name).await?;
        }
        Ok(stored)
    }

    /// The name index is another key (another slot on a cluster): written after the record,
    /// again on every open with a capacity, so a failed write heals itself.
    async fn index_name(&self, name: &str) -> Result<()> {
        let names = sem_keys::names(&self.prefix);
        let deadline = tokio::time::Instant::now() + self.link.request_timeout();
        self.link
            .run(RequestKind::Put, deadline, |mut c| {
                let (names, name) = (names.clone(), name.to_string());
                async move {
                    redis::cmd("SADD")
                        .arg(names)
                        .arg(name)
                        .query_async::<()>(&mut c)
                        .await
                }
            })
            .await
    }

    /// The semaphore as one read sees it, its queue up to token `upto` (all: `None`);
    /// expired sessions' entries are dropped on the way.
    pub(super) async fn read(&self, name: &str, upto: Option<u64>) -> Result<Option<SemState>> {
        let arg = upto.map_or(String::new(), |u| u.to_string());
        let items: Vec<String> = self
            .call(
                RequestKind::Range,
                &self.scripts.read,
                &self.keys(name),
                &[arg],
            )
            .await?;
        SemState::parse(&items, upto).map_err(|e| self.unreadable(name, e))
    }

    pub(super) async fn status(&self, name: &str) -> Result<Status> {
        match self.read(name, None).await? {
            Some(state) => Ok(state.status(name)),
            None => Err(Error::NotFound(name.to_string())),
        }
    }

    /// Changes the capacity; shrinking keeps current holders (their tokens go under the floor;
    /// on a fair semaphore, holders are its marks, which a shrink keeps: no floor, and the
    /// classes' guaranteed permits must fit the new capacity).
    ///
    /// As on etcd, the write compares the record alone, so acquires and releases never make it
    /// fail (only another capacity write does): the floor written is the one of the read, which
    /// can only be too low; the write returns the queue it saw, and a higher floor from that is
    /// written by one more compare-and-set.
    pub(super) async fn resize(&self, name: &str, capacity: u32) -> Result<()> {
        let keys = self.keys(name);
        let mut attempts = Attempts::new(self.link.request_timeout());
        loop {
            let state = self
                .read(name, None)
                .await?
                .ok_or_else(|| Error::NotFound(name.to_string()))?;
            if state.capacity == capacity {
                return Ok(());
            }
            if let Some(fair) = &state.fair {
                fair.classes.check(capacity)?;
            }
            let queue: Vec<queue::Entry> = crate::backend::QueueView::entries(&state).collect();
            let floor = match state.fair {
                Some(_) => state.floor,
                None => queue::floor_after_resize(&queue, state.capacity, capacity, state.floor),
            };
            let args = [state.ver.clone(), capacity.to_string(), floor.to_string()];
            let items: Vec<String> = self
                .call(RequestKind::Txn, &self.scripts.resize, &keys, &args)
                .await?;
            match Resize::parse(&items).map_err(|e| self.unreadable(name, e))? {
                Resize::NoSemaphore => return Err(Error::NotFound(name.to_string())),
                Resize::Done { ver, queue } => {
                    let exact =
                        queue::floor_after_resize(&queue, state.capacity, capacity, state.floor);
                    if exact > floor && state.fair.is_none() {
                        self.raise_floor(name, ver, capacity, exact).await;
                    }
                    return Ok(());
                }
                Resize::Conflict => {
                    if !attempts.again(true).await {
                        return Err(Error::store(format!(
                            "the capacity of semaphore {name:?} kept being changed by other writers; capacity not set, try again"
                        )));
                    }
                }
            }
        }
    }

    /// Writes the exact floor of a shrink, unless the capacity changed since (that writer read
    /// our floor and decided from it). Best effort: the stored floor is safe, only lower.
    async fn raise_floor(&self, name: &str, ver: String, capacity: u32, floor: u64) {
        let args = [ver, capacity.to_string(), floor.to_string()];
        let sent: Result<Vec<String>> = self
            .call(
                RequestKind::Txn,
                &self.scripts.resize,
                &self.keys(name),
                &args,
            )
            .await;
        if let Err(e) = sent {
            tracing::debug!(semaphore = %name, "raising the floor of a shrink failed: {e}; the stored floor stays (safe, lower)");
        }
    }

    /// Names of every semaphore, sorted.
    pub(super) async fn list(&self) -> Result<Vec<String>> {
        let names = sem_keys::names(&self.prefix);
        let deadline = tokio::time::Instant::now() + self.link.request_timeout();
        let mut all: Vec<String> = self
            .link
            .run(RequestKind::Range, deadline, |mut c| {
                let names = names.clone();
                async move { redis::cmd("SMEMBERS").arg(names).query_async(&mut c).await }
            })
            .await?;
        all.sort();
        Ok(all)
    }
}
