//! The store's own failover time, measured in the same run as the library's: from a fault until
//! a raw client's write succeeds again (a put on etcd, a setData on ZooKeeper), not through the
//! library. Each member gets its own raw client; each writes with a short per-attempt timeout
//! every ~10 ms, and the first success anywhere ends the measurement.

use crate::cluster::Kind;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::task::{JoinHandle, JoinSet};
use zookeeper_client as zk;

/// Bound of one write attempt: long enough for a healthy 3-member write on a loaded machine,
/// short enough that a hung attempt does not hide the moment the store is back.
const ATTEMPT: Duration = Duration::from_millis(250);
/// Pause between attempts of one member's client.
const POLL: Duration = Duration::from_millis(10);
/// The key / node the probes write (outside every semaphore's prefix).
const PROBE_KEY: &str = "/failover-store-probe";

/// Starts measuring now: the returned task yields how long after `since` a raw write first
/// succeeded through one of `members` (client addresses), or `None` within `limit`.
pub fn spawn(
    kind: Kind,
    members: Vec<SocketAddr>,
    since: Instant,
    limit: Duration,
) -> JoinHandle<Option<Duration>> {
    tokio::spawn(async move {
        let deadline = Instant::now() + limit;
        let mut set = JoinSet::new();
        for addr in members {
            match kind {
                Kind::Etcd => set.spawn(etcd_writes(addr, deadline)),
                Kind::Zk => set.spawn(zk_writes(addr, deadline)),
            };
        }
        let mut first: Option<Instant> = None;
        while let Some(done) = set.join_next().await {
            if let Ok(Some(at)) = done {
                first = Some(at);
                break;
            }
        }
        set.abort_all();
        first.map(|at| at.saturating_duration_since(since))
    })
}

/// Puts through one etcd member until a put succeeds; returns when it did.
async fn etcd_writes(addr: SocketAddr, deadline: Instant) -> Option<Instant> {
    let options = etcd_client::ConnectOptions::new()
        .with_connect_timeout(ATTEMPT)
        .with_timeout(ATTEMPT);
    // Connecting is lazy: it fails only on a bad address.
    let mut client = etcd_client::Client::connect([format!("http://{addr}")], Some(options))
        .await
        .ok()?;
    while Instant::now() < deadline {
        let put = client.put(PROBE_KEY, "x", None);
        if let Ok(Ok(_)) = tokio::time::timeout(ATTEMPT, put).await {
            return Some(Instant::now());
        }
        tokio::time::sleep(POLL).await;
    }
    None
}

/// Writes through one ZooKeeper member until a write succeeds; returns when it did. A client
/// whose session is unusable is replaced (connecting is itself a write: a session create).
async fn zk_writes(addr: SocketAddr, deadline: Instant) -> Option<Instant> {
    let target = addr.to_string();
    let mut client: Option<zk::Client> = None;
    while Instant::now() < deadline {
        if client.is_none() {
            let connect = zk::Client::connector()
                .with_session_timeout(Duration::from_secs(10))
                .with_fail_eagerly()
                .connect(&target);
            client = tokio::time::timeout(ATTEMPT, connect)
                .await
                .ok()
                .and_then(Result::ok);
        }
        if let Some(c) = &client {
            match tokio::time::timeout(ATTEMPT, zk_write(c)).await {
                Ok(Ok(())) => return Some(Instant::now()),
                Ok(Err(zk::Error::SessionExpired | zk::Error::ClientClosed)) => client = None,
                _ => {}
            }
        }
        tokio::time::sleep(POLL).await;
    }
    None
}

/// One write: setData on the probe node, created on first use.
async fn zk_write(client: &zk::Client) -> Result<(), zk::Error> {
    match client.set_data(PROBE_KEY, b"x", None).await {
        Ok(_) => Ok(()),
        Err(zk::Error::NoNode) => {
            let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
            match client.create(PROBE_KEY, b"x", &options).await {
                Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e),
    }
}
