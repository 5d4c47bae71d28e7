//! One cluster's store URL, `SCHEME://HOSTS/PATH?SETTINGS`: split into its parts, refused if
//! it carries credentials, then parsed by its scheme's file (`etcd.rs`, `zookeeper.rs`,
//! `redis.rs`; `memory://NAME` here, it has nothing more).

use super::parsed::StoreUrl;
use super::parts::UrlParts;
use super::redact::redact;
use super::settings::Settings;
use super::{etcd, redis, zookeeper};
use crate::error::{Error, Result};

/// Parses one cluster's URL (not a sharded one); every mistake is an `InvalidArgument`
/// naming it.
pub(super) fn parse_one(url: &str) -> Result<StoreUrl> {
    let (scheme, rest, query) = split(url)?;
    let settings = Settings::parse(url, query)?;
    let url = &redact(url);
    refuse_credentials(url, rest)?;
    let parts = |settings| UrlParts {
        url,
        scheme,
        rest,
        settings,
    };
    match scheme {
        "memory" | "mem" => memory(rest, settings),
        "etcd" | "etcd+http" | "etcds" | "etcd+https" => etcd::parse(parts(settings)),
        "zk" | "zookeeper" | "zks" | "zk+tls" => zookeeper::parse(parts(settings)),
        "redis" | "rediss" | "redis+sentinel" | "rediss+sentinel" | "redis+cluster"
        | "rediss+cluster" => redis::parse(parts(settings)),
        other => Err(Error::invalid(format!(
            "store URL {url}: unknown scheme {other:?}; use memory://, etcd://, etcds://, zk://, zks://, redis://, rediss://, redis+sentinel:// or redis+cluster://"
        ))),
    }
}

/// `SCHEME://REST?QUERY` → the scheme, the rest (hosts and path) and the query, if any.
fn split(url: &str) -> Result<(&str, &str, Option<&str>)> {
    let (scheme, rest) = url.split_once("://").ok_or_else(|| {
        Error::invalid(format!(
            "store URL {} has no scheme; use memory://NAME, etcd://HOST:PORT[,HOST:PORT]/PREFIX, zk://HOST:PORT[,HOST:PORT]/CHROOT or redis://HOST:PORT/PREFIX",
            redact(url)
        ))
    })?;
    Ok(match rest.split_once('?') {
        Some((r, q)) => (scheme, r, Some(q)),
        None => (scheme, rest, None),
    })
}

/// Refuses a `USER:PASSWORD@` before the hosts: secrets never travel in a URL. `url` is
/// already redacted.
fn refuse_credentials(url: &str, rest: &str) -> Result<()> {
    if rest
        .split('/')
        .next()
        .is_some_and(|hosts| hosts.contains('@'))
    {
        return Err(Error::invalid(format!(
            "store URL {url}: credentials are never put in a URL (USER:PASSWORD@); give user= and password_file= (etcd, Redis) or digest_file= (ZooKeeper)"
        )));
    }
    Ok(())
}

/// `memory://NAME` (`default` when empty); it takes no settings.
fn memory(rest: &str, settings: Settings<'_>) -> Result<StoreUrl> {
    settings.finish("none")?;
    let name = rest.trim_matches('/');
    let name = if name.is_empty() { "default" } else { name };
    Ok(StoreUrl::Memory {
        name: name.to_string(),
    })
}
