//! Parsing of store URLs: `memory://NAME`, `etcd://host:port,host:port/prefix`,
//! `etcds://…` (TLS), `zk://host:port,host:port/chroot`, each network one with optional
//! `?key=value&…` settings, and `URL;URL;…` for rate limits spread over several clusters.
//! Secrets never travel in a URL (only paths of files holding them), and every message about a
//! URL shows it with credential-like values redacted ([`redact`]).
//!
//! This file is the entry point ([`StoreUrl::parse`]) and re-exports the public items from
//! the files below it, which never import it back: `parsed.rs` and `security.rs` (the values),
//! `redact.rs`, `settings.rs` (the `?key=value` part), `address.rs` (`HOST:PORT`, the key prefix), `scheme.rs`
//! (one cluster's URL, by scheme: `etcd.rs`, `zookeeper.rs`, `redis.rs`) and `sharded.rs`.

mod address;
mod etcd;
mod parsed;
mod parts;
mod redact;
mod redis;
mod scheme;
mod security;
mod settings;
mod sharded;
mod zookeeper;

pub use parsed::{RedisMode, ShardUrl, StoreUrl, SHARD_SEPARATOR};
pub use redact::redact;
pub use security::{EtcdUser, RedisUser, TlsFiles, ZkAcl};

use crate::error::Result;
use scheme::parse_one;

impl StoreUrl {
    /// Parses a store URL; every mistake is an `InvalidArgument` naming it.
    ///
    /// ```
    /// use clusterlimit::StoreUrl;
    /// let url = StoreUrl::parse("etcd://10.0.0.1:2379,10.0.0.2:2379/myapp")?;
    /// assert_eq!(
    ///     url,
    ///     StoreUrl::Etcd {
    ///         endpoints: vec!["http://10.0.0.1:2379".into(), "http://10.0.0.2:2379".into()],
    ///         prefix: "myapp".into(),
    ///         tls: None,
    ///         user: None,
    ///     }
    /// );
    /// assert!(StoreUrl::parse("zk://zk-1").is_err()); // no port
    /// # Ok::<(), clusterlimit::Error>(())
    /// ```
    pub fn parse(url: &str) -> Result<StoreUrl> {
        if url.contains(SHARD_SEPARATOR) {
            return sharded::parse(url);
        }
        parse_one(url)
    }
}

#[cfg(test)]
mod tests;
