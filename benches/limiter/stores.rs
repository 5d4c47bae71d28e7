//! The servers of a run (real etcd and ZooKeeper child processes from the test support, killed
//! when dropped) and Limiters on them.

use crate::support::{EtcdCluster, ZkCluster};
use anyhow::Context as _;
use clusterlimit::{Limiter, Semaphore};

/// One store under test: its URL and how the rows call it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Store {
    Memory,
    Etcd,
    Zk,
}

impl Store {
    pub const ALL: [Store; 3] = [Store::Memory, Store::Etcd, Store::Zk];

    pub fn label(self) -> &'static str {
        match self {
            Store::Memory => "memory",
            Store::Etcd => "etcd",
            Store::Zk => "ZooKeeper",
        }
    }
}

/// etcd and ZooKeeper, started together (1 node each, or 3 with `--cluster`).
pub struct Servers {
    pub etcd: EtcdCluster,
    pub zk: ZkCluster,
}

impl Servers {
    /// Starts both; the support code panics with the server's log tail if one cannot start.
    pub fn start(nodes: usize) -> Servers {
        Servers {
            etcd: EtcdCluster::start(nodes),
            zk: ZkCluster::start(nodes),
        }
    }

    /// A URL of `store` whose semaphores no other row sees: etcd prefix, ZooKeeper chroot or
    /// memory store name `space`.
    pub fn url(&self, store: Store, space: &str) -> String {
        match store {
            Store::Memory => format!("memory://{space}"),
            Store::Etcd => self.etcd.url(space),
            Store::Zk => self.zk.url(space),
        }
    }

    /// Process ids of the servers of `store` (none for memory://: it lives in this process).
    pub fn pids(&self, store: Store) -> Vec<u32> {
        match store {
            Store::Memory => Vec::new(),
            Store::Etcd => (0..self.etcd.endpoints().len())
                .filter_map(|m| self.etcd.pid(m))
                .collect(),
            Store::Zk => (0..self.zk.len()).filter_map(|m| self.zk.pid(m)).collect(),
        }
    }

    /// `ZooKeeper version: …` line of the first server.
    pub fn zk_version(&self) -> String {
        self.zk
            .srvr(0)
            .lines()
            .find_map(|l| l.strip_prefix("Zookeeper version:"))
            .map(|v| v.split([',', '-']).next().unwrap_or(v).trim().to_string())
            .unwrap_or_else(|| "?".to_string())
    }

    /// `zk_packets_received` of every ZooKeeper server, summed: requests from every client,
    /// ours and kazoo's alike.
    pub fn zk_packets_received(&self) -> anyhow::Result<u64> {
        let mut total = 0;
        for m in 0..self.zk.len() {
            let mntr = self.zk.four_letter_word(m, "mntr");
            let v = mntr
                .lines()
                .find_map(|l| l.strip_prefix("zk_packets_received"))
                .with_context(|| format!("no zk_packets_received in mntr: {mntr}"))?;
            total += v.trim().parse::<u64>().context("zk_packets_received")?;
        }
        Ok(total)
    }
}

/// A Limiter with its own session, labelled `owner`.
pub async fn limiter(url: &str, owner: &str) -> anyhow::Result<Limiter> {
    Limiter::builder(url)
        .owner(owner)
        .connect()
        .await
        .with_context(|| format!("connect a Limiter to {url}"))
}

/// A Limiter with its own session and its handle on semaphore `name` of `capacity`.
pub async fn client(
    url: &str,
    owner: &str,
    name: &str,
    capacity: u32,
) -> anyhow::Result<(Limiter, Semaphore)> {
    let l = limiter(url, owner).await?;
    let s = l
        .semaphore(name, capacity)
        .await
        .with_context(|| format!("open semaphore {name} on {url}"))?;
    Ok((l, s))
}

/// Closes every Limiter (ends their sessions), reporting the first failure.
pub async fn close_all(limiters: &[Limiter]) -> anyhow::Result<()> {
    for l in limiters {
        l.close().await.context("close a Limiter")?;
    }
    Ok(())
}

/// Request counters of several Limiters, summed.
pub fn total_stats(limiters: &[Limiter]) -> clusterlimit::RequestStats {
    limiters.iter().map(Limiter::stats).sum()
}

/// A raw etcd client for compactions: a physical compaction of a long history takes seconds,
/// beyond the test support client's 2 s request timeout.
pub async fn etcd_admin(endpoints: &[String]) -> anyhow::Result<etcd_client::Client> {
    let opts = etcd_client::ConnectOptions::new()
        .with_connect_timeout(std::time::Duration::from_secs(5))
        .with_timeout(std::time::Duration::from_secs(120));
    etcd_client::Client::connect(endpoints, Some(opts))
        .await
        .context("connect the compaction client")
}

/// Compacts etcd's history up to its current revision (what `--auto-compaction-*` does on a
/// schedule; the benchmark's etcd has no automatic compaction), and waits until etcd has also
/// removed the old revisions from its backend, which it otherwise does in the background,
/// competing with what is measured next.
pub async fn compact(client: &mut etcd_client::Client) -> anyhow::Result<()> {
    let revision = client
        .get("compaction-probe", None)
        .await
        .context("read etcd's revision")?
        .header()
        .map(|h| h.revision())
        .context("no header in etcd's answer")?;
    let physical = etcd_client::CompactionOptions::new().with_physical();
    client
        .compact(revision, Some(physical))
        .await
        .context("compact etcd")?;
    Ok(())
}

/// The Redis Cluster of clusterlimit's rate rows on Redis (issue 39): 3 primaries from the test
/// support (child processes on free loopback ports, killed on drop). The one-Redis rows use the
/// peers' Redis (`PeerServers`), so clusterlimit and redis-cell are measured on one server.
pub struct RedisStores {
    pub cluster: crate::support::redis::RedisCluster,
}

impl RedisStores {
    /// Primaries of the Redis Cluster.
    pub const PRIMARIES: usize = 3;

    /// Starts the cluster; the support code panics with a server's log if it cannot.
    pub fn start() -> RedisStores {
        RedisStores {
            cluster: crate::support::redis::RedisCluster::start(Self::PRIMARIES),
        }
    }

    /// `redis+cluster://…/space`: rate limits under their own prefix.
    pub fn cluster_url(&self, space: &str) -> String {
        self.cluster.url(space)
    }

    /// Process ids of the cluster's primaries.
    pub fn cluster_pids(&self) -> Vec<u32> {
        self.cluster.nodes.iter().map(|n| n.pid()).collect()
    }
}

/// The one Redis of the permit rows on Redis (issue 39), started as the tests start theirs
/// (`tests/support/redis.rs`, no persistence, killed on drop).
pub struct PermitRedis {
    pub server: crate::support::redis::RedisServer,
}

impl PermitRedis {
    pub fn start() -> PermitRedis {
        PermitRedis {
            server: crate::support::redis::RedisServer::start(),
        }
    }

    /// `redis://127.0.0.1:PORT/space`: semaphores under their own prefix.
    pub fn url(&self, space: &str) -> String {
        self.server.url(space)
    }

    /// `redis://127.0.0.1:PORT` for the raw clients of the floors.
    pub fn raw_url(&self) -> String {
        format!("redis://{}", self.server.host())
    }

    pub fn pids(&self) -> Vec<u32> {
        vec![self.server.pid()]
    }
}
