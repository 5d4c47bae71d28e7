//! The floor of a handoff with the same client libraries: one raw client deletes a key (node)
//! that another raw client watches; a sample is the time from the delete call to the watcher
//! receiving the event. What row 4's handoff is compared with besides "one write". On Redis,
//! which has no watch, a PUBLISH and another connection's SUBSCRIBE: how the permit scripts
//! wake waiters.

use anyhow::{bail, Context as _};
use etcd_client::{EventType, WatchStream};
use futures::StreamExt as _;
use redis::aio::{MultiplexedConnection, PubSubSink, PubSubStream};
use std::time::{Duration, Instant};
use zookeeper_client::{self as zk, Acls, CreateMode};

/// Bound on one notification.
const BOUND: Duration = Duration::from_secs(10);

pub enum Notify {
    Etcd {
        // Boxed: an etcd Client is kilobytes, the ZooKeeper variant is small.
        writer: Box<etcd_client::Client>,
        events: WatchStream,
        key: String,
    },
    Zk {
        writer: zk::Client,
        watcher: zk::Client,
        path: String,
    },
    Redis {
        writer: MultiplexedConnection,
        /// Kept: dropping it ends the subscription.
        _sink: PubSubSink,
        messages: PubSubStream,
        channel: String,
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
            writer: Box::new(writer),
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

    /// A publisher and a subscriber (each its own connection) of `channel` on Redis.
    pub async fn redis(url: &str, channel: &str) -> anyhow::Result<Notify> {
        let writer = crate::latency::redis_connection(url).await?;
        let (_sink, messages) = redis_subscriber(url, channel).await?;
        Ok(Notify::Redis {
            writer,
            _sink,
            messages,
            channel: channel.to_string(),
        })
    }

    /// Creates the key (untimed, its event drained), then times delete → watcher's event;
    /// on Redis, PUBLISH → the subscriber's message.
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
            Notify::Redis {
                writer,
                messages,
                channel,
                ..
            } => {
                let start = Instant::now();
                redis::cmd("PUBLISH")
                    .arg(channel.as_str())
                    .arg("removed")
                    .query_async::<()>(writer)
                    .await?;
                messages.next().await.context("the subscription ended")?;
                Ok(start.elapsed())
            }
        }
    }
}

/// A connection of its own subscribed to `channel`.
async fn redis_subscriber(url: &str, channel: &str) -> anyhow::Result<(PubSubSink, PubSubStream)> {
    let client = redis::Client::open(url).with_context(|| format!("bad redis URL {url}"))?;
    let mut pubsub = client
        .get_async_pubsub()
        .await
        .with_context(|| format!("a pub/sub connection to {url}"))?;
    pubsub
        .subscribe(channel)
        .await
        .with_context(|| format!("subscribe to {channel}"))?;
    Ok(pubsub.split())
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

/// A raw client watching a semaphore the library uses (its etcd queue prefix, its ZooKeeper
/// node): records when each deletion reaches a client of this process, so a handoff can be
/// split into "the store's notification arrives" and "the library turns it into a grant".
pub struct Spy {
    deletes: tokio::sync::mpsc::UnboundedReceiver<Instant>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Spy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Spy {
    /// Watches every key under `prefix` on etcd.
    pub async fn etcd(endpoints: &[String], prefix: &str) -> anyhow::Result<Spy> {
        let mut client = crate::support::connect(endpoints).await;
        let opts = etcd_client::WatchOptions::new().with_prefix();
        let mut events = client.watch(prefix, Some(opts)).await?;
        events.message().await.context("spy watch created")?;
        let (tx, deletes) = tokio::sync::mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            let _client = client;
            while let Ok(Some(msg)) = events.message().await {
                let now = Instant::now();
                let deleted = msg
                    .events()
                    .iter()
                    .any(|e| e.event_type() == EventType::Delete);
                if deleted && tx.send(now).is_err() {
                    return;
                }
            }
        });
        Ok(Spy { deletes, task })
    }

    /// Watches `path` and everything below it on ZooKeeper.
    pub async fn zk(connect: &str, path: &str) -> anyhow::Result<Spy> {
        let client = crate::support::zk_connect(connect).await;
        let mut watch = client
            .watch(path, zk::AddWatchMode::PersistentRecursive)
            .await?;
        let (tx, deletes) = tokio::sync::mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            let _client = client;
            loop {
                let event = watch.changed().await;
                let now = Instant::now();
                match event.event_type {
                    zk::EventType::NodeDeleted if tx.send(now).is_err() => return,
                    zk::EventType::Session => return,
                    _ => {}
                }
            }
        });
        Ok(Spy { deletes, task })
    }

    /// Subscribes to a semaphore's channel on Redis (`{PREFIX:s:NAME}:changed`): every message
    /// there is a change that can decide a waiter (in row 4's turns, the holder's release).
    pub async fn redis(url: &str, channel: &str) -> anyhow::Result<Spy> {
        let (sink, mut messages) = redis_subscriber(url, channel).await?;
        let (tx, deletes) = tokio::sync::mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            let _sink = sink;
            while messages.next().await.is_some() {
                if tx.send(Instant::now()).is_err() {
                    return;
                }
            }
        });
        Ok(Spy { deletes, task })
    }

    /// Forgets deletions seen so far.
    pub fn clear(&mut self) {
        while self.deletes.try_recv().is_ok() {}
    }

    /// When the next deletion reached the spy (waiting for it at most 10 s).
    pub async fn next_delete(&mut self) -> anyhow::Result<Instant> {
        tokio::time::timeout(BOUND, self.deletes.recv())
            .await
            .context("the spy saw no deletion within 10 s")?
            .context("the spy's watch ended")
    }
}
