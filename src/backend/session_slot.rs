//! The one current session of a network backend: reused while it lives, replaced when it is
//! lost, taken out to end it. Both etcd (a lease) and ZooKeeper (a session) keep theirs here, so
//! "which session is current" and "end it only if it is still the current one" are written once.

use super::stop::Stop;
use crate::error::{Error, Result};
use crate::lost::LostSignal;
use std::future::Future;
use std::sync::Arc;
use tokio::sync::Mutex;

/// What the slot needs of a store session.
pub(crate) trait StoreSession: Send + Sync {
    /// Fires when the session can no longer be trusted.
    fn lost(&self) -> &LostSignal;
    /// Stops keeping it alive and marks it lost, locally; never blocks. Asking the store to end
    /// it now (a revoke, a close) is the backend's part.
    fn end_locally(&self);
}

/// Holds the current session, if any.
#[derive(Debug)]
pub(crate) struct SessionSlot<S>(Mutex<Option<Arc<S>>>);

impl<S> Default for SessionSlot<S> {
    fn default() -> Self {
        SessionSlot(Mutex::new(None))
    }
}

impl<S: StoreSession> SessionSlot<S> {
    /// The live session, or one `start` makes (after ending the lost one, handed to
    /// `replaced`). Calls wait for each other, so one session starts at a time. Refused once
    /// the backend is stopped.
    pub(crate) async fn live_or_start<F, Fut>(
        &self,
        stop: &Stop,
        replaced: impl FnOnce(&S),
        start: F,
    ) -> Result<Arc<S>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Arc<S>>>,
    {
        let mut current = self.0.lock().await;
        if let Some(s) = current.as_ref() {
            if !s.lost().is_lost() {
                return Ok(s.clone());
            }
            s.end_locally();
            replaced(s);
        }
        stop.check()?;
        let s = start().await?;
        if stop.is_stopped() {
            // Closed while it started: nothing keeps it alive, the store ends it within a TTL.
            s.end_locally();
            return Err(Error::Closed);
        }
        *current = Some(s.clone());
        Ok(s)
    }

    /// The current session, lost or not.
    pub(crate) async fn current(&self) -> Option<Arc<S>> {
        self.0.lock().await.clone()
    }

    /// The loss signal of the live session, if there is one.
    pub(crate) async fn live_signal(&self) -> Option<LostSignal> {
        let current = self.0.lock().await;
        current
            .as_ref()
            .filter(|s| !s.lost().is_lost())
            .map(|s| s.lost().clone())
    }

    /// Takes out and ends (locally) the session `of` belongs to, if it is still the current
    /// one (see [`LostSignal::same_session`]); the caller asks the store to end it.
    pub(crate) async fn end_if_current(&self, of: &LostSignal) -> Option<Arc<S>> {
        let ended = {
            let mut current = self.0.lock().await;
            match current.as_ref() {
                Some(s) if s.lost().same_session(of) => current.take(),
                _ => None,
            }
        };
        ended.inspect(|s| s.end_locally())
    }

    /// Takes out and ends (locally) the current session, for the close.
    pub(crate) async fn end(&self) -> Option<Arc<S>> {
        let taken = self.0.lock().await.take();
        taken.inspect(|s| s.end_locally())
    }

    /// [`end`](Self::end) without waiting, for `Drop`: does nothing if the slot is busy (a
    /// session being started is stopped by the backend's `Stop` instead).
    pub(crate) fn try_end(&self) -> Option<Arc<S>> {
        let taken = self.0.try_lock().ok().and_then(|mut s| s.take());
        taken.inspect(|s| s.end_locally())
    }
}
