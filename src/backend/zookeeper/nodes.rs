//! Node layout and values in ZooKeeper. A semaphore is one persistent node whose data is the
//! capacity record and whose children are the queue, so one `getChildren` sees the whole queue
//! with every weight and position, and one recursive watch sees every change:
//!
//! ```text
//! <root>/s/<name>                          {"capacity":N,"floor":F}  (persistent)
//! <root>/s/<name>/<permits>-<id>-<seq>     {"owner":"…","since_unix_ms":T[,"permits":P]}  (ephemeral sequential)
//! <root>/s/<name>/fair                     {"classes":"…","granted":[tokens]}  (persistent, fair only)
//! <root>/s/<name>/<permits>-<id>.<weight>.<class>.<flow>-<seq>   an entry of a fair semaphore
//! ```
//!
//! * A fair semaphore's record (`fair`, see `fair_record.rs`) is created with the semaphore's
//!   node in one `multi`; its data version is what every grant compares. It has no sequence
//!   suffix, so it is never taken for a queue entry.
//! * An entry that states a flow carries its tag in its name (class and flow escaped by
//!   [`escape_key`], which never emits `.` or `/`; an empty class is the first class), so the
//!   view decides from the child listing alone, as it does for weights: the id ends at the
//!   first `.` and the sequence suffix after the last `-` is digits only. An entry without
//!   a tag is the flow `default` of the first class, weight 1.
//!
//! * `<seq>` is ZooKeeper's sequence suffix, strictly increasing in creation order from 0. The
//!   entry's token (queue position and fencing token) is `seq + 1`: tokens start at 1, as
//!   [`crate::queue`] requires.
//! * `<id>` is the request id (32 hex digits, chosen before the first attempt): a create whose
//!   reply was lost is found again by it after a reconnect, and never created twice.
//! * `<permits>` is in the name so that a child listing alone decides who holds. A held entry
//!   whose weight was lowered (`Permit::shrink_to`, see `shrink.rs`) keeps its name (so its
//!   sequence, token and place stay) and states the lowered weight `P` in its data: every
//!   reader takes the lower of the two ([`EntryData::weight`]). An entry without `permits` in
//!   its data (all of them before shrinks existed) weighs what its name says. A build that
//!   predates shrinks ignores the field and counts the name's weight: it over-counts a shrunk
//!   entry, so it may grant later than it could, never more than the capacity.
//!
//! Names are validated to `[A-Za-z0-9._-]` and ids are hex, so a name never reaches outside
//! its parent.
//!
//! Rate limits live beside the semaphores, under their own child of the root, so the two never
//! share a parent (a semaphore named `r` is `<root>/s/r`, a rate limit named `s` is `<root>/r/s`):
//!
//! ```text
//! <root>/r/<name>                          the encoded quota  (persistent; its version is the quota version)
//! <root>/r/<name>/<escaped key>            the key's encoded state  (persistent; its version is the key's version)
//! ```
//!
//! Announcement boards (see `board.rs`) have a child of the root of their own too:
//!
//! ```text
//! <root>/boards/<board>                    (persistent, empty)
//! <root>/boards/<board>/<id>               the announced bytes  (ephemeral: gone with the session)
//! ```
//!
//! A key is any non-empty UTF-8 up to 512 bytes; [`escape_key`] makes it one legal node name.
//! A key node's data is the caller's state followed by `\n@<expires_at>` (Unix ns, decimal):
//! `crate::backend::expiry`'s `with_expiry` / `split_expiry`. The suffix lets any process sweep a key whose writer
//! died before its expiry (see `scan.rs`); callers only ever see their own bytes.

use crate::fair::FairTag;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone)]
pub(super) struct Paths {
    root: String,
}

impl Paths {
    /// `root` is an absolute path without a trailing slash (see `StoreUrl`).
    pub(super) fn new(root: &str) -> Self {
        Paths {
            root: root.to_string(),
        }
    }
    pub(super) fn root(&self) -> &str {
        &self.root
    }
    pub(super) fn semaphores(&self) -> String {
        format!("{}/s", self.root)
    }
    pub(super) fn semaphore(&self, name: &str) -> String {
        format!("{}/s/{name}", self.root)
    }
    /// Path given to a sequential create; ZooKeeper appends `<seq>`. `id` is the request
    /// id with its tag, if any ([`id_part`]).
    pub(super) fn entry_prefix(&self, name: &str, permits: u32, id: &str) -> String {
        format!("{}/s/{name}/{permits}-{id}-", self.root)
    }
    /// A fair semaphore's record (see `fair_record.rs`).
    pub(super) fn fair(&self, name: &str) -> String {
        format!("{}/s/{name}/{FAIR_NODE}", self.root)
    }
    pub(super) fn entry(&self, name: &str, node: &str) -> String {
        format!("{}/s/{name}/{node}", self.root)
    }
    pub(super) fn rate_limits(&self) -> String {
        format!("{}/r", self.root)
    }
    pub(super) fn rate_limit(&self, name: &str) -> String {
        format!("{}/r/{name}", self.root)
    }
    pub(super) fn rate_key(&self, name: &str, key: &str) -> String {
        format!("{}/r/{name}/{}", self.root, escape_key(key))
    }
    /// The persistent parent of one announcement board's ephemeral values.
    pub(super) fn board(&self, board: &str) -> String {
        format!("{}/boards/{board}", self.root)
    }
    pub(super) fn board_entry(&self, board: &str, id: &str) -> String {
        format!("{}/boards/{board}/{id}", self.root)
    }
}

/// Percent-encodes every byte outside `[A-Za-z0-9_~-]` (`%2F`, `%2E`, …): the result has no
/// `/`, is never `.` or `..`, and holds none of the characters ZooKeeper refuses in a path
/// (control characters, U+D800–U+F8FF, U+FFF0–U+FFFF), whatever the key. Distinct keys give
/// distinct names (`%` itself is encoded). Never decoded: nothing lists keys back to callers.
pub(super) fn escape_key(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for b in key.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'_' | b'~' | b'-') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The child of a fair semaphore's node that holds its record.
pub(super) const FAIR_NODE: &str = "fair";

/// Undoes [`escape_key`]; `None` for text it never emits.
fn unescape_key(text: &str) -> Option<String> {
    let mut out = Vec::with_capacity(text.len());
    let mut bytes = text.bytes();
    while let Some(b) = bytes.next() {
        if b == b'%' {
            let hex = [bytes.next()?, bytes.next()?];
            out.push(u8::from_str_radix(std::str::from_utf8(&hex).ok()?, 16).ok()?);
        } else {
            out.push(b);
        }
    }
    String::from_utf8(out).ok()
}

/// The request id as a node name carries it: `<id>` alone, or `<id>.<weight>.<class>.<flow>`
/// for an acquire that states its flow.
pub(super) fn id_part(id: &str, tag: Option<&FairTag>) -> String {
    match tag {
        None => id.to_string(),
        Some(t) => format!(
            "{id}.{}.{}.{}",
            t.weight,
            t.class.as_deref().map(escape_key).unwrap_or_default(),
            escape_key(&t.flow)
        ),
    }
}

/// The tag of `<weight>.<class>.<flow>`; an unreadable one is the default tag (the entry
/// still counts with its weight, in the default flow).
fn parse_tag(text: &str) -> FairTag {
    let parse = || {
        let mut parts = text.split('.');
        let (weight, class, flow) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() {
            return None;
        }
        let mut tag = FairTag::new(unescape_key(flow)?).weight(weight.parse().ok()?);
        if !class.is_empty() {
            tag = tag.class(unescape_key(class)?);
        }
        Some(tag)
    };
    parse().unwrap_or_default()
}

/// A queue entry as its node name tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct EntryName {
    pub seq: u64,
    pub permits: u32,
    pub id: String,
    /// Flow, class and weight, when the name states them.
    pub tag: Option<FairTag>,
}

impl EntryName {
    /// Queue position and fencing token.
    pub(super) fn token(&self) -> u64 {
        self.seq + 1
    }

    /// The node name of entry `token` of request `id` (with its tag: [`id_part`]).
    pub(super) fn node(permits: u32, id: &str, token: u64) -> String {
        let seq = token.saturating_sub(1);
        // ZooKeeper's own suffix format: 10 digits, 19 once past i32.
        if seq <= i32::MAX as u64 {
            format!("{permits}-{id}-{seq:010}")
        } else {
            format!("{permits}-{id}-{seq:019}")
        }
    }

    /// Parses `<permits>-<id>-<seq>`. `None` if there is no sequence suffix (not a queue entry).
    /// An unreadable weight counts as `u32::MAX`: a node written by something else blocks
    /// everything behind it, since never granting too much beats granting on a guess.
    pub(super) fn parse(node: &str) -> Option<EntryName> {
        let (rest, seq) = node.rsplit_once('-')?;
        if seq.is_empty() || !seq.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let seq = seq.parse::<u64>().ok()?;
        let (permits, id) = rest.split_once('-').unwrap_or((rest, ""));
        let (id, tag) = match id.split_once('.') {
            Some((id, tag)) => (id, Some(parse_tag(tag))),
            None => (id, None),
        };
        Some(EntryName {
            seq,
            permits: permits.parse().ok().filter(|&p| p > 0).unwrap_or(u32::MAX),
            id: id.to_string(),
            tag,
        })
    }
}

/// Data of a queue entry node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct EntryData {
    pub owner: String,
    pub since_unix_ms: u64,
    /// The weight the entry was lowered to, if it was (absent: the name's weight).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permits: Option<u32>,
}

impl EntryData {
    /// The entry's weight, its name stating `named`: the lowered weight when one is stored
    /// and lower (data never raises a weight; a stored 0 is not ours and ignored).
    pub(super) fn weight(&self, named: u32) -> u32 {
        self.permits
            .filter(|&p| p > 0)
            .map_or(named, |p| p.min(named))
    }

    /// The weight of an entry named with `named` whose data is `raw` (unreadable data: the
    /// name's weight).
    pub(super) fn weight_of(raw: &[u8], named: u32) -> u32 {
        EntryData::parse(raw).map_or(named, |d| d.weight(named))
    }

    pub(super) fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }
    pub(super) fn parse(raw: &[u8]) -> Option<EntryData> {
        serde_json::from_slice(raw).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        let p = Paths::new("/cl");
        assert_eq!(p.entry_prefix("jobs", 2, "ab12"), "/cl/s/jobs/2-ab12-");
        assert_eq!(
            EntryName::parse("2-ab12-0000000042"),
            Some(EntryName {
                seq: 42,
                permits: 2,
                id: "ab12".into(),
                tag: None,
            })
        );
        assert_eq!(
            EntryName::parse(FAIR_NODE),
            None,
            "the fair record is no entry"
        );
        // Foreign nodes: a sequence but no readable weight blocks; no sequence is ignored.
        assert_eq!(
            EntryName::parse("x-0000000007").map(|e| e.permits),
            Some(u32::MAX)
        );
        assert_eq!(
            EntryName::parse("0-a-0000000007").map(|e| e.permits),
            Some(u32::MAX)
        );
        assert_eq!(EntryName::parse("lock"), None);
        assert_eq!(EntryName::parse("1-a-"), None);
        assert_eq!(EntryName::parse("1-a-12x"), None);
    }

    #[test]
    fn fair_entries_carry_their_tag() {
        let tag = FairTag::new("a-b.c/ü").class("batch-1").weight(5);
        let id = id_part("ab12", Some(&tag));
        assert_eq!(id, "ab12.5.batch-1.a-b%2Ec%2F%C3%BC");
        let node = EntryName::node(3, &id, 8);
        let e = EntryName::parse(&node).unwrap();
        assert_eq!((e.token(), e.permits, e.id.as_str()), (8, 3, "ab12"));
        assert_eq!(e.tag, Some(tag));
        let first = FairTag::new("t");
        let e = EntryName::parse(&EntryName::node(1, &id_part("x", Some(&first)), 1)).unwrap();
        assert_eq!((e.id.as_str(), e.tag), ("x", Some(first)));
        // Unreadable tags are the default flow, never a refusal to count the entry.
        let e = EntryName::parse("2-x.zz.%G1.f-0000000003").unwrap();
        assert_eq!((e.permits, e.tag), (2, Some(FairTag::default())));
    }

    #[test]
    fn a_lowered_weight_is_read_from_the_data() {
        let mut d = EntryData {
            owner: "o".into(),
            since_unix_ms: 1,
            permits: None,
        };
        // Written before shrinks existed (no field): the name's weight, and no field written.
        assert_eq!(d.weight(8), 8);
        assert!(!String::from_utf8_lossy(&d.encode()).contains("permits"));
        assert_eq!(
            EntryData::weight_of(br#"{"owner":"o","since_unix_ms":1}"#, 8),
            8
        );
        d.permits = Some(5);
        assert_eq!(EntryData::weight_of(&d.encode(), 8), 5);
        // Never raised, 0 ignored, unreadable data is the name's weight.
        assert_eq!(d.weight(3), 3);
        d.permits = Some(0);
        assert_eq!(d.weight(8), 8);
        assert_eq!(EntryData::weight_of(b"junk", 8), 8);
        // What a build before shrinks reads of a shrunk entry: its owner and time, unchanged.
        #[derive(serde::Deserialize)]
        struct Older {
            owner: String,
            since_unix_ms: u64,
        }
        let older: Older =
            serde_json::from_slice(br#"{"owner":"o","since_unix_ms":1,"permits":5}"#).unwrap();
        assert_eq!((older.owner.as_str(), older.since_unix_ms), ("o", 1));
    }

    #[test]
    fn rate_paths_and_key_escaping() {
        let p = Paths::new("/cl");
        assert_eq!(p.rate_limit("api"), "/cl/r/api");
        assert_eq!(p.rate_key("api", "user-42"), "/cl/r/api/user-42");
        assert_eq!(escape_key("."), "%2E");
        assert_eq!(escape_key(".."), "%2E%2E");
        assert_eq!(escape_key("a/b c%"), "a%2Fb%20c%25");
        assert_eq!(escape_key("é\u{0}"), "%C3%A9%00");
        assert_eq!(escape_key("A_~-z9"), "A_~-z9");
        // Injective: a key that looks escaped is escaped again.
        assert_ne!(escape_key("%2F"), escape_key("/"));
    }
}

/// The members named in ZooKeeper's configuration text (`/zookeeper/config`), e.g.
/// `server.1=10.0.0.1:2888:3888:participant;0.0.0.0:2181` and `version=100000000`: name
/// `server.N`, the client address after `;` (its host replaced by the peer host when it is a
/// wildcard; the peer host alone when the client port is configured apart, as `clientPort`),
/// the role if given (default `participant`). A configuration without servers (a
/// standalone server) gives one member at `hosts`, the addresses the client was given.
pub(super) fn ensemble(config: &str, hosts: &str) -> Vec<crate::members::StoreMember> {
    let mut members: Vec<crate::members::StoreMember> = config
        .lines()
        .filter_map(|line| {
            let (key, value) = line.trim().split_once('=')?;
            let name = key.strip_prefix("server.").map(|_| key.to_string())?;
            let (peer, client) = value.split_once(';').unwrap_or((value, ""));
            let mut peer_parts = peer.split(':');
            let peer_host = peer_parts.next().unwrap_or_default();
            let role = peer_parts.nth(2).unwrap_or("participant").to_string();
            let address = match client.rsplit_once(':') {
                Some(("0.0.0.0" | "[::]" | "::" | "", port)) => format!("{peer_host}:{port}"),
                Some(_) => client.to_string(),
                None => peer_host.to_string(),
            };
            Some(crate::members::StoreMember {
                name,
                address,
                role,
            })
        })
        .collect();
    if members.is_empty() {
        members.push(crate::members::StoreMember {
            name: "standalone".to_string(),
            address: hosts.to_string(),
            role: "standalone".to_string(),
        });
    }
    members.sort_by(|a, b| a.name.cmp(&b.name));
    members
}

#[cfg(test)]
mod ensemble_tests {
    use super::ensemble;

    #[test]
    fn servers_roles_and_client_addresses_are_read() {
        let config = "server.2=10.0.0.2:2888:3888:observer;0.0.0.0:2181\n\
                      server.1=10.0.0.1:2888:3888:participant;10.0.0.1:2181\n\
                      server.3=10.0.0.3:2888:3888\n\
                      version=100000000";
        let m = ensemble(config, "ignored:2181");
        let got: Vec<(&str, &str, &str)> = m
            .iter()
            .map(|m| (m.name.as_str(), m.address.as_str(), m.role.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("server.1", "10.0.0.1:2181", "participant"),
                ("server.2", "10.0.0.2:2181", "observer"),
                ("server.3", "10.0.0.3", "participant"),
            ]
        );
    }

    #[test]
    fn a_standalone_server_is_one_member() {
        let m = ensemble("", "127.0.0.1:2181");
        assert_eq!(m.len(), 1);
        assert_eq!(
            (m[0].address.as_str(), m[0].role.as_str()),
            ("127.0.0.1:2181", "standalone")
        );
    }
}
