//! Entries of this Limiter's live lease that no request owns: written by the store *after* the
//! request they belong to had finished, so nothing would ever remove them.
//!
//! How one appears: an enqueue Txn sent to a member that hangs (SIGSTOP, a frozen VM) waits in
//! that member's socket buffer; the attempt times out and is retried on another member, the
//! request ends (granted and released, or timed out and removed), and its key is deleted. When
//! the hung member wakes up, it applies the stale Txn: the key is absent again, so
//! `create_revision == 0 → put` writes it anew, under our live lease. At the head of the FIFO
//! queue such an entry blocks everyone behind it until the session ends.
//!
//! So every queue entry the backend sees (watch events, and the queue each enqueue and status
//! read anyway: no extra request) is checked: one under our live lease that is neither in
//! flight, nor held, nor the very entry we just removed (same create revision: its put event
//! arriving after our release is no stray) is handed to the Limiter's background releaser,
//! which removes it under the rule of `release.rs`.

use crate::backend::{lock, OrphanSink};
use crate::lost::LostSignal;
use etcd_client::KeyValue;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long a removed key's create revision is remembered: far longer than a watch event can
/// lag behind the release that follows its put.
const REMEMBER_REMOVED: Duration = Duration::from_secs(60);

/// The queue entries of this Limiter, by key.
#[derive(Debug, Default)]
pub(super) struct Tracked {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Entries of finished enqueues, until removed: loss signal and create revision.
    live: HashMap<Vec<u8>, (LostSignal, i64)>,
    /// Enqueues sent and not answered yet.
    in_flight: HashSet<Vec<u8>>,
    /// Keys removed lately, with the create revision removed (if known).
    removed: HashMap<Vec<u8>, (Option<i64>, Instant)>,
}

impl Tracked {
    /// An enqueue of `key` is about to be sent: in flight until the guard is told it
    /// [`enqueued`](Sending::enqueued) or is dropped (the enqueue failed or was cancelled).
    pub(super) fn sending(&self, key: Vec<u8>) -> Sending<'_> {
        lock(&self.inner).in_flight.insert(key.clone());
        Sending { tracked: self, key }
    }

    /// We are removing `key` (a release, a cancel): it is no longer ours to watch.
    pub(super) fn removing(&self, key: &[u8]) {
        let mut t = lock(&self.inner);
        let revision = t.live.remove(key).map(|(_, r)| r);
        let now = Instant::now();
        if t.removed.len() > 1024 {
            t.removed
                .retain(|_, (_, at)| now.duration_since(*at) < REMEMBER_REMOVED);
        }
        match t.removed.get_mut(key) {
            // Keep what is known (a stray being removed has its revision recorded).
            Some(entry) if revision.is_none() => entry.1 = now,
            _ => {
                t.removed.insert(key.to_vec(), (revision, now));
            }
        }
    }

    /// `key` was deleted by someone else: its permit is lost (returns its signal).
    pub(super) fn vanished(&self, key: &[u8]) -> Option<LostSignal> {
        lock(&self.inner).live.remove(key).map(|(lost, _)| lost)
    }

    /// Fires every entry's signal and forgets them all (the Limiter closes).
    pub(super) fn end_all(&self) {
        let live = std::mem::take(&mut lock(&self.inner).live);
        for (lost, _) in live.into_values() {
            lost.fire();
        }
    }

    /// Forgets the entries of lost sessions.
    pub(super) fn forget_lost(&self) {
        lock(&self.inner)
            .live
            .retain(|_, (lost, _)| !lost.is_lost());
    }

    /// Whether no request of this Limiter holds, or is enqueuing, `key`.
    fn is_untracked(&self, key: &[u8]) -> bool {
        let t = lock(&self.inner);
        !t.live.contains_key(key) && !t.in_flight.contains(key)
    }

    /// Whether `key` at `revision` is nobody's, and if so records it as being removed, so that
    /// it is handed over once.
    fn claim_stray(&self, key: &[u8], revision: i64) -> bool {
        let mut t = lock(&self.inner);
        if t.live.contains_key(key) || t.in_flight.contains(key) {
            return false;
        }
        if t.removed
            .get(key)
            .is_some_and(|(r, _)| *r == Some(revision))
        {
            return false;
        }
        t.removed
            .insert(key.to_vec(), (Some(revision), Instant::now()));
        true
    }
}

/// An enqueue in flight (see [`Tracked::sending`]).
pub(super) struct Sending<'a> {
    tracked: &'a Tracked,
    key: Vec<u8>,
}

impl Sending<'_> {
    /// The enqueue finished: the entry holds or waits under `lost`, at `revision`.
    pub(super) fn enqueued(&self, revision: i64, lost: LostSignal) {
        lock(&self.tracked.inner)
            .live
            .insert(self.key.clone(), (lost, revision));
    }
}

impl Drop for Sending<'_> {
    fn drop(&mut self) {
        lock(&self.tracked.inner).in_flight.remove(&self.key);
    }
}

/// Finds stray entries and hands them to the Limiter. Cheap to clone into watch tasks.
#[derive(Clone)]
pub(super) struct Strays {
    pub tracked: Arc<Tracked>,
    /// The live lease and its loss signal (`None` before the first, or after it ended).
    pub session: Arc<Mutex<Option<(i64, LostSignal)>>>,
    pub sink: Arc<OnceLock<OrphanSink>>,
    /// How long a stray is left alone first.
    pub grace: Duration,
}

impl Strays {
    /// Strays are handed over `grace` after they are first seen.
    pub(super) fn new(grace: Duration) -> Self {
        Strays {
            tracked: Arc::default(),
            session: Arc::default(),
            sink: Arc::default(),
            grace,
        }
    }

    /// Checks one queue entry of semaphore `name` (`queue_prefix` + request id).
    pub(super) fn check(&self, name: &str, queue_prefix: &str, kv: &KeyValue) {
        let Some(id) = kv.key().strip_prefix(queue_prefix.as_bytes()) else {
            return;
        };
        let Some(lost) = lock(&self.session)
            .as_ref()
            .filter(|(lease, lost)| *lease == kv.lease() && !lost.is_lost())
            .map(|(_, lost)| lost.clone())
        else {
            return; // not our live lease: another Limiter's, or one that expires anyway
        };
        let (Ok(id), Some(sink)) = (std::str::from_utf8(id), self.sink.get()) else {
            return;
        };
        if !self.tracked.claim_stray(kv.key(), kv.create_revision()) {
            return;
        }
        // Handed over after a short grace, if still nobody's: the bookkeeping of an enqueue
        // that is just answering settles first.
        let (tracked, sink, key) = (self.tracked.clone(), sink.clone(), kv.key().to_vec());
        let (name, id, revision) = (name.to_string(), id.to_string(), kv.create_revision());
        let grace = self.grace;
        tokio::spawn(async move {
            tokio::select! {
                _ = tokio::time::sleep(grace) => {}
                _ = lost.lost() => return, // the session is gone, and the entry with it
            }
            if !tracked.is_untracked(&key) {
                return;
            }
            tracing::warn!(semaphore = %name, %id, revision, "a queue entry of this session that no request owns (an enqueue the store applied late); removing it");
            sink(&name, &id, lost);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lost::Deadline;

    #[test]
    fn only_untracked_entries_of_other_revisions_are_strays() {
        let t = Tracked::default();
        let lost = LostSignal::new(Deadline::none());
        let sending = t.sending(b"a".to_vec());
        assert!(!t.claim_stray(b"a", 5), "in flight");
        sending.enqueued(5, lost.child());
        drop(sending);
        assert!(!t.claim_stray(b"a", 5), "held");
        drop(t.sending(b"c".to_vec()));
        assert!(
            t.claim_stray(b"c", 7),
            "an enqueue that ended without an entry owns nothing"
        );
        t.removing(b"a");
        assert!(
            !t.claim_stray(b"a", 5),
            "its own put, seen after the release"
        );
        assert!(t.claim_stray(b"a", 9), "written again later: a stray");
        assert!(!t.claim_stray(b"a", 9), "handed over once");
        t.removing(b"a"); // the releaser removes it
        assert!(!t.claim_stray(b"a", 9));
        assert!(
            t.claim_stray(b"b", 3),
            "never ours in this Limiter's memory"
        );
    }
}
