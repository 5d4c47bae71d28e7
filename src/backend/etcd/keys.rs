//! Key layout and values in etcd. Everything of one semaphore sits under one prefix so that a
//! single range read or watch sees its capacity and its whole queue in one revision:
//!
//! ```text
//! <root>/names/<name>          index of semaphores (for listing), empty value
//! <root>/s/<name>/cap          {"capacity":N,"floor":F}
//! <root>/s/<name>/fair         a fair semaphore's classes and grant marks (`fair_record.rs`)
//! <root>/s/<name>/q/<id>       {"permits":K,"owner":"…","since_unix_ms":T}, bound to a lease
//!                              (+ "flow", "class", "weight" on a fair semaphore)
//! <root>/rq/<name>             a rate limit's quota (the bytes the caller gave)
//! <root>/rk/<name>/<key>       a rate-limit key's state + `\n@<expires_at>` (swept: sweeper.rs)
//! <root>/boards/<board>/<id>   an announced value (the caller's bytes), bound to a lease
//! ```
//! Names are validated to `[A-Za-z0-9._-]`, so a name can never reach outside its prefix, and
//! the five second-level segments (`names`, `s`, `rq`, `rk`, `boards`) differ, so semaphores and rate
//! limits of one name never share a key. A rate-limit key is any UTF-8 (`/` included), kept
//! as is: it comes after `<root>/rk/<name>/`, which no other name's keys start with, and a
//! listing of limits reads `<root>/rq/` only.

use crate::queue;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone)]
pub(super) struct Keys {
    root: String,
}

impl Keys {
    pub(super) fn new(root: &str) -> Self {
        Keys {
            root: root.to_string(),
        }
    }
    pub(super) fn names_prefix(&self) -> String {
        format!("{}/names/", self.root)
    }
    pub(super) fn name_index(&self, name: &str) -> String {
        format!("{}/names/{name}", self.root)
    }
    pub(super) fn sem_prefix(&self, name: &str) -> String {
        format!("{}/s/{name}/", self.root)
    }
    pub(super) fn cap(&self, name: &str) -> String {
        format!("{}/s/{name}/cap", self.root)
    }
    pub(super) fn fair(&self, name: &str) -> String {
        format!("{}/s/{name}/fair", self.root)
    }
    pub(super) fn queue_prefix(&self, name: &str) -> String {
        format!("{}/s/{name}/q/", self.root)
    }
    pub(super) fn entry(&self, name: &str, id: &str) -> String {
        format!("{}/s/{name}/q/{id}", self.root)
    }
    pub(super) fn quotas_prefix(&self) -> String {
        format!("{}/rq/", self.root)
    }
    pub(super) fn quota(&self, name: &str) -> String {
        format!("{}/rq/{name}", self.root)
    }
    /// Where every rate-limit key lives (what the slow scan reads).
    pub(super) fn rate_keys_prefix(&self) -> String {
        format!("{}/rk/", self.root)
    }
    pub(super) fn rate_key(&self, name: &str, key: &str) -> String {
        format!("{}/rk/{name}/{key}", self.root)
    }
    /// Where the values of one announcement board live (one range read lists them).
    pub(super) fn board_prefix(&self, board: &str) -> String {
        format!("{}/boards/{board}/", self.root)
    }
    pub(super) fn board_entry(&self, board: &str, id: &str) -> String {
        format!("{}/boards/{board}/{id}", self.root)
    }
}

/// Value of a queue entry key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct EntryValue {
    pub permits: u32,
    pub owner: String,
    pub since_unix_ms: u64,
    /// On a fair semaphore: the request's flow, class and weight (absent on a plain one, so
    /// its entries keep their bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
}

impl EntryValue {
    pub(super) fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub(super) fn parse(raw: &[u8]) -> Option<EntryValue> {
        serde_json::from_slice(raw).ok()
    }

    /// The fair tag of an entry (`None` when it names no flow).
    pub(super) fn tag(&self) -> Option<crate::fair::FairTag> {
        let flow = self.flow.clone()?;
        let mut tag = crate::fair::FairTag::new(flow).weight(self.weight.unwrap_or(1));
        tag.class = self.class.clone();
        Some(tag)
    }

    /// Weight of a raw entry. An unreadable entry (written by something else) counts as
    /// blocking everything behind it: never granting too much beats granting on a guess.
    pub(super) fn weight(raw: &[u8]) -> u32 {
        Self::parse(raw).map_or(u32::MAX, |v| v.permits)
    }
}

/// The queue of a semaphore from a range read sorted by create revision.
pub(super) fn queue_of<'a>(
    queue_prefix: &'a str,
    kvs: &'a [etcd_client::KeyValue],
) -> impl Iterator<Item = (queue::Entry, &'a etcd_client::KeyValue)> + 'a {
    kvs.iter()
        .filter(move |kv| kv.key().starts_with(queue_prefix.as_bytes()))
        .map(|kv| {
            (
                queue::Entry {
                    token: kv.create_revision() as u64,
                    permits: EntryValue::weight(kv.value()),
                },
                kv,
            )
        })
}
