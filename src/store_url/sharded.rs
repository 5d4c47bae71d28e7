//! `URL;URL;…`: rate-limit keys spread over several clusters of one kind, each part an
//! ordinary store URL with an optional `shard=NAME` (its place on the hash ring).

use super::parsed::{ShardUrl, StoreUrl, SHARD_SEPARATOR};
use super::redact::redact;
use super::scheme::parse_one;
use crate::error::{Error, Result};

/// `URL;URL;…`: each part an ordinary store URL of the same kind, with an optional
/// `shard=NAME` setting, the identities distinct.
pub(super) fn parse(url: &str) -> Result<StoreUrl> {
    let shown = redact(url);
    let mut clusters: Vec<ShardUrl> = Vec::new();
    for (i, part) in url.split(SHARD_SEPARATOR).map(str::trim).enumerate() {
        let bad = |why: String| {
            Error::invalid(format!(
                "sharded store URL {shown}: cluster {} ({}) {why}",
                i + 1,
                redact(part)
            ))
        };
        if part.is_empty() {
            return Err(bad(
                "is empty; clusters are separated by single semicolons".into()
            ));
        }
        let (part_url, name) = take_shard_name(part).map_err(bad)?;
        let parsed = parse_one(&part_url).map_err(|e| match e {
            Error::InvalidArgument(why) => bad(format!("is not a store URL: {why}")),
            other => other,
        })?;
        if let Some(first) = clusters.first() {
            if first.url.kind() != parsed.kind() {
                return Err(bad(format!(
                    "is {} store but cluster 1 is {} store; every cluster of a sharded store \
                     must be of one kind (one set of credentials and one failure behaviour)",
                    a_kind(parsed.kind()),
                    a_kind(first.url.kind())
                )));
            }
        }
        let id = name.unwrap_or_else(|| parsed.ring_id());
        if let Some(twin) = clusters.iter().position(|c| c.id == id) {
            return Err(bad(format!(
                "is the same cluster as cluster {} (identity {id:?}); list each cluster once, or \
                 give distinct shard=NAME settings",
                twin + 1
            )));
        }
        clusters.push(ShardUrl {
            url: parsed,
            id,
            shown: redact(part),
        });
    }
    if clusters.len() < 2 {
        return Err(Error::invalid(format!(
            "sharded store URL {shown}: list at least two clusters, separated by semicolons"
        )));
    }
    Ok(StoreUrl::Sharded { clusters })
}

/// A store kind with its article: `an etcd`, `a ZooKeeper`, `a memory`.
fn a_kind(kind: &str) -> String {
    let vowel = kind.starts_with(['a', 'e', 'i', 'o', 'u']);
    format!("{} {kind}", if vowel { "an" } else { "a" })
}

/// `part` without its `shard=NAME` setting, and the name.
fn take_shard_name(part: &str) -> std::result::Result<(String, Option<String>), String> {
    let Some((head, query)) = part.split_once('?') else {
        return Ok((part.to_string(), None));
    };
    let mut name = None;
    let mut kept = Vec::new();
    for pair in query.split('&') {
        match pair.strip_prefix("shard=") {
            Some(_) if name.is_some() => return Err("gives shard= twice".into()),
            Some("") => return Err("has an empty shard= name".into()),
            Some(n) if n.chars().any(|c| c.is_control() || c == ';') => {
                return Err(format!("has a bad shard= name {n:?}"))
            }
            Some(n) => name = Some(format!("shard={n}")),
            None => kept.push(pair),
        }
    }
    let url = if kept.is_empty() {
        head.to_string()
    } else {
        format!("{head}?{}", kept.join("&"))
    };
    Ok((url, name))
}
