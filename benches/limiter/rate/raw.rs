//! The stores' own floors for many keys (issue 28): worker processes that write a fresh key per
//! call straight through the same clients the library uses, in the same closed loop
//! (`peers::drive`), so the library's many-keys row has a baseline measured in the same run.
//!
//! * `EtcdPut`: a plain `put`, no condition, no lease: the most etcd writes per second.
//! * `EtcdPutIfAbsent`: one `Txn` putting the key if absent: one key's compare-and-swap.
//! * `ZkCreate`: `create` of a persistent node: ZooKeeper's write of a new key.
//! * `RedisSet`: `SET key value PX ttl` (issue 39): Redis's write of a new key that expires as
//!   clusterlimit's do, through redis-rs (the library's client) on one multiplexed connection
//!   per process (as redis-cell's worker has).

use super::protocol::{Contender, Mode, WorkerReport, WorkerSetup};
use crate::peers::drive;
use anyhow::{ensure, Context as _};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A value the size of a rate-limit state (GCRA's theoretical arrival time and a tag).
const VALUE: &[u8] = b"1795687375057000000:4f2a9c1be07d";
/// Bound on connecting.
const CONNECT_BOUND: Duration = Duration::from_secs(10);

/// Runs one floor worker: `setup.mode` must be `Fresh`.
pub fn run_worker(setup: &WorkerSetup) -> anyhow::Result<WorkerReport> {
    ensure!(
        setup.mode == Mode::Fresh,
        "the floors write fresh keys only"
    );
    // One worker thread, as the library's workers have.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .context("build the worker's runtime")?;
    let prefix = format!("{}-{}-{}", setup.limit_name, setup.key, std::process::id());
    let n = Arc::new(AtomicU64::new(0));
    let next = move || format!("{prefix}-{}", n.fetch_add(1, Ordering::Relaxed));
    rt.block_on(async {
        match setup.contender {
            Contender::EtcdPut | Contender::EtcdPutIfAbsent => {
                let if_absent = setup.contender == Contender::EtcdPutIfAbsent;
                let client = etcd(&setup.target).await?;
                drive::run(setup, "write", move || {
                    let key = format!("floor/{}", next());
                    let mut kv = client.kv_client();
                    async move {
                        if if_absent {
                            use etcd_client::{Compare, CompareOp, Txn, TxnOp};
                            let txn = Txn::new()
                                .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
                                .and_then([TxnOp::put(key.as_str(), VALUE, None)]);
                            Ok(kv.txn(txn).await?.succeeded())
                        } else {
                            kv.put(key, VALUE, None).await?;
                            Ok(true)
                        }
                    }
                })
                .await
            }
            Contender::ZkCreate => {
                let client = zk(&setup.target).await?;
                drive::run(setup, "write", move || {
                    let path = format!("/floor/{}", next());
                    let client = client.clone();
                    async move {
                        use zookeeper_client::{Acls, CreateMode};
                        let mode = CreateMode::Persistent.with_acls(Acls::anyone_all());
                        client.create(&path, VALUE, &mode).await?;
                        Ok(true)
                    }
                })
                .await
            }
            Contender::RedisSet => {
                let conn = redis(&setup.target).await?;
                drive::run(setup, "write", move || {
                    let mut conn = conn.clone();
                    let mut cmd = redis::cmd("SET");
                    cmd.arg(format!("floor:{}", next()))
                        .arg(VALUE)
                        .arg("PX")
                        .arg(REDIS_TTL_MS);
                    async move {
                        let _: () = cmd.query_async(&mut conn).await?;
                        Ok(true)
                    }
                })
                .await
            }
            other => anyhow::bail!("{other:?} is no store floor"),
        }
    })
}

/// How long a floor's Redis key lives: what clusterlimit's key of a 100/s burst 10 quota does
/// (its reset time, 10 ms, plus the Redis store's grace of 10 s).
const REDIS_TTL_MS: u64 = 10_010;

/// One multiplexed redis-rs connection (every caller of the process shares it).
async fn redis(target: &str) -> anyhow::Result<redis::aio::MultiplexedConnection> {
    let client = redis::Client::open(target)
        .with_context(|| format!("bad redis URL in target: {target}"))?;
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CONNECT_BOUND))
        .set_response_timeout(Some(CONNECT_BOUND));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .with_context(|| format!("connect to redis at {target}"))
}

async fn etcd(target: &str) -> anyhow::Result<etcd_client::Client> {
    let connecting = etcd_client::Client::connect([target], None);
    tokio::time::timeout(CONNECT_BOUND, connecting)
        .await
        .with_context(|| format!("connect to etcd at {target}: no answer"))?
        .with_context(|| format!("connect to etcd at {target}"))
}

/// A ZooKeeper client, with `/floor` made.
async fn zk(target: &str) -> anyhow::Result<zookeeper_client::Client> {
    use zookeeper_client::{Acls, CreateMode};
    let connecting = zookeeper_client::Client::connect(target);
    let client = tokio::time::timeout(CONNECT_BOUND, connecting)
        .await
        .with_context(|| format!("connect to ZooKeeper at {target}: no answer"))?
        .with_context(|| format!("connect to ZooKeeper at {target}"))?;
    let mode = CreateMode::Persistent.with_acls(Acls::anyone_all());
    match client.create("/floor", b"", &mode).await {
        Ok(_) | Err(zookeeper_client::Error::NodeExists) => Ok(client),
        Err(e) => Err(e).context("create /floor"),
    }
}
