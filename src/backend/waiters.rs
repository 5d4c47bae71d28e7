//! Local waiters of one semaphore and how their outcome is decided, shared by the backends.
//!
//! A backend keeps the semaphore's queue (from its store or a watch of it) and, after every
//! change, calls [`Waiters::resolve`] once: it finds the holder boundary once and tells exactly
//! the waiters whose fate is now decided. Nobody else wakes up.

use super::request::EntryRequest;
use crate::error::{Error, Result};
use crate::lost::LostSignal;
use crate::queue;
use std::collections::HashMap;
use tokio::sync::oneshot;

/// What a waiter learns: the decided fate of one queue entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WaitOutcome {
    /// The entry holds its permits.
    Granted,
    /// The entry is not in the queue any more (deleted, expired with its session).
    Gone,
    /// The capacity is now below the entry's weight; it could never be granted.
    TooHeavy(u32),
    /// The semaphore itself is gone.
    NoSemaphore,
}

impl WaitOutcome {
    /// What the outcome means for the acquire waiting on entry `req` whose session signal is
    /// `lost`: `Ok` when it holds. The one place that maps outcomes to errors, for every backend.
    pub(crate) fn into_result(self, req: &EntryRequest, lost: &LostSignal) -> Result<()> {
        match self {
            // A grant seen after the session was lost is worth nothing: the store may already
            // have handed the permits to someone else.
            WaitOutcome::Granted if !lost.is_lost() => Ok(()),
            WaitOutcome::Granted | WaitOutcome::Gone => Err(Error::SessionLost),
            WaitOutcome::TooHeavy(capacity) => Err(Error::invalid(format!(
                "capacity of {:?} fell to {capacity}, below the {} permits requested",
                req.name, req.permits
            ))),
            WaitOutcome::NoSemaphore => Err(Error::NotFound(req.name.clone())),
        }
    }
}

/// The error of an enqueue asking for more permits than the capacity it found.
pub(crate) fn over_capacity(req: &EntryRequest, capacity: u32) -> Error {
    Error::invalid(format!(
        "requested {} permits but semaphore {:?} has capacity {capacity}",
        req.permits, req.name
    ))
}

/// A consistent picture of one semaphore, as far as deciding outcomes goes. A backend
/// implements it for whatever holds its queue (the store itself, a watch-fed view).
pub trait QueueView {
    /// Capacity and floor, or `None` if the semaphore does not exist.
    fn capacity(&self) -> Option<(u32, u64)>;
    /// Entries in token order.
    fn entries(&self) -> impl Iterator<Item = queue::Entry> + '_;
    /// Whether an entry with `token` is queued.
    fn contains(&self, token: u64) -> bool;
    /// Whether the view has seen the creation of entry `token` (a watch may lag behind).
    fn has_seen(&self, token: u64) -> bool;
    /// On a fair semaphore, whether entry `token` is marked granted (see [`crate::fair`]):
    /// there, holding is the mark, not a place in the queue. `None` (the default): a FIFO
    /// semaphore, decided by [`crate::queue`].
    fn marked(&self, _token: u64) -> Option<bool> {
        None
    }
}

/// Token of the last entry holding permits (0 if none): holders are a prefix of the queue.
fn last_holder(view: &impl QueueView) -> u64 {
    let Some((capacity, floor)) = view.capacity() else {
        return 0;
    };
    let n = queue::holders(view.entries(), capacity, floor);
    n.checked_sub(1)
        .and_then(|i| view.entries().nth(i))
        .map_or(0, |e| e.token)
}

fn decide(
    view: &impl QueueView,
    token: u64,
    permits: u32,
    last_holder: u64,
) -> Option<WaitOutcome> {
    if !view.has_seen(token) {
        return None;
    }
    let Some((capacity, _)) = view.capacity() else {
        return Some(WaitOutcome::NoSemaphore);
    };
    if !view.contains(token) {
        Some(WaitOutcome::Gone)
    } else if view.marked(token).unwrap_or(token <= last_holder) {
        Some(WaitOutcome::Granted)
    } else if capacity < permits {
        Some(WaitOutcome::TooHeavy(capacity))
    } else {
        None
    }
}

/// The outcome for one entry now, or `None` while it must wait.
pub fn outcome(view: &impl QueueView, token: u64, permits: u32) -> Option<WaitOutcome> {
    decide(view, token, permits, last_holder(view))
}

/// Waiters registered by token.
#[derive(Debug, Default)]
pub struct Waiters {
    waiting: HashMap<u64, (u32, oneshot::Sender<WaitOutcome>)>,
}

impl Waiters {
    /// Registers entry `token`; the receiver gets its outcome (at once if already decided).
    pub fn register(
        &mut self,
        view: &impl QueueView,
        token: u64,
        permits: u32,
    ) -> oneshot::Receiver<WaitOutcome> {
        let (tx, rx) = oneshot::channel();
        match outcome(view, token, permits) {
            Some(o) => {
                let _ = tx.send(o);
            }
            None => {
                self.waiting.insert(token, (permits, tx));
            }
        }
        rx
    }

    /// Tells every waiter whose outcome is now decided, and forgets it. Call after each change.
    pub fn resolve(&mut self, view: &impl QueueView) {
        if self.waiting.is_empty() {
            return;
        }
        let boundary = last_holder(view);
        let decided: Vec<(u64, WaitOutcome)> = self
            .waiting
            .iter()
            .filter_map(|(&t, &(permits, _))| decide(view, t, permits, boundary).map(|o| (t, o)))
            .collect();
        for (token, outcome) in decided {
            if let Some((_, tx)) = self.waiting.remove(&token) {
                // A cancelled waiter no longer listens; its entry goes anyway.
                let _ = tx.send(outcome);
            }
        }
    }

    /// The tokens of the registered waiters.
    pub fn tokens(&self) -> Vec<u64> {
        self.waiting.keys().copied().collect()
    }

    /// Number of registered waiters.
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    /// Whether nobody waits.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    struct V {
        cap: Option<(u32, u64)>,
        entries: BTreeMap<u64, u32>,
        seen: u64,
    }

    impl QueueView for V {
        fn capacity(&self) -> Option<(u32, u64)> {
            self.cap
        }
        fn entries(&self) -> impl Iterator<Item = queue::Entry> + '_ {
            self.entries
                .iter()
                .map(|(&token, &permits)| queue::Entry { token, permits })
        }
        fn contains(&self, token: u64) -> bool {
            self.entries.contains_key(&token)
        }
        fn has_seen(&self, token: u64) -> bool {
            token <= self.seen
        }
    }

    #[test]
    fn decides_and_wakes_only_the_decided() {
        let mut v = V {
            cap: Some((2, 0)),
            entries: [(5, 1), (7, 1), (9, 1), (11, 2)].into(),
            seen: 11,
        };
        assert_eq!(outcome(&v, 7, 1), Some(WaitOutcome::Granted));
        assert_eq!(outcome(&v, 8, 1), Some(WaitOutcome::Gone));
        assert_eq!(outcome(&v, 12, 1), None, "not seen yet");
        let mut w = Waiters::default();
        let mut r9 = w.register(&v, 9, 1);
        let mut r11 = w.register(&v, 11, 2);
        assert_eq!(w.len(), 2);
        v.entries.remove(&5);
        w.resolve(&v);
        assert_eq!(r9.try_recv(), Ok(WaitOutcome::Granted));
        assert!(r11.try_recv().is_err(), "still waiting");
        v.cap = Some((1, 0));
        w.resolve(&v);
        assert_eq!(r11.try_recv(), Ok(WaitOutcome::TooHeavy(1)));
        assert_eq!(w.len(), 0);
        v.cap = None;
        assert_eq!(outcome(&v, 7, 1), Some(WaitOutcome::NoSemaphore));
    }
}
