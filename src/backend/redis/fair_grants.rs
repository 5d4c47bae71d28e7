//! Granting on a fair semaphore in Redis: one read of the semaphore (its whole queue and fair
//! record), the fair rule (`crate::fair`), and the marks of what it grants written by one
//! script that compares the fair record's version and the capacity with the read's
//! (`lua/sem_grant.lua`). A conflict means someone else granted (or resized) since: read and
//! decide again, within one call's bound. Who grants: an enqueue for its own entry, and a
//! Limiter whose watch shows the rule granting one of its waiters (after a release, a holder's
//! expiry or a resize), so a release wakes only the Limiter it grants.

use super::fair_record::LOST;
use super::permits::Permits;
use super::sem_reply::SemState;
use crate::backend::lock;
use crate::backend::retry::Attempts;
use crate::error::{Error, Result};
use crate::stats::RequestKind;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// What a grant script call came to (`lua/sem_grant.lua`).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Grant {
    NoSemaphore,
    /// No fair record (any more).
    Plain,
    /// Another grant or a capacity change came first.
    Conflict,
    /// The marks would exceed the capacity (the script's own check): nothing written.
    Over(String),
    /// Written: the tokens marked now.
    Done(HashSet<u64>),
}

impl Grant {
    fn parse(items: &[String]) -> std::result::Result<Grant, String> {
        match items {
            [tag] if tag == "nosem" => Ok(Grant::NoSemaphore),
            [tag] if tag == "plain" => Ok(Grant::Plain),
            [tag] if tag == "conflict" => Ok(Grant::Conflict),
            [tag, used] if tag == "over" => Ok(Grant::Over(used.clone())),
            [tag, marks @ ..] if tag == "ok" => marks
                .iter()
                .map(|t| t.parse::<u64>())
                .collect::<std::result::Result<_, _>>()
                .map(Grant::Done)
                .map_err(|_| format!("a grant answer with unreadable marks ({marks:?})")),
            _ => Err(format!("a grant answer of {} items", items.len())),
        }
    }
}

/// Grants what the fair rule grants now on `name`, starting from `first` (a read already made)
/// or a fresh read. Returns the marks once nothing more is to be granted (`None`: a plain
/// semaphore).
pub(super) async fn grant(
    permits: &Permits,
    name: &str,
    mut first: Option<SemState>,
) -> Result<Option<HashSet<u64>>> {
    let mut attempts = Attempts::new(permits.link.request_timeout());
    loop {
        let state = match first.take() {
            Some(state) => state,
            None => permits
                .read(name, None)
                .await?
                .ok_or_else(|| Error::NotFound(name.to_string()))?,
        };
        let Some(fair) = &state.fair else {
            return Ok(None);
        };
        let (grants, vtimes) = state.next_grants_and_vtimes();
        if grants.is_empty() {
            return Ok(Some(fair.marks.clone()));
        }
        let vtimes = serde_json::to_string(&vtimes).unwrap_or_default();
        let mut args = vec![fair.ver.clone(), state.capacity.to_string(), vtimes];
        args.extend(grants.iter().map(u64::to_string));
        let keys = permits.keys(name);
        let items: Vec<String> = permits
            .call(RequestKind::Txn, &permits.scripts.grant, &keys, &args)
            .await?;
        match Grant::parse(&items).map_err(|e| permits.unreadable(name, e))? {
            Grant::Done(marks) => return Ok(Some(marks)),
            Grant::NoSemaphore => return Err(Error::NotFound(name.to_string())),
            Grant::Plain => return Err(permits.unreadable(name, LOST.to_string())),
            Grant::Over(used) => {
                return Err(Error::store(format!(
                    "{}: granting on fair semaphore {name:?} would have marked {used} permits \
                     of {} (the grant was refused, nothing changed); report this, with the \
                     semaphore's status",
                    permits.link.shown(),
                    state.capacity
                )))
            }
            Grant::Conflict => {}
        }
        // Someone granted (or resized) from the same read first: decide again from theirs.
        if !attempts.again(false).await {
            return Err(Error::store(format!(
                "grants on fair semaphore {name:?} kept being written by other Limiters; \
                 the waiters stay queued and are granted at the next change"
            )));
        }
    }
}

/// The background grant of one fair semaphore's watch: kicked when a read shows the rule
/// granting one of our waiters; one pass at a time, and one more if kicked meanwhile. A pass
/// decides from the read that kicked it (no read of its own; a stale one only costs a
/// conflict, then a fresh read).
pub(super) struct Granter {
    permits: Weak<Permits>,
    name: String,
    running: AtomicBool,
    again: AtomicBool,
    /// The newest read that kicked a pass not yet run.
    read: Mutex<Option<SemState>>,
}

impl Granter {
    pub(super) fn new(permits: Weak<Permits>, name: &str) -> Arc<Granter> {
        Arc::new(Granter {
            permits,
            name: name.to_string(),
            running: AtomicBool::new(false),
            again: AtomicBool::new(false),
            read: Mutex::new(None),
        })
    }

    /// Starts a grant pass from `read`, or asks the running one for one more.
    pub(super) fn kick(self: &Arc<Self>, read: SemState) {
        *lock(&self.read) = Some(read);
        self.again.store(true, Ordering::SeqCst);
        if self.running.swap(true, Ordering::SeqCst) {
            return;
        }
        let me = self.clone();
        tokio::spawn(async move {
            loop {
                while me.again.swap(false, Ordering::SeqCst) {
                    let Some(permits) = me.permits.upgrade().filter(|p| !p.stop.is_stopped())
                    else {
                        break;
                    };
                    let read = lock(&me.read).take();
                    if let Err(e) = grant(&permits, &me.name, read).await {
                        tracing::warn!(semaphore = %me.name, "granting on a fair semaphore failed: {e}; its waiters are granted at the next change of it");
                    }
                }
                me.running.store(false, Ordering::SeqCst);
                // A kick between the last check and now found us running: take it.
                if !me.again.load(Ordering::SeqCst) || me.running.swap(true, Ordering::SeqCst) {
                    return;
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grant_answers_read() {
        let s = |items: &[&str]| items.iter().map(|i| i.to_string()).collect::<Vec<_>>();
        assert_eq!(
            Grant::parse(&s(&["ok", "10", "30"])),
            Ok(Grant::Done(HashSet::from([10, 30])))
        );
        assert_eq!(Grant::parse(&s(&["ok"])), Ok(Grant::Done(HashSet::new())));
        assert_eq!(Grant::parse(&s(&["conflict"])), Ok(Grant::Conflict));
        assert_eq!(Grant::parse(&s(&["plain"])), Ok(Grant::Plain));
        assert_eq!(
            Grant::parse(&s(&["over", "3"])),
            Ok(Grant::Over("3".into()))
        );
        assert!(Grant::parse(&s(&["ok", "x"])).is_err());
        assert!(Grant::parse(&s(&[])).is_err());
    }
}
