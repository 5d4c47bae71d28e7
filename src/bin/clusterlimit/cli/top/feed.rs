//! The pictures `top` shows: a task that connects (again and again while the store refuses),
//! then takes one picture per interval. The screen reads only the latest, from a watch
//! channel, so however long the store takes to answer, keys and redraws go on.

use crate::cli::args::TopArgs;
use crate::common::{connect, exit, Failure};
use crate::live::gather::{Gatherer, Viewer};
use crate::live::picture::{Picture, StoreView};
use clusterlimit::{redact, Limiter};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;

/// What the screen has to show.
#[derive(Clone)]
pub enum Feed {
    /// Nothing yet: the first connect is under way.
    Connecting { url: String },
    /// The latest picture and when it arrived (an unreachable store is a picture too).
    Shown { picture: Box<Picture>, at: Instant },
    /// The store side rejected the arguments: the screen ends with this exit code and message.
    Fatal { code: u8, message: String },
}

/// The running task, and the store session it opened (closed when `top` quits).
pub struct FeedTask {
    task: JoinHandle<()>,
    limiter: Arc<Mutex<Option<Limiter>>>,
}

impl FeedTask {
    /// Stops taking pictures; the session to close, if one was opened.
    pub fn stop(self) -> Option<Limiter> {
        self.task.abort();
        crate::common::lock(&self.limiter).take()
    }
}

/// Starts the task.
pub fn start(args: &TopArgs) -> (FeedTask, watch::Receiver<Feed>) {
    let url = redact(&args.store.store);
    let (tx, rx) = watch::channel(Feed::Connecting { url: url.clone() });
    let limiter = Arc::new(Mutex::new(None));
    let task = tokio::spawn(feed(
        Source {
            store: args.store.store.clone(),
            url,
            security: args.store.security(),
            timeouts: args.store.timeouts(),
            interval: args.interval,
        },
        tx,
        limiter.clone(),
    ));
    (FeedTask { task, limiter }, rx)
}

/// Where and how often to look.
struct Source {
    store: String,
    /// Redacted, as shown.
    url: String,
    security: crate::common::StoreSecurity,
    timeouts: crate::common::StoreTimeouts,
    interval: std::time::Duration,
}

async fn feed(src: Source, tx: watch::Sender<Feed>, opened: Arc<Mutex<Option<Limiter>>>) {
    let mut tick = tokio::time::interval(src.interval);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut gatherer: Option<Gatherer> = None;
    loop {
        tick.tick().await;
        let picture = match &gatherer {
            Some(g) => g.picture(None).await,
            None => match connect(
                &src.store,
                Limiter::DEFAULT_SESSION_TTL,
                None,
                &src.security,
                src.timeouts,
            )
            .await
            {
                Ok(limiter) => {
                    *crate::common::lock(&opened) = Some(limiter.clone());
                    let g = Gatherer::new(
                        limiter,
                        Viewer {
                            source: "top".into(),
                            store_url: src.url.clone(),
                            timeout: src.timeouts.request,
                            session_ttl: Limiter::DEFAULT_SESSION_TTL,
                        },
                    );
                    let p = g.picture(None).await;
                    gatherer = Some(g);
                    p
                }
                Err(f) if f.code == exit::USAGE => {
                    let _ = tx.send(fatal(f));
                    return;
                }
                Err(f) => {
                    // The URL is in the header already.
                    let prefix = format!("cannot connect to {}: ", src.url);
                    let why = f.message.strip_prefix(&prefix).unwrap_or(&f.message);
                    unreachable_picture(&src.url, why.to_string())
                }
            },
        };
        let shown = Feed::Shown {
            picture: Box::new(picture),
            at: Instant::now(),
        };
        if tx.send(shown).is_err() {
            return; // the screen is gone
        }
    }
}

fn fatal(f: Failure) -> Feed {
    Feed::Fatal {
        code: f.code,
        message: f.message,
    }
}

/// A picture of a store that could not be connected to: nothing but the reason.
fn unreachable_picture(url: &str, why: String) -> Picture {
    Picture {
        at_unix_ms: crate::live::clock::unix_ms(),
        source: "top".into(),
        store: StoreView {
            url: url.to_string(),
            reachable: false,
            error: Some(why),
            session_ttl_ms: Limiter::DEFAULT_SESSION_TTL.as_millis() as u64,
            ..StoreView::default()
        },
        ..Picture::default()
    }
}
