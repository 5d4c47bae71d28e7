//! The "can this permit still be trusted?" signal shared by a session and its permits.
//!
//! A permit is lost when its session is cancelled (expired, revoked, closed), when its own entry
//! is cancelled (the key vanished), or when the session's local deadline passes. The deadline is
//! the send time of the last acknowledged keepalive plus the TTL: the earliest moment the store
//! could expire the session and hand the permits to someone else. Checking the clock directly
//! (rather than waiting for a background task to notice) makes `is_lost()` right even when the
//! keepalive task is starved.

use std::sync::Arc;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The instant a session could expire, the earliest moment the store could hand its permits to
/// someone else: it moves forward with every acknowledged keepalive; `None` means "no
/// deadline" (memory store).
#[derive(Debug, Clone)]
pub struct SessionDeadline {
    tx: Arc<watch::Sender<Option<Instant>>>,
}

impl SessionDeadline {
    /// A deadline that never passes.
    pub fn none() -> Self {
        SessionDeadline {
            tx: Arc::new(watch::Sender::new(None)),
        }
    }

    /// A deadline at `at`.
    pub fn at(at: Instant) -> Self {
        SessionDeadline {
            tx: Arc::new(watch::Sender::new(Some(at))),
        }
    }

    /// Moves the deadline to `at` if that is later (acks may arrive out of order) and it has
    /// not passed yet. A deadline that passed stays passed, even if a late ack arrives: someone
    /// may have seen the permits as lost (and acted on it, as a removal that skips the store
    /// does), so the session must end for good rather than come back with them.
    pub fn extend(&self, at: Instant) {
        let now = Instant::now();
        self.tx.send_if_modified(|cur| match cur {
            Some(c) if *c >= at || now >= *c => false,
            _ => {
                *cur = Some(at);
                true
            }
        });
    }

    /// The current deadline.
    pub fn get(&self) -> Option<Instant> {
        *self.tx.borrow()
    }

    /// Whether the deadline has passed.
    pub fn passed(&self) -> bool {
        self.get().is_some_and(|d| Instant::now() >= d)
    }

    /// Completes once the deadline has passed (it may move forward while we wait).
    pub async fn wait(&self) {
        let mut rx = self.tx.subscribe();
        loop {
            let current = *rx.borrow_and_update();
            match current {
                Some(d) if Instant::now() >= d => return,
                Some(d) => {
                    tokio::select! {
                        _ = tokio::time::sleep_until(d) => {}
                        r = rx.changed() => if r.is_err() { std::future::pending::<()>().await },
                    }
                }
                None => {
                    if rx.changed().await.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
            }
        }
    }
}

/// Fires when a session, or one entry of it, can no longer be trusted.
#[derive(Debug, Clone)]
pub struct LostSignal {
    token: CancellationToken,
    deadline: SessionDeadline,
}

impl LostSignal {
    /// A signal for a new session with the given deadline.
    pub fn new(deadline: SessionDeadline) -> Self {
        LostSignal {
            token: CancellationToken::new(),
            deadline,
        }
    }

    /// A signal for one entry: lost when the session is, or when [`fire`](Self::fire) is called on it.
    pub fn child(&self) -> Self {
        LostSignal {
            token: self.token.child_token(),
            deadline: self.deadline.clone(),
        }
    }

    /// Marks this signal (and its children) lost.
    pub fn fire(&self) {
        self.token.cancel();
    }

    /// Whether it has fired or the deadline has passed.
    pub fn is_lost(&self) -> bool {
        self.token.is_cancelled() || self.deadline.passed()
    }

    /// Completes when the signal fires or the deadline passes. Cancel-safe.
    pub async fn lost(&self) {
        tokio::select! {
            _ = self.token.cancelled() => {}
            _ = self.deadline.wait() => {}
        }
    }

    /// Whether `other` belongs to the same session as this signal (a session's signal and the
    /// signals of its entries share the session's deadline).
    pub fn same_session(&self, other: &LostSignal) -> bool {
        Arc::ptr_eq(&self.deadline.tx, &other.deadline.tx)
    }

    /// The session deadline behind this signal.
    pub fn deadline(&self) -> &SessionDeadline {
        &self.deadline
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn deadline_moves_and_fires() {
        let d = SessionDeadline::at(Instant::now() + Duration::from_secs(3));
        let s = LostSignal::new(d.clone());
        let child = s.child();
        d.extend(Instant::now() + Duration::from_secs(5));
        d.extend(Instant::now() + Duration::from_secs(1)); // earlier: ignored
        tokio::time::sleep(Duration::from_millis(4900)).await;
        assert!(!child.is_lost());
        tokio::time::timeout(Duration::from_millis(200), child.lost())
            .await
            .expect("fires at the deadline");
        assert!(s.is_lost());
    }

    /// A late keepalive ack must not revive a session someone may already have seen as lost
    /// (a removal skipped the store because of it; ZooKeeper keeps the session if it is not
    /// ended, and with it the node nobody deletes any more).
    #[tokio::test(start_paused = true)]
    async fn a_passed_deadline_stays_passed() {
        let d = SessionDeadline::at(Instant::now() + Duration::from_secs(3));
        let s = LostSignal::new(d.clone());
        let permit = s.child();
        tokio::time::sleep(Duration::from_millis(3001)).await;
        assert!(permit.is_lost());
        d.extend(Instant::now() + Duration::from_secs(3)); // an ack sent before the deadline
        assert!(permit.is_lost() && s.is_lost() && d.passed());
        tokio::time::timeout(Duration::from_millis(1), s.lost())
            .await
            .expect("still fired");
    }

    #[tokio::test]
    async fn child_fires_alone() {
        let s = LostSignal::new(SessionDeadline::none());
        let a = s.child();
        let b = s.child();
        a.fire();
        a.lost().await;
        assert!(a.is_lost() && !b.is_lost() && !s.is_lost());
        s.fire();
        b.lost().await;
    }
}
