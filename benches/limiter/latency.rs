//! Rows 1 and 2: one client enters and leaves, nobody else around. The floors (raw writes with
//! the same client libraries the Limiter uses), the Limiter on each store, and the sidecar.
//!
//! Every operation is measured in interleaved rounds (a batch of each, then the next round)
//! rather than one after the other, so a load change on this shared machine hits a store's
//! floor and the Limiter on it alike, and their ratio stays honest.

use crate::sidecar::SidecarClient;
use crate::stats::Samples;
use anyhow::Context as _;
use clusterlimit::Semaphore;
use etcd_client::PutOptions;
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
    /// ZooKeeper create (ephemeral sequential, like a permit node) then delete of that node.
    ZkRaw { client: zk::Client, prefix: String },
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
        let mut client = crate::support::connect(endpoints).await;
        let lease = client
            .lease_grant(60, None)
            .await
            .context("grant the floor's lease")?
            .id();
        Ok(Op::EtcdRaw {
            client,
            lease,
            key: key.to_string(),
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
            Op::ZkRaw { client, prefix } => {
                let mode = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
                let (_, seq) = client.create(prefix, VALUE.as_bytes(), &mode).await?;
                entered = Instant::now();
                client.delete(&format!("{prefix}{seq}"), None).await?;
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

impl Pair {
    pub fn total(&self) -> Duration {
        self.enter + self.leave
    }
}

/// Latencies of one operation: whole pairs, and the enter and leave halves.
#[derive(Debug, Clone, Default)]
pub struct PairSamples {
    pub pair: Samples,
    pub enter: Samples,
    pub leave: Samples,
}

/// Runs one unmeasured batch of every op (connections, caches, JIT), then `rounds` rounds of
/// `batch` pairs of every op in turn. Returns the samples in the order of `ops`.
pub async fn interleaved(
    ops: &mut [Op],
    rounds: usize,
    batch: usize,
) -> anyhow::Result<Vec<PairSamples>> {
    for op in ops.iter_mut() {
        for _ in 0..batch {
            op.once().await?;
        }
    }
    let mut raw: Vec<Vec<Pair>> = ops.iter().map(|_| Vec::new()).collect();
    for _ in 0..rounds {
        for (op, out) in ops.iter_mut().zip(&mut raw) {
            for _ in 0..batch {
                out.push(op.once().await?);
            }
        }
    }
    Ok(raw.into_iter().map(|pairs| summarize(&pairs)).collect())
}

fn summarize(pairs: &[Pair]) -> PairSamples {
    PairSamples {
        pair: Samples::new(pairs.iter().map(Pair::total).collect()),
        enter: Samples::new(pairs.iter().map(|p| p.enter).collect()),
        leave: Samples::new(pairs.iter().map(|p| p.leave).collect()),
    }
}
