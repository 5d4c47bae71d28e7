//! Connecting to ZooKeeper, and the sessions of a connected backend: started on first use and
//! again after a loss, each with its reaper of abandoned nodes.

use super::auth::{self, Digest, Identity};
use super::calls::is_zk;
use super::config::ZkConfig;
use super::nodes::Paths;
use super::session::{SessionConfig, ZkSession};
use super::sweep_state::ZkSweep;
use super::sweeper::Sweeper;
use super::tracked::{Entries, Reaper};
use super::{tls, view, ZkBackend};
use crate::backend::{lock, reach, SessionSlot, Stop};
use crate::backoff::Backoff;
use crate::error::Result;
use crate::stats::{RequestCounters, RequestKind};
use crate::timing::GIVE_UP_AFTER_TTLS;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use zookeeper_client::{self as zk, Acls, CreateMode, Permission};

impl ZkBackend {
    /// Connects the session and creates the root nodes if absent. Fails fast if no server
    /// answers.
    pub async fn connect(config: ZkConfig) -> Result<ZkBackend> {
        Self::open(config, false).await
    }

    /// [`connect`](Self::connect) for a cluster that keeps rate-limit keys alone (a sharded
    /// store's clusters after the first): no semaphore lives in its sessions, and its logs
    /// say that the loss of one costs nothing.
    pub async fn connect_rate_only(config: ZkConfig) -> Result<ZkBackend> {
        Self::open(config, true).await
    }

    async fn open(config: ZkConfig, rate_only: bool) -> Result<ZkBackend> {
        let tls = config.tls.as_ref().map(tls::Tls::load).transpose()?;
        let digest = Digest::load(config.digest_file.as_deref())?;
        let acls = auth::node_acls(config.acl, digest.as_ref())?;
        reach::any_reachable("ZooKeeper", &config.hosts).await?;
        let stop = Stop::default();
        let stats = Arc::new(RequestCounters::default());
        let backend = ZkBackend {
            sweeper: Sweeper::new(
                ZkSweep::new(stats.clone(), config.request_timeout),
                stop.child_token(),
            ),
            identity: Identity::of(digest.as_ref()),
            digest,
            tls,
            acls,
            hosts: config.hosts.join(","),
            paths: Paths::new(&config.root),
            config,
            rate_only,
            stats,
            session: SessionSlot::default(),
            entries: Arc::new(Entries::default()),
            stop,
        };
        let session = backend.session().await?;
        let client = session.client()?;
        let dir = backend.paths.semaphores();
        let made = backend
            .call(RequestKind::Put, async {
                client
                    .mkdir(&dir, &CreateMode::Persistent.with_acls(backend.acls))
                    .await
            })
            .await;
        match made {
            Ok(()) => {}
            // ZooKeeper checks the parent's ACL before whether the node exists: a client that
            // may only read (another identity, or none) gets NoAuth for a root that is there.
            Err(e) if is_zk(&e, &zk::Error::NoAuth) => {
                let there = backend
                    .call(RequestKind::Range, client.check_stat(&dir))
                    .await?;
                if there.is_none() {
                    return Err(backend
                        .identity
                        .denied(&format!("creating the root node {dir}")));
                }
            }
            Err(e) => return Err(e),
        }
        backend.warn_if_open(&client, &dir).await;
        Ok(backend)
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
}
