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
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long a removed key's create revision is remembered: far longer than a watch event can
/// lag behind the release that follows its put.
const REMEMBER_REMOVED: Duration = Duration::from_secs(60);
/// At most this many removed keys are remembered (the oldest go first): a busy Limiter removes
/// thousands a second. One forgotten too early costs at most a harmless removal of a key that
/// is already gone, if its put event comes later still.
const MAX_REMEMBERED: usize = 1 << 16;

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
    removed: Removed,
}

/// Keys removed lately, forgotten oldest first ([`REMEMBER_REMOVED`], [`MAX_REMEMBERED`]) in
/// amortised constant time: a release must not scan every key removed in the last minute.
#[derive(Debug, Default)]
struct Removed {
    by_key: HashMap<Vec<u8>, (Option<i64>, Instant)>,
    /// Every record in the order made; one whose key was recorded again since is stale.
    order: VecDeque<(Vec<u8>, Instant)>,
}

impl Removed {
    fn get(&self, key: &[u8]) -> Option<&(Option<i64>, Instant)> {
        self.by_key.get(key)
    }

    /// Records `key` as removed `now`, at `revision` (`None`: keep a known one).
    fn record(&mut self, key: &[u8], revision: Option<i64>, now: Instant) {
        self.forget_old(now);
        let revision = revision.or_else(|| self.by_key.get(key).and_then(|(r, _)| *r));
        self.by_key.insert(key.to_vec(), (revision, now));
        self.order.push_back((key.to_vec(), now));
    }

    fn forget_old(&mut self, now: Instant) {
        while let Some((key, at)) = self.order.front() {
            let expired = now.saturating_duration_since(*at) >= REMEMBER_REMOVED;
            if !expired && self.order.len() < MAX_REMEMBERED {
                return;
            }
            // Only the key's latest record forgets it.
            if self.by_key.get(key).is_some_and(|(_, t)| t == at) {
                self.by_key.remove(key);
            }
            self.order.pop_front();
        }
    }
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
        // Without a revision, what is known is kept (a stray being removed has its own).
        t.removed.record(key, revision, Instant::now());
    }

    /// Whether a finished enqueue of this Limiter holds or waits with `key`.
    pub(super) fn is_live(&self, key: &[u8]) -> bool {
        lock(&self.inner).live.contains_key(key)
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
        t.removed.record(key, Some(revision), Instant::now());
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
    use crate::lost::SessionDeadline;

    #[test]
    fn removed_keys_are_forgotten_oldest_first_by_age_and_by_count() {
        let mut r = Removed::default();
        let t0 = Instant::now();
        r.record(b"old", Some(1), t0);
        r.record(b"again", Some(2), t0);
        // recorded again later: its first record's expiry must not forget it
        r.record(b"again", None, t0 + REMEMBER_REMOVED / 2);
        r.record(b"new", Some(3), t0 + REMEMBER_REMOVED);
        assert!(r.get(b"old").is_none(), "a minute old");
        assert_eq!(
            r.get(b"again").map(|e| e.0),
            Some(Some(2)),
            "kept, revision too"
        );
        assert!(r.get(b"new").is_some());
        for i in 0..MAX_REMEMBERED + 10 {
            r.record(
                format!("k{i}").as_bytes(),
                Some(i as i64),
                t0 + REMEMBER_REMOVED,
            );
        }
        assert!(r.by_key.len() <= MAX_REMEMBERED && r.order.len() <= MAX_REMEMBERED);
        assert!(r.get(b"k0").is_none(), "the oldest beyond the count");
        let last = format!("k{}", MAX_REMEMBERED + 9);
        assert!(r.get(last.as_bytes()).is_some());
    }

    #[test]
    fn only_untracked_entries_of_other_revisions_are_strays() {
        let t = Tracked::default();
        let lost = LostSignal::new(SessionDeadline::none());
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
