//! [`LimiterBuilder`]: the options of a [`Limiter`] (URL forms, session TTL, timeouts,
//! credentials) and connecting with them.

use crate::backend::sharded::{Shard, ShardedBackend};
use crate::backend::zookeeper::{ZkBackend, ZkConfig};
use crate::backend::{etcd::EtcdBackend, etcd::EtcdConfig, memory::MemoryBackend, Backend};
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::limiter::Limiter;
use crate::store_url::{EtcdUser, StoreUrl, TlsFiles};
use crate::timing::{
    DEFAULT_REQUEST_TIMEOUT, DEFAULT_SESSION_TTL, MAX_REQUEST_TIMEOUT, MIN_SESSION_TTL,
};
use crate::validate;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
/// Options for [`Limiter::builder`].
///
/// URL forms:
/// * `memory://NAME` — in-process; Limiters on the same NAME share semaphores.
/// * `etcd://HOST:PORT[,HOST:PORT…][/PREFIX]` — etcd v3 (3.4+); keys live under `PREFIX/`
///   (default `clusterlimit`).
/// * `zk://HOST:PORT[,HOST:PORT…][/CHROOT]` — ZooKeeper 3.6+ (persistent recursive watches);
///   nodes live under `/CHROOT` (default `/clusterlimit`), created if absent.
/// * `URL;URL[;URL…]` — rate-limit keys spread over several clusters of one kind, each key on
///   one (consistent hashing; `{tag}` keeps keys together); semaphores on the first. See
///   `docs/rate-limits.md`, "Sharding".
///
/// ```no_run
/// # async fn f() -> clusterlimit::Result<()> {
/// use std::time::Duration;
/// let limiter = clusterlimit::Limiter::builder("etcd://127.0.0.1:2379/myapp")
///     .session_ttl(Duration::from_secs(10))
///     .owner("host-a/worker-3")
///     .connect()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct LimiterBuilder {
    url: String,
    session_ttl: Duration,
    owner: Option<String>,
    request_timeout: Duration,
    connect_timeout: Option<Duration>,
    tls: Option<TlsFiles>,
    etcd_user: Option<EtcdUser>,
    zk_digest_file: Option<PathBuf>,
    clock: Clock,
}

impl LimiterBuilder {
    /// A builder for `url` with every default (what [`Limiter::builder`] returns).
    pub(crate) fn new(url: &str) -> LimiterBuilder {
        LimiterBuilder {
            url: url.to_string(),
            session_ttl: DEFAULT_SESSION_TTL,
            owner: None,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            connect_timeout: None,
            tls: None,
            etcd_user: None,
            zk_digest_file: None,
            clock: Clock::system(),
        }
    }

    /// Session TTL (default 10 s, minimum 2 s; etcd rounds up to whole seconds; on ZooKeeper it
    /// is the session timeout, which the server may move into its own bounds, by default 2–20
    /// ticks). A dead holder's permits come back within it; a live holder's keepalives go out
    /// every TTL/3.
    pub fn session_ttl(mut self, ttl: Duration) -> Self {
        self.session_ttl = ttl;
        self
    }

    /// Owner label stored with every permit (default `HOSTNAME/PID`).
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }

    /// Bound on each store request (default 5 s).
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Bound on [`connect`](Self::connect) as a whole: reaching the store, authenticating and
    /// starting the session. A store that does not answer within it fails the connect with
    /// [`Error::Store`]. Without it, connect keeps to the bounds of its requests (about twice
    /// the request timeout), which leaves room to name a likely cause (e.g. TLS to a
    /// plain-text server); a refused connection or a host name that does not resolve fails at
    /// once either way.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// TLS for the store connection. etcd: overrides the URL's `cacert`/`cert`/`key` as a
    /// whole (files left out fall back to `ETCDCTL_*`) and makes an `etcd://` URL connect as
    /// `etcds://`. ZooKeeper: connects to the servers' `secureClientPort` (the CA is required;
    /// feature `zk-tls`). See `docs/security.md`.
    pub fn tls(mut self, files: TlsFiles) -> Self {
        self.tls = Some(files);
        self
    }

    /// etcd user authentication (overrides the URL's `user`/`password_file`).
    pub fn etcd_user(mut self, user: EtcdUser) -> Self {
        self.etcd_user = Some(user);
        self
    }

    /// ZooKeeper digest authentication from a file holding `user:password` (overrides the URL's
    /// `digest_file`).
    pub fn zk_digest_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.zk_digest_file = Some(path.into());
        self
    }

    /// The wall clock rate limits read (default: the system clock). Rate-limit state holds
    /// absolute times shared by every client, so clients' clocks should agree: a clock `Δ`
    /// ahead of the others can admit up to `Δ × limit / period` more on a key (see
    /// `docs/rate-limits.md`, "Clocks"). Semaphores do not read it.
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Connects and starts the session. Fails fast if the store does not answer.
    ///
    /// Cancel-safe: a session started by a dropped call is never used and expires by its TTL.
    pub async fn connect(self) -> Result<Limiter> {
        if self.session_ttl < MIN_SESSION_TTL {
            return Err(Error::invalid(format!(
                "session TTL must be at least {MIN_SESSION_TTL:?}, got {:?}",
                self.session_ttl
            )));
        }
        if self.request_timeout.is_zero() || self.request_timeout > MAX_REQUEST_TIMEOUT {
            return Err(Error::invalid(format!(
                "request timeout must be above zero and at most {MAX_REQUEST_TIMEOUT:?}, got {:?}",
                self.request_timeout
            )));
        }
        if let Some(t) = self.connect_timeout {
            if t.is_zero() || t > MAX_REQUEST_TIMEOUT {
                return Err(Error::invalid(format!(
                    "connect timeout must be above zero and at most {MAX_REQUEST_TIMEOUT:?}, got {t:?}"
                )));
            }
        }
        let url = StoreUrl::parse(&self.url)?;
        self.check_credentials_fit(&url)?;
        let owner = self.owner.clone().unwrap_or_else(default_owner);
        validate::owner(&owner)?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::invalid("clusterlimit needs a Tokio runtime"));
        }
        let opening = self.open(url);
        let backend = match self.connect_timeout {
            None => opening.await?,
            Some(t) => tokio::time::timeout(t, opening).await.map_err(|_| {
                Error::store(format!(
                    "the store did not answer within {t:?} (the connect timeout)"
                ))
            })??,
        };
        Limiter::wrap(backend, owner, self.clock, self.request_timeout)
    }
}

impl LimiterBuilder {
    /// Opens the backend of `url`: a sharded URL opens its clusters together.
    async fn open(&self, url: StoreUrl) -> Result<Arc<dyn Backend>> {
        let backend: Arc<dyn Backend> = match url {
            StoreUrl::Memory { name } => Arc::new(MemoryBackend::open(&name)),
            StoreUrl::Etcd {
                endpoints,
                prefix,
                tls,
                user,
            } => Arc::new(
                EtcdBackend::connect(EtcdConfig {
                    endpoints,
                    prefix,
                    session_ttl: self.session_ttl,
                    request_timeout: self.request_timeout,
                    tls: self.tls.clone().or(tls),
                    user: self.etcd_user.clone().or(user),
                })
                .await?,
            ),
            StoreUrl::ZooKeeper {
                hosts,
                root,
                digest_file,
                acl,
                tls,
            } => Arc::new(
                ZkBackend::connect(ZkConfig {
                    hosts,
                    root,
                    session_timeout: self.session_ttl,
                    request_timeout: self.request_timeout,
                    tls: self.tls.clone().or(tls),
                    digest_file: self.zk_digest_file.clone().or(digest_file),
                    acl,
                })
                .await?,
            ),
            StoreUrl::Sharded { clusters } => {
                let opened = clusters.into_iter().map(|c| async move {
                    let shown = c.shown.clone();
                    let backend = Box::pin(self.open(c.url)).await.map_err(|e| match e {
                        Error::Store(s) => Error::store(format!("cluster {shown}: {s}")),
                        other => other,
                    })?;
                    Ok::<_, Error>(Shard {
                        id: c.id,
                        name: shown,
                        backend,
                    })
                });
                let shards = futures::future::try_join_all(opened).await?;
                ShardedBackend::new(shards)?
            }
        };
        Ok(backend)
    }

    /// Credentials given through the builder must be for the store the URL names: a mistake
    /// here would otherwise connect without them.
    fn check_credentials_fit(&self, url: &StoreUrl) -> Result<()> {
        let url = match url {
            StoreUrl::Sharded { clusters } => match clusters.first() {
                Some(first) => &first.url,
                None => url,
            },
            url => url,
        };
        let misplaced = match url {
            StoreUrl::Memory { .. } => {
                (self.tls.is_some() || self.etcd_user.is_some() || self.zk_digest_file.is_some())
                    .then_some("memory:// takes no TLS or credentials")
            }
            StoreUrl::Etcd { .. } => self
                .zk_digest_file
                .is_some()
                .then_some("a ZooKeeper digest file was given for an etcd store"),
            StoreUrl::ZooKeeper { .. } => self
                .etcd_user
                .is_some()
                .then_some("an etcd user was given for a ZooKeeper store"),
            StoreUrl::Sharded { .. } => None,
        };
        misplaced.map_or(Ok(()), |m| Err(Error::invalid(m)))
    }
}

fn default_owner() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown-host".to_string());
    format!("{host}/{}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn credentials_must_fit_the_store() {
        let cases = [
            Limiter::builder("memory://c").tls(TlsFiles::default()),
            Limiter::builder("memory://c").zk_digest_file("/d"),
            Limiter::builder("etcd://127.0.0.1:1/p").zk_digest_file("/d"),
            Limiter::builder("zk://127.0.0.1:1/p").etcd_user(EtcdUser {
                name: "u".into(),
                password_file: None,
            }),
        ];
        for builder in cases {
            let err = builder.clone().connect().await.err();
            assert!(
                matches!(err, Some(Error::InvalidArgument(_))),
                "{builder:?}: {err:?}"
            );
        }
    }
}
