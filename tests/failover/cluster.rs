//! A 3-member etcd cluster or ZooKeeper ensemble behind one interface, so every scenario is
//! written once and run on both stores.

use crate::support::{self, EtcdCluster, ProxyGroup, ZkCluster};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

/// Which store a run uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Etcd,
    Zk,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Etcd => "etcd",
            Kind::Zk => "ZooKeeper",
        }
    }
}

/// Session TTL / ZooKeeper session timeout of every client in the suite: short, so expiry
/// scenarios are quick, and still 10× etcd's election timeout (250 ms).
pub const TTL: Duration = Duration::from_secs(3);

/// Per-request bound of every client in the suite (the library's `request_timeout`).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

pub enum Cluster {
    Etcd(EtcdCluster),
    Zk(ZkCluster),
}

impl Cluster {
    /// Starts 3 members: etcd with fast elections (heartbeat 50 ms, election 250 ms, set by
    /// the support code), ZooKeeper with a 200 ms tick (a dead leader is noticed after
    /// `syncLimit` = 5 ticks) and sessions of 1–20 s.
    pub fn start(kind: Kind) -> Cluster {
        match kind {
            Kind::Etcd => Cluster::Etcd(EtcdCluster::start(3)),
            Kind::Zk => Cluster::Zk(
                ZkCluster::builder()
                    .members(3)
                    .tick_time_ms(200)
                    .session_timeout_range_ms(1000, 20_000)
                    .start(),
            ),
        }
    }

    pub fn len(&self) -> usize {
        3
    }

    /// Client addresses of the members, in member order.
    pub fn member_addrs(&self) -> Vec<SocketAddr> {
        match self {
            Cluster::Etcd(c) => c
                .endpoints()
                .iter()
                .map(|e| e.parse().expect("etcd endpoint is an address"))
                .collect(),
            Cluster::Zk(c) => (0..c.len()).map(|i| c.client_addr(i)).collect(),
        }
    }

    /// The library's URL for a client that reaches the members through `proxies`.
    pub fn url_via(&self, proxies: &ProxyGroup, namespace: &str) -> String {
        match self {
            Cluster::Etcd(_) => format!("etcd://{}/{namespace}", proxies.connect_string()),
            Cluster::Zk(_) => proxies.zk_url(&format!("/{namespace}")),
        }
    }

    /// The library's URL for a client that reaches every member directly (no proxy).
    pub fn direct_url(&self, namespace: &str) -> String {
        match self {
            Cluster::Etcd(c) => c.url(namespace),
            Cluster::Zk(c) => c.url(&format!("/{namespace}")),
        }
    }

    /// The leader's index (waits for an election in progress, bounded).
    pub async fn leader(&mut self) -> usize {
        match self {
            Cluster::Etcd(c) => support::etcd::leader(c).await,
            Cluster::Zk(c) => {
                tokio::task::block_in_place(|| c.wait_leader(Duration::from_secs(15)))
            }
        }
    }

    /// The last election and sync events in the logs of `members`, one block per member: why
    /// the store did not serve, for a failed row's report.
    pub fn election_log(&self, members: &[usize]) -> String {
        let mut out = String::new();
        for &m in members {
            let events = match self {
                Cluster::Etcd(c) => last_matching(
                    &std::fs::read_to_string(c.log_path(m)).unwrap_or_default(),
                    &["became", "elected leader", "lost leader", "leader changed"],
                    ELECTION_LOG_LINES,
                ),
                Cluster::Zk(c) => c.election_log(m, ELECTION_LOG_LINES),
            };
            let _ = write!(
                out,
                "\n    ---- member {m}: last election events ----\n{events}"
            );
        }
        out
    }

    /// How many `NEWLEADER` acknowledgements the members ever rejected: ZooKeeper 3.8.0's own
    /// re-election loop (see `support::zookeeper::REJECTED_NEWLEADER_ACK`); 0 on etcd.
    pub fn rejected_newleader_acks(&self) -> usize {
        match self {
            Cluster::Etcd(_) => 0,
            Cluster::Zk(c) => (0..c.len()).map(|m| c.rejected_newleader_acks(m)).sum(),
        }
    }

    /// SIGKILLs a member.
    pub fn kill(&mut self, member: usize) {
        tokio::task::block_in_place(|| match self {
            Cluster::Etcd(c) => c.kill(member),
            Cluster::Zk(c) => c.kill(member),
        })
    }

    /// Restarts a member and waits until the cluster is whole again.
    pub fn restart(&mut self, member: usize) {
        tokio::task::block_in_place(|| match self {
            Cluster::Etcd(c) => c.restart(member),
            Cluster::Zk(c) => c.restart(member),
        })
    }

    /// Restarts a member unless it runs: a scenario may have brought it back early (see
    /// `scenarios::end_zookeeper_election_loop`).
    pub fn restart_if_down(&mut self, member: usize) {
        let running = match self {
            Cluster::Etcd(c) => c.is_running(member),
            Cluster::Zk(c) => c.is_running(member),
        };
        if !running {
            self.restart(member);
        }
    }

    /// SIGKILLs every member: the whole store is gone.
    pub fn kill_all(&mut self) {
        for i in 0..self.len() {
            self.kill(i);
        }
    }

    /// Starts every member again and waits until the cluster serves.
    pub fn restart_all(&mut self) {
        tokio::task::block_in_place(|| match self {
            Cluster::Etcd(c) => c.restart_all(),
            Cluster::Zk(c) => c.restart_all(),
        })
    }

    /// SIGSTOPs a member: a hung server.
    pub fn pause(&mut self, member: usize) {
        match self {
            Cluster::Etcd(c) => c.pause(member),
            Cluster::Zk(c) => c.pause(member),
        }
    }

    /// SIGCONTs a member paused with [`Cluster::pause`].
    pub fn resume(&mut self, member: usize) {
        match self {
            Cluster::Etcd(c) => c.resume(member),
            Cluster::Zk(c) => c.resume(member),
        }
    }

    pub fn kind(&self) -> Kind {
        match self {
            Cluster::Etcd(_) => Kind::Etcd,
            Cluster::Zk(_) => Kind::Zk,
        }
    }

    /// Every queue entry of semaphore `name` (key or node name, and its value), read straight
    /// from the store with a raw client (etcd range of the queue prefix / ZooKeeper children
    /// with their data), not through the library.
    pub async fn queue_entries(&self, name: &str) -> Vec<(String, String)> {
        match self {
            Cluster::Etcd(c) => {
                support::etcd::list_entries(&c.endpoints(), &format!("failover/s/{name}/q/")).await
            }
            Cluster::Zk(c) => {
                support::zookeeper::children_with_data(
                    &c.connect_string(),
                    &format!("/failover/s/{name}"),
                )
                .await
            }
        }
    }

    /// What the store holds about one queue entry of `name` (etcd: revisions and lease;
    /// ZooKeeper: owner session and creation), for a failure message.
    pub async fn describe_entry(&self, name: &str, entry: &str) -> String {
        match self {
            Cluster::Etcd(c) => {
                support::etcd::describe_key(&c.endpoints(), &format!("failover/s/{name}/q/{entry}"))
                    .await
            }
            Cluster::Zk(c) => {
                let node = support::zookeeper::describe_node(
                    &c.connect_string(),
                    &format!("/failover/s/{name}/{entry}"),
                )
                .await;
                match node
                    .split("owner session ")
                    .nth(1)
                    .and_then(|t| t.split(',').next())
                {
                    Some(session) => format!("{node}; {}", zk_session_seen(c, session)),
                    None => node,
                }
            }
        }
    }

    /// etcd's current revision; `None` on ZooKeeper.
    pub async fn revision(&self) -> Option<i64> {
        match self {
            Cluster::Etcd(c) => Some(support::etcd::current_revision(&c.endpoints()).await),
            Cluster::Zk(_) => None,
        }
    }

    /// Compacts etcd's history to the current revision; `None` on ZooKeeper, which keeps no
    /// history for watches to resume from.
    pub async fn compact(&self) -> Option<i64> {
        match self {
            Cluster::Etcd(c) => Some(support::etcd::compact_to_current(&c.endpoints()).await),
            Cluster::Zk(_) => None,
        }
    }
}

/// Where the ZooKeeper members still know `session` (`0x…`): which members hold a
/// connection of it (`cons`) and whether the leader still tracks it (`dump`). Tells a session
/// the client still keeps alive from one the servers failed to expire.
fn zk_session_seen(c: &ZkCluster, session: &str) -> String {
    let mut seen = Vec::new();
    for m in 0..c.len() {
        let cons = c.four_letter_word(m, "cons");
        let connected = cons
            .lines()
            .filter(|l| l.contains(&format!("sid={session}")))
            .count();
        let dump = c.four_letter_word(m, "dump");
        let tracked = dump
            .lines()
            .any(|l| l.trim().trim_end_matches(':') == session);
        seen.push(format!(
            "member {m}: {connected} connections of it, {} by dump",
            if dump.is_empty() {
                "no answer"
            } else if tracked {
                "tracked"
            } else {
                "not tracked"
            }
        ));
    }
    format!("session {session} on the servers: {}", seen.join(", "))
}

/// How many election events of each member a failed row's report shows.
const ELECTION_LOG_LINES: usize = 12;

/// The last `n` lines of `text` that contain one of `needles`.
fn last_matching(text: &str, needles: &[&str], n: usize) -> String {
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| needles.iter().any(|x| l.contains(x)))
        .collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
