//! Queue entries on Redis: enqueue (one script call that also tells whether the entry holds),
//! the wait for an entry's fate (a watch of the semaphore, `watch.rs`), and removal.

use super::permits::Permits;
use super::sem_reply::Enqueue;
use super::session::RedisSession;
use super::watch::SemWatch;
use crate::backend::{lock, waiters, Enqueued, EntryRequest, WaitOutcome};
use crate::error::{Error, Result};
use crate::stats::RequestKind;
use crate::status::unix_ms_now;
use std::sync::Arc;

impl Permits {
    pub(super) async fn enqueue(self: &Arc<Self>, req: &EntryRequest) -> Result<Enqueued> {
        let session = self.live_session().await?;
        // Kept alive in this semaphore from before the request: Redis may queue the entry
        // before it answers.
        session.sending(&req.name);
        let sent = self.enqueue_in(req, &session).await;
        session.sent(
            &req.name,
            sent.as_ref()
                .ok()
                .map(|(token, _)| (req.id.as_str(), *token)),
        );
        let (token, granted) = sent?;
        Ok(Enqueued {
            token,
            granted,
            lost: session.lost.child(),
        })
    }

    async fn enqueue_in(&self, req: &EntryRequest, session: &RedisSession) -> Result<(u64, bool)> {
        let args = [
            req.id.clone(),
            req.permits.to_string(),
            session.id.clone(),
            session.ttl.as_millis().to_string(),
            unix_ms_now().to_string(),
            req.owner.clone(),
        ];
        let keys = self.keys(&req.name);
        let items: Vec<String> = self
            .call(RequestKind::Txn, &self.scripts.enqueue, &keys, &args)
            .await?;
        match Enqueue::parse(&items).map_err(|e| self.unreadable(&req.name, e))? {
            Enqueue::NoSemaphore => Err(Error::NotFound(req.name.clone())),
            Enqueue::Heavy(capacity) => Err(waiters::over_capacity(req, capacity)),
            Enqueue::Queued { token, holds } => Ok((token, holds)),
        }
    }

    /// Waits for the fate of the enqueued entry (see
    /// [`Backend::wait_outcome`](crate::backend::Backend::wait_outcome)).
    pub(super) async fn wait_outcome(
        self: &Arc<Self>,
        req: &EntryRequest,
        enq: &Enqueued,
    ) -> Result<WaitOutcome> {
        // A watch stops on its own when nobody waited for a while; registering on one that
        // just stopped starts the next.
        for _ in 0..3 {
            if let Some(told) = self.watch(&req.name)?.register(enq.token, req.permits) {
                // A watch that stops with the backend drops its waiters: the session is gone.
                return told.await.map_err(|_| Error::SessionLost);
            }
        }
        Err(Error::SessionLost)
    }

    /// The live watch of semaphore `name`, started if there is none.
    fn watch(self: &Arc<Self>, name: &str) -> Result<Arc<SemWatch>> {
        if self.stop.is_stopped() {
            return Err(Error::SessionLost);
        }
        let mut watches = lock(&self.watches);
        if let Some(w) = watches.get(name).filter(|w| !w.is_stopped()) {
            return Ok(w.clone());
        }
        let w = SemWatch::start(Arc::downgrade(self), name, self.stop.child_token());
        watches.insert(name.to_string(), w.clone());
        Ok(w)
    }

    /// Removes an entry; an absent one counts as removed.
    pub(super) async fn remove(&self, name: &str, id: &str) -> Result<()> {
        if let Some(session) = self.session.current().await {
            // Its absence is no loss from now on.
            session.forget(name, id);
        }
        if self.stop.is_stopped() {
            // close() ended the session, and its entries with it.
            return Ok(());
        }
        let _: i64 = self
            .call(
                RequestKind::Delete,
                &self.scripts.remove,
                &self.keys(name),
                &[id.to_string()],
            )
            .await?;
        Ok(())
    }

    /// Drops the entries of `session` in every semaphore it is in (its end, asked of Redis).
    /// Best effort: what fails lapses with the session's deadline.
    pub(super) async fn drop_session(&self, session: &RedisSession) {
        let calls = session.semaphores().into_iter().map(|s| async move {
            let sem = s.name;
            let ended: Result<i64> = self
                .call(
                    RequestKind::Lease,
                    &self.scripts.end_session,
                    &self.keys(&sem),
                    std::slice::from_ref(&session.id),
                )
                .await;
            if let Err(e) = ended {
                tracing::debug!(semaphore = %sem, "ending the session in semaphore {sem:?} failed: {e}; its entries lapse within the session TTL");
            }
        });
        futures::future::join_all(calls).await;
    }
}
