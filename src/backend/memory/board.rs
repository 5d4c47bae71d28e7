//! Announcement boards of the in-process store: each value tagged with the session that wrote
//! it, so ending a session drops its values as it drops its queue entries.

use std::collections::BTreeMap;

/// board → id → (session, value).
#[derive(Debug, Default)]
pub(super) struct Boards(BTreeMap<String, BTreeMap<String, (u64, Vec<u8>)>>);

impl Boards {
    /// Puts or replaces `id`'s value on `board`, now bound to `session`.
    pub(super) fn put(&mut self, board: &str, id: &str, session: u64, value: &[u8]) {
        self.0
            .entry(board.to_string())
            .or_default()
            .insert(id.to_string(), (session, value.to_vec()));
    }

    /// Every `(id, value)` on `board`, sorted by id.
    pub(super) fn list(&self, board: &str) -> Vec<(String, Vec<u8>)> {
        self.0.get(board).map_or_else(Vec::new, |b| {
            b.iter()
                .map(|(id, (_, v))| (id.clone(), v.clone()))
                .collect()
        })
    }

    pub(super) fn remove(&mut self, board: &str, id: &str) {
        if let Some(b) = self.0.get_mut(board) {
            b.remove(id);
        }
    }

    /// Drops every value of `session`, and boards left empty.
    pub(super) fn end_session(&mut self, session: u64) {
        for b in self.0.values_mut() {
            b.retain(|_, (s, _)| *s != session);
        }
        self.0.retain(|_, b| !b.is_empty());
    }
}
