//! The floor of a handoff with the same client libraries: one raw client deletes a key (node)
//! that another raw client watches; a sample is the time from the delete call to the watcher
//! receiving the event. What row 4's handoff is compared with besides "one write".

use anyhow::{bail, Context as _};
use etcd_client::{EventType, WatchStream};
use std::time::{Duration, Instant};
use zookeeper_client::{self as zk, Acls, CreateMode};

/// Bound on one notification.
const BOUND: Duration = Duration::from_secs(10);

pub enum Notify {
    Etcd {
        writer: etcd_client::Client,
        events: WatchStream,
        key: String,
    },
    Zk {
        writer: zk::Client,
        watcher: zk::Client,
        path: String,
    },
}

impl Notify {
    /// A writer and a watcher (each its own connection) of `key` on etcd.
    pub async fn etcd(endpoints: &[String], key: &str) -> anyhow::Result<Notify> {
        let writer = crate::support::connect(endpoints).await;
        let mut watcher = crate::support::connect(endpoints).await;
        let mut events = watcher.watch(key, None).await.context("watch the key")?;
        // The first message confirms the watch.
        events.message().await.context("watch created")?;
        Ok(Notify::Etcd {
            writer,
            events,
            key: key.to_string(),
        })
    }

    /// A writer and a watcher (each its own session) of `path` on ZooKeeper.
    pub async fn zk(connect: &str, path: &str) -> anyhow::Result<Notify> {
        Ok(Notify::Zk {
            writer: crate::support::zk_connect(connect).await,
            watcher: crate::support::zk_connect(connect).await,
            path: path.to_string(),
        })
    }

    /// Creates the key (untimed, its event drained), then times delete → watcher's event.
    pub async fn once(&mut self) -> anyhow::Result<Duration> {
        tokio::time::timeout(BOUND, self.sample())
            .await
            .context("a raw notification took over 10 s")?
    }

    async fn sample(&mut self) -> anyhow::Result<Duration> {
        match self {
            Notify::Etcd {
                writer,
                events,
                key,
            } => {
                writer.put(key.as_str(), "x", None).await?;
                next_event(events, EventType::Put).await?;
                let start = Instant::now();
                writer.delete(key.as_str(), None).await?;
                next_event(events, EventType::Delete).await?;
                Ok(start.elapsed())
            }
            Notify::Zk {
                writer,
                watcher,
                path,
            } => {
                let mode = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
                writer.create(path, b"x", &mode).await?;
                let (_, watch) = watcher.check_and_watch_stat(path).await?;
                let start = Instant::now();
                writer.delete(path, None).await?;
                watch.changed().await;
                Ok(start.elapsed())
            }
        }
    }
}

/// Reads watch messages until one holds an event of `kind`.
async fn next_event(events: &mut WatchStream, kind: EventType) -> anyhow::Result<()> {
    for _ in 0..100 {
        let msg = events.message().await?.context("the watch stream ended")?;
        if msg.events().iter().any(|e| e.event_type() == kind) {
            return Ok(());
        }
    }
    bail!("no {kind:?} event in 100 watch messages")
}
