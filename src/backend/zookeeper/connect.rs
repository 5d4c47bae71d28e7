//! Connecting to ZooKeeper: the TLS files and credentials read, the first session started,
//! the root nodes created if absent; what it makes is the [`Link`] every part of the backend
//! shares.

use super::auth::{self, Digest, Identity};
use super::calls::{is_zk, Link};
use super::config::ZkConfig;
use super::nodes::Paths;
use super::tls;
use super::tracked::Entries;
use crate::backend::{reach, SessionSlot, Stop};
use crate::error::Result;
use crate::stats::{RequestCounters, RequestKind};
use std::sync::Arc;
use zookeeper_client::{self as zk, CreateMode};

/// Loads the TLS files and credentials, starts the session and creates the root nodes if
/// absent (see `ZkBackend::connect`).
pub(super) async fn connect(config: ZkConfig, rate_only: bool) -> Result<Link> {
    let tls = config.tls.as_ref().map(tls::Tls::load).transpose()?;
    let digest = Digest::load(config.digest_file.as_deref())?;
    let acls = auth::node_acls(config.acl, digest.as_ref())?;
    reach::any_reachable("ZooKeeper", &config.hosts).await?;
    let stop = Stop::default();
    let stats = Arc::new(RequestCounters::default());
    let link = Link {
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
    let session = link.session().await?;
    let client = session.client()?;
    let dir = link.paths.semaphores();
    let made = link
        .call(RequestKind::Put, async {
            client
                .mkdir(&dir, &CreateMode::Persistent.with_acls(link.acls))
                .await
        })
        .await;
    match made {
        Ok(()) => {}
        // ZooKeeper checks the parent's ACL before whether the node exists: a client that
        // may only read (another identity, or none) gets NoAuth for a root that is there.
        Err(e) if is_zk(&e, &zk::Error::NoAuth) => {
            let there = link
                .call(RequestKind::Range, client.check_stat(&dir))
                .await?;
            if there.is_none() {
                return Err(link
                    .identity
                    .denied(&format!("creating the root node {dir}")));
            }
        }
        Err(e) => return Err(e),
    }
    link.warn_if_open(&client, &dir).await;
    Ok(link)
}
