//! A Limiter's session on Redis. Redis has no leases, so a session is an id and, in each
//! semaphore it has entries in, a deadline (server time) its keeper pushes forward about every
//! TTL/3 (`keeper.rs`); a script that finds a session's deadline passed removes the session's
//! entries there (`lua/sem_common.lua`). The session also remembers which of its entries each
//! semaphore should hold, so the keeper can tell when one vanished (ended behind its back, or
//! lost in a failover).

use crate::backend::lock;
use crate::lost::{LostSignal, SessionDeadline};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// One session: lost (for good) when its deadline passes without an acknowledged keepalive,
/// when Redis no longer knows it, or when one of its entries vanished.
#[derive(Debug)]
pub(super) struct RedisSession {
    /// Random, so two Limiters (or two sessions of one) never share one.
    pub(super) id: String,
    pub(super) lost: LostSignal,
    pub(super) ttl: Duration,
    pub(super) stop: CancellationToken,
    held: Mutex<BTreeMap<String, Held>>,
}

/// The session's part in one semaphore.
#[derive(Debug, Default)]
struct Held {
    /// Entries Redis confirmed.
    ids: BTreeSet<String>,
    /// The highest token Redis confirmed here.
    max_token: u64,
    /// `max_token` as it was the last time no enqueue was in flight here: an entry of this
    /// session at or below it that is not in `ids` is a stray (a release a failover lost),
    /// removed by the keeper. Not `max_token` itself: replies are handled in any order, so an
    /// enqueue still unconfirmed may have a lower token than one confirmed already; one sent
    /// after a moment with none in flight is queued after every token confirmed by then.
    stray_below: u64,
    /// Enqueues sent and not answered yet: the keeper keeps the session alive there meanwhile.
    sending: usize,
}

impl RedisSession {
    /// A new session: nothing in Redis yet (its first enqueue in a semaphore registers it
    /// there), so its deadline starts from now.
    pub(super) fn new(ttl: Duration) -> RedisSession {
        RedisSession {
            id: uuid::Uuid::new_v4().simple().to_string(),
            lost: LostSignal::new(SessionDeadline::at(Instant::now() + ttl)),
            ttl,
            stop: CancellationToken::new(),
            held: Mutex::new(BTreeMap::new()),
        }
    }

    /// Before an enqueue in `sem` is sent.
    pub(super) fn sending(&self, sem: &str) {
        lock(&self.held).entry(sem.to_string()).or_default().sending += 1;
    }

    /// After it answered: `Some((id, token))` when Redis queued entry `id`.
    pub(super) fn sent(&self, sem: &str, queued: Option<(&str, u64)>) {
        let mut held = lock(&self.held);
        let h = held.entry(sem.to_string()).or_default();
        h.sending = h.sending.saturating_sub(1);
        if let Some((id, token)) = queued {
            h.ids.insert(id.to_string());
            h.max_token = h.max_token.max(token);
        }
        if h.sending == 0 {
            h.stray_below = h.max_token;
        }
        if h.ids.is_empty() && h.sending == 0 {
            held.remove(sem);
        }
    }

    /// Before entry `id` of `sem` is removed: its absence is no longer a loss.
    pub(super) fn forget(&self, sem: &str, id: &str) {
        let mut held = lock(&self.held);
        if let Some(h) = held.get_mut(sem) {
            h.ids.remove(id);
            if h.ids.is_empty() && h.sending == 0 {
                held.remove(sem);
            }
        }
    }

    /// Whether entry `id` of `sem` is still held (confirmed and not released since).
    pub(super) fn holds(&self, sem: &str, id: &str) -> bool {
        lock(&self.held)
            .get(sem)
            .is_some_and(|h| h.ids.contains(id))
    }

    /// Every semaphore the session is in now, with the entries it should find there and the
    /// token at or below which any other entry of the session there is a stray.
    pub(super) fn semaphores(&self) -> Vec<InSemaphore> {
        lock(&self.held)
            .iter()
            .map(|(sem, h)| InSemaphore {
                name: sem.clone(),
                ids: h.ids.iter().cloned().collect(),
                max_token: h.stray_below,
            })
            .collect()
    }
}

/// The session's part in one semaphore, as the keeper checks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct InSemaphore {
    pub(super) name: String,
    pub(super) ids: Vec<String>,
    pub(super) max_token: u64,
}

impl crate::backend::StoreSession for RedisSession {
    fn lost(&self) -> &LostSignal {
        &self.lost
    }

    /// The keeper stops first: from then on nothing keeps the session alive, so Redis's
    /// scripts drop its entries within the TTL even if ending it there fails.
    fn end_locally(&self) {
        self.stop.cancel();
        self.lost.fire();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_to_what_redis_confirmed() {
        let s = RedisSession::new(Duration::from_secs(3));
        s.sending("a");
        assert_eq!(s.semaphores()[0].ids, Vec::<String>::new());
        s.sent("a", Some(("e1", 7)));
        s.sending("a");
        s.sent("a", None);
        let want = InSemaphore {
            name: "a".into(),
            ids: vec!["e1".into()],
            max_token: 7,
        };
        assert_eq!(s.semaphores(), vec![want]);
        s.forget("a", "e1");
        assert!(s.semaphores().is_empty());
        assert_ne!(s.id, RedisSession::new(Duration::from_secs(3)).id);
    }

    #[test]
    fn an_unconfirmed_enqueue_is_never_below_the_stray_cutoff() {
        let s = RedisSession::new(Duration::from_secs(3));
        s.sending("a");
        s.sent("a", Some(("e1", 5)));
        // e2 (token 8) and e3 (token 9) in flight; e3's reply is handled first.
        s.sending("a");
        s.sending("a");
        s.sent("a", Some(("e3", 9)));
        assert_eq!(s.semaphores()[0].max_token, 5, "e2 may be below 9");
        s.sent("a", Some(("e2", 8)));
        assert_eq!(s.semaphores()[0].max_token, 9);
    }
}
