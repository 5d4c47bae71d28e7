//! The link to ZooKeeper that every part of the backend shares ([`Link`]: settings, node
//! layout, credentials, counters, the session and this Limiter's entries in it, stop), and
//! every request to ZooKeeper goes through it: one request bounded by the request timeout
//! (`call`), or retried across connection errors and lost sessions (`session_call`), and
//! ZooKeeper's errors as the crate's (`NoAuth` named after what it denied). The sessions are
//! started here on first use and again after a loss, each with its reaper of abandoned nodes.
//! The parts (`entries.rs`, `semaphore.rs`, `board.rs`, `rate.rs`) hold an `Arc` of it; it
//! knows none of them.

use super::auth::{Digest, Identity};
use super::config::ZkConfig;
use super::fair_grants::{FairPaths, Granter};
use super::nodes::Paths;
use super::session::{SessionConfig, ZkSession};
use super::sweeper::Sweeper;
use super::tls::Tls;
use super::tracked::{Entries, Reaper};
use super::view::{self, is_connection_error, is_terminal, SemView, ViewConfig};
use crate::backend::retry::Attempts;
use crate::backend::{lock, SessionSlot, Stop};
use crate::backoff::Backoff;
use crate::error::{Error, Result};
use crate::stats::{RequestCounters, RequestKind};
use crate::timing::GIVE_UP_AFTER_TTLS;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use zookeeper_client::{self as zk, Acls, Permission};

/// What every request needs: the settings, the node layout, the credentials and ACLs, the
/// request counters, the session (and this Limiter's entries in it), and the stop of the
/// whole backend.
pub(super) struct Link {
    pub(super) config: ZkConfig,
    /// Keeps rate-limit keys alone (see `ZkBackend::connect_rate_only`).
    pub(super) rate_only: bool,
    pub(super) hosts: String,
    pub(super) paths: Paths,
    pub(super) stats: Arc<RequestCounters>,
    pub(super) session: SessionSlot<ZkSession>,
    /// This Limiter's entries: the session's views report to it, a new session forgets them.
    pub(super) entries: Arc<Entries>,
    /// Sent on every session (and every reconnect of one); `Debug` hides the password.
    pub(super) digest: Option<Digest>,
    pub(super) identity: Identity,
    /// Read from the files once; `None`: plain text.
    pub(super) tls: Option<Tls>,
    /// ACL of every node created.
    pub(super) acls: Acls<'static>,
    /// Set by close/shutdown: no new session starts.
    pub(super) stop: Stop,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("config", &self.config)
            .field("digest", &self.digest)
            .finish_non_exhaustive()
    }
}

impl Link {
    /// One store request, bounded by the request timeout; `kind` is counted.
    pub(super) async fn call<T>(
        &self,
        kind: RequestKind,
        request: impl Future<Output = std::result::Result<T, zk::Error>>,
    ) -> Result<T> {
        self.stats.count(kind);
        match tokio::time::timeout(self.config.request_timeout, request).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(self.map_error(e)),
            Err(_) => Err(Error::store("ZooKeeper did not answer in time")),
        }
    }

    pub(super) fn map_error(&self, e: zk::Error) -> Error {
        match e {
            zk::Error::AuthFailed => self.identity.rejected(),
            e if is_terminal(&e) => Error::SessionLost,
            e => Error::store(e),
        }
    }

    /// `e`, or if it is a `NoAuth` answer, an error saying that the ACL denied `what`.
    pub(super) fn denied_as(&self, e: Error, what: impl FnOnce() -> String) -> Error {
        if is_zk(&e, &zk::Error::NoAuth) {
            self.identity.denied(&what())
        } else {
            e
        }
    }

    /// Runs one request (`op` on the session's client) in the live session (started if
    /// needed), retried across connection errors and a lost session within [`Attempts`];
    /// `NoAuth` is named after `what`. `sweeper`: the client is handed to the rate-limit
    /// sweeper too.
    pub(super) async fn session_call<T, F, Fut>(
        &self,
        kind: RequestKind,
        what: &str,
        sweeper: Option<&Sweeper>,
        mut op: F,
    ) -> Result<T>
    where
        F: FnMut(zk::Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, zk::Error>>,
    {
        let mut attempts = Attempts::new(self.config.request_timeout);
        loop {
            let session = match self.session().await {
                Ok(s) => s,
                Err(Error::Closed) => return Err(Error::Closed),
                Err(e) => {
                    if attempts.again(true).await {
                        continue;
                    }
                    return Err(e);
                }
            };
            let client = match session.client() {
                Ok(c) => c,
                // Ended just now: the next turn starts a new session.
                Err(e) => {
                    if attempts.again(false).await {
                        continue;
                    }
                    return Err(e);
                }
            };
            if let Some(sweeper) = sweeper {
                sweeper.use_client(&client, session.stop_token());
            }
            self.stats.count(kind);
            let bound = tokio::time::Instant::now() + self.config.request_timeout;
            let r = tokio::time::timeout_at(bound.min(attempts.deadline()), op(client)).await;
            let e = match r {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) => e,
                Err(_) => {
                    return Err(Error::store(format!(
                        "ZooKeeper did not answer in time ({what})"
                    )))
                }
            };
            match &e {
                zk::Error::NoAuth => return Err(self.identity.denied(what)),
                zk::Error::AuthFailed => return Err(self.identity.rejected()),
                // Gone for good: end it here (the keeper may not have noticed yet), retry on
                // a new one.
                e if is_terminal(e) => session.end(),
                e if is_connection_error(e) => {}
                _ => return Err(self.map_error(e)),
            }
            tracing::debug!(error = %e, what, "ZooKeeper request failed; retrying");
            if !attempts.again(true).await {
                return Err(self.map_error(e));
            }
        }
    }

    /// With creator ACLs, says so if an existing node we rely on (the semaphores' node, a
    /// semaphore) is open to everyone, e.g. made by an earlier version without credentials:
    /// clusterlimit never changes an existing node's ACL, and ZooKeeper checks a parent's ACL
    /// for creating and deleting children, so anyone could still add or delete what is under
    /// it. One read, best effort.
    pub(super) async fn warn_if_open(&self, client: &zk::Client, dir: &str) {
        if self.acls == Acls::anyone_all() {
            return;
        }
        if let Ok((acls, _)) = self.call(RequestKind::Range, client.get_acl(dir)).await {
            let open = acls.iter().any(|a| {
                let p = a.permission();
                a.scheme() == "world"
                    && [Permission::WRITE, Permission::CREATE, Permission::DELETE]
                        .into_iter()
                        .any(|w| p.has(w))
            });
            if open {
                tracing::warn!(
                    node = dir,
                    "this node lets anyone write (created without ACLs), so anyone may add or delete what is under it; clusterlimit does not change existing ACLs: restrict it with setAcl or use a new chroot"
                );
            }
        }
    }

    /// The live session, or a new one if the last one was lost.
    pub(super) async fn session(&self) -> Result<Arc<ZkSession>> {
        // Entries of a replaced session are gone with it.
        let forget = |_: &ZkSession| self.entries.forget_session();
        self.session
            .live_or_start(&self.stop, forget, || async {
                let s = ZkSession::connect(SessionConfig {
                    hosts: &self.hosts,
                    probe_path: self.paths.root(),
                    digest: self.digest.as_ref(),
                    tls: self.tls.as_ref(),
                    identity: &self.identity,
                    session_timeout: self.config.session_timeout,
                    request_timeout: self.config.request_timeout,
                    stats: self.stats.clone(),
                    loss: if self.rate_only {
                        super::session::LOSES_NOTHING
                    } else {
                        super::session::LOSES_PERMITS
                    },
                })
                .await?;
                *lock(&self.entries.reaper) = Some(self.reaper(&s)?);
                Ok(s)
            })
            .await
    }

    /// Deletes the nodes of abandoned requests in the background, under the rule of
    /// `release.rs`: retried until ZooKeeper confirms it or the session ends, and if it stays
    /// unconfirmed for two session timeouts, the session is ended so the node goes for certain.
    fn reaper(&self, session: &ZkSession) -> Result<Reaper> {
        let client = session.client()?;
        let stop = session.stop_token().clone();
        let ender = session.end_handle();
        let root = self.paths.semaphores();
        let stats = self.stats.clone();
        let bound = self.config.request_timeout;
        let give_up_after = self.config.session_timeout * GIVE_UP_AFTER_TTLS;
        // Holds a client clone only while a delete runs; ends with the session.
        let client = Arc::new(Mutex::new(Some(client)));
        let stopper = client.clone();
        let stop_watch = stop.clone();
        tokio::spawn(async move {
            stop_watch.cancelled().await;
            lock(&stopper).take();
        });
        Ok(Arc::new(move |rel: String| {
            let Some(client) = lock(&client).clone() else {
                return;
            };
            let path = format!("{root}/{rel}");
            let (stats, stop, ender) = (stats.clone(), stop.clone(), ender.clone());
            tokio::spawn(async move {
                let give_up_at = Instant::now() + give_up_after;
                let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));
                loop {
                    stats.count(RequestKind::Delete);
                    let r = tokio::select! {
                        _ = stop.cancelled() => return, // the session ended: the node went too
                        r = tokio::time::timeout(bound, client.delete(&path, None)) => r,
                    };
                    match r {
                        Ok(Ok(())) | Ok(Err(zk::Error::NoNode)) => return,
                        Ok(Err(e)) if view::is_terminal(&e) => return,
                        Ok(Err(e)) => {
                            tracing::debug!(%path, error = %e, "deleting an abandoned node failed; retrying")
                        }
                        Err(_) => {
                            tracing::debug!(%path, "deleting an abandoned node timed out; retrying")
                        }
                    }
                    if Instant::now() >= give_up_at {
                        tracing::error!(%path, "an abandoned node could not be deleted within {GIVE_UP_AFTER_TTLS} session timeouts; ending the session so ZooKeeper removes it");
                        ender.end();
                        return;
                    }
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(backoff.pause()) => {}
                    }
                }
            });
        }))
    }

    pub(super) fn end_locally(&self) {
        self.stop.stop();
        for (_, l) in lock(&self.entries.live).drain() {
            l.lost.fire();
        }
    }

    /// The session's view of `name`, set up on first use (3 requests: watch, children, data).
    pub(super) async fn view(&self, session: &ZkSession, name: &str) -> Result<Arc<SemView>> {
        let mut views = session.views.lock().await;
        if let Some(v) = views.get(name) {
            if v.is_live() {
                return Ok(v.clone());
            }
        }
        let stop = session.stop_token().child_token();
        let cfg = ViewConfig {
            client: session.client()?,
            name: name.to_string(),
            path: self.paths.semaphore(name),
            stats: self.stats.clone(),
            events: self.entries.clone(),
            fair_path: self.paths.fair(name),
            granter: Granter::new(
                session.client()?,
                FairPaths {
                    semaphore: self.paths.semaphore(name),
                    record: self.paths.fair(name),
                },
                self.stats.clone(),
                self.config.request_timeout,
                stop.clone(),
            ),
        };
        let start = SemView::start(cfg, stop);
        let view = match tokio::time::timeout(self.config.request_timeout, start).await {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => return Err(self.map_error(e)),
            Err(_) => return Err(Error::store("ZooKeeper did not answer in time")),
        };
        views.insert(name.to_string(), view.clone());
        Ok(view)
    }
}

/// Whether `e` is the ZooKeeper error `z`.
pub(super) fn is_zk(e: &Error, z: &zk::Error) -> bool {
    matches!(e, Error::Store(inner) if inner.downcast_ref::<zk::Error>() == Some(z))
}

/// A `NoNode` store error for the semaphore's node means the semaphore does not exist.
pub(super) fn not_found_as(e: Error, name: &str) -> Error {
    if is_zk(&e, &zk::Error::NoNode) {
        Error::NotFound(name.to_string())
    } else {
        e
    }
}
