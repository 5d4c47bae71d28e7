//! Keeps a Redis session alive: about every TTL/3, one script call per semaphore the session
//! is in pushes its deadline there forward, checks its entries are all still there, and
//! removes strays of it (entries it released that a failover brought back). The
//! local deadline (when `lost()` fires at the latest) is the send time of the last round
//! Redis acknowledged in full plus the TTL: never later than Redis's own deadlines, which
//! count from when it applied the round. A round is never abandoned for being slow (a busy
//! Redis is not a down one): after TTL/3 without an answer a second goes out beside it, and
//! whichever Redis acknowledges first extends the deadline.

use super::permits::Permits;
use super::session::RedisSession;
use crate::backend::outage::Outage;
use crate::error::Result;
use crate::stats::RequestKind;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::task::JoinSet;
use tokio::time::{timeout, Instant};

/// Pause between keepalive rounds once one has failed.
const RETRY_PAUSE: Duration = Duration::from_millis(200);
/// Keepalive rounds in flight at once: the one a busy Redis is slow to answer, and one more.
const MAX_ROUNDS: usize = 2;

impl Permits {
    /// The live session, or a new one (with its keeper started).
    pub(super) async fn live_session(self: &Arc<Self>) -> Result<Arc<RedisSession>> {
        self.session
            .live_or_start(
                &self.stop,
                |_| {},
                || async {
                    let session = Arc::new(RedisSession::new(self.ttl));
                    tokio::spawn(run(Arc::downgrade(self), session.clone()));
                    Ok(session)
                },
            )
            .await
    }
}

async fn run(permits: Weak<Permits>, session: Arc<RedisSession>) {
    let interval = session.ttl / 3;
    // Each round: its send time, and its verdict (a failure in words).
    let mut rounds: JoinSet<(Instant, std::result::Result<Option<String>, String>)> =
        JoinSet::new();
    let mut next_round = Instant::now() + interval;
    let mut outage = Outage::default();
    loop {
        tokio::select! {
            biased;
            _ = session.stop.cancelled() => return,
            _ = session.lost.lost() => {
                // Marked lost by whoever noticed (and reported) it: nothing left to do.
                if !session.lost.deadline().passed() {
                    return;
                }
                break;
            }
            Some(done) = rounds.join_next(), if !rounds.is_empty() => {
                let Ok((sent, verdict)) = done else { continue };
                let Some(p) = permits.upgrade() else { return };
                let store = p.link.shown().to_string();
                match verdict {
                    Ok(None) => {
                        session.lost.deadline().extend(sent + session.ttl);
                        next_round = next_round.min(sent + interval);
                        outage.ok("Redis session keepalive");
                    }
                    Ok(Some(why)) => {
                        tracing::warn!(%store, "{store}: {why}; permits of this session are lost");
                        session.lost.fire();
                        p.drop_session(&session).await;
                        return;
                    }
                    Err(e) => {
                        outage.failed("Redis session keepalive", &store, &e);
                        next_round = next_round.min(Instant::now() + RETRY_PAUSE);
                    }
                }
            }
            _ = tokio::time::sleep_until(next_round) => {
                // A round still unanswered is not given up: a busy Redis answers late, and a
                // late acknowledgement still extends the deadline from its send time. One more
                // goes out beside it (a new connection may answer where the old one hangs),
                // never more than MAX_ROUNDS at once.
                next_round = Instant::now() + interval;
                if rounds.len() < MAX_ROUNDS {
                    let Some(p) = permits.upgrade() else { return };
                    let session = session.clone();
                    rounds.spawn(async move {
                        let sent = Instant::now();
                        // An answer later than the TTL extends nothing.
                        let verdict = match timeout(session.ttl, round(&p, &session)).await {
                            Ok(verdict) => verdict.map_err(|e| e.to_string()),
                            Err(_) => Err("no answer in time".to_string()),
                        };
                        (sent, verdict)
                    });
                }
            }
        }
    }
    // The deadline passed without an acknowledged round: the session is dead to us. Its
    // entries go now, in case Redis still keeps them.
    rounds.abort_all();
    let Some(p) = permits.upgrade() else { return };
    let store = p.link.shown();
    tracing::warn!(%store, "{store} acknowledged no session keepalive within the session TTL; permits of this session are lost (dropping its entries in case they live on)");
    session.lost.fire();
    p.drop_session(&session).await;
}

/// One keepalive round: `Some(reason)` when the session can no longer be trusted.
async fn round(p: &Permits, session: &RedisSession) -> Result<Option<String>> {
    let ttl_ms = session.ttl.as_millis().to_string();
    let calls = session.semaphores().into_iter().map(|s| {
        let ttl_ms = ttl_ms.clone();
        async move {
            let sem = s.name;
            let mut args = vec![session.id.clone(), ttl_ms, s.max_token.to_string()];
            let expected = s.ids.len();
            args.extend(s.ids);
            let keys = p.keys(&sem);
            let missing: Vec<String> = p
                .call(RequestKind::Lease, &p.scripts.touch, &keys, &args)
                .await?;
            if missing.first().is_some_and(|m| m == "unknown") {
                return Ok(Some(format!(
                    "semaphore {sem:?} no longer knows this session (it expired there, was ended, or a failover lost it)"
                )));
            }
            // An entry released since the round started is missing by our own doing.
            let lost = missing.iter().filter(|id| session.holds(&sem, id)).count();
            Ok((lost > 0).then(|| format!(
                "{lost} of this session's {expected} entries in semaphore {sem:?} vanished (removed behind its back, or lost in a failover)"
            )))
        }
    });
    let found: Vec<Result<Option<String>>> = futures::future::join_all(calls).await;
    // A loss anywhere outweighs a failed call elsewhere.
    let mut failed = None;
    for f in found {
        match f {
            Ok(Some(why)) => return Ok(Some(why)),
            Ok(None) => {}
            Err(e) => failed = Some(e),
        }
    }
    failed.map_or(Ok(None), Err)
}
