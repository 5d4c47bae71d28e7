//! Announcements on Redis (the fleet view, adaptive sums): one hash per board, each value with
//! the server time it lapses at. Redis has no leases, so a Limiter's own announcements are
//! put again every third of the session TTL while their session lives; a Limiter that dies,
//! or whose session is lost, stops refreshing them and they lapse within one TTL, as with
//! etcd's leases.

use super::link::Link;
use crate::backend::lock;
use crate::error::Result;
use crate::lost::LostSignal;
use crate::stats::RequestKind;
use redis::Script;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::time::Instant;

/// This Limiter's announcements, kept alive by a task of their own.
pub(super) struct Board {
    link: Weak<Link>,
    prefix: String,
    ttl: Duration,
    put: Script,
    read: Script,
    own: Mutex<Own>,
}

#[derive(Default)]
struct Own {
    /// Each value with the loss signal of the session it was announced in.
    values: BTreeMap<(String, String), (Vec<u8>, LostSignal)>,
    refreshing: bool,
    closed: bool,
}

impl std::fmt::Debug for Board {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Board")
    }
}

impl Board {
    pub(super) fn new(link: &Arc<Link>, prefix: &str, ttl: Duration) -> Arc<Board> {
        Arc::new(Board {
            link: Arc::downgrade(link),
            prefix: prefix.to_string(),
            ttl,
            put: Script::new(include_str!("lua/board_put.lua")),
            read: Script::new(include_str!("lua/board_read.lua")),
            own: Mutex::new(Own::default()),
        })
    }

    fn key(&self, board: &str) -> String {
        format!("{{{}}}:board:{board}", self.prefix)
    }

    fn link(&self) -> Result<Arc<Link>> {
        self.link.upgrade().ok_or(crate::error::Error::Closed)
    }

    /// Puts `value` under `id`, and keeps it alive until withdrawn, closed, or `session` is
    /// lost.
    pub(super) async fn announce(
        self: &Arc<Self>,
        board: &str,
        id: &str,
        value: &[u8],
        session: LostSignal,
    ) -> Result<()> {
        self.put_one(board, id, value).await?;
        let start = {
            let mut own = lock(&self.own);
            own.values.insert(
                (board.to_string(), id.to_string()),
                (value.to_vec(), session),
            );
            !std::mem::replace(&mut own.refreshing, true)
        };
        if start {
            tokio::spawn(refresh(Arc::downgrade(self)));
        }
        Ok(())
    }

    async fn put_one(&self, board: &str, id: &str, value: &[u8]) -> Result<()> {
        let link = self.link()?;
        let (key, ttl) = (self.key(board), self.ttl.as_millis() as u64);
        let deadline = Instant::now() + link.request_timeout();
        link.run(RequestKind::Put, deadline, |mut c| {
            let mut inv = self.put.prepare_invoke();
            inv.key(&key).arg(id).arg(ttl).arg(value);
            async move { inv.invoke_async::<i64>(&mut c).await }
        })
        .await
        .map(|_| ())
    }

    /// Every live announcement of `board`, sorted by id.
    pub(super) async fn read(&self, board: &str) -> Result<Vec<(String, Vec<u8>)>> {
        let link = self.link()?;
        let key = self.key(board);
        let deadline = Instant::now() + link.request_timeout();
        let flat: Vec<Vec<u8>> = link
            .run(RequestKind::Range, deadline, |mut c| {
                let mut inv = self.read.prepare_invoke();
                inv.key(&key);
                async move { inv.invoke_async(&mut c).await }
            })
            .await?;
        let mut out: Vec<(String, Vec<u8>)> = flat
            .chunks(2)
            .filter_map(|p| match p {
                [id, value] => Some((String::from_utf8_lossy(id).into_owned(), value.clone())),
                _ => None,
            })
            .collect();
        out.sort();
        Ok(out)
    }

    /// Removes `id` from `board` (an absent one counts as removed) and stops refreshing it.
    pub(super) async fn withdraw(&self, board: &str, id: &str) -> Result<()> {
        lock(&self.own)
            .values
            .remove(&(board.to_string(), id.to_string()));
        let link = self.link()?;
        let key = self.key(board);
        let deadline = Instant::now() + link.request_timeout();
        link.run(RequestKind::Delete, deadline, |mut c| {
            let key = key.clone();
            async move {
                redis::cmd("HDEL")
                    .arg(key)
                    .arg(id)
                    .query_async::<i64>(&mut c)
                    .await
            }
        })
        .await
        .map(|_| ())
    }

    /// Withdraws every own announcement (best effort) and stops the refreshing.
    pub(super) async fn close(&self) {
        let own: Vec<(String, String)> = {
            let mut own = lock(&self.own);
            own.closed = true;
            std::mem::take(&mut own.values).into_keys().collect()
        };
        for (board, id) in own {
            let _ = self.withdraw(&board, &id).await;
        }
    }

    pub(super) fn stop(&self) {
        lock(&self.own).closed = true;
    }
}

/// Puts the Board's own announcements again every third of the TTL, until it is closed or
/// gone. A failed round is logged and tried again at the next.
async fn refresh(board: Weak<Board>) {
    loop {
        let Some(b) = board.upgrade() else { return };
        let pause = b.ttl / 3;
        drop(b);
        tokio::time::sleep(pause).await;
        let Some(b) = board.upgrade() else { return };
        let values: Vec<((String, String), Vec<u8>)> = {
            let mut own = lock(&b.own);
            if own.closed {
                return;
            }
            // A lost session's values are not its to keep: they lapse.
            own.values.retain(|_, (_, session)| !session.is_lost());
            own.values
                .iter()
                .map(|(k, (v, _))| (k.clone(), v.clone()))
                .collect()
        };
        for ((name, id), value) in values {
            if let Err(e) = b.put_one(&name, &id, &value).await {
                tracing::warn!(
                    "announcement {id} on board {name} could not be refreshed ({e}); it lapses within {} ms unless a later round succeeds",
                    b.ttl.as_millis()
                );
            }
        }
    }
}
