//! Announcement boards on etcd: one key per announcer under `<root>/boards/<board>/`, put with
//! the session's lease, so revoking or expiring the lease deletes it; a board is read with one
//! range read of its prefix. [`Board`] holds no state of its own, only the link: an
//! announcement is put under the lease sessions the backend hands it (as on Redis).

use super::calls::Link;
use super::client::kv;
use super::lease::Leases;
use super::session::Session;
use crate::error::{Error, Result};
use crate::stats::RequestKind;
use etcd_client::{GetOptions, PutOptions};
use std::sync::Arc;

/// The announcement boards of a backend.
pub(super) struct Board {
    link: Arc<Link>,
}

impl Board {
    pub(super) fn new(link: Arc<Link>) -> Board {
        Board { link }
    }

    /// Puts `value` under `id` with the lease of `leases`' live session; if etcd no longer has
    /// that lease (revoked or expired before our keeper noticed), under a new session's.
    pub(super) async fn announce(
        &self,
        leases: &Leases,
        board: &str,
        id: &str,
        value: &[u8],
    ) -> Result<()> {
        let session = leases.live().await?;
        match self.put_leased(board, id, value, &session).await {
            Err(Error::SessionLost) if !session.lost.is_lost() => {
                session.lost.fire();
                let session = leases.live().await?;
                self.put_leased(board, id, value, &session).await
            }
            other => other,
        }
    }

    /// One plain put (retried: a put of the same key and value is idempotent).
    async fn put_leased(
        &self,
        board: &str,
        id: &str,
        value: &[u8],
        session: &Arc<Session>,
    ) -> Result<()> {
        let key = self.link.keys.board_entry(board, id);
        let opts = PutOptions::new().with_lease(session.lease);
        self.link
            .retry_in(session, RequestKind::Put, |c| {
                let (k, v, o) = (key.clone(), value.to_vec(), opts.clone());
                async move { kv(&c).put(k, v, Some(o)).await }
            })
            .await
            .map(|_| ())
    }

    /// Every `(id, value)` on `board`: one range read, sorted by key (so by id).
    pub(super) async fn read(&self, board: &str) -> Result<Vec<(String, Vec<u8>)>> {
        let prefix = self.link.keys.board_prefix(board);
        let mut resp = self
            .link
            .retry(RequestKind::Range, |c| {
                let p = prefix.clone();
                async move { kv(&c).get(p, Some(GetOptions::new().with_prefix())).await }
            })
            .await?;
        let mut all: Vec<(String, Vec<u8>)> = resp
            .take_kvs()
            .into_iter()
            .filter_map(|kv| {
                let (key, value) = kv.into_key_value();
                let id = String::from_utf8(key)
                    .ok()?
                    .strip_prefix(prefix.as_str())?
                    .to_string();
                Some((id, value))
            })
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(all)
    }

    /// Deletes `id`'s key on `board` (absent: nothing to do, etcd says so without failing).
    pub(super) async fn withdraw(&self, board: &str, id: &str) -> Result<()> {
        let key = self.link.keys.board_entry(board, id);
        self.link
            .retry(RequestKind::Delete, |mut c| {
                let k = key.clone();
                async move { c.delete(k, None).await }
            })
            .await
            .map(|_| ())
    }
}
