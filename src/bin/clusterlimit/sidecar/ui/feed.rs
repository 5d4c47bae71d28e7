//! The live view's feed: one picture a second, taken only while someone watches (an open
//! event stream), shared by every watcher through a `watch` channel, so ten open pages cost
//! the store what one does.

use crate::common::lock;
use crate::live::gather::Gatherer;
use crate::live::picture::{BreakerView, Picture};
use crate::sidecar::metrics::Metrics;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// How often a picture is taken while someone watches.
pub const PERIOD: Duration = Duration::from_secs(1);

/// The feed.
pub struct Feed {
    gatherer: Gatherer,
    metrics: Arc<Metrics>,
    tx: watch::Sender<Arc<str>>,
    running: AtomicBool,
    stop: CancellationToken,
    /// Breakers' state at the last picture (to note their moves as health events).
    breakers: std::sync::Mutex<Vec<(String, bool)>>,
    /// Permits lost per semaphore at the last picture, and when (for losses per second).
    losses: std::sync::Mutex<(
        Option<std::time::Instant>,
        std::collections::HashMap<String, u64>,
    )>,
}

impl Feed {
    /// A feed of pictures taken by `gatherer`, with the sidecar's own parts from `metrics`;
    /// it stops with `stop`.
    pub fn new(gatherer: Gatherer, metrics: Arc<Metrics>, stop: CancellationToken) -> Arc<Feed> {
        Arc::new(Feed {
            gatherer,
            metrics,
            tx: watch::Sender::new(Arc::from("")),
            running: AtomicBool::new(false),
            stop,
            breakers: Default::default(),
            losses: Default::default(),
        })
    }

    /// One picture now, with the sidecar's own parts.
    pub async fn picture(&self) -> Picture {
        let recorder = &self.metrics.rate.live;
        let mut p = self.gatherer.picture(Some(recorder)).await;
        let breakers = self.metrics.breakers();
        {
            let mut last = lock(&self.breakers);
            for (name, b) in &breakers {
                let before = last.iter().find(|(n, _)| n == name).map(|(_, o)| *o);
                if before.is_some_and(|o| o != b.open) {
                    let to = if b.open { "opened" } else { "closed" };
                    self.gatherer.event(format!("breaker {name} {to}"));
                }
            }
            *last = breakers.iter().map(|(n, b)| (n.clone(), b.open)).collect();
        }
        p.store.events = self.gatherer.events();
        p.store.breakers = breakers
            .into_iter()
            .map(|(name, b)| BreakerView {
                name,
                open: b.open,
                opened: b.opened,
                closed: b.closed,
            })
            .collect();
        p.rls = recorder.rules();
        self.losses_per_second(&mut p);
        p
    }

    /// This sidecar's permits lost per second on each semaphore since the last picture.
    fn losses_per_second(&self, p: &mut Picture) {
        let mut last = lock(&self.losses);
        let elapsed = last
            .0
            .replace(std::time::Instant::now())
            .map(|t| t.elapsed());
        let mut now = std::collections::HashMap::new();
        for s in &mut p.semaphores {
            let lost = self.metrics.lost_so_far(&s.name);
            if let (Some(dt), Some(before)) = (elapsed, last.1.get(&s.name)) {
                s.losses_per_s = lost.saturating_sub(*before) as f64 / dt.as_secs_f64().max(0.001);
            }
            now.insert(s.name.clone(), lost);
        }
        last.1 = now;
    }

    /// A receiver of the pictures (the current one first, if any); starts the feed if it
    /// was idle.
    pub fn subscribe(self: &Arc<Self>) -> watch::Receiver<Arc<str>> {
        let rx = self.tx.subscribe();
        if !self.running.swap(true, Ordering::SeqCst) {
            tokio::spawn(self.clone().run());
        }
        rx
    }

    async fn run(self: Arc<Self>) {
        loop {
            if self.tx.receiver_count() == 0 {
                self.running.store(false, Ordering::SeqCst);
                // A watcher that came between the count and the store started no task.
                if self.tx.receiver_count() == 0 || self.running.swap(true, Ordering::SeqCst) {
                    return;
                }
            }
            let next = tokio::time::Instant::now() + PERIOD;
            let picture = tokio::select! {
                _ = self.stop.cancelled() => return,
                p = self.picture() => p,
            };
            match serde_json::to_string(&picture) {
                Ok(json) => {
                    self.tx.send_replace(Arc::from(json));
                }
                Err(e) => tracing::warn!(error = %e, "live view: the picture could not be encoded"),
            }
            tokio::select! {
                _ = self.stop.cancelled() => return,
                _ = tokio::time::sleep_until(next) => {}
            }
        }
    }
}
