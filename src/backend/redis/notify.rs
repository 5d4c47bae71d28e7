//! Wakeups for waiters: every permit script that can decide a waiter publishes on the
//! semaphore's channel, and a backend keeps one pub/sub connection, subscribed to the channels
//! of the semaphores it has waiters in. A message wakes that semaphore's watch (one read per
//! Limiter, `watch.rs`), never each waiter. On a Redis Cluster, a publish reaches every node,
//! so the connection goes to any one of them.
//!
//! Pub/sub delivers at most once: when the connection breaks, every watch is woken (messages
//! may have been missed), and the connection is made again with every channel subscribed.

use super::link::Link;
use crate::backend::lock;
use futures::StreamExt;
use redis::aio::{PubSubSink, PubSubStream};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// First pause before connecting again; doubled up to [`MAX_PAUSE`].
const RETRY_PAUSE: Duration = Duration::from_millis(100);
const MAX_PAUSE: Duration = Duration::from_secs(2);

/// One backend's pub/sub connection and who to wake per channel.
pub(super) struct Notifier {
    link: Weak<Link>,
    channels: Mutex<HashMap<String, Arc<Notify>>>,
    sink: tokio::sync::Mutex<Option<PubSubSink>>,
    stop: CancellationToken,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Notifier")
    }
}

impl Notifier {
    pub(super) fn new(link: &Arc<Link>, stop: CancellationToken) -> Arc<Notifier> {
        Arc::new(Notifier {
            link: Arc::downgrade(link),
            channels: Mutex::new(HashMap::new()),
            sink: tokio::sync::Mutex::new(None),
            stop,
        })
    }

    /// Wakes `wake` on every message on `channel` from now on. Returns once subscribed, or
    /// after the request timeout if the connection cannot be made now (then the subscription
    /// is made when it can, and `wake` is woken at that moment).
    pub(super) async fn subscribe(self: &Arc<Self>, channel: &str, wake: Arc<Notify>) {
        // Subscriptions change one at a time (under the sink's lock), so a watch that stops
        // cannot unsubscribe the channel of the one that replaces it.
        let mut slot = self.sink.lock().await;
        lock(&self.channels).insert(channel.to_string(), wake);
        let Some(link) = self.link.upgrade() else {
            return;
        };
        match slot.as_mut() {
            Some(sink) => {
                let subscribed =
                    tokio::time::timeout(link.request_timeout(), sink.subscribe(channel));
                if !matches!(subscribed.await, Ok(Ok(()))) {
                    tracing::debug!(store = %link.shown(), %channel, "subscribing failed; retried when the connection is made again");
                }
            }
            // Made with every channel subscribed, this one too.
            None => {
                if let Some(stream) = self.open(&mut slot).await {
                    tokio::spawn(self.clone().read(stream));
                }
            }
        }
    }

    /// Stops waking `wake` for `channel` (unless another took its place).
    pub(super) async fn unsubscribe(&self, channel: &str, wake: &Arc<Notify>) {
        let mut slot = self.sink.lock().await;
        {
            let mut channels = lock(&self.channels);
            match channels.get(channel) {
                Some(w) if Arc::ptr_eq(w, wake) => channels.remove(channel),
                _ => return,
            };
        }
        let (Some(link), Some(sink)) = (self.link.upgrade(), slot.as_mut()) else {
            return;
        };
        let _ = tokio::time::timeout(link.request_timeout(), sink.unsubscribe(channel)).await;
    }

    /// Makes the connection into `slot`, with every channel subscribed, and returns its
    /// messages; leaves `slot` empty when that fails (within the request timeout).
    async fn open(&self, slot: &mut Option<PubSubSink>) -> Option<PubSubStream> {
        let link = self.link.upgrade().filter(|_| !self.stop.is_cancelled())?;
        let made = tokio::time::timeout(link.request_timeout(), async {
            let (mut sink, stream) = link.pubsub().await?.split();
            let channels: Vec<String> = lock(&self.channels).keys().cloned().collect();
            if !channels.is_empty() {
                sink.subscribe(&channels).await?;
            }
            redis::RedisResult::Ok((sink, stream))
        })
        .await;
        match made {
            Ok(Ok((sink, stream))) => {
                *slot = Some(sink);
                Some(stream)
            }
            Ok(Err(e)) => {
                tracing::debug!(store = %link.shown(), "the pub/sub connection failed: {e}");
                None
            }
            Err(_) => {
                tracing::debug!(store = %link.shown(), "the pub/sub connection was not made in time");
                None
            }
        }
    }

    /// Wakes each message's watch; when the connection breaks, makes it again (with every
    /// channel) and goes on, until stopped or nobody listens.
    async fn read(self: Arc<Self>, mut stream: PubSubStream) {
        loop {
            loop {
                tokio::select! {
                    _ = self.stop.cancelled() => return,
                    message = stream.next() => match message {
                        Some(m) => {
                            if let Some(wake) = lock(&self.channels).get(m.get_channel_name()) {
                                wake.notify_one();
                            }
                        }
                        None => break,
                    },
                }
            }
            *self.sink.lock().await = None;
            self.wake_all();
            match self.reconnect().await {
                Some(next) => stream = next,
                None => return,
            }
        }
    }

    /// Makes the connection again, pausing longer after each failure; `None` when stopped,
    /// when nobody listens any more, or when a subscribe made it meanwhile (and reads it).
    async fn reconnect(&self) -> Option<PubSubStream> {
        let mut pause = RETRY_PAUSE;
        while !self.stop.is_cancelled() && !lock(&self.channels).is_empty() {
            tokio::select! {
                _ = self.stop.cancelled() => return None,
                _ = tokio::time::sleep(pause) => {}
            }
            let mut slot = self.sink.lock().await;
            if slot.is_some() {
                self.wake_all();
                return None;
            }
            if let Some(stream) = self.open(&mut slot).await {
                // Changes made while it was down were not heard: every watch reads again.
                self.wake_all();
                return Some(stream);
            }
            pause = (pause * 2).min(MAX_PAUSE);
        }
        None
    }

    fn wake_all(&self) {
        for wake in lock(&self.channels).values() {
            wake.notify_one();
        }
    }
}
