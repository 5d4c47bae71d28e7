//! One etcd lease per Limiter, kept alive in the background about every TTL/3.
//!
//! The lease may be gone from the moment `send time of the last acknowledged keepalive + TTL`
//! passes, so that instant is the session's [`SessionDeadline`]: permits report lost then at the
//! latest, before etcd could expire the lease and give their permits away. The lease is also
//! reported lost when etcd answers a keepalive with TTL 0 or "lease not found" (revoked or
//! expired behind our back). A lost session is never revived: the backend grants a new lease
//! for later calls.
//!
//! The keepalive stream lives on the member [`Endpoints`] picks; a round that fails or times
//! out marks that member failed, and the next round opens the stream on the next member. That
//! is how a hung member is left well within the TTL, without HTTP/2 pings.

use super::describe::failure;
use super::endpoints::Endpoints;
use crate::backend::outage::Outage;
use crate::lost::{LostSignal, SessionDeadline};
use crate::stats::{RequestCounters, RequestKind};
use etcd_client::{LeaseGrantResponse, LeaseKeepAliveStream, LeaseKeeper};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::{timeout, Instant};
use tokio_util::sync::CancellationToken;

/// Pause between keepalive retries once one has failed.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

#[derive(Debug)]
pub(super) struct Session {
    pub lease: i64,
    pub lost: LostSignal,
    stop: CancellationToken,
}

impl Session {
    /// Starts the keeper of a lease etcd granted in answer to a request sent at `sent`.
    pub(super) fn start(
        endpoints: Arc<Endpoints>,
        sent: Instant,
        granted: &LeaseGrantResponse,
        ttl: Duration,
        request_timeout: Duration,
        stats: Arc<RequestCounters>,
    ) -> Arc<Session> {
        let granted_ttl = Duration::from_secs(granted.ttl().max(1) as u64);
        let session = Arc::new(Session {
            lease: granted.id(),
            lost: LostSignal::new(SessionDeadline::at(sent + granted_ttl)),
            stop: CancellationToken::new(),
        });
        let keeper = Keeper {
            endpoints,
            session: session.clone(),
            interval: ttl.min(granted_ttl) / 3,
            lease_ttl_secs: granted_ttl.as_secs() as i64,
            request_timeout,
            stats,
        };
        tokio::spawn(keeper.run());
        session
    }

    /// The TTL to ask etcd for: whole seconds, rounded up.
    pub(super) fn ttl_secs(ttl: Duration) -> i64 {
        (ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0)) as i64
    }

    /// Stops the keeper (the lease then expires unless revoked).
    pub(super) fn stop(&self) {
        self.stop.cancel();
    }
}

impl crate::backend::StoreSession for Session {
    fn lost(&self) -> &LostSignal {
        &self.lost
    }

    /// The keeper stops first: from then on nothing keeps the lease alive, so etcd expires it
    /// within the TTL even if no revoke ever arrives.
    fn end_locally(&self) {
        self.stop();
        self.lost.fire();
    }
}

/// An open keepalive stream and the member it is on.
type Stream = (usize, LeaseKeeper, LeaseKeepAliveStream);

struct Keeper {
    endpoints: Arc<Endpoints>,
    session: Arc<Session>,
    interval: Duration,
    lease_ttl_secs: i64,
    request_timeout: Duration,
    stats: Arc<RequestCounters>,
}

/// Why the keeper woke up.
enum Wake {
    /// Time for the next round.
    Due,
    /// Stopped, or the session was marked lost by whoever noticed (and reported) it: nothing
    /// left to do.
    Done,
    /// The deadline passed without an acknowledged keepalive.
    Expired,
}

/// The keepalive stream and where the rounds went.
#[derive(Default)]
struct Rounds {
    stream: Option<Stream>,
    /// The member the current round went to.
    member: usize,
    outage: Outage,
}

impl Keeper {
    async fn run(self) {
        let mut rounds = Rounds::default();
        let mut pause = self.interval;
        loop {
            match self.wait(pause).await {
                Wake::Due => {}
                Wake::Done => return,
                Wake::Expired => break,
            }
            match self.round(&mut rounds).await {
                Some(next) => pause = next,
                None => return,
            }
        }
        self.expired(rounds.member).await;
    }

    /// Sleeps `pause`, unless the session is stopped or lost first.
    async fn wait(&self, pause: Duration) -> Wake {
        tokio::select! {
            // Stop first: close() both stops the keeper and marks the session lost.
            biased;
            _ = self.session.stop.cancelled() => Wake::Done,
            _ = self.session.lost.lost() => {
                if self.session.lost.deadline().passed() {
                    Wake::Expired
                } else {
                    Wake::Done
                }
            }
            _ = tokio::time::sleep(pause) => Wake::Due,
        }
    }

    /// One keepalive round: the deadline extended by an acknowledged one, the stream moved to
    /// the next member after a failure. Returns the pause before the next round, or `None`
    /// once etcd said the lease is gone (the session is then lost).
    async fn round(&self, r: &mut Rounds) -> Option<Duration> {
        let lease = self.session.lease;
        let sent = Instant::now();
        // Each round is bounded: a hung server must not stall the keeper past the deadline.
        let round = timeout(
            self.request_timeout.min(self.interval.max(RETRY_PAUSE)),
            self.keep_alive_once(&mut r.stream, &mut r.member),
        )
        .await;
        let why = match round {
            Ok(Ok(ttl)) if ttl > 0 => {
                self.session
                    .lost
                    .deadline()
                    .extend(sent + Duration::from_secs(ttl as u64));
                r.outage.ok("etcd lease keepalive");
                return Some(self.interval);
            }
            Ok(Ok(_)) => {
                let member = self.endpoints.url(r.member);
                tracing::warn!(
                    lease,
                    %member,
                    "etcd at {member} says the session's lease expired or was revoked; permits of this session are lost"
                );
                self.session.lost.fire();
                return None;
            }
            Ok(Err(e)) if is_lease_not_found(&e) => {
                let member = self.endpoints.url(r.member);
                tracing::warn!(lease, %member, "etcd at {member} does not know the session's lease ({}); permits of this session are lost", failure(&e));
                self.session.lost.fire();
                return None;
            }
            Ok(Err(e)) => failure(&e),
            Err(_) => "no answer in time".to_string(),
        };
        let member = self.endpoints.url(r.member);
        r.outage.failed("etcd lease keepalive", member, &why);
        r.stream = None;
        self.endpoints.failed(r.member);
        Some(RETRY_PAUSE)
    }

    /// The deadline passed without an acknowledged keepalive: the session is dead to us.
    /// Revoke in case the lease is in fact alive, so its permits come back now.
    async fn expired(&self, member: usize) {
        let lease = self.session.lease;
        let member = self.endpoints.url(member);
        tracing::warn!(
            lease,
            %member,
            "etcd at {member} acknowledged no lease keepalive within the session TTL; permits of this session are lost (revoking the lease in case it lives)"
        );
        self.session.lost.fire();
        self.stats.count(RequestKind::Lease);
        let (_, client) = self.endpoints.pick();
        let _ = timeout(self.request_timeout, client.lease_client().revoke(lease)).await;
    }

    /// Sends one keepalive and returns the TTL etcd answered (0: the lease is gone); `member`
    /// is set to the member it went to.
    async fn keep_alive_once(
        &self,
        stream: &mut Option<Stream>,
        member: &mut usize,
    ) -> std::result::Result<i64, etcd_client::Error> {
        self.stats.count(RequestKind::Lease);
        if let Some((on, keeper, responses)) = stream.as_mut() {
            *member = *on;
            keeper.keep_alive().await?;
            return match responses.message().await? {
                Some(resp) => Ok(resp.ttl()),
                None => Err(etcd_client::Error::LeaseKeepAliveError(
                    "keepalive stream closed".into(),
                )),
            };
        }
        // Opening the stream sends the first keepalive and checks its answer.
        let (on, client) = self.endpoints.pick();
        *member = on;
        let (keeper, responses) = client.lease_client().keep_alive(self.session.lease).await?;
        *stream = Some((on, keeper, responses));
        // The opening answer's TTL is checked (> 0) but not exposed: it is the granted TTL.
        Ok(self.lease_ttl_secs)
    }
}

/// Whether etcd says the lease no longer exists (expired or revoked).
pub(super) fn is_lease_not_found(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::LeaseKeepAliveError(m) => m.contains("not found"),
        etcd_client::Error::GRpcStatus(s) => s.message().contains("lease not found"),
        _ => false,
    }
}
