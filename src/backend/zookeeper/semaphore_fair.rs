//! A fair semaphore's own records in ZooKeeper: created (its node and its fair record in one
//! `multi`), opened (from the session's view), and its record read for a status or a resize.

use super::calls::{is_zk, Link};
use super::fair_record::{Fair, FairRecord, FairState};
use crate::backend::capacity::CapValue;
use crate::backend::fair_checks;
use crate::error::{Error, Result};
use crate::fair::Classes;
use crate::stats::RequestKind;
use tokio::time::Instant;
use zookeeper_client::{self as zk, CreateMode};

/// Creates the fair semaphore with `capacity` and `classes` if absent (its node and its fair
/// record in one `multi`), or opens it (see
/// [`Backend::ensure_fair_semaphore`](crate::backend::Backend::ensure_fair_semaphore)).
pub(super) async fn open_fair(
    link: &Link,
    name: &str,
    capacity: Option<u32>,
    classes: Option<&Classes>,
) -> Result<u32> {
    let session = link.session().await?;
    let mut denied = None;
    if let (Some(c), Some(classes)) = (capacity, classes) {
        let client = session.client()?;
        let options = CreateMode::Persistent.with_acls(link.acls);
        let mut multi = client.new_multi_writer();
        let (path, cap) = (link.paths.semaphore(name), CapValue::new(c).encode());
        multi
            .add_create(&path, &cap, &options)
            .map_err(Error::store)?;
        let record = FairRecord::new(classes).encode();
        multi
            .add_create(&link.paths.fair(name), &record, &options)
            .map_err(Error::store)?;
        let commit = multi.commit();
        match link
            .call(RequestKind::Txn, async { Ok(commit.await?) })
            .await
        {
            Ok(_) => {}
            Err(e) if is_zk(&e, &zk::Error::NodeExists) => {}
            // It may exist (ZooKeeper checks the ACL first): the view tells.
            Err(e) if is_zk(&e, &zk::Error::NoAuth) => denied = Some(e),
            Err(e) => return Err(e),
        }
    }
    let view = link.view(&session, name).await?;
    if capacity.is_some() && view.capacity().is_none() {
        // Our create's events precede its reply: wait for the view to apply them.
        let limit = Instant::now() + link.config.request_timeout;
        view.wait_progress(limit, |_| view.capacity().is_some())
            .await;
    }
    let Some(stored) = view.capacity() else {
        return Err(match denied {
            Some(e) => link.denied_as(e, || format!("creating semaphore {name:?}")),
            None => Error::NotFound(name.to_string()),
        });
    };
    let fair = match view.fair() {
        Fair::Kept(f) => f,
        Fair::Plain => return Err(fair_checks::not_fair(name)),
        Fair::Broken => return Err(broken(name)),
    };
    if let Some(asked) = classes.filter(|c| **c != fair.classes) {
        return Err(fair_checks::classes_differ(name, &fair.classes, asked));
    }
    match capacity {
        Some(c) if c != stored => Err(Error::CapacityMismatch {
            stored,
            requested: c,
        }),
        _ => Ok(stored),
    }
}

/// Reads the fair record of `name`: `None` for a plain semaphore (or none).
pub(super) async fn read_fair(
    link: &Link,
    client: &zk::Client,
    name: &str,
) -> Result<Option<FairState>> {
    let path = link.paths.fair(name);
    match link.call(RequestKind::Range, client.get_data(&path)).await {
        Ok((data, stat)) => FairState::parse(&data, stat.version)
            .map(Some)
            .ok_or_else(|| broken(name)),
        Err(e) if is_zk(&e, &zk::Error::NoNode) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The error of a fair record that is unreadable, or gone from a semaphore that had one.
pub(super) fn broken(name: &str) -> Error {
    Error::store(format!(
        "the fair record of semaphore {name:?} is missing or unreadable; nothing is granted on \
         it until it is recreated"
    ))
}
