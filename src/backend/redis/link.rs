//! The connection to Redis, and how a request is sent: bounded by the request timeout, retried
//! on a fresh connection after a dropped one or a failover, and failing with a message that
//! names the deployment.
//!
//! One Redis and Sentinel's primary are reached over one multiplexed connection (requests of
//! every task are pipelined on it); after a connection fails it is made anew on the next
//! request, and with Sentinel the primary is asked of the sentinels again (a failover demotes
//! the old one: its writes answer `READONLY`). A Redis Cluster connection routes by hash slot
//! and follows `MOVED`/`ASK` itself.

use super::config::RedisConfig;
use super::describe::{describe, Retry};
use crate::error::{Error, Result};
use crate::stats::{RequestCounters, RequestKind};
use crate::store_url::RedisMode;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::{
    AsyncConnectionConfig, Client, ConnectionAddr, ConnectionInfo, IntoConnectionInfo,
    RedisConnectionInfo,
};
use std::future::Future;
use std::time::Duration;
use tokio::sync::Mutex;
use tokio::time::Instant;

/// Pause before retrying after a failure the server says will pass (`LOADING`, `TRYAGAIN`,
/// `CLUSTERDOWN`, `MASTERDOWN`, a refused connection during a failover).
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// A connection requests go through (cheap to clone: a handle on a shared one).
#[derive(Clone)]
pub(super) enum Conn {
    One(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Conn::One(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Conn::One(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::One(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// The deployment, its current connection, and the request counters.
pub(super) struct Link {
    config: RedisConfig,
    password: Option<String>,
    shown: String,
    current: Mutex<Option<Conn>>,
    /// `HOST:PORT` of the server the current connection reaches (one Redis, Sentinel's
    /// primary); `None` on a Redis Cluster or before connecting.
    server: std::sync::Mutex<Option<String>>,
    /// The Redis Cluster seed the next pub/sub connection goes to.
    next_seed: std::sync::atomic::AtomicUsize,
    pub(super) stats: RequestCounters,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password.
        f.debug_struct("Link").field("store", &self.shown).finish()
    }
}

impl Link {
    /// Connects within the request timeout (an unreachable store fails here, named).
    pub(super) async fn connect(config: RedisConfig) -> Result<Link> {
        let password = config.password()?;
        let link = Link {
            shown: config.shown(),
            password,
            config,
            current: Mutex::new(None),
            server: std::sync::Mutex::new(None),
            next_seed: std::sync::atomic::AtomicUsize::new(0),
            stats: RequestCounters::default(),
        };
        let deadline = Instant::now() + link.config.request_timeout;
        link.run(RequestKind::Range, deadline, |mut c| async move {
            redis::cmd("PING").query_async::<()>(&mut c).await
        })
        .await?;
        Ok(link)
    }

    /// How messages name the store.
    pub(super) fn shown(&self) -> &str {
        &self.shown
    }

    pub(super) fn request_timeout(&self) -> Duration {
        self.config.request_timeout
    }

    /// Replicas each rate-limit write waits for (`WAIT`); 0: none.
    pub(super) fn wait_replicas(&self) -> u32 {
        self.config.wait_replicas
    }

    /// `HOST:PORT` of the server connected to now (one Redis or Sentinel's primary).
    pub(super) fn server(&self) -> Option<String> {
        crate::backend::lock(&self.server).clone()
    }

    pub(super) fn is_cluster(&self) -> bool {
        matches!(self.config.mode, RedisMode::Cluster { .. })
    }

    /// Sends `op` (counted as `kind`) until it succeeds, fails for good, or `deadline` passes.
    /// A failed attempt whose request may have applied is retried too: every caller's request
    /// is safe to repeat (see `RateStore`).
    pub(super) async fn run<T, F, Fut>(
        &self,
        kind: RequestKind,
        deadline: Instant,
        op: F,
    ) -> Result<T>
    where
        F: Fn(Conn) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        loop {
            self.stats.count(kind);
            let attempt = async {
                let conn = self.conn().await?;
                op(conn).await
            };
            let failure = match tokio::time::timeout_at(deadline, attempt).await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) => e,
                Err(_) => {
                    self.forget().await;
                    return Err(Error::store(format!(
                        "{} did not answer within {} ms (the request timeout)",
                        self.shown,
                        self.config.request_timeout.as_millis()
                    )));
                }
            };
            let (what, retry) = describe(&failure, &self.config.mode);
            if retry != Retry::No {
                self.forget().await;
            }
            if retry == Retry::No || Instant::now() + RETRY_PAUSE >= deadline {
                return Err(Error::store(format!("{}: {what}", self.shown)));
            }
            tracing::debug!(store = %self.shown, "{what}; trying again");
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }

    /// How many of `wait` replicas acknowledged everything connection `c` wrote so far, within
    /// what is left of `deadline` (`WAIT`); 0 at once when `wait` is 0. A write counts only
    /// once they have it (`?wait_replicas=N`): a failover cannot lose it then.
    pub(super) async fn acked(
        c: &mut Conn,
        wait: u32,
        deadline: Instant,
    ) -> redis::RedisResult<i64> {
        if wait == 0 {
            return Ok(0);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        redis::cmd("WAIT")
            .arg(wait)
            .arg(left.as_millis().max(1) as u64)
            .query_async(c)
            .await
    }

    /// The current connection, made if there is none.
    async fn conn(&self) -> redis::RedisResult<Conn> {
        let mut current = self.current.lock().await;
        if let Some(c) = current.as_ref() {
            return Ok(c.clone());
        }
        let made = self.open().await?;
        *current = Some(made.clone());
        Ok(made)
    }

    /// Drops the current connection: the next request makes a new one.
    async fn forget(&self) {
        *self.current.lock().await = None;
    }

    async fn open(&self) -> redis::RedisResult<Conn> {
        let connect_timeout = self.config.request_timeout;
        match &self.config.mode {
            RedisMode::Single { host } => {
                let client = self.client(host)?;
                *crate::backend::lock(&self.server) = Some(host.clone());
                self.multiplexed(&client).await
            }
            RedisMode::Sentinel { .. } => {
                let client = self.sentinel_primary().await?;
                *crate::backend::lock(&self.server) =
                    Some(client.get_connection_info().addr().to_string());
                self.multiplexed(&client).await
            }
            RedisMode::Cluster { seeds } => {
                let infos = seeds
                    .iter()
                    .map(|s| self.info(s))
                    .collect::<redis::RedisResult<Vec<_>>>()?;
                let mut builder = redis::cluster::ClusterClientBuilder::new(infos)
                    .connection_timeout(connect_timeout)
                    .response_timeout(connect_timeout)
                    .retries(3);
                if let Some(user) = self.config.user.as_ref().and_then(|u| u.name.as_ref()) {
                    builder = builder.username(user);
                }
                if let Some(password) = &self.password {
                    builder = builder.password(password);
                }
                if self.config.tls.is_some() {
                    builder = builder
                        .tls(redis::TlsMode::Secure)
                        .certs(self.certificates()?);
                }
                Ok(Conn::Cluster(
                    builder.build()?.get_async_connection().await?,
                ))
            }
        }
    }

    /// A client of the primary the sentinels name now.
    async fn sentinel_primary(&self) -> redis::RedisResult<Client> {
        let RedisMode::Sentinel { sentinels, service } = &self.config.mode else {
            return Err((redis::ErrorKind::Client, "not a Sentinel deployment").into());
        };
        let addrs = sentinels
            .iter()
            .map(|s| self.addr(s))
            .collect::<redis::RedisResult<Vec<_>>>()?;
        let mut builder = redis::sentinel::SentinelClientBuilder::new(
            addrs,
            service,
            redis::sentinel::SentinelServerType::Master,
        )?;
        if let Some(user) = self.config.user.as_ref().and_then(|u| u.name.as_ref()) {
            builder = builder.set_client_to_redis_username(user);
        }
        if let Some(password) = &self.password {
            builder = builder.set_client_to_redis_password(password);
        }
        if self.config.tls.is_some() {
            builder = builder
                .set_client_to_redis_tls_mode(redis::TlsMode::Secure)
                .set_client_to_redis_certificates(self.certificates()?);
        }
        builder.build()?.async_get_client().await
    }

    /// A pub/sub connection (waiters' wakeups, `notify.rs`): to the server, Sentinel's
    /// primary, or the next seed of a Redis Cluster (a publish reaches every node).
    pub(super) async fn pubsub(&self) -> redis::RedisResult<redis::aio::PubSub> {
        let client = match &self.config.mode {
            RedisMode::Single { host } => self.client(host)?,
            RedisMode::Sentinel { .. } => self.sentinel_primary().await?,
            RedisMode::Cluster { seeds } => {
                let next = self
                    .next_seed
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let seed = seeds.get(next % seeds.len().max(1)).ok_or_else(|| {
                    redis::RedisError::from((redis::ErrorKind::Client, "no seed node"))
                })?;
                self.client(seed)?
            }
        };
        client.get_async_pubsub().await
    }

    /// One multiplexed connection to `client`'s server: connecting bounded by the request
    /// timeout, answers by the caller's deadline (no timeout of the client's own).
    async fn multiplexed(&self, client: &Client) -> redis::RedisResult<Conn> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.config.request_timeout))
            .set_response_timeout(None);
        let conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        Ok(Conn::One(conn))
    }

    /// The address of `host` (`HOST:PORT`), with TLS when the URL asks for it.
    fn addr(&self, host: &str) -> redis::RedisResult<ConnectionAddr> {
        let (h, port) = host.rsplit_once(':').unwrap_or((host, "6379"));
        let h = h.trim_start_matches('[').trim_end_matches(']').to_string();
        let port = port.parse().unwrap_or(6379);
        Ok(match self.config.tls {
            Some(_) => ConnectionAddr::TcpTls {
                host: h,
                port,
                insecure: false,
                tls_params: None,
            },
            None => ConnectionAddr::Tcp(h, port),
        })
    }

    /// Connection settings of `host`, with the user and password.
    fn info(&self, host: &str) -> redis::RedisResult<ConnectionInfo> {
        let mut redis = RedisConnectionInfo::default();
        if let Some(user) = self.config.user.as_ref().and_then(|u| u.name.as_ref()) {
            redis = redis.set_username(user);
        }
        if let Some(password) = &self.password {
            redis = redis.set_password(password);
        }
        Ok(self
            .addr(host)?
            .into_connection_info()?
            .set_redis_settings(redis))
    }

    fn client(&self, host: &str) -> redis::RedisResult<Client> {
        let info = self.info(host)?;
        match self.config.tls {
            Some(_) => Client::build_with_tls(info, self.certificates()?),
            None => Client::open(info),
        }
    }

    /// The CA and client certificate files, read.
    fn certificates(&self) -> redis::RedisResult<redis::TlsCertificates> {
        super::tls::certificates(self.config.tls.as_ref())
    }
}
