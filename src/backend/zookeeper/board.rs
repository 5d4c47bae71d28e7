//! Announcement boards on ZooKeeper: each value is an EPHEMERAL node
//! `<root>/boards/<board>/<id>` (layout in `nodes.rs`), so it goes when its session ends; the
//! board's node and its parent are persistent, made on first use with the backend's ACLs. A
//! board is read as its children and their data (one listing, one multi-read). Every call runs
//! through `session_call`: bounded by the request timeout, retried across reconnects, on a new
//! session if the last one was lost. [`Board`] has no state of its own.

use super::calls::Link;
use crate::error::Result;
use crate::stats::RequestKind;
use std::sync::Arc;
use zookeeper_client::{self as zk, CreateMode, MultiReadResult};

/// Rounds of "replace, else create" before giving up: a round fails only when a node of ours
/// appears or vanishes between two requests (a retried create applied late, a session ending).
const PUT_ROUNDS: usize = 3;

/// The announcement boards of a backend.
pub(super) struct Board {
    link: Arc<Link>,
}

impl Board {
    pub(super) fn new(link: Arc<Link>) -> Board {
        Board { link }
    }

    /// Replaces the value of our node (if this session owns it) or creates it.
    pub(super) async fn announce(&self, board: &str, id: &str, value: &[u8]) -> Result<()> {
        let (dir, path) = (
            self.link.paths.board(board),
            self.link.paths.board_entry(board, id),
        );
        let acls = self.link.acls;
        let what = format!("announcing on board {board:?}");
        self.link
            .session_call(RequestKind::Put, &what, None, |c| {
                let (dir, path) = (dir.clone(), path.clone());
                async move {
                    let mut last = zk::Error::NodeExists;
                    for _ in 0..PUT_ROUNDS {
                        match put_once(&c, &dir, &path, value, acls).await {
                            Ok(()) => return Ok(()),
                            Err(e @ (zk::Error::NodeExists | zk::Error::NoNode)) => last = e,
                            Err(e) => return Err(e),
                        }
                    }
                    Err(last)
                }
            })
            .await
    }

    /// Every `(id, value)` on `board`; a node that goes between the listing and the read is
    /// left out (its announcer is gone).
    pub(super) async fn read(&self, board: &str) -> Result<Vec<(String, Vec<u8>)>> {
        let dir = self.link.paths.board(board);
        let what = format!("reading board {board:?}");
        let mut all = self
            .link
            .session_call(RequestKind::Range, &what, None, |c| {
                let dir = dir.clone();
                async move {
                    let ids = match c.list_children(&dir).await {
                        Ok(ids) => ids,
                        Err(zk::Error::NoNode) => return Ok(Vec::new()),
                        Err(e) => return Err(e),
                    };
                    if ids.is_empty() {
                        return Ok(Vec::new());
                    }
                    let mut reader = c.new_multi_reader();
                    for id in &ids {
                        reader.add_get_data(&format!("{dir}/{id}"))?;
                    }
                    let read = reader.commit().await?;
                    Ok(ids
                        .into_iter()
                        .zip(read)
                        .filter_map(|(id, r)| match r {
                            MultiReadResult::Data { data, .. } => Some((id, data)),
                            _ => None,
                        })
                        .collect::<Vec<_>>())
                }
            })
            .await?;
        all.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(all)
    }

    /// Deletes our node on `board`; absent counts as deleted.
    pub(super) async fn withdraw(&self, board: &str, id: &str) -> Result<()> {
        let path = self.link.paths.board_entry(board, id);
        let what = format!("withdrawing from board {board:?}");
        self.link
            .session_call(RequestKind::Delete, &what, None, |c| {
                let path = path.clone();
                async move {
                    match c.delete(&path, None).await {
                        Ok(()) | Err(zk::Error::NoNode) => Ok(()),
                        Err(e) => Err(e),
                    }
                }
            })
            .await
    }
}

/// One round: set the data of our node if this session owns it; a node of an earlier session
/// of ours (alive on the server until it expires) is deleted, so the value is not bound to the
/// wrong session; then create the node, and the board's node first if it is absent.
async fn put_once(
    c: &zk::Client,
    dir: &str,
    path: &str,
    value: &[u8],
    acls: zk::Acls<'static>,
) -> std::result::Result<(), zk::Error> {
    match c.set_data(path, value, None).await {
        Ok(stat) if stat.ephemeral_owner == c.session_id().0 => return Ok(()),
        Ok(stat) => match c.delete(path, Some(stat.version)).await {
            Ok(()) | Err(zk::Error::NoNode) => {}
            Err(e) => return Err(e),
        },
        Err(zk::Error::NoNode) => {}
        Err(e) => return Err(e),
    }
    let ephemeral = CreateMode::Ephemeral.with_acls(acls);
    match c.create(path, value, &ephemeral).await {
        Ok(_) => Ok(()),
        Err(zk::Error::NoNode) => {
            match c.mkdir(dir, &CreateMode::Persistent.with_acls(acls)).await {
                Ok(()) | Err(zk::Error::NodeExists) => {}
                Err(e) => return Err(e),
            }
            c.create(path, value, &ephemeral).await.map(|_| ())
        }
        Err(e) => Err(e),
    }
}
