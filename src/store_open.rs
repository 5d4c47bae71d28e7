//! Which backend a store URL opens, with the options a [`LimiterBuilder`](crate::LimiterBuilder)
//! gathered: memory, etcd, ZooKeeper, or a sharded store of several clusters.

use crate::backend::etcd::{EtcdBackend, EtcdConfig};
use crate::backend::memory::MemoryBackend;
use crate::backend::sharded::{Shard, ShardedBackend};
use crate::backend::zookeeper::{ZkBackend, ZkConfig};
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::store_url::{EtcdUser, StoreUrl, TlsFiles};
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
}

/// Opens the backend of `url`: a sharded URL opens its clusters together.
pub(crate) async fn open_store(url: StoreUrl, o: &StoreOptions) -> Result<Arc<dyn Backend>> {
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
                session_ttl: o.session_ttl,
                request_timeout: o.request_timeout,
                tls: o.tls.clone().or(tls),
                user: o.etcd_user.clone().or(user),
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
                session_timeout: o.session_ttl,
                request_timeout: o.request_timeout,
                tls: o.tls.clone().or(tls),
                digest_file: o.zk_digest_file.clone().or(digest_file),
                acl,
            })
            .await?,
        ),
        StoreUrl::Sharded { clusters } => {
            let opened = clusters.into_iter().map(|c| async move {
                let shown = c.shown.clone();
                let backend = Box::pin(open_store(c.url, o)).await.map_err(|e| match e {
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
