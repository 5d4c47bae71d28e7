//! Queue entries on Redis: enqueue (one script call that also tells whether the entry holds;
//! on a fair semaphore, one more that grants it when the rule gives it now), the wait for an
//! entry's fate (a watch of the semaphore, `watch.rs`), and removal.

use super::fair_grants;
use super::fair_record::tag_suffix;
use super::permits::Permits;
use super::sem_reply::{Enqueue, SemState};
use super::session::RedisSession;
use crate::backend::{fair_checks, waiters, Enqueued, EntryRequest};
use crate::error::{Error, Result};
use crate::fair::Classes;
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
        let mut args = vec![
            req.id.clone(),
            req.permits.to_string(),
            session.id.clone(),
            session.ttl.as_millis().to_string(),
            unix_ms_now().to_string(),
            req.owner.clone(),
        ];
        // A plain acquire sends what it always sent.
        args.extend(req.fair.as_ref().map(tag_suffix));
        let keys = self.keys(&req.name);
        let items: Vec<String> = self
            .call(RequestKind::Txn, &self.scripts.enqueue, &keys, &args)
            .await?;
        match Enqueue::parse(&items).map_err(|e| self.unreadable(&req.name, e))? {
            Enqueue::NoSemaphore => Err(Error::NotFound(req.name.clone())),
            Enqueue::Heavy(capacity) => Err(waiters::over_capacity(req, capacity)),
            Enqueue::Queued { token, holds } => Ok((token, holds)),
            Enqueue::Plain => Err(fair_checks::not_fair(&req.name)),
            Enqueue::NoClass(text) => Err(self.no_class(req, &text)),
            Enqueue::Fair { token, state } => self.fair_verdict(req, token, *state).await,
        }
    }

    /// Whether entry `token`, just queued on a fair semaphore seen as `state`, holds: marked
    /// by the enqueue itself (the one waiter, and it fits), or granted now by the rule (written
    /// here, `fair_grants.rs`), or not yet (its watch waits for the mark).
    async fn fair_verdict(
        &self,
        req: &EntryRequest,
        token: u64,
        state: SemState,
    ) -> Result<(u64, bool)> {
        if let Some(fair) = &state.fair {
            // Checked by the script before queuing; again here against what it returned.
            fair_checks::check_tag(&req.name, &fair.classes, req.fair.as_ref())?;
            if fair.marks.contains(&token) {
                return Ok((token, true));
            }
        }
        let marks = fair_grants::grant(self, &req.name, Some(state)).await?;
        Ok((token, marks.is_some_and(|m| m.contains(&token))))
    }

    /// The refusal of a class the fair semaphore lacks (`classes`: its classes as stored).
    fn no_class(&self, req: &EntryRequest, classes: &str) -> Error {
        let refused = classes
            .parse::<Classes>()
            .map(|c| fair_checks::check_tag(&req.name, &c, req.fair.as_ref()));
        match refused {
            Ok(Err(e)) => e,
            _ => self.unreadable(
                &req.name,
                format!("a fair record whose classes ({classes:?}) refused a known class"),
            ),
        }
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

    /// Lowers entry `id`'s weight to `permits` if above (one script call); returns the weight
    /// stored afterwards. See [`Backend::shrink_entry`](crate::backend::Backend::shrink_entry).
    pub(super) async fn shrink(&self, name: &str, id: &str, permits: u32) -> Result<u32> {
        self.stop.check()?;
        let args = [id.to_string(), permits.to_string()];
        let stored: i64 = self
            .call(
                RequestKind::Txn,
                &self.scripts.shrink,
                &self.keys(name),
                &args,
            )
            .await?;
        match stored {
            -1 => Err(Error::SessionLost),
            n => u32::try_from(n).map_err(|_| {
                self.unreadable(name, format!("an entry whose weight is unreadable ({n})"))
            }),
        }
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
