//! Queue entries: the enqueue (one create, decided from the session's view of the semaphore),
//! a create whose reply was lost found again or abandoned, the wait, and the removal.
//! [`Permits`] has no state of its own: this Limiter's entries (`tracked.rs`) live with the
//! session in the link, as a new session forgets them and the session's views report to them.

use super::calls::{is_zk, Link};
use super::fair_grants::{self, FairPaths};
use super::fair_record::Fair;
use super::nodes::{id_part, EntryData, EntryName};
use super::session::ZkSession;
use super::tracked::LiveEntry;
use super::view::{self, SemView};
use crate::backend::fair_checks;
use crate::backend::retry::Attempts;
use crate::backend::waiters::{self, WaitOutcome};
use crate::backend::{lock, Enqueued, EntryRequest};
use crate::error::{Error, Result};
use crate::stats::RequestKind;
use crate::status::unix_ms_now;
use std::sync::Arc;
use tokio::time::Instant;
use zookeeper_client::{self as zk, CreateMode};

/// How one create attempt ended.
enum Created {
    Node {
        token: u64,
        node: String,
        /// The data it was created with (data version 0).
        data: EntryData,
    },
    /// The connection dropped: the create may or may not have been applied.
    InDoubt,
}

/// The queue entries of a backend.
pub(super) struct Permits {
    link: Arc<Link>,
}

impl Permits {
    pub(super) fn new(link: Arc<Link>) -> Permits {
        Permits { link }
    }

    /// Waits until the entry `enq` of `req` holds, or cannot (see
    /// [`Backend::wait_outcome`](crate::backend::Backend::wait_outcome)).
    pub(super) async fn wait(&self, req: &EntryRequest, enq: &Enqueued) -> Result<WaitOutcome> {
        if enq.lost.is_lost() {
            return Err(Error::SessionLost);
        }
        // The session is the entry's own: a lost session would have fired `enq.lost`.
        let session = self.link.session.current().await;
        let view = match session {
            Some(s) => s.views.lock().await.get(&req.name).cloned(),
            None => None,
        };
        let Some(view) = view else {
            return Err(Error::SessionLost);
        };
        // A view that stops (its session ended) drops its waiters.
        view.register(enq.token, req.permits)
            .await
            .map_err(|_| Error::SessionLost)
    }

    /// The enqueue of `req` failed, and nobody will ask for its id again: a create of it
    /// whose outcome is unknown (timed out, reply lost) may still apply, late (a member that
    /// was hung commits it when it resumes). Delete its node if it shows up, or now if the view
    /// shows it already.
    fn abandon_in_doubt(&self, view: &SemView, req: &EntryRequest) {
        if !lock(&self.link.entries.in_doubt).remove(&req.id) {
            return;
        }
        lock(&self.link.entries.abandoned).insert(req.id.clone());
        let shown = view.nodes_of(&req.id);
        if shown.is_empty() {
            return;
        }
        lock(&self.link.entries.abandoned).remove(&req.id);
        if let Some(reap) = lock(&self.link.entries.reaper).clone() {
            for node in shown {
                tracing::debug!(semaphore = %req.name, %node, "deleting the node of a failed enqueue");
                reap(format!("{}/{node}", req.name));
            }
        }
    }

    /// Sends the create of `req`'s node once.
    async fn create_once(
        &self,
        client: &zk::Client,
        req: &EntryRequest,
        deadline: Instant,
    ) -> Result<Created> {
        let id = id_part(&req.id, req.fair.as_ref());
        let prefix = self.link.paths.entry_prefix(&req.name, req.permits, &id);
        let entry = EntryData {
            owner: req.owner.clone(),
            since_unix_ms: unix_ms_now(),
            permits: None,
        };
        let data = entry.encode();
        let options = CreateMode::EphemeralSequential.with_acls(self.link.acls);
        self.link.stats.count(RequestKind::Put);
        lock(&self.link.entries.in_doubt).insert(req.id.clone());
        let settled = |e: &Self| lock(&e.link.entries.in_doubt).remove(&req.id);
        match tokio::time::timeout_at(deadline, client.create(&prefix, &data, &options)).await {
            Ok(Ok((_, seq))) => {
                settled(self);
                let token = u64::try_from(seq.into_i64())
                    .map_err(|_| Error::store("ZooKeeper returned a negative sequence number"))?
                    + 1;
                let node = EntryName::node(req.permits, &id, token);
                Ok(Created::Node {
                    token,
                    node,
                    data: entry,
                })
            }
            Ok(Err(e)) if view::is_connection_error(&e) => Ok(Created::InDoubt),
            Ok(Err(zk::Error::NoNode)) => {
                settled(self);
                Err(Error::NotFound(req.name.clone()))
            }
            Ok(Err(e)) => {
                settled(self);
                Err(self.link.denied_as(self.link.map_error(e), || {
                    format!("adding an entry to semaphore {:?}", req.name)
                }))
            }
            // Still queued or in flight: it stays in doubt, so a late node is deleted.
            Err(_) => Err(Error::store("ZooKeeper did not answer the create in time")),
        }
    }

    /// Creates `req`'s node, retrying across reconnects; a create whose reply was lost is found
    /// again in the view by its request id. Returns `(token, node, the data it was created with
    /// when known)`: a node found again may be of an earlier attempt, whose data differs.
    async fn create_entry(
        &self,
        session: &ZkSession,
        view: &SemView,
        req: &EntryRequest,
    ) -> Result<(u64, String, Option<EntryData>)> {
        let client = session.client()?;
        let deadline = Attempts::new(self.link.config.request_timeout).deadline();
        loop {
            let snapshots = view.snapshots();
            match self.create_once(&client, req, deadline).await? {
                Created::Node { token, node, data } => return Ok((token, node, Some(data))),
                Created::InDoubt => {
                    tracing::debug!(semaphore = %req.name, id = %req.id, "create reply lost; looking for the node after the reconnect");
                    // A snapshot taken after the loss shows the node if the create was applied.
                    let resynced = view.wait_progress(deadline, |(_, n)| n > snapshots).await;
                    if session.lost().is_lost() {
                        return Err(Error::SessionLost);
                    }
                    if !resynced {
                        return Err(Error::store("ZooKeeper connection lost during the create"));
                    }
                    if let Some((token, node)) = view.find(&req.id) {
                        lock(&self.link.entries.in_doubt).remove(&req.id);
                        return Ok((token, node, None));
                    }
                }
            }
        }
    }

    /// Appends `req`'s entry to the queue (see [`Backend::enqueue`](crate::backend::Backend::enqueue)).
    pub(super) async fn enqueue(&self, req: &EntryRequest) -> Result<Enqueued> {
        let session = self.link.session().await?;
        let view = self.link.view(&session, &req.name).await?;
        // The weight is checked once the view has applied every change made before our entry
        // (below): a capacity changed just now may not be in the view yet.
        if view.capacity().is_none() {
            return Err(Error::NotFound(req.name.clone()));
        }
        // Refused before anything is queued: flows on a plain semaphore, an unknown class.
        check_fair(req, &view.fair())?;
        let (token, node, data) = match self.create_entry(&session, &view, req).await {
            Ok(created) => created,
            Err(e) => {
                self.abandon_in_doubt(&view, req);
                return Err(e);
            }
        };
        let lost = session.lost().child();
        lock(&self.link.entries.live).insert(
            req.id.clone(),
            LiveEntry {
                node: node.clone(),
                lost: lost.clone(),
                data: data.map(|d| (d, 0)),
            },
        );
        // A create retried after a lost reply may have applied twice, the first one late. A
        // second node of ours that the view showed while our create was in doubt was left
        // alone then (it could have been the one we would keep): delete it now. One that
        // shows up from here on is caught by `appeared`, as `live` knows which node is ours.
        let extra: Vec<String> = view
            .nodes_of(&req.id)
            .into_iter()
            .filter(|n| *n != node)
            .collect();
        if !extra.is_empty() {
            if let Some(reap) = lock(&self.link.entries.reaper).clone() {
                for other in extra {
                    tracing::debug!(semaphore = %req.name, node = %other, "deleting a second node of one request (a create applied late)");
                    reap(format!("{}/{other}", req.name));
                }
            }
        }
        // Our node's creation event precedes the create's reply; the view applies it promptly.
        let limit = Instant::now() + self.link.config.request_timeout;
        if !view.wait_progress(limit, |(seen, _)| seen > token).await {
            return Err(if session.lost().is_lost() {
                Error::SessionLost
            } else {
                Error::store("the semaphore watch did not report our own entry in time")
            });
        }
        let granted = match view.outcome(token, req.permits) {
            Some(WaitOutcome::Granted) => true,
            Some(WaitOutcome::TooHeavy(cap)) => return Err(waiters::over_capacity(req, cap)),
            Some(other) => {
                return Err(other
                    .into_result(req, &lost)
                    .err()
                    .unwrap_or(Error::SessionLost))
            }
            None => self.grant_own(&session, &view, req, token).await?,
        };
        Ok(Enqueued {
            token,
            granted,
            lost,
        })
    }

    /// On a fair semaphore, when the rule (on the view) grants entry `token` now: writes that
    /// grant, one attempt (the view has applied our entry, and so every change before it).
    /// `true` if the entry holds. On a conflict the entry waits, and its
    /// view grants it when the rule picks it (see `fair_grants.rs`).
    async fn grant_own(
        &self,
        session: &ZkSession,
        view: &SemView,
        req: &EntryRequest,
        token: u64,
    ) -> Result<bool> {
        let Some(plan) = view.plan_with(token) else {
            return Ok(false);
        };
        let client = session.client()?;
        let paths = self.fair_paths(&req.name);
        let written = self
            .link
            .call(
                RequestKind::Txn,
                fair_grants::write_plan(&client, &paths, None, &plan),
            )
            .await;
        // Not known to have applied: the entry waits, and the view shows its mark if it did.
        Ok(written.unwrap_or_else(|e| {
            tracing::debug!(semaphore = %req.name, error = %e, "writing our own grant failed; waiting for the view");
            false
        }))
    }

    fn fair_paths(&self, name: &str) -> FairPaths {
        FairPaths {
            semaphore: self.link.paths.semaphore(name),
            record: self.link.paths.fair(name),
        }
    }

    /// A release on a fair semaphore: deletes `node` and writes the grant the view decides
    /// without it, in one `multi`. `false` when that did not apply (a plain semaphore, nothing
    /// to grant, the record moved on, an error): the caller deletes alone.
    async fn release_granting(
        &self,
        session: &ZkSession,
        client: &zk::Client,
        name: &str,
        node: &str,
    ) -> bool {
        let Some(token) = EntryName::parse(node).map(|e| e.token()) else {
            return false;
        };
        let view = session.views.lock().await.get(name).cloned();
        let Some(plan) = view.and_then(|v| v.release_plan(token)) else {
            return false;
        };
        let (entry, paths) = (self.link.paths.entry(name, node), self.fair_paths(name));
        let released = self
            .link
            .call(
                RequestKind::Txn,
                fair_grants::write_plan(client, &paths, Some(&entry), &plan),
            )
            .await;
        released.unwrap_or_else(|e| {
            tracing::debug!(semaphore = %name, error = %e, "release with a grant failed; deleting alone");
            false
        })
    }

    /// Removes an entry (release or cancel); removing an absent entry succeeds.
    pub(super) async fn remove(&self, name: &str, id: &str) -> Result<()> {
        // Forget it first: our own delete must not look like a node deleted behind our back.
        let live = lock(&self.link.entries.live).remove(id);
        if self.link.stop.is_stopped() {
            return Ok(()); // close() ended the session, and every node of it
        }
        if live.as_ref().is_some_and(|l| l.lost.is_lost()) {
            return Ok(()); // its session is gone, and the node with it
        }
        let session = self.link.session().await?;
        let node = match live {
            Some(l) => Some(l.node),
            None => {
                let known = session.views.lock().await.get(name).cloned();
                let shown = || known.as_ref().and_then(|v| v.find(id)).map(|f| f.1);
                match shown() {
                    Some(node) => Some(node),
                    // Created by a request whose reply never came: delete that node if it ever
                    // shows up; if the view showed it between the look above and the mark,
                    // `appeared` did not know it was abandoned then: delete it here.
                    None if lock(&self.link.entries.in_doubt).remove(id) => {
                        lock(&self.link.entries.abandoned).insert(id.to_string());
                        let late = shown();
                        if late.is_some() {
                            lock(&self.link.entries.abandoned).remove(id);
                        }
                        late
                    }
                    None => None,
                }
            }
        };
        let Some(node) = node else {
            return Ok(()); // never created, or abandoned until it shows up
        };
        let client = session.client()?;
        let path = self.link.paths.entry(name, &node);
        if self.release_granting(&session, &client, name, &node).await {
            return Ok(());
        }
        // A delete is idempotent (NoNode: done), so a connection broken under it (a failover,
        // a blip) is retried on the reconnected client, within the call's deadline and while
        // the session lives.
        let mut attempts = Attempts::new(self.link.config.request_timeout);
        loop {
            let e = match self
                .link
                .call(RequestKind::Delete, client.delete(&path, None))
                .await
            {
                Ok(()) => return Ok(()),
                Err(e) if is_zk(&e, &zk::Error::NoNode) => return Ok(()),
                Err(e) if is_zk(&e, &zk::Error::NoAuth) => {
                    return Err(self
                        .link
                        .denied_as(e, || format!("deleting the entry node {path}")))
                }
                Err(e) => e,
            };
            let broken = matches!(&e, Error::Store(inner)
                if inner.downcast_ref::<zk::Error>().is_some_and(view::is_connection_error));
            if !broken || session.lost().is_lost() || !attempts.again(true).await {
                return Err(e);
            }
            tracing::debug!(%path, error = %e, "release interrupted by a connection error; retrying");
        }
    }
}

/// Whether `req` may join a semaphore whose fair record the view holds as `fair`: flows need a
/// fair semaphore, a class must be one of its classes, and a broken record takes nobody.
fn check_fair(req: &EntryRequest, fair: &Fair) -> Result<()> {
    match fair {
        Fair::Plain if req.fair.is_some() => Err(fair_checks::not_fair(&req.name)),
        Fair::Plain => Ok(()),
        Fair::Kept(f) => fair_checks::check_tag(&req.name, &f.classes, req.fair.as_ref()),
        Fair::Broken => Err(super::semaphore_fair::broken(&req.name)),
    }
}
