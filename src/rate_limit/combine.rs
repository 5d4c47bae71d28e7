//! Writes of *different* rate-limit keys that are ready at the same moment share one store
//! request ([`RateStore::write_each`]: on etcd one Txn of nested Txns, each key applying or
//! failing alone), so checks of many keys move at the store's write speed instead of one
//! round trip each.
//!
//! Each key's batch task (`rate_limit/batch.rs`) hands its one write here. A write goes at
//! once when no request is out; otherwise it waits for the next request, which carries every
//! write queued meanwhile (at most [`MAX_PER_REQUEST`], one per key), and goes when the one
//! out is answered, or at once as a second one if [`SECOND_AT`] writes wait. An uncontended check so costs one request as before and waits for nothing; under
//! load, writes pile up exactly while the store is busy, and go together.
//!
//! A store spread over clusters (`RateStore::part_of`) gets a queue and its own requests in
//! flight per cluster, so a slow cluster never holds back the writes of another, and each
//! cluster's requests carry as many writes as one store's would.
//!
//! Cancel-safety: a request is sent by the caller that found a free slot (no task hop when
//! uncontended) or, for writes queued meanwhile, by a task of its own; whoever drops a request
//! (finished or not) hands the queue on. A caller that stops waiting leaves its write to be
//! sent (its outcome unknown to it, as with any dropped store call).

use crate::backend::{lock, Backend, KeyOutcome, KeyWrite};
use crate::error::{Error, Result};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// Requests of combined writes out at once. A second one overlaps the first's round trip (the
/// store's own pipelining), but only once [`SECOND_AT`] writes wait: every request costs the
/// store a fixed price beside its per-key work (etcd 3.4 copies its uncommitted-write buffer
/// for each Txn), so below that, waiting to fill one request moves more keys per second.
pub(crate) const MAX_IN_FLIGHT: usize = 2;
/// Writes waiting that justify a second request while one is out.
pub(crate) const SECOND_AT: usize = MAX_PER_REQUEST / 2;
/// Most writes in one request (etcd: each is one op of a Txn, `--max-txn-ops` 128 by default).
pub(crate) const MAX_PER_REQUEST: usize = 64;

/// One write waiting for a request, and where its outcome goes.
#[derive(Debug)]
struct Queued {
    write: KeyWrite,
    reply: oneshot::Sender<Result<KeyOutcome>>,
}

/// The combining of one Limiter's rate-limit writes: a queue per part of the store.
#[derive(Debug, Default)]
pub(crate) struct Combiner {
    parts: Mutex<HashMap<usize, State>>,
}

#[derive(Debug, Default)]
struct State {
    queue: Vec<Queued>,
    in_flight: usize,
}

/// What sends requests: the backend (kept alive by each request's task) and the runtime to
/// spawn on.
#[derive(Clone)]
pub(crate) struct Sender {
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) runtime: tokio::runtime::Handle,
}

impl Combiner {
    /// Sends `write`, alone or with others, and returns its outcome.
    pub(crate) async fn write(
        self: &Arc<Self>,
        sender: &Sender,
        write: KeyWrite,
    ) -> Result<KeyOutcome> {
        let part = sender
            .backend
            .rate_store()
            .map_or(0, |store| store.part_of(&write.limit, &write.key));
        let (tx, rx) = oneshot::channel();
        let queued = Queued { write, reply: tx };
        let own = {
            let mut parts = lock(&self.parts);
            let s = parts.entry(part).or_default();
            if s.queue.is_empty() && s.in_flight == 0 {
                s.in_flight += 1;
                Some(queued)
            } else {
                s.queue.push(queued);
                None
            }
        };
        if let Some(own) = own {
            // Nothing to combine with: sent from this task, with no hop through another. Only
            // this write is in the request, so dropping this future mid-request (which drops
            // the `Request`, handing the queue on) cancels nobody else's write.
            let request = Request {
                combiner: self.clone(),
                sender: sender.clone(),
                part,
            };
            request.send(vec![own]).await;
        } else {
            self.send_if_free(sender, part);
        }
        rx.await.unwrap_or_else(|_| {
            Err(Error::store(
                "the rate-limit write was dropped before the store answered (runtime shutting down)",
            ))
        })
    }

    /// Starts a request with what `part` has queued if none of its requests is out, or a
    /// second one if [`SECOND_AT`] writes wait.
    fn send_if_free(self: &Arc<Self>, sender: &Sender, part: usize) {
        let batch = {
            let mut parts = lock(&self.parts);
            let Some(s) = parts.get_mut(&part) else {
                return;
            };
            let free =
                s.in_flight == 0 || (s.in_flight < MAX_IN_FLIGHT && s.queue.len() >= SECOND_AT);
            if s.queue.is_empty() || !free {
                return;
            }
            s.in_flight += 1;
            take_batch(&mut s.queue)
        };
        let request = Request {
            combiner: self.clone(),
            sender: sender.clone(),
            part,
        };
        sender.runtime.spawn(request.send(batch));
    }
}

/// Up to [`MAX_PER_REQUEST`] queued writes, oldest first, at most one per (limit, key) (a store
/// takes one write per key in a request; a later one waits for the next).
fn take_batch(queue: &mut Vec<Queued>) -> Vec<Queued> {
    let mut keys = HashSet::new();
    let mut batch = Vec::new();
    let mut rest = Vec::new();
    for q in queue.drain(..) {
        if batch.len() < MAX_PER_REQUEST
            && keys.insert((q.write.limit.clone(), q.write.key.clone()))
        {
            batch.push(q);
        } else {
            rest.push(q);
        }
    }
    *queue = rest;
    batch
}

/// One request in flight; when it ends (or its task is dropped), the next queued writes go.
struct Request {
    combiner: Arc<Combiner>,
    sender: Sender,
    /// The part of the store its writes go to.
    part: usize,
}

impl Request {
    async fn send(self, batch: Vec<Queued>) {
        let (writes, replies): (Vec<KeyWrite>, Vec<_>) =
            batch.into_iter().map(|q| (q.write, q.reply)).unzip();
        let outcomes = match self.sender.backend.rate_store() {
            // One write: the store's plain conditional write (on etcd a flat Txn, cheaper
            // than one nested in another).
            Some(store) if writes.len() == 1 => {
                vec![store.write_keys(&writes).await.and_then(KeyOutcome::of_one)]
            }
            Some(store) => store.write_each(&writes).await,
            None => writes
                .iter()
                .map(|_| Err(Error::invalid("this store does not keep rate limits")))
                .collect(),
        };
        let mut outcomes = outcomes.into_iter();
        for reply in replies {
            let outcome = outcomes
                .next()
                .unwrap_or_else(|| Err(Error::store("the store answered fewer writes than sent")));
            let _ = reply.send(outcome);
        }
    }
}

impl Drop for Request {
    fn drop(&mut self) {
        if let Some(s) = lock(&self.combiner.parts).get_mut(&self.part) {
            s.in_flight = s.in_flight.saturating_sub(1);
        }
        self.combiner.send_if_free(&self.sender, self.part);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(limit: &str, key: &str) -> Queued {
        let (reply, _) = oneshot::channel();
        Queued {
            write: KeyWrite {
                limit: limit.to_string(),
                quota_version: 1,
                key: key.to_string(),
                expected: None,
                value: Vec::new(),
                expires_at: 0,
            },
            reply,
        }
    }

    #[test]
    fn a_request_takes_one_write_per_key_oldest_first_and_at_most_its_share() {
        let mut q = vec![w("a", "1"), w("a", "2"), w("a", "1"), w("b", "1")];
        let batch = take_batch(&mut q);
        let keys: Vec<_> = batch
            .iter()
            .map(|q| (q.write.limit.as_str(), q.write.key.as_str()))
            .collect();
        assert_eq!(keys, [("a", "1"), ("a", "2"), ("b", "1")]);
        assert_eq!(
            q.len(),
            1,
            "the second write of a/1 waits for the next request"
        );
        let mut many: Vec<_> = (0..MAX_PER_REQUEST + 5)
            .map(|i| w("a", &i.to_string()))
            .collect();
        assert_eq!(take_batch(&mut many).len(), MAX_PER_REQUEST);
        assert_eq!(many.len(), 5);
    }
}
