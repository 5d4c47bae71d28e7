//! Rows 1 and 2: one client enters and leaves, nobody else around. The floors (raw writes with
//! the same client libraries the Limiter uses), the Limiter on each store, and the sidecar; on
//! Redis (issue 39) the floor and the Limiter only.
//!
//! Every operation is measured in interleaved rounds (a batch of each, then the next round)
//! rather than one after the other, so a load change on this shared machine hits a store's
//! floor and the Limiter on it alike, and their ratio stays honest. Around every batch the CPU
//! time of this process, of the sidecar and of the store's servers is read ([`crate::cpu`]).

use crate::cpu::cpu_ns;
use crate::sidecar::SidecarClient;
use crate::stats::Samples;
use anyhow::Context as _;
use clusterlimit::Semaphore;
use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp};
use std::time::{Duration, Instant};
use zookeeper_client::{self as zk, Acls, CreateMode};

/// Bound on one operation: a healthy one takes milliseconds.
const OP_BOUND: Duration = Duration::from_secs(10);

/// One way of entering and leaving.
pub enum Op {
    /// etcd put (bound to a lease, like a permit key) then delete of the same key.
    EtcdRaw {
        client: etcd_client::Client,
        lease: i64,
        key: String,
    },
    /// The Limiter's enqueue Txn on etcd, sent with the raw client (if the key is absent: put it
    /// with a lease and read the semaphore's keys sorted by creation; else read both), then a
    /// delete: separates what etcd spends on that Txn from what the library adds.
    EtcdTxn {
        client: etcd_client::Client,
        lease: i64,
        prefix: String,
    },
    /// ZooKeeper create (ephemeral sequential, like a permit node) then delete of that node.
    ZkRaw { client: zk::Client, prefix: String },
    /// Redis SET then DEL of one key on one multiplexed redis-rs connection (the Limiter's
    /// client and connection kind): the two round trips an acquire + release is on Redis.
    RedisRaw {
        conn: redis::aio::MultiplexedConnection,
        key: String,
    },
    /// `acquire()` then `release()`.
    Library(Semaphore),
    /// The sidecar's POST then DELETE.
    Sidecar(SidecarClient),
}

/// Durations of one enter + leave.
#[derive(Debug, Clone, Copy)]
pub struct Pair {
    pub enter: Duration,
    pub leave: Duration,
}

/// What an entry looks like in the store (an owner label and a time), so the raw writes carry
/// about as many bytes as a permit.
const VALUE: &str = r#"{"permits":1,"owner":"bench-host/12345","since_unix_ms":1795343284245}"#;

impl Op {
    /// A raw etcd client with a lease of its own (`endpoints` as `127.0.0.1:PORT`).
    pub async fn etcd_raw(endpoints: &[String], key: &str) -> anyhow::Result<Op> {
        let (client, lease) = etcd_with_lease(endpoints).await?;
        Ok(Op::EtcdRaw {
            client,
            lease,
            key: key.to_string(),
        })
    }

    /// A raw etcd client sending the Limiter's Txn under `prefix` (a capacity key is put
    /// there first, so the read returns what an uncontended acquire's read returns).
    pub async fn etcd_txn(endpoints: &[String], prefix: &str) -> anyhow::Result<Op> {
        let (mut client, lease) = etcd_with_lease(endpoints).await?;
        client
            .put(format!("{prefix}/cap"), r#"{"capacity":2,"floor":0}"#, None)
            .await
            .context("put the Txn floor's capacity key")?;
        Ok(Op::EtcdTxn {
            client,
            lease,
            prefix: prefix.to_string(),
        })
    }

    /// A raw ZooKeeper session creating nodes under `parent` (created if absent).
    pub async fn zk_raw(connect: &str, parent: &str) -> anyhow::Result<Op> {
        let client = crate::support::zk_connect(connect).await;
        client
            .mkdir(
                parent,
                &CreateMode::Persistent.with_acls(Acls::anyone_all()),
            )
            .await
            .or_else(|e| match e {
                zk::Error::NodeExists => Ok(()),
                e => Err(e),
            })
            .context("create the floor's parent node")?;
        Ok(Op::ZkRaw {
            client,
            prefix: format!("{parent}/n-"),
        })
    }

    /// A raw redis-rs client (`url` as `redis://127.0.0.1:PORT`) writing `key`.
    pub async fn redis_raw(url: &str, key: &str) -> anyhow::Result<Op> {
        Ok(Op::RedisRaw {
            conn: redis_connection(url).await?,
            key: key.to_string(),
        })
    }

    /// Enters and leaves once.
    pub async fn once(&mut self) -> anyhow::Result<Pair> {
        tokio::time::timeout(OP_BOUND, self.pair())
            .await
            .context("an operation took over 10 s")?
    }

    async fn pair(&mut self) -> anyhow::Result<Pair> {
        let start = Instant::now();
        let entered;
        match self {
            Op::EtcdRaw { client, lease, key } => {
                let opts = PutOptions::new().with_lease(*lease);
                client.put(key.as_str(), VALUE, Some(opts)).await?;
                entered = Instant::now();
                client.delete(key.as_str(), None).await?;
            }
            Op::EtcdTxn {
                client,
                lease,
                prefix,
            } => {
                let key = format!("{prefix}/q/0123456789abcdef0123456789abcdef");
                let sorted = || {
                    GetOptions::new()
                        .with_prefix()
                        .with_sort(SortTarget::Create, SortOrder::Ascend)
                };
                let txn = Txn::new()
                    .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                    .and_then([
                        TxnOp::put(
                            key.clone(),
                            VALUE,
                            Some(PutOptions::new().with_lease(*lease)),
                        ),
                        TxnOp::get(format!("{prefix}/"), Some(sorted())),
                    ])
                    .or_else([
                        TxnOp::get(key.clone(), None),
                        TxnOp::get(format!("{prefix}/"), Some(sorted())),
                    ]);
                client.txn(txn).await?;
                entered = Instant::now();
                client.delete(key, None).await?;
            }
            Op::ZkRaw { client, prefix } => {
                let mode = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
                let (_, seq) = client.create(prefix, VALUE.as_bytes(), &mode).await?;
                entered = Instant::now();
                client.delete(&format!("{prefix}{seq}"), None).await?;
            }
            Op::RedisRaw { conn, key } => {
                redis::cmd("SET")
                    .arg(key.as_str())
                    .arg(VALUE)
                    .query_async::<()>(conn)
                    .await?;
                entered = Instant::now();
                redis::cmd("DEL")
                    .arg(key.as_str())
                    .query_async::<()>(conn)
                    .await?;
            }
            Op::Library(sem) => {
                let permit = sem.acquire().await?;
                entered = Instant::now();
                permit.release().await?;
            }
            Op::Sidecar(sc) => {
                let id = sc.acquire().await?;
                entered = Instant::now();
                sc.release(&id).await?;
            }
        }
        let left = Instant::now();
        Ok(Pair {
            enter: entered - start,
            leave: left - entered,
        })
    }
}

/// A raw etcd client and a lease of its own (60 s, outlives any row).
async fn etcd_with_lease(endpoints: &[String]) -> anyhow::Result<(etcd_client::Client, i64)> {
    let mut client = crate::support::connect(endpoints).await;
    let lease = client
        .lease_grant(60, None)
        .await
        .context("grant the floor's lease")?
        .id();
    Ok((client, lease))
}

/// One multiplexed redis-rs connection, made as the Limiter's Redis backend makes its own (no
/// response timeout of the client's: [`OP_BOUND`] bounds an operation).
pub async fn redis_connection(url: &str) -> anyhow::Result<redis::aio::MultiplexedConnection> {
    let client = redis::Client::open(url).with_context(|| format!("bad redis URL {url}"))?;
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(OP_BOUND))
        .set_response_timeout(None);
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .with_context(|| format!("connect to redis at {url}"))
}

impl Pair {
    pub fn total(&self) -> Duration {
        self.enter + self.leave
    }
}

/// Latencies of one operation: whole pairs, and the enter and leave halves; and the mean CPU
/// time per pair of this process, the sidecar and the store's servers (`None`: not readable).
#[derive(Debug, Clone, Default)]
pub struct PairSamples {
    pub pair: Samples,
    pub enter: Samples,
    pub leave: Samples,
    pub cpu: Option<CpuPerPair>,
}

/// Mean CPU time per pair, in µs.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuPerPair {
    pub client: f64,
    pub sidecar: f64,
    pub servers: f64,
}

/// An operation and the other processes that work for it.
pub struct Measured {
    pub op: Op,
    pub sidecar: Option<u32>,
    pub servers: Vec<u32>,
}

impl Measured {
    fn cpu(&self) -> Option<[u64; 3]> {
        Some([
            cpu_ns(&[std::process::id()])?,
            cpu_ns(self.sidecar.as_slice())?,
            cpu_ns(&self.servers)?,
        ])
    }
}

/// Runs one unmeasured batch of every op (connections, caches, JIT), then `rounds` rounds of
/// `batch` pairs of every op in turn. Returns the samples in the order of `ops`.
///
/// With `etcd`, etcd's history is compacted before every round, as an etcd with automatic
/// compaction would keep it: every acquire leaves a deleted key behind, and the cost of that
/// history is row 6's subject, not this one's.
pub async fn interleaved(
    ops: &mut [Measured],
    rounds: usize,
    batch: usize,
    mut etcd: Option<etcd_client::Client>,
) -> anyhow::Result<Vec<PairSamples>> {
    for m in ops.iter_mut() {
        for _ in 0..batch {
            m.op.once().await?;
        }
    }
    let mut pairs: Vec<Vec<Pair>> = ops.iter().map(|_| Vec::new()).collect();
    let mut cpu: Vec<Option<[u64; 3]>> = ops.iter().map(|_| Some([0; 3])).collect();
    for _ in 0..rounds {
        if let Some(c) = etcd.as_mut() {
            crate::stores::compact(c).await?;
        }
        for ((m, out), used) in ops.iter_mut().zip(&mut pairs).zip(&mut cpu) {
            let before = m.cpu();
            for _ in 0..batch {
                out.push(m.op.once().await?);
            }
            *used = match (*used, before, m.cpu()) {
                (Some(u), Some(b), Some(a)) => {
                    Some([0, 1, 2].map(|i| u[i] + a[i].saturating_sub(b[i])))
                }
                _ => None,
            };
        }
    }
    Ok(pairs
        .iter()
        .zip(cpu)
        .map(|(p, used)| summarize(p, used))
        .collect())
}

fn summarize(pairs: &[Pair], cpu: Option<[u64; 3]>) -> PairSamples {
    let per_pair = |ns: u64| ns as f64 / 1e3 / pairs.len().max(1) as f64;
    PairSamples {
        pair: Samples::new(pairs.iter().map(Pair::total).collect()),
        enter: Samples::new(pairs.iter().map(|p| p.enter).collect()),
        leave: Samples::new(pairs.iter().map(|p| p.leave).collect()),
        cpu: cpu.map(|[client, sidecar, servers]| CpuPerPair {
            client: per_pair(client),
            sidecar: per_pair(sidecar),
            servers: per_pair(servers),
        }),
    }
}
