//! Parsing of store URLs: `memory://NAME`, `etcd://host:port,host:port/prefix`,
//! `etcds://…` (TLS), `zk://host:port,host:port/chroot`, each network one with optional
//! `?key=value&…` settings, and `URL;URL;…` for rate limits spread over several clusters. Secrets never travel in a URL (only paths of files holding them), and
//! every message about a URL shows it with credential-like values redacted ([`redact`]).

use crate::error::{Error, Result};
use std::path::PathBuf;

/// Certificate files for a TLS connection to etcd or ZooKeeper (PEM). Built with
/// [`TlsFiles::new`] or `TlsFiles::default()` and its fields (it may gain settings).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct TlsFiles {
    /// CA bundle that signed the servers' certificates (`None`: the system's roots).
    pub ca_cert: Option<PathBuf>,
    /// Client certificate, for servers that require one (with `key`).
    pub cert: Option<PathBuf>,
    /// Private key of the client certificate.
    pub key: Option<PathBuf>,
}

/// etcd user authentication: the user name and where its password is read from. Built with
/// [`EtcdUser::new`] (it may gain settings).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EtcdUser {
    /// etcd user name.
    pub name: String,
    /// File holding the password (trailing newline ignored); `None`: the
    /// `CLUSTERLIMIT_ETCD_PASSWORD` environment variable.
    pub password_file: Option<PathBuf>,
}

/// Redis authentication: an ACL user (or the `default` user) and where its password is read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct RedisUser {
    /// ACL user name (`None`: Redis's `default` user, as with `requirepass`).
    pub name: Option<String>,
    /// File holding the password (trailing newline ignored); `None`: the
    /// `CLUSTERLIMIT_REDIS_PASSWORD` environment variable, if set.
    pub password_file: Option<PathBuf>,
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

impl RedisUser {
    /// The ACL user `name` (`None`: the `default` user) and the file holding its password
    /// (`None`: `CLUSTERLIMIT_REDIS_PASSWORD`, if set).
    pub fn new(name: Option<String>, password_file: Option<PathBuf>) -> Self {
        RedisUser {
            name,
            password_file,
        }
    }
}

impl TlsFiles {
    /// The CA bundle (`None`: the system's roots) and the client certificate and its key (both
    /// or neither).
    pub fn new(ca_cert: Option<PathBuf>, cert: Option<PathBuf>, key: Option<PathBuf>) -> Self {
        TlsFiles { ca_cert, cert, key }
    }
}

impl EtcdUser {
    /// The user `name`, its password read from `password_file` (`None`: the
    /// `CLUSTERLIMIT_ETCD_PASSWORD` environment variable).
    pub fn new(name: impl Into<String>, password_file: Option<PathBuf>) -> Self {
        EtcdUser {
            name: name.into(),
            password_file,
        }
    }
}

/// Who may change the ZooKeeper nodes clusterlimit creates (`zk://…?acl=creator|open`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ZkAcl {
    /// Only the digest identity that created a node may change or delete it (and what is
    /// under it); anyone may read. The default when digest credentials are given; needs them.
    Creator,
    /// Anyone may do anything (ZooKeeper's `world:anyone` with every permission). The default
    /// without credentials.
    Open,
}

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

/// `url` with the values of credential-like settings (`password`, `secret`, `token`, `digest`
/// that are not `…_file` paths) and any `user:password@` part replaced by `***`: for messages.
pub fn redact(url: &str) -> String {
    if url.contains(SHARD_SEPARATOR) {
        return url
            .split(SHARD_SEPARATOR)
            .map(|p| redact_one(p.trim()))
            .collect::<Vec<_>>()
            .join(";");
    }
    redact_one(url)
}

fn redact_one(url: &str) -> String {
    let (head, query) = match url.split_once('?') {
        Some((h, q)) => (h, Some(q)),
        None => (url, None),
    };
    let head = match head.split_once("://") {
        Some((scheme, rest)) => match rest.split_once('@') {
            Some((_, after)) => format!("{scheme}://***@{after}"),
            None => head.to_string(),
        },
        None => head.to_string(),
    };
    let Some(query) = query else { return head };
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((k, _)) if is_secret_key(k) => format!("{k}=***"),
            _ => pair.to_string(),
        })
        .collect();
    format!("{head}?{}", pairs.join("&"))
}

fn is_secret_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    !k.ends_with("_file")
        && ["password", "passwd", "secret", "token", "digest", "auth"]
            .iter()
            .any(|s| k.contains(s))
}

/// The `?key=value&…` settings of a URL, each used at most once; what is left over when the
/// scheme has taken its own is an error naming it.
struct Settings<'a> {
    url: &'a str,
    pairs: Vec<(&'a str, &'a str)>,
}

impl<'a> Settings<'a> {
    fn parse(url: &'a str, query: Option<&'a str>) -> Result<Settings<'a>> {
        let mut pairs: Vec<(&str, &str)> = Vec::new();
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').ok_or_else(|| {
                Error::invalid(format!(
                    "store URL {}: setting {k:?} has no value (use KEY=VALUE)",
                    redact(url),
                    k = pair
                ))
            })?;
            if pairs.iter().any(|(seen, _)| *seen == k) {
                return Err(Error::invalid(format!(
                    "store URL {}: setting {k:?} given twice",
                    redact(url)
                )));
            }
            pairs.push((k, v));
        }
        Ok(Settings { url, pairs })
    }

    /// Takes the value of `key`, if given; an empty value is an error.
    fn take(&mut self, key: &str) -> Result<Option<&'a str>> {
        let Some(i) = self.pairs.iter().position(|(k, _)| *k == key) else {
            return Ok(None);
        };
        let (_, v) = self.pairs.remove(i);
        if v.is_empty() {
            return Err(Error::invalid(format!(
                "store URL {}: setting {key:?} is empty",
                redact(self.url)
            )));
        }
        Ok(Some(v))
    }

    fn take_path(&mut self, key: &str) -> Result<Option<PathBuf>> {
        Ok(self.take(key)?.map(PathBuf::from))
    }

    /// The TLS settings `cacert`, `cert`, `key`: `Some` for a TLS scheme (each optional), an
    /// error if given to a plain-text one (named `tls_scheme` in the message).
    fn tls(&mut self, secure: bool, tls_scheme: &str) -> Result<Option<TlsFiles>> {
        let tls = TlsFiles {
            ca_cert: self.take_path("cacert")?,
            cert: self.take_path("cert")?,
            key: self.take_path("key")?,
        };
        let url = redact(self.url);
        if !secure && tls != TlsFiles::default() {
            return Err(Error::invalid(format!(
                "store URL {url}: cacert, cert and key are TLS settings; use {tls_scheme}"
            )));
        }
        if tls.cert.is_some() != tls.key.is_some() {
            return Err(Error::invalid(format!(
                "store URL {url}: a client certificate needs both cert= and key="
            )));
        }
        Ok(secure.then_some(tls))
    }

    /// Fails on any setting not taken, naming it (and how secrets are passed, if it is one).
    fn finish(self, known: &str) -> Result<()> {
        match self.pairs.first() {
            None => Ok(()),
            Some((k, _)) if is_secret_key(k) => Err(Error::invalid(format!(
                "store URL {}: secrets are never put in a URL; give {k}_file=PATH (a file holding it) or the environment variable instead",
                redact(self.url)
            ))),
            Some((k, _)) => Err(Error::invalid(format!(
                "store URL {}: unknown setting {k:?} (known: {known})",
                redact(self.url)
            ))),
        }
    }
}

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
            return parse_sharded(url);
        }
        Self::parse_one(url)
    }

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

    fn parse_one(url: &str) -> Result<StoreUrl> {
        let (scheme, rest) = url.split_once("://").ok_or_else(|| {
            Error::invalid(format!(
                "store URL {} has no scheme; use memory://NAME, etcd://HOST:PORT[,HOST:PORT]/PREFIX, zk://HOST:PORT[,HOST:PORT]/CHROOT or redis://HOST:PORT/PREFIX",
                redact(url)
            ))
        })?;
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (rest, None),
        };
        let mut settings = Settings::parse(url, query)?;
        let url = &redact(url);
        if rest
            .split('/')
            .next()
            .is_some_and(|hosts| hosts.contains('@'))
        {
            return Err(Error::invalid(format!(
                "store URL {url}: credentials are never put in a URL (USER:PASSWORD@); give user= and password_file= (etcd, Redis) or digest_file= (ZooKeeper)"
            )));
        }
        match scheme {
            "memory" | "mem" => {
                settings.finish("none")?;
                let name = rest.trim_matches('/');
                let name = if name.is_empty() { "default" } else { name };
                Ok(StoreUrl::Memory {
                    name: name.to_string(),
                })
            }
            "etcd" | "etcd+http" | "etcds" | "etcd+https" => {
                let secure = matches!(scheme, "etcds" | "etcd+https");
                let http = if secure { "https" } else { "http" };
                let (hosts, path) = rest.split_once('/').unwrap_or((rest, ""));
                let endpoints = hosts
                    .split(',')
                    .map(|h| endpoint(url, h.trim()).map(|hp| format!("{http}://{hp}")))
                    .collect::<Result<Vec<_>>>()?;
                let tls = settings.tls(secure, "etcds://")?;
                let user = settings.take("user")?.map(str::to_string);
                let password_file = settings.take_path("password_file")?;
                let user = match (user, password_file) {
                    (Some(name), password_file) => Some(EtcdUser {
                        name,
                        password_file,
                    }),
                    (None, Some(_)) => {
                        return Err(Error::invalid(format!(
                            "store URL {url}: password_file= needs user="
                        )))
                    }
                    (None, None) => None,
                };
                settings.finish("cacert, cert, key, user, password_file")?;
                let prefix = path.trim_matches('/');
                if prefix
                    .chars()
                    .any(|c| c.is_control() || c == '?' || c == '#')
                {
                    return Err(Error::invalid(format!(
                        "store URL {url}: bad key prefix {prefix:?}"
                    )));
                }
                let prefix = if prefix.is_empty() {
                    "clusterlimit"
                } else {
                    prefix
                };
                Ok(StoreUrl::Etcd {
                    endpoints,
                    prefix: prefix.to_string(),
                    tls,
                    user,
                })
            }
            "zk" | "zookeeper" | "zks" | "zk+tls" => {
                let secure = matches!(scheme, "zks" | "zk+tls");
                let (hosts, path) = rest.split_once('/').unwrap_or((rest, ""));
                let hosts = hosts
                    .split(',')
                    .map(|h| endpoint(url, h.trim()))
                    .collect::<Result<Vec<_>>>()?;
                let digest_file = settings.take_path("digest_file")?;
                let acl = match settings.take("acl")? {
                    None => None,
                    Some("creator") => Some(ZkAcl::Creator),
                    Some("open") => Some(ZkAcl::Open),
                    Some(other) => {
                        return Err(Error::invalid(format!(
                            "store URL {url}: acl={other:?} is not creator or open"
                        )))
                    }
                };
                let tls = settings.tls(secure, "zks://")?;
                settings.finish("cacert, cert, key (zks://), digest_file, acl")?;
                Ok(StoreUrl::ZooKeeper {
                    hosts,
                    root: zk_root(url, path)?,
                    digest_file,
                    acl,
                    tls,
                })
            }
            "redis" | "rediss" | "redis+sentinel" | "rediss+sentinel" | "redis+cluster"
            | "rediss+cluster" => parse_redis(url, scheme, rest, settings),
            other => Err(Error::invalid(format!(
                "store URL {url}: unknown scheme {other:?}; use memory://, etcd://, etcds://, zk://, zks://, redis://, rediss://, redis+sentinel:// or redis+cluster://"
            ))),
        }
    }
}

/// The rest of a `redis…://` URL (see [`StoreUrl::Redis`]); `url` is already redacted.
fn parse_redis(
    url: &str,
    scheme: &str,
    rest: &str,
    mut settings: Settings<'_>,
) -> Result<StoreUrl> {
    let secure = scheme.starts_with("rediss");
    let (hosts, path) = rest.split_once('/').unwrap_or((rest, ""));
    let hosts = hosts
        .split(',')
        .map(|h| endpoint(url, h.trim()))
        .collect::<Result<Vec<_>>>()?;
    let (mode, path) = if scheme.ends_with("+sentinel") {
        let (service, prefix) = path.split_once('/').unwrap_or((path, ""));
        if service.is_empty() || service.chars().any(|c| c.is_control() || c == ' ') {
            return Err(Error::invalid(format!(
                "store URL {url}: name the primary the sentinels monitor after the hosts: {scheme}://HOST:PORT[,HOST:PORT]/SERVICE[/PREFIX]"
            )));
        }
        let mode = RedisMode::Sentinel {
            sentinels: hosts,
            service: service.to_string(),
        };
        (mode, prefix)
    } else if scheme.ends_with("+cluster") {
        (RedisMode::Cluster { seeds: hosts }, path)
    } else {
        let [host] = <[String; 1]>::try_from(hosts).map_err(|_| {
            Error::invalid(format!(
                "store URL {url}: {scheme}:// takes one server; for several use redis+cluster:// (a Redis Cluster's seed nodes) or redis+sentinel:// (sentinels)"
            ))
        })?;
        (RedisMode::Single { host }, path)
    };
    let tls = settings.tls(secure, "rediss://")?;
    let wait_replicas = match settings.take("wait_replicas")? {
        None => 0,
        Some(n) => n.parse::<u32>().ok().filter(|n| *n <= 16).ok_or_else(|| {
            Error::invalid(format!(
                "store URL {url}: wait_replicas={n:?} is not a number of replicas from 0 to 16"
            ))
        })?,
    };
    if wait_replicas > 0 && matches!(mode, RedisMode::Cluster { .. }) {
        return Err(Error::invalid(format!(
            "store URL {url}: wait_replicas= is for redis:// and redis+sentinel:// (a Redis Cluster's replicas are not waited for yet)"
        )));
    }
    let name = settings.take("user")?.map(str::to_string);
    let password_file = settings.take_path("password_file")?;
    let user = (name.is_some() || password_file.is_some()).then_some(RedisUser {
        name,
        password_file,
    });
    settings.finish("cacert, cert, key (rediss://), user, password_file")?;
    let prefix = path.trim_matches('/');
    if prefix
        .chars()
        .any(|c| c.is_control() || c.is_whitespace() || matches!(c, '?' | '#' | '{' | '}'))
    {
        return Err(Error::invalid(format!(
            "store URL {url}: bad key prefix {prefix:?} (no spaces, braces, ? or #)"
        )));
    }
    let prefix = if prefix.is_empty() {
        "clusterlimit"
    } else {
        prefix
    };
    Ok(StoreUrl::Redis {
        mode,
        prefix: prefix.to_string(),
        tls,
        user,
        wait_replicas,
    })
}

/// `URL;URL;…`: each part an ordinary store URL of the same kind, with an optional
/// `shard=NAME` setting, the identities distinct.
fn parse_sharded(url: &str) -> Result<StoreUrl> {
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
        let parsed = StoreUrl::parse_one(&part_url).map_err(|e| match e {
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

/// A ZooKeeper chroot: `/`-separated segments, none empty, `.` or `..`, no control characters
/// (ZooKeeper's own path rules), so every node path built under it is valid.
fn zk_root(url: &str, path: &str) -> Result<String> {
    let path = path.trim_matches('/');
    if path.is_empty() {
        return Ok("/clusterlimit".to_string());
    }
    for seg in path.split('/') {
        if seg.is_empty()
            || seg == "."
            || seg == ".."
            || seg == "zookeeper"
            || seg.chars().any(|c| c.is_control() || c == '?' || c == '#')
        {
            return Err(Error::invalid(format!(
                "store URL {url}: bad ZooKeeper chroot {path:?} (segment {seg:?})"
            )));
        }
    }
    Ok(format!("/{path}"))
}

/// Checks one `HOST:PORT` of a URL and returns it unchanged: a host name or IPv4 address, or
/// an IPv6 address in brackets (`[::1]:2379`), then a port from 1 to 65535. Refused here, a
/// malformed endpoint is bad input with its reason, not a store error from the client later.
fn endpoint(url: &str, host: &str) -> Result<String> {
    // A `user:password@` part is not shown (the URL itself is already redacted).
    let shown = match host.rsplit_once('@') {
        Some((_, after)) => format!("***@{after}"),
        None => host.to_string(),
    };
    let bad = |why: &str| {
        Error::invalid(format!(
            "store URL {url}: {shown:?} is not HOST:PORT ({why})"
        ))
    };
    if host.is_empty() {
        return Err(bad("empty; endpoints are separated by single commas"));
    }
    let (h, port) = split_host_port(host).map_err(|why| bad(&why))?;
    match port.parse::<u16>() {
        Ok(p) if p > 0 => {}
        _ if port.is_empty() => return Err(bad("no port after the colon")),
        _ => {
            return Err(bad(&format!(
                "port {port:?} is not a number from 1 to 65535"
            )))
        }
    }
    if h.is_empty() {
        return Err(bad("no host before the port"));
    }
    Ok(host.to_string())
}

/// `[v6]:port` or `name:port` split at the port's colon; the reason otherwise.
fn split_host_port(host: &str) -> std::result::Result<(&str, &str), String> {
    if let Some(rest) = host.strip_prefix('[') {
        let (addr, after) = rest
            .split_once(']')
            .ok_or("an IPv6 address is closed by ']'")?;
        if addr.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(format!("{addr:?} is not an IPv6 address"));
        }
        let port = after
            .strip_prefix(':')
            .ok_or("a port follows the ']' after a colon")?;
        return Ok((addr, port));
    }
    let (h, port) = host.rsplit_once(':').ok_or("no port")?;
    if h.contains(':') {
        return Err(
            "one colon, before the port; put an IPv6 address in brackets: [ADDRESS]:PORT".into(),
        );
    }
    if let Some(c) = h
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')))
    {
        return Err(format!("{c:?} cannot be in a host name"));
    }
    Ok((h, port))
}

#[cfg(test)]
mod tests;
