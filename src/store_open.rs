//! Which backend a store URL opens, with the options a [`LimiterBuilder`](crate::LimiterBuilder)
//! gathered: memory, etcd, ZooKeeper, or a sharded store of several clusters.

use crate::backend::etcd::{EtcdBackend, EtcdConfig};
use crate::backend::memory::MemoryBackend;
use crate::backend::redis::{RedisBackend, RedisConfig};
use crate::backend::sharded::lazy::{LazyBackend, Opener};
use crate::backend::sharded::{Shard, ShardedBackend};
use crate::backend::zookeeper::{ZkBackend, ZkConfig};
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::store_url::{EtcdUser, ShardUrl, StoreUrl, TlsFiles};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The options of a connection that the backends take.
#[derive(Debug, Clone)]
pub(crate) struct StoreOptions {
    pub(crate) session_ttl: Duration,
    pub(crate) request_timeout: Duration,
    pub(crate) tls: Option<TlsFiles>,
    pub(crate) etcd_user: Option<EtcdUser>,
    pub(crate) zk_digest_file: Option<PathBuf>,
    /// Bound on opening the store (`None`: the backends' own, about a request timeout).
    pub(crate) connect_timeout: Option<Duration>,
    /// A cluster that keeps rate-limit keys alone (a sharded store's after the first).
    pub(crate) rate_only: bool,
}

/// Opens the backend of `url`: a sharded URL opens its clusters together.
pub(crate) async fn open_store(url: StoreUrl, o: &StoreOptions) -> Result<Arc<dyn Backend>> {
    Ok(match url {
        StoreUrl::Memory { name } => Arc::new(MemoryBackend::open(&name)),
        StoreUrl::Etcd {
            endpoints,
            prefix,
            tls,
            user,
        } => {
            let config = EtcdConfig {
                endpoints,
                prefix,
                session_ttl: o.session_ttl,
                request_timeout: o.request_timeout,
                tls: o.tls.clone().or(tls),
                user: o.etcd_user.clone().or(user),
            };
            Arc::new(match o.rate_only {
                true => EtcdBackend::connect_rate_only(config).await?,
                false => EtcdBackend::connect(config).await?,
            })
        }
        StoreUrl::ZooKeeper {
            hosts,
            root,
            digest_file,
            acl,
            tls,
        } => {
            let config = ZkConfig {
                hosts,
                root,
                session_timeout: o.session_ttl,
                request_timeout: o.request_timeout,
                tls: o.tls.clone().or(tls),
                digest_file: o.zk_digest_file.clone().or(digest_file),
                acl,
            };
            Arc::new(match o.rate_only {
                true => ZkBackend::connect_rate_only(config).await?,
                false => ZkBackend::connect(config).await?,
            })
        }
        StoreUrl::Redis {
            mode,
            prefix,
            tls,
            user,
            wait_replicas,
        } => {
            let mut config = RedisConfig::new(mode, prefix);
            config.wait_replicas = wait_replicas;
            config.tls = o.tls.clone().or(tls);
            config.user = user;
            config.request_timeout = o.request_timeout;
            config.session_ttl = o.session_ttl;
            Arc::new(RedisBackend::connect(config).await?)
        }
        StoreUrl::Sharded { clusters } => open_sharded(clusters, o).await?,
    })
}

/// A sharded store: the first cluster opened now (semaphores, the session, the reference
/// quotas), the others connecting in the background (`lazy.rs`), started at once so they
/// connect alongside the first.
async fn open_sharded(clusters: Vec<ShardUrl>, o: &StoreOptions) -> Result<Arc<dyn Backend>> {
    let count = clusters.len();
    let mut clusters = clusters.into_iter();
    let Some(first) = clusters.next() else {
        return Err(Error::invalid("a sharded store needs at least one cluster"));
    };
    let later: Vec<_> = clusters
        .map(|c| (c.id, c.shown.clone(), lazy_cluster(c.url, c.shown, o)))
        .collect();
    // The connect timeout is applied here, per cluster, so its message names the one that did
    // not answer (the builder leaves a sharded URL's to this).
    let started = tokio::time::Instant::now();
    let bound = o.connect_timeout.unwrap_or(Duration::MAX);
    let named = |s: String| {
        Error::store(format!(
            "cluster 1 of {count} ({}), which the sharded store needs to open: {s}",
            first.shown
        ))
    };
    let opened = match tokio::time::timeout(bound, Box::pin(open_store(first.url, o))).await {
        Err(_) => Err(named(format!(
            "no answer within {bound:?} (the connect timeout)"
        ))),
        Ok(Err(Error::Store(s))) => Err(named(s.to_string())),
        Ok(r) => r,
    }?;
    let settle = SETTLE.min(bound.saturating_sub(started.elapsed()));
    futures::future::join_all(later.iter().map(|(_, _, l)| l.settle(settle))).await;
    let mut shards = vec![Shard {
        id: first.id,
        name: first.shown,
        backend: opened,
    }];
    shards.extend(later.into_iter().map(|(id, name, lazy)| Shard {
        id,
        name,
        backend: lazy as Arc<dyn Backend>,
    }));
    Ok(ShardedBackend::new(shards)?)
}

/// How long opening a sharded store waits, once its first cluster is open, for the others'
/// connections: a cluster that answers is connected when the Limiter is returned, one that
/// does not delays opening by this much at most.
const SETTLE: Duration = Duration::from_millis(500);

/// A cluster after the first of a sharded store: connected in the background and on use,
/// keeping rate-limit keys alone.
fn lazy_cluster(url: StoreUrl, shown: String, o: &StoreOptions) -> Arc<LazyBackend> {
    let version_life = match url {
        StoreUrl::ZooKeeper { .. } => crate::backend::zookeeper::rate::version_life(),
        StoreUrl::Redis { .. } => crate::backend::redis::VERSION_LIFE,
        _ => Duration::MAX,
    };
    let options = StoreOptions {
        rate_only: true,
        ..o.clone()
    };
    let bound = o.connect_timeout.unwrap_or(o.request_timeout);
    let open: Opener = Arc::new(move || {
        let (url, options) = (url.clone(), options.clone());
        Box::pin(async move {
            tokio::time::timeout(bound, open_store(url, &options))
                .await
                .map_err(|_| Error::store(format!("no answer within {} ms", bound.as_millis())))?
        })
    });
    LazyBackend::start(shown, open, version_life, o.session_ttl)
}

/// Credentials given through the builder must be for the store the URL names: a mistake
/// here would otherwise connect without them.
pub(crate) fn check_credentials_fit(url: &StoreUrl, o: &StoreOptions) -> Result<()> {
    let url = match url {
        StoreUrl::Sharded { clusters } => match clusters.first() {
            Some(first) => &first.url,
            None => url,
        },
        url => url,
    };
    let misplaced = match url {
        StoreUrl::Memory { .. } => {
            (o.tls.is_some() || o.etcd_user.is_some() || o.zk_digest_file.is_some())
                .then_some("memory:// takes no TLS or credentials")
        }
        StoreUrl::Etcd { .. } => o
            .zk_digest_file
            .is_some()
            .then_some("a ZooKeeper digest file was given for an etcd store"),
        StoreUrl::ZooKeeper { .. } => o
            .etcd_user
            .is_some()
            .then_some("an etcd user was given for a ZooKeeper store"),
        StoreUrl::Redis { .. } => (o.etcd_user.is_some() || o.zk_digest_file.is_some())
            .then_some("etcd or ZooKeeper credentials were given for a Redis store"),
        StoreUrl::Sharded { .. } => None,
    };
    misplaced.map_or(Ok(()), |m| Err(Error::invalid(m)))
}

#[cfg(test)]
mod tests {
    use crate::error::Error;
    use crate::limiter::Limiter;
    use crate::store_url::{EtcdUser, TlsFiles};

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
