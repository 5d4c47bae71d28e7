//! The reservations clients hold through the sidecar, by id. A reservation holds nothing in
//! the store (its estimate was taken when admitted), so the table needs no task per entry: it
//! keeps the library's `Reservation` until the client settles it, and forgets it when its time
//! limit passes (dropping it settles it at its estimate), so a client that vanishes costs no
//! memory for longer than its time limit. The table is capped; past the cap a reservation is
//! refused before anything is taken. Ids of ended reservations are remembered for a while,
//! so a late or repeated settle learns what happened rather than "no such id".

use crate::common::lock;
use clusterlimit::Reservation;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;
use tokio::time::Instant;

/// How long the id of an ended reservation is remembered (and at most as many as the cap).
pub const ENDED_MEMORY: Duration = Duration::from_secs(3600);

/// How a reservation ended, as remembered by its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Settled by a client (at a real cost or at its estimate).
    Settled,
    /// Its time limit passed unsettled: settled at its estimate then.
    Expired,
}

/// What taking an id out of the table found.
pub enum Taken {
    /// Open: the caller settles it (the id is remembered as settled already).
    Open(Reservation),
    /// Past its time limit just now (the sweep had not forgotten it yet): dropped, settled
    /// at its estimate. The limit it was of.
    ExpiredNow(String),
    /// Ended before.
    Ended(Ended),
    /// Never known here, or ended too long ago to remember.
    Unknown,
}

/// One open reservation: the library's handle, the limit it is of, and when it expires.
struct Slot {
    limit: String,
    reservation: Reservation,
    expires: Instant,
}

#[derive(Default)]
struct Inner {
    open: HashMap<String, Slot>,
    /// Open ids by expiry, so the sweep looks only at the due ones.
    by_expiry: BTreeSet<(Instant, String)>,
    ended: HashMap<String, Ended>,
    /// Ended ids in the order they ended, to forget the oldest first.
    ended_order: VecDeque<(Instant, String)>,
}

/// Every open reservation held through the sidecar, by id.
pub struct Reservations {
    inner: Mutex<Inner>,
    cap: usize,
}

impl Reservations {
    /// An empty table holding at most `cap` open reservations.
    pub fn new(cap: usize) -> Reservations {
        Reservations {
            inner: Mutex::new(Inner::default()),
            cap,
        }
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        lock(&self.inner)
    }

    /// The cap on open reservations.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Whether the table is full (a new reservation would be refused).
    pub fn full(&self) -> bool {
        self.inner().open.len() >= self.cap
    }

    /// How many are open.
    pub fn len(&self) -> usize {
        self.inner().open.len()
    }

    /// Keeps an admitted reservation of `limit`; its id, or the reservation back when the
    /// table filled up meanwhile (the caller gives its estimate back).
    pub fn insert(
        &self,
        limit: &str,
        reservation: Reservation,
    ) -> Result<String, Box<Reservation>> {
        let mut inner = self.inner();
        if inner.open.len() >= self.cap {
            return Err(Box::new(reservation));
        }
        let id = uuid::Uuid::new_v4().simple().to_string();
        let now = Instant::now();
        let expires = now.checked_add(reservation.time_left()).unwrap_or(now);
        inner.by_expiry.insert((expires, id.clone()));
        let slot = Slot {
            limit: limit.to_string(),
            reservation,
            expires,
        };
        inner.open.insert(id.clone(), slot);
        Ok(id)
    }

    /// The estimate of `id`, if open on `limit`.
    pub fn estimate(&self, limit: &str, id: &str) -> Option<u64> {
        let inner = self.inner();
        let slot = inner.open.get(id).filter(|s| s.limit == limit)?;
        Some(slot.reservation.estimate())
    }

    /// Takes `id` of `limit` out to be settled by the caller (the id is remembered as settled
    /// from now on). One past its time limit (the sweep has not run yet) is dropped here:
    /// settled at its estimate.
    pub fn take(&self, limit: &str, id: &str) -> Taken {
        let mut inner = self.inner();
        let now = Instant::now();
        inner.forget_old(now, self.cap);
        if inner.open.get(id).is_some_and(|s| s.limit != limit) {
            return Taken::Unknown;
        }
        let Some(slot) = inner.open.remove(id) else {
            return inner
                .ended
                .get(id)
                .map_or(Taken::Unknown, |e| Taken::Ended(*e));
        };
        inner.by_expiry.remove(&(slot.expires, id.to_string()));
        if slot.reservation.time_left().is_zero() {
            inner.remember(now, id, Ended::Expired);
            return Taken::ExpiredNow(slot.limit);
        }
        inner.remember(now, id, Ended::Settled);
        Taken::Open(slot.reservation)
    }

    /// Drops every reservation past its time limit (each stays settled at its estimate);
    /// the limits they were of, one entry each.
    pub fn sweep(&self) -> Vec<String> {
        let mut inner = self.inner();
        let now = Instant::now();
        inner.forget_old(now, self.cap);
        let mut expired = Vec::new();
        while let Some((at, id)) = inner.by_expiry.first().cloned() {
            if at > now {
                break;
            }
            inner.by_expiry.pop_first();
            if let Some(slot) = inner.open.remove(&id) {
                // Dropped: the library keeps its estimate taken.
                expired.push(slot.limit);
                inner.remember(now, &id, Ended::Expired);
            }
        }
        expired
    }
}

impl Inner {
    fn remember(&mut self, now: Instant, id: &str, ended: Ended) {
        self.ended.insert(id.to_string(), ended);
        self.ended_order.push_back((now, id.to_string()));
    }

    /// Forgets ended ids older than `ENDED_MEMORY`, and the oldest past `cap` of them.
    fn forget_old(&mut self, now: Instant, cap: usize) {
        while let Some((at, _)) = self.ended_order.front() {
            let old = now.saturating_duration_since(*at) > ENDED_MEMORY;
            if !old && self.ended_order.len() <= cap {
                break;
            }
            if let Some((_, id)) = self.ended_order.pop_front() {
                self.ended.remove(&id);
            }
        }
    }
}
