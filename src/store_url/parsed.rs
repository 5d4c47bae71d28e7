//! What a store URL parses into: [`StoreUrl`] (one variant per kind of store), the clusters
//! of a sharded one ([`ShardUrl`]), how Redis is reached ([`RedisMode`]), and what the parsed
//! value says of itself ([`StoreUrl::kind`], [`StoreUrl::ring_id`]). A leaf: the parsers under
//! `store_url/` build these values and `store_url.rs` re-exports them.

use super::security::{EtcdUser, RedisUser, TlsFiles, ZkAcl};
use std::path::PathBuf;

/// A parsed store URL.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreUrl {
    /// `memory://NAME`: in-process store shared by every Limiter opened on the same NAME.
    Memory {
        /// Store name (`default` when empty).
        name: String,
    },
    /// `etcd://h1:p1,h2:p2/prefix`, or `etcds://…?cacert=PATH&cert=PATH&key=PATH` for TLS;
    /// `?user=NAME&password_file=PATH` for etcd authentication on either.
    Etcd {
        /// `http://host:port` (or `https://`) endpoints.
        endpoints: Vec<String>,
        /// Key prefix without slashes at either end (`clusterlimit` when empty).
        prefix: String,
        /// TLS settings (`etcds://`), `None` for plain text.
        tls: Option<TlsFiles>,
        /// User authentication, if any.
        user: Option<EtcdUser>,
    },
    /// `zk://h1:p1,h2:p2/chroot`, with `?digest_file=PATH` for digest authentication and
    /// `?acl=creator|open` for the ACL of the nodes it creates.
    ZooKeeper {
        /// `host:port` servers.
        hosts: Vec<String>,
        /// Absolute path under which every node lives (`/clusterlimit` when empty); created if
        /// absent.
        root: String,
        /// File holding `user:password` for digest authentication (`None`: the
        /// `CLUSTERLIMIT_ZK_DIGEST` environment variable, if set).
        digest_file: Option<PathBuf>,
        /// ACL of created nodes (`None`: [`ZkAcl::Creator`] with credentials, else
        /// [`ZkAcl::Open`]).
        acl: Option<ZkAcl>,
        /// TLS settings (`zks://`, to the servers' `secureClientPort`; the CA is required),
        /// `None` for plain text.
        tls: Option<TlsFiles>,
    },
    /// `redis://HOST:PORT/prefix`, `redis+sentinel://S1:P1,S2:P2/SERVICE/prefix` or
    /// `redis+cluster://N1:P1,N2:P2/prefix`; `rediss…://` with `?cacert=PATH&cert=PATH&key=PATH`
    /// for TLS; `?user=NAME&password_file=PATH` for authentication on any.
    Redis {
        /// Which servers, and how they are found.
        mode: RedisMode,
        /// Key prefix (`clusterlimit` when empty).
        prefix: String,
        /// TLS settings (`rediss…://`), `None` for plain text.
        tls: Option<TlsFiles>,
        /// Authentication, if any (a password from the environment counts without it).
        user: Option<RedisUser>,
        /// `?wait_replicas=N`: a rate-limit write counts only once N replicas acknowledged it
        /// (Redis `WAIT`), so a failover to one of them loses no admitted request (0: off).
        wait_replicas: u32,
    },
    /// `URL;URL;…`: rate-limit keys spread over several clusters of one kind (see
    /// `docs/rate-limits.md`, "Sharding"); semaphores live on the first.
    Sharded {
        /// The clusters, in the order given (the first keeps semaphores and is the reference
        /// for quotas).
        clusters: Vec<ShardUrl>,
    },
}

/// One cluster of a [`StoreUrl::Sharded`]: `URL` or `URL?shard=NAME`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardUrl {
    /// The cluster's store URL, parsed (never itself sharded).
    pub url: StoreUrl,
    /// What places the cluster on the hash ring: `shard=NAME` if given, else
    /// [`StoreUrl::ring_id`]. Keys move when it changes.
    pub id: String,
    /// The part as written, redacted: how messages name the cluster.
    pub shown: String,
}

/// Separates the clusters of a sharded store URL.
pub const SHARD_SEPARATOR: char = ';';

impl StoreUrl {
    /// The kind of store, for messages: `memory`, `etcd` or `ZooKeeper`.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreUrl::Memory { .. } => "memory",
            StoreUrl::Etcd { .. } => "etcd",
            StoreUrl::ZooKeeper { .. } => "ZooKeeper",
            StoreUrl::Redis { .. } => "Redis",
            StoreUrl::Sharded { .. } => "sharded",
        }
    }

    /// The cluster's identity on a sharded store's hash ring when no `shard=NAME` is given:
    /// its kind, its endpoints sorted, and its prefix or chroot. Credentials, TLS files and
    /// the endpoints' order do not count; adding or replacing an endpoint does (give
    /// `shard=NAME` to keep a cluster's keys where they are through such changes).
    pub fn ring_id(&self) -> String {
        let sorted = |hosts: &[String]| {
            let mut h: Vec<&str> = hosts
                .iter()
                .map(|e| e.split_once("://").map_or(e.as_str(), |(_, hp)| hp))
                .collect();
            h.sort_unstable();
            h.join(",")
        };
        match self {
            StoreUrl::Memory { name } => format!("memory://{name}"),
            StoreUrl::Etcd {
                endpoints, prefix, ..
            } => format!("etcd://{}/{prefix}", sorted(endpoints)),
            StoreUrl::ZooKeeper { hosts, root, .. } => format!("zk://{}{root}", sorted(hosts)),
            StoreUrl::Redis { mode, prefix, .. } => match mode {
                RedisMode::Single { host } => format!("redis://{host}/{prefix}"),
                RedisMode::Sentinel { service, .. } => {
                    format!("redis+sentinel://{service}/{prefix}")
                }
                RedisMode::Cluster { seeds } => {
                    format!("redis+cluster://{}/{prefix}", sorted(seeds))
                }
            },
            StoreUrl::Sharded { clusters } => clusters
                .iter()
                .map(|c| c.id.as_str())
                .collect::<Vec<_>>()
                .join(";"),
        }
    }
}

/// How a Redis deployment is reached (the part of a `redis…://` URL before the prefix).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RedisMode {
    /// `redis://HOST:PORT`: one server (a primary).
    Single {
        /// `host:port`.
        host: String,
    },
    /// `redis+sentinel://S1:P1,S2:P2/SERVICE`: the primary of `service`, found through the
    /// sentinels and followed when they fail it over.
    Sentinel {
        /// The sentinels' `host:port`.
        sentinels: Vec<String>,
        /// The name the sentinels monitor the primary under.
        service: String,
    },
    /// `redis+cluster://N1:P1,N2:P2`: a Redis Cluster, found from these seed nodes; keys are
    /// routed by hash slot.
    Cluster {
        /// Seed nodes' `host:port`.
        seeds: Vec<String>,
    },
}
