//! Permits (semaphores) on Redis: what a Limiter's Redis backend keeps for them, and how a
//! permit script is sent. The queue's meaning is `crate::queue`'s; Redis only stores it, one
//! script call per step (`lua/sem_*.lua`, keys of `sem_keys.rs`). The steps live beside this
//! file: `semaphore.rs` (open, status, capacity, list), `entries.rs` (enqueue, wait, remove),
//! the session and its keeper (`session.rs`, `keeper.rs`), waiters' wakeups (`notify.rs`,
//! `watch.rs`). Imports run one way: those files use this one, never the reverse.

use super::link::Link;
use super::notify::Notifier;
use super::sem_keys::SemKeys;
use super::sem_scripts::SemScripts;
use super::session::RedisSession;
use crate::backend::{SessionSlot, Stop};
use crate::error::{Error, Result};
use crate::stats::RequestKind;
use redis::{FromRedisValue, Script};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The permit side of a Redis backend.
#[derive(Debug)]
pub(super) struct Permits {
    pub(super) link: Arc<Link>,
    pub(super) prefix: String,
    pub(super) scripts: SemScripts,
    pub(super) session: SessionSlot<RedisSession>,
    pub(super) notifier: Arc<Notifier>,
    pub(super) stop: Stop,
    pub(super) ttl: Duration,
}

impl Permits {
    pub(super) fn new(link: Arc<Link>, prefix: &str, ttl: Duration) -> Arc<Permits> {
        let stop = Stop::default();
        Arc::new(Permits {
            notifier: Notifier::new(&link, stop.child_token()),
            link,
            prefix: prefix.to_string(),
            scripts: SemScripts::new(),
            session: SessionSlot::default(),
            stop,
            ttl,
        })
    }

    pub(super) fn keys(&self, name: &str) -> SemKeys {
        SemKeys::new(&self.prefix, name)
    }

    /// Sends `script` on semaphore `sem`'s keys with `args` (after the channel), within the
    /// request timeout. With `wait_replicas` set, every write (all but reads) waits for that
    /// many replicas to have it, and fails if they do not in time: what a failover can lose
    /// is then only what no call reported done.
    pub(super) async fn call<T: FromRedisValue + Send>(
        &self,
        kind: RequestKind,
        script: &Script,
        sem: &SemKeys,
        args: &[String],
    ) -> Result<T> {
        let deadline = Instant::now() + self.link.request_timeout();
        let wait = match kind {
            RequestKind::Range => 0,
            _ => self.link.wait_replicas(),
        };
        let (value, acked): (T, i64) = self
            .link
            .run(kind, deadline, |mut c| {
                let mut inv = script.prepare_invoke();
                for k in &sem.keys {
                    inv.key(k);
                }
                inv.arg(&sem.channel);
                for a in args {
                    inv.arg(a);
                }
                async move {
                    let value = inv.invoke_async(&mut c).await?;
                    Ok((value, Link::acked(&mut c, wait, deadline).await?))
                }
            })
            .await?;
        if acked < i64::from(wait) {
            return Err(Error::store(format!(
                "{}: the change is on the primary but only {acked} of {wait} replicas acknowledged it in time; it does not count (a failover could lose it)",
                self.link.shown()
            )));
        }
        Ok(value)
    }

    /// A reply of semaphore `name` that did not read, as an error naming both.
    pub(super) fn unreadable(&self, name: &str, what: String) -> Error {
        if what == super::fair_record::LOST {
            return Error::store(format!(
                "{}: semaphore {name:?} was created fair but its fair record (the key ending in \
                 :fair) is gone, so who holds cannot be known; nothing is granted there until \
                 its keys are deleted and it is created again",
                self.link.shown()
            ));
        }
        Error::store(format!(
            "{}: semaphore {name:?} holds something clusterlimit did not write: {what}",
            self.link.shown()
        ))
    }
}
