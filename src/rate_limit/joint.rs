//! `check_all` calls waiting for their Limiter's next joint write (`rate_limit/check_all.rs`
//! decides them): calls that come while a joint write is in flight go together in the next
//! one, decided in arrival order, so a hot key that many requests check together with other
//! keys costs one store request per batch of requests, not one each (and no conflicts among
//! this Limiter's own requests).

use super::cell::KeyCell;
use super::options::Asker;
use super::registry::LimitShared;
use crate::backend::lock;
use crate::error::Result;
use crate::rate::Decision;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;
use tokio::time::Instant;

/// One (limit, key) of a call, with the checks of the call on it.
#[derive(Debug)]
pub(crate) struct JointGroup {
    pub(crate) limit: Arc<LimitShared>,
    pub(crate) key: String,
    pub(crate) cell: Arc<KeyCell>,
}

/// One check of a `check_all` call: (group, cost, its class and flow).
pub(crate) type CallCheck = (usize, u64, Asker);

/// One `check_all` call: its groups and its checks, in order.
#[derive(Debug)]
pub(crate) struct JointCall {
    /// The part of the store that keeps every key of the call (`RateStore::part_of`): one
    /// joint write carries calls of one part only.
    pub(crate) part: usize,
    pub(crate) groups: Vec<JointGroup>,
    pub(crate) checks: Vec<CallCheck>,
    pub(crate) arrived: Instant,
    pub(crate) reply: oneshot::Sender<Result<Vec<Decision>>>,
}

impl JointCall {
    /// The distinct (limit, key) pairs and limits this call writes at most.
    fn footprint(&self) -> impl Iterator<Item = (usize, &str)> + '_ {
        self.groups
            .iter()
            .map(|g| (Arc::as_ptr(&g.limit) as usize, g.key.as_str()))
    }
}

#[derive(Debug, Default)]
pub(crate) struct JointQueue {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    pending: Vec<JointCall>,
    driving: bool,
}

impl JointQueue {
    /// Queues a call; true if no joint task runs (the caller starts one).
    pub(crate) fn push(&self, call: JointCall) -> bool {
        let mut s = lock(&self.state);
        s.pending.push(call);
        !std::mem::replace(&mut s.driving, true)
    }

    /// The next batch: the oldest call, then the following ones while the batch's distinct
    /// keys plus limits stay within `max_ops` (one store request must carry them all). Calls
    /// whose caller is gone are left out. `None` (and the task ends) when none waits.
    pub(crate) fn take(&self, max_ops: usize) -> Option<Vec<JointCall>> {
        let mut s = lock(&self.state);
        s.pending.retain(|c| !c.reply.is_closed());
        if s.pending.is_empty() {
            s.driving = false;
            return None;
        }
        let mut keys = HashSet::new();
        let mut limits = HashSet::new();
        let mut batch: Vec<JointCall> = Vec::new();
        let mut rest = Vec::new();
        let mut full = false;
        for call in std::mem::take(&mut s.pending) {
            // Calls of other parts share no key with this batch: they wait for a later one
            // without holding back the calls of this part.
            if batch.first().is_some_and(|b| b.part != call.part) {
                rest.push(call);
                continue;
            }
            let new_keys: Vec<(usize, String)> = call
                .footprint()
                .filter(|(l, k)| !keys.contains(&(*l, k.to_string())))
                .map(|(l, k)| (l, k.to_string()))
                .collect();
            let new_limits: HashSet<usize> = call
                .footprint()
                .map(|(l, _)| l)
                .filter(|l| !limits.contains(l))
                .collect();
            let fits = keys.len() + new_keys.len() + limits.len() + new_limits.len() <= max_ops;
            if batch.is_empty() || (fits && !full) {
                keys.extend(new_keys);
                limits.extend(new_limits);
                batch.push(call);
            } else {
                // Later calls of this part wait too, so they are decided in arrival order.
                full = true;
                rest.push(call);
            }
        }
        s.pending = rest;
        Some(batch)
    }

    /// The joint task ended without finishing (its runtime shut down): every queued call gets
    /// an error and the next call starts a new task.
    pub(crate) fn abandon(&self) {
        let pending = {
            let mut s = lock(&self.state);
            s.driving = false;
            std::mem::take(&mut s.pending)
        };
        for c in pending {
            let _ = c.reply.send(Err(crate::error::Error::store(
                "the rate-limit joint task ended before deciding",
            )));
        }
    }
}
