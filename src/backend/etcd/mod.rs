//! `etcd://` backend: permits are keys bound to the Limiter's lease, ordered by create revision.
//!
//! * Acquire: **one** Txn — `if create_revision(key) == 0 then put(key, lease) else read key`;
//!   retrying the same key after a lost reply is idempotent. Once this Limiter has a live view
//!   of the semaphore (`view.rs`: a watch, set up by its second acquire or first wait there),
//!   the grant is decided from the view as soon as it has applied the put's revision: the Txn
//!   reads nothing, so its cost grows neither with the queue nor with the semaphore's
//!   tombstones. Without a view (the first acquire), or if the view lags, the semaphore is
//!   read: in the same Txn, or by one range read after it.
//! * Release: one delete.
//! * Waiting: one watch per semaphore per Limiter feeds a local view (`view.rs`); a release costs
//!   one delete plus one watch event per watching process, never a re-read per waiter.
//! * Fencing token: the entry key's create revision.
//! * Rate limits (`rate.rs`): one Txn per compare-and-swap write, whose else branch returns
//!   the current state; idle keys are deleted by their writer once expired, many per Txn
//!   (`sweeper.rs`), and those of dead writers by a slow paced scan (`scan.rs`).

mod board;
mod describe;
mod endpoints;
mod keys;
mod rate;
mod scan;
mod security;
mod session;
mod strays;
mod sweeper;
mod tls_probe;
mod view;

use super::retry::Attempts;
use super::{lock, Backend, Enqueued, EntryRequest, SessionSlot, Stop};
use crate::backend::capacity::CapValue;
use crate::backend::waiters::{self, Outcome};
use crate::error::{Error, Result};
use crate::lost::LostSignal;
use crate::queue;
use crate::stats::{RequestCounters, RequestKind, RequestStats};
use crate::status::{unix_ms_now, Holder, Status};
use async_trait::async_trait;
use endpoints::Endpoints;
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, GetOptions, PutOptions, SortOrder, SortTarget, Txn,
    TxnOp, TxnOpResponse,
};
use keys::{queue_of, EntryValue, Keys};
use security::Security;
pub use security::{CACERT_ENV, CERT_ENV, KEY_ENV, PASSWORD_ENV};
use session::Session;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use strays::Strays;
use view::{Seen, SemWatch, View, WatchConfig};

/// Settings of the etcd backend. Holds no secret: the password is read from its file (or
/// [`PASSWORD_ENV`]) at connect, so `{:?}` of this shows paths only.
#[derive(Debug, Clone)]
pub struct EtcdConfig {
    /// `http://host:port` endpoints.
    pub endpoints: Vec<String>,
    /// Key prefix (no slashes at the ends).
    pub prefix: String,
    /// Lease TTL (rounded up to whole seconds).
    pub session_ttl: Duration,
    /// Bound on each request.
    pub request_timeout: Duration,
    /// TLS settings; `None` for plain text. A file not given falls back to etcdctl's
    /// [`CACERT_ENV`], [`CERT_ENV`], [`KEY_ENV`]; no CA at all means the system's roots.
    pub tls: Option<crate::TlsFiles>,
    /// User authentication, if any (token refreshed when etcd expires it).
    pub user: Option<crate::EtcdUser>,
}

/// The `etcd://` backend: one client, one lease, one watch per contended semaphore.
pub struct EtcdBackend {
    endpoints: Arc<Endpoints>,
    keys: Keys,
    config: EtcdConfig,
    /// How the connection is secured, to name the cause of a refusal.
    security: Security,
    stats: Arc<RequestCounters>,
    session: SessionSlot<Session>,
    /// Entries of this Limiter (key → loss signal), so a key deleted behind our back fires
    /// `lost()` and `close()` can mark every permit lost.
    /// (Entries held or in flight, so a key deleted behind our back fires `lost()`, `close()`
    /// can mark every permit lost, and an entry nobody owns is found: see `strays.rs`.)
    strays: Strays,
    watches: Mutex<HashMap<String, Arc<SemWatch>>>,
    /// Semaphores enqueued on through a read: the next enqueue on one starts its view.
    enqueued: Mutex<HashSet<String>>,
    /// Set by close/shutdown: stops every background task and retry of this backend.
    stop: Stop,
    /// Deletes the rate-limit keys we wrote once expired (`sweeper.rs`, `scan.rs`).
    sweeper: sweeper::Sweeper,
}

impl std::fmt::Debug for EtcdBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdBackend")
            .field("config", &self.config)
            .field("stopped", &self.stop.is_stopped())
            .finish_non_exhaustive()
    }
}

/// Errors after which the same idempotent request may be sent again (refusals by TLS,
/// authentication or permissions are caught before this by [`Security::refusal`]).
fn is_transient(e: &etcd_client::Error) -> bool {
    use tonic::Code;
    match e {
        etcd_client::Error::GRpcStatus(s) => matches!(
            s.code(),
            Code::Unavailable
                | Code::DeadlineExceeded
                | Code::Unknown
                | Code::Cancelled
                | Code::Aborted
                | Code::Internal
        ),
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
        _ => false,
    }
}

/// Upper bound on one attempt of a request whose whole call may take `request_timeout`.
fn attempt_timeout(request_timeout: Duration) -> Duration {
    (request_timeout / 3)
        .max(Duration::from_millis(500))
        .min(request_timeout)
}

/// Bound on a call's first attempts. A request that reached a follower just as the leader
/// died is forwarded to the dead leader and never answered, and so is one sent to the other
/// follower until it, too, notices (etcd's randomized election timeout, up to 2× the
/// configured one); the new leader is up a few hundred ms after the kill, and this bound
/// decides how soon after that we ask again. It is ~100× a normal request's latency, and at
/// least [`LATENCY_FACTOR`] × the latency seen lately (a slow link is not a dead member). After
/// [`SHORT_ATTEMPTS`] attempts that timed out, each further one doubles it up to
/// [`attempt_timeout`], so a request that is only slow (every retried request is idempotent)
/// gets the time it needs.
const FIRST_ATTEMPT: Duration = Duration::from_millis(200);
const LATENCY_FACTOR: u32 = 4;
/// Multiple of the slowest authentication seen that an attempt allows (see
/// `Endpoints::auth_time`): an authenticating client's first attempts are that much longer.
const AUTH_FACTOR: u32 = 2;
const SHORT_ATTEMPTS: u32 = 3;
// Three short attempts fit in one call's deadline with the default request timeout.
const _: () = assert!(
    FIRST_ATTEMPT.as_millis() * (SHORT_ATTEMPTS as u128)
        < crate::timing::DEFAULT_REQUEST_TIMEOUT.as_millis()
);

/// Least time an enqueue waits for the view to show its put (see
/// `EtcdBackend::view_lag_bound`): a watch event follows the put's reply within a round trip,
/// so past this the watch lags or hangs, and a read costs less than waiting on.
const VIEW_LAG_MIN: Duration = Duration::from_millis(100);

/// How long an entry nobody owns is left alone before it is removed (see `strays.rs`).
const STRAY_GRACE: Duration = Duration::from_millis(200);

/// When a call's attempts stop early, besides the call's deadline (see [`Attempts`]).
#[derive(Debug, Clone, Copy)]
enum Until<'a> {
    /// Only the deadline, or the backend's stop.
    Deadline,
    /// Also once this session is lost: a write bound to its lease is pointless then.
    SessionLive(&'a LostSignal),
    /// The close itself: goes on after the backend has stopped.
    Closing,
}

impl EtcdBackend {
    /// The sorted names of the keys under `prefix` (one keys-only range): semaphores under
    /// `names/`, rate limits under `rq/`.
    pub(super) async fn names_under(&self, prefix: String) -> Result<Vec<String>> {
        let resp = self
            .retry(RequestKind::Range, |mut c| {
                let p = prefix.clone();
                async move {
                    c.get(p, Some(GetOptions::new().with_prefix().with_keys_only()))
                        .await
                }
            })
            .await?;
        let mut names: Vec<String> = resp
            .kvs()
            .iter()
            .filter_map(|kv| kv.key_str().ok())
            .filter_map(|k| k.strip_prefix(prefix.as_str()))
            .map(str::to_string)
            .collect();
        names.sort();
        Ok(names)
    }

    /// Connects and grants the session lease (fails fast if no member answers).
    ///
    /// TLS files and the password are read first: a missing, unreadable or garbled one is an
    /// `InvalidArgument` naming it, before any network traffic. A refusal by etcd (untrusted or
    /// rejected certificate, wrong password, no permission on the prefix) is a `Store` error
    /// naming the cause, returned without retrying.
    pub async fn connect(config: EtcdConfig) -> Result<EtcdBackend> {
        // No HTTP/2 pings (see endpoints.rs): a hung member is found by the bounded attempts,
        // keepalive rounds and watch progress checks, which then move on to the next member.
        let opts = ConnectOptions::new()
            .with_timeout(attempt_timeout(config.request_timeout))
            .with_connect_timeout(attempt_timeout(config.request_timeout));
        let secured = security::secure(
            opts,
            config.tls.as_ref(),
            config.user.as_ref(),
            &config.prefix,
        )?;
        let security = secured.security;
        // TLS given by the builder for an etcd:// URL: the same members, over TLS.
        let urls: Vec<String> = config
            .endpoints
            .iter()
            .map(|u| match u.strip_prefix("http://") {
                Some(rest) if security.tls => format!("https://{rest}"),
                _ => u.clone(),
            })
            .collect();
        let addrs: Vec<String> = urls
            .iter()
            .map(|u| super::reach::host_port(u).to_string())
            .collect();
        super::reach::any_reachable("etcd", &addrs).await?;
        let deadline = tokio::time::Instant::now() + config.request_timeout;
        let connecting = Endpoints::connect(
            &urls,
            &secured.options,
            security.user.is_some(),
            deadline,
            |e| security.refusal(e).is_some(),
        );
        // Each authentication is bounded by the options' timeouts; this is a safety net.
        let safety = config.request_timeout + attempt_timeout(config.request_timeout);
        let connected = tokio::time::timeout(safety, connecting)
            .await
            .map_err(|_| Error::store("timed out connecting to etcd"))?;
        let endpoints = match connected {
            Ok(endpoints) => endpoints,
            Err(e) => return Err(connect_failure(&security, &urls, e).await),
        };
        let stop = Stop::default();
        let keys = Keys::new(&config.prefix);
        let stats = Arc::new(RequestCounters::default());
        let sweeper = sweeper::Sweeper::new(
            endpoints.clone(),
            stop.child_token(),
            stats.clone(),
            config.request_timeout,
            keys.rate_keys_prefix(),
        );
        let backend = EtcdBackend {
            endpoints,
            security,
            keys,
            strays: Strays::new(STRAY_GRACE),
            config,
            stats,
            session: SessionSlot::default(),
            watches: Mutex::new(HashMap::new()),
            enqueued: Mutex::new(HashSet::new()),
            stop,
            sweeper,
        };
        backend.session().await?;
        Ok(backend)
    }

    /// The live session, or a new lease if the last one was lost.
    async fn session(&self) -> Result<Arc<Session>> {
        self.session
            .live_or_start(&self.stop, |_| {}, || self.start_session())
            .await
    }

    /// Grants a lease and starts its keeper.
    async fn start_session(&self) -> Result<Arc<Session>> {
        // Retried like any request: a lease whose grant reply was lost holds no keys and
        // simply expires.
        let ttl = Session::ttl_secs(self.config.session_ttl);
        let (sent, granted) = self
            .retry(RequestKind::Lease, |c| async move {
                let sent = tokio::time::Instant::now();
                c.lease_client().grant(ttl, None).await.map(|g| (sent, g))
            })
            .await?;
        let s = Session::start(
            self.endpoints.clone(),
            sent,
            &granted,
            self.config.session_ttl,
            self.config.request_timeout,
            self.stats.clone(),
        );
        *lock(&self.strays.session) = Some((s.lease, s.lost.clone()));
        Ok(s)
    }

    /// Asks etcd to end the lease of a session already ended locally (retried through a
    /// failover; etcd expires it within the TTL anyway, as nothing keeps it alive).
    async fn revoke(&self, session: &Session, until: Until<'_>) -> Result<()> {
        let lease = session.lease;
        let revoked = self
            .retry_until(RequestKind::Lease, until, |c| async move {
                c.lease_client().revoke(lease).await
            })
            .await;
        match revoked {
            // "Not found": it is gone already, which is the goal.
            Ok(_) | Err(Error::SessionLost) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Sends an idempotent request, retrying transient failures under the shared policy
    /// ([`Attempts`]) until the call's deadline or the backend's stop.
    async fn retry<T, F, Fut>(&self, kind: RequestKind, op: F) -> Result<T>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        self.retry_until(kind, Until::Deadline, op).await
    }

    /// [`retry`](Self::retry) of a write bound to `session`'s lease: it stops when the session
    /// is lost, and then fails with `SessionLost`.
    async fn retry_in<T, F, Fut>(&self, session: &Session, kind: RequestKind, op: F) -> Result<T>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        self.retry_until(kind, Until::SessionLive(&session.lost), op)
            .await
            .map_err(|e| {
                if session.lost.is_lost() {
                    Error::SessionLost
                } else {
                    e
                }
            })
    }

    /// [`retry`](Self::retry), stopping also as `until` says.
    async fn retry_until<T, F, Fut>(
        &self,
        kind: RequestKind,
        until: Until<'_>,
        mut op: F,
    ) -> Result<T>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        let mut attempts = Attempts::new(self.config.request_timeout);
        let max_attempt = attempt_timeout(self.config.request_timeout);
        let mut bound = FIRST_ATTEMPT
            .max(self.endpoints.latency() * LATENCY_FACTOR)
            // Room for one re-authentication (an expired token) within the attempt.
            .max(self.endpoints.auth_time() * AUTH_FACTOR)
            .min(max_attempt);
        let mut timeouts = 0u32;
        let mut probed = false;
        // A likely cause seen on any attempt (the last failure may be a mere timeout).
        let mut hint = None;
        loop {
            if !matches!(until, Until::Closing) {
                self.stop.check()?;
            }
            self.stats.count(kind);
            let (member, client) = self.endpoints.pick();
            let sent = tokio::time::Instant::now();
            let mut timed_out = false;
            let failure = match tokio::time::timeout(bound, op(client)).await {
                Ok(Ok(v)) => {
                    self.endpoints.answered_in(sent.elapsed());
                    return Ok(v);
                }
                Ok(Err(e)) => {
                    // Refused for TLS, authentication or permissions: no retry changes that.
                    if let Some(refused) = self.refused(&e, member, bound, &mut probed).await {
                        return Err(refused);
                    }
                    if is_transient(&e) {
                        hint = self.security.hint(&e).or(hint);
                        Error::store(describe::failure(&e))
                    } else if session::is_lease_not_found(&e) {
                        // A write bound to a lease that etcd no longer has: the session is gone.
                        return Err(Error::SessionLost);
                    } else {
                        return Err(Error::store(describe::failure(&e)));
                    }
                }
                Err(_) => {
                    let e = Error::store(format!("etcd did not answer within {bound:?}"));
                    timed_out = true;
                    timeouts += 1;
                    if timeouts >= SHORT_ATTEMPTS {
                        bound = (bound * 2).min(max_attempt);
                    }
                    e
                }
            };
            // Whatever failed here, the next attempt goes to another member.
            self.endpoints.failed(member);
            if matches!(until, Until::SessionLive(lost) if lost.is_lost()) {
                return Err(failure);
            }
            // After a timeout the time is spent already and the next member is another one:
            // ask at once. Fast failures (a member that refuses, no leader yet) back off.
            if !attempts.again(!timed_out).await {
                return Err(match (hint, failure) {
                    (Some(hint), Error::Store(last)) => {
                        Error::store(format!("{hint}; last failure: {last}"))
                    }
                    (_, failure) => failure,
                });
            }
            tracing::debug!(error = %failure, attempts = attempts.made(), "transient etcd failure; retrying");
        }
    }

    /// The clear error if etcd refused the request for TLS, authentication or permissions (no
    /// retry changes that). A TLS connection closed under the request gets one handshake of
    /// our own per call (`probed`), in case etcd's certificate alert lost a race (tls_probe.rs).
    async fn refused(
        &self,
        e: &etcd_client::Error,
        member: usize,
        bound: Duration,
        probed: &mut bool,
    ) -> Option<Error> {
        if let Some(refused) = self.security.refusal(e) {
            return Some(refused);
        }
        let tls = self.security.closed_under_us(e).filter(|_| !*probed)?;
        *probed = true;
        let text = tls_probe::failure(self.endpoints.url(member), tls, bound).await?;
        self.security.tls_refusal(&text)
    }

    /// Sends a Txn whose retry is harmless (its compares make a repeated apply a no-op).
    async fn txn(&self, txn: Txn) -> Result<etcd_client::TxnResponse> {
        self.retry(RequestKind::Txn, |mut c| {
            let t = txn.clone();
            async move { c.txn(t).await }
        })
        .await
    }

    /// Reads the semaphore's prefix sorted by create revision: (revision, kvs).
    async fn read_semaphore(&self, name: &str) -> Result<(i64, Vec<etcd_client::KeyValue>)> {
        let prefix = self.keys.sem_prefix(name);
        let mut resp = self
            .retry(RequestKind::Range, |c| {
                let prefix = prefix.clone();
                async move { kv(&c).get(prefix, Some(sorted_prefix())).await }
            })
            .await?;
        let revision = resp.header().map_or(0, |h| h.revision());
        Ok((revision, resp.take_kvs()))
    }

    /// One enqueue under `session`: with a live view of the semaphore, a plain put and the
    /// grant decided from the view (no read); else the put-if-absent Txn that also reads.
    async fn enqueue_in(&self, req: &EntryRequest, session: &Arc<Session>) -> Result<Enqueued> {
        let queue_prefix = self.keys.queue_prefix(&req.name);
        let (token, granted) = match self.live_watch(&req.name) {
            Some(watch) => {
                let (token, fresh) = self.put_entry_alone(req, session).await?;
                // A fresh entry right after what the view has applied is decided at once; any
                // other waits for the view to apply the put's revision.
                let at_once = fresh
                    .then(|| watch.decide_own_put(token, req.permits))
                    .flatten();
                let seen = match at_once {
                    Some(seen) => Some(seen),
                    None => watch.when_seen(token, self.view_lag_bound()).await,
                };
                let seen = match seen {
                    Some(seen) => {
                        self.stats.decided_from_view();
                        seen
                    }
                    // The view lags (or its stream broke): never decide from it; read.
                    None => {
                        let (_, kvs) = self.read_semaphore(&req.name).await?;
                        self.decide_from_read(&req.name, &kvs, token)
                    }
                };
                (token, verdict(req, seen)?)
            }
            None => {
                let (token, resp) = self.put_entry(req, session).await?;
                let ops = resp.op_responses();
                let (revision, kvs) = (header_revision(&resp), get_kvs(ops.get(1)));
                let granted = verdict(req, self.decide_from_read(&req.name, kvs, token))?;
                // The Txn's own read is the view's starting point: no extra read.
                if (req.wait && !granted) || self.enqueued_before(&req.name) {
                    let cap_key = self.keys.cap(&req.name);
                    let view = View::from_kvs(revision, &cap_key, &queue_prefix, kvs);
                    self.ensure_watch(&req.name, view);
                }
                (token, granted)
            }
        };
        let lost = session.lost.child();
        Ok(Enqueued {
            token,
            granted,
            lost,
        })
    }

    /// The value of `req`'s entry, written now.
    fn entry_value(req: &EntryRequest) -> Vec<u8> {
        EntryValue {
            permits: req.permits,
            owner: req.owner.clone(),
            since_unix_ms: unix_ms_now(),
        }
        .encode()
    }

    /// Writes the entry of `req` under `session` with a plain put that reads nothing (a Limiter
    /// with a live view of the semaphore decides the grant there). Returns the entry's token
    /// and whether this put created the key (then its revision is the token).
    ///
    /// A retry after a lost reply puts the same key again, which keeps its create revision
    /// (its place in the queue and its token): the previous value it returns says so. A plain
    /// put costs etcd less than the put-if-absent Txn (no compare, no branch): ~6–13% of an
    /// acquire+release in raw runs on this machine.
    async fn put_entry_alone(
        &self,
        req: &EntryRequest,
        session: &Arc<Session>,
    ) -> Result<(u64, bool)> {
        let key = self.keys.entry(&req.name, &req.id);
        let value = Self::entry_value(req);
        let opts = PutOptions::new().with_lease(session.lease).with_prev_key();
        let resp = self
            .retry_in(session, RequestKind::Put, |c| {
                let (k, v, o) = (key.clone(), value.clone(), opts.clone());
                async move { kv(&c).put(k, v, Some(o)).await }
            })
            .await?;
        let (token, fresh) = match resp.prev_key() {
            None => (resp.header().map_or(0, |h| h.revision()), true),
            Some(prev) if prev.lease() == session.lease => (prev.create_revision(), false),
            // Written under another lease (an earlier session of this request): that session
            // is gone, so is the entry's claim; the caller removes the key.
            Some(_) => return Err(Error::store("request entry exists under an older lease")),
        };
        Ok((token as u64, fresh && token > 0))
    }

    /// Writes the entry of `req` under `session` if it is not there yet (the same key on a
    /// retry finds the first put), reading the whole semaphore in the same Txn: the entry's
    /// token, and the reply (the read is its second operation's).
    async fn put_entry(
        &self,
        req: &EntryRequest,
        session: &Arc<Session>,
    ) -> Result<(u64, etcd_client::TxnResponse)> {
        let key = self.keys.entry(&req.name, &req.id);
        let put = TxnOp::put(
            key.clone(),
            Self::entry_value(req),
            Some(PutOptions::new().with_lease(session.lease)),
        );
        let sem_prefix = self.keys.sem_prefix(&req.name);
        let read = || TxnOp::get(sem_prefix.clone(), Some(sorted_prefix()));
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([put, read()])
            .or_else([TxnOp::get(key, None), read()]);
        let resp = self
            .retry_in(session, RequestKind::Txn, |c| {
                let t = txn.clone();
                async move { kv(&c).txn(t).await }
            })
            .await?;
        let token = if resp.succeeded() {
            header_revision(&resp)
        } else {
            match get_kvs(resp.op_responses().first()).first() {
                Some(kv) if kv.lease() == session.lease => kv.create_revision(),
                // Written under another lease (an earlier session of this request): that
                // session is gone, so is the entry's claim; the caller removes the key.
                Some(_) => return Err(Error::store("request entry exists under an older lease")),
                None => return Err(Error::store("request entry vanished during the enqueue")),
            }
        } as u64;
        Ok((token, resp))
    }

    /// What a read of the semaphore (at a revision at or past `token`'s) says about entry
    /// `token`; every entry read is checked for strays on the way.
    fn decide_from_read(&self, name: &str, kvs: &[etcd_client::KeyValue], token: u64) -> Seen {
        let cap_key = self.keys.cap(name);
        let queue_prefix = self.keys.queue_prefix(name);
        for kv in queue_of(&queue_prefix, kvs).map(|(_, kv)| kv) {
            self.strays.check(name, &queue_prefix, kv);
        }
        let cap = kvs
            .iter()
            .find(|kv| kv.key() == cap_key.as_bytes())
            .and_then(|kv| CapValue::parse(kv.value()));
        Seen::decide(cap, queue_of(&queue_prefix, kvs).map(|(e, _)| e), token)
    }

    /// The watch of `name` if it feeds its view right now.
    fn live_watch(&self, name: &str) -> Option<Arc<SemWatch>> {
        lock(&self.watches)
            .get(name)
            .filter(|w| w.is_live())
            .cloned()
    }

    /// Makes sure this Limiter sees semaphore `name`'s queue from now on (a read, then its
    /// watch), so that an entry of ours the store writes late, after its removal, is found as
    /// a stray and removed: without a view, only a later enqueue or status read of our own
    /// would look, and the entry could block the queue until the session ends. Best effort:
    /// a failed read leaves it to those.
    async fn watch_for_late_puts(&self, name: &str) {
        if lock(&self.watches)
            .get(name)
            .is_some_and(|w| !w.is_stopped())
        {
            return;
        }
        let (revision, kvs) = match self.read_semaphore(name).await {
            Ok(read) => read,
            Err(e) => {
                tracing::debug!(semaphore = %name, error = %e, "no view after removing an unanswered enqueue");
                return;
            }
        };
        let (cap_key, queue_prefix) = (self.keys.cap(name), self.keys.queue_prefix(name));
        for kv in queue_of(&queue_prefix, &kvs).map(|(_, kv)| kv) {
            self.strays.check(name, &queue_prefix, kv);
        }
        let view = View::from_kvs(revision, &cap_key, &queue_prefix, &kvs);
        self.ensure_watch(name, view);
    }

    /// Whether this backend enqueued on `name` before (remembering it now): a semaphore used a
    /// second time gets a view, one used once costs no watch.
    fn enqueued_before(&self, name: &str) -> bool {
        !lock(&self.enqueued).insert(name.to_string())
    }

    /// How long an enqueue waits for the view to apply its put before it reads instead: a few
    /// round trips, at least [`VIEW_LAG_MIN`], at most a quarter of a request's time.
    fn view_lag_bound(&self) -> Duration {
        (self.endpoints.latency() * LATENCY_FACTOR)
            .max(VIEW_LAG_MIN)
            .min((self.config.request_timeout / 4).max(VIEW_LAG_MIN))
    }

    /// Enqueues under the live session; if etcd no longer has its lease, under a new one.
    async fn enqueue_checked(&self, req: &EntryRequest) -> Result<Enqueued> {
        let session = self.session().await?;
        match self.enqueue_in(req, &session).await {
            // The lease vanished before our keeper noticed (revoked, expired in a pause): the
            // session is lost for its permits, and this request starts a new one.
            Err(Error::SessionLost) if !session.lost.is_lost() => {
                session.lost.fire();
                let session = self.session().await?;
                self.enqueue_in(req, &session).await
            }
            other => other,
        }
    }

    /// The watch of `name`, started from `view` if there is none yet.
    fn ensure_watch(&self, name: &str, view: View) -> Arc<SemWatch> {
        let mut watches = lock(&self.watches);
        if let Some(w) = watches.get(name) {
            if !w.is_stopped() {
                return w.clone();
            }
        }
        let tracked = self.strays.tracked.clone();
        let strays = self.strays.clone();
        let (sem, queue_prefix) = (name.to_string(), self.keys.queue_prefix(name));
        let config = WatchConfig {
            endpoints: self.endpoints.clone(),
            sem_prefix: self.keys.sem_prefix(name),
            cap_key: self.keys.cap(name),
            queue_prefix: self.keys.queue_prefix(name),
            request_timeout: self.config.request_timeout,
            stats: self.stats.clone(),
            on_delete: Arc::new(move |key: &[u8]| {
                if let Some(lost) = tracked.vanished(key) {
                    tracing::warn!(key = %String::from_utf8_lossy(key), "permit key deleted behind our back; permit lost");
                    lost.fire();
                }
            }),
            on_put: Arc::new(move |kv| strays.check(&sem, &queue_prefix, kv)),
        };
        let w = SemWatch::start(view, config, self.stop.child_token());
        watches.insert(name.to_string(), w.clone());
        w
    }

    fn end_locally(&self) {
        self.stop.stop();
        self.strays.tracked.end_all();
    }
}

/// Why connecting (authenticating, with a user) failed: a refusal named as such, else the
/// store error (a TLS connection closed under the authentication gets one probe, as in
/// `EtcdBackend::refused`).
async fn connect_failure(security: &Security, urls: &[String], e: etcd_client::Error) -> Error {
    if let Some(refused) = security.refusal(&e) {
        return refused;
    }
    if let (Some(tls), Some(url)) = (security.closed_under_us(&e), urls.first()) {
        if let Some(text) = tls_probe::failure(url, tls, FIRST_ATTEMPT * 5).await {
            if let Some(refused) = security.tls_refusal(&text) {
                return refused;
            }
        }
    }
    match security.hint(&e) {
        Some(hint) => Error::store(format!("{hint}; last failure: {}", describe::failure(&e))),
        None => Error::store(describe::failure(&e)),
    }
}

/// A status, a first enqueue (or one whose view lags) reads a semaphore's whole queue (~170
/// bytes an entry). tonic's default 4 MiB reply limit would make those fail past ~25k queued
/// entries.
pub(super) const MAX_REPLY_BYTES: usize = 256 << 20;

/// A KV client that accepts replies up to [`MAX_REPLY_BYTES`].
pub(super) fn kv(client: &Client) -> etcd_client::KvClient {
    client
        .kv_client()
        .max_decoding_message_size(MAX_REPLY_BYTES)
}

fn sorted_prefix() -> GetOptions {
    GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
}

fn header_revision(resp: &etcd_client::TxnResponse) -> i64 {
    resp.header().map_or(0, |h| h.revision())
}

/// Whether the entry of `req` holds, as `seen` decided; an error if it never can.
fn verdict(req: &EntryRequest, seen: Seen) -> Result<bool> {
    match seen {
        Seen::NoSemaphore => Err(Error::NotFound(req.name.clone())),
        Seen::Entry { capacity, .. } if req.permits > capacity => {
            Err(waiters::over_capacity(req, capacity))
        }
        Seen::Entry { granted, .. } => Ok(granted),
    }
}

fn get_kvs(resp: Option<&TxnOpResponse>) -> &[etcd_client::KeyValue] {
    match resp {
        Some(TxnOpResponse::Get(g)) => g.kvs(),
        _ => &[],
    }
}

#[async_trait]
impl Backend for EtcdBackend {
    async fn ensure_semaphore(&self, name: &str, capacity: Option<u32>) -> Result<u32> {
        let cap_key = self.keys.cap(name);
        let Some(requested) = capacity else {
            let resp = self
                .retry(RequestKind::Range, |mut c| {
                    let k = cap_key.clone();
                    async move { c.get(k, None).await }
                })
                .await?;
            return match resp.kvs().first() {
                Some(kv) => CapValue::parse(kv.value())
                    .map(|c| c.capacity)
                    .ok_or_else(|| Error::store(format!("unreadable capacity at {cap_key}"))),
                None => Err(Error::NotFound(name.to_string())),
            };
        };
        let value = CapValue::new(requested).encode();
        let index = self.keys.name_index(name);
        let txn = Txn::new()
            .when([Compare::create_revision(
                cap_key.clone(),
                CompareOp::Equal,
                0,
            )])
            .and_then([
                TxnOp::put(cap_key.clone(), value, None),
                TxnOp::put(index, "", None),
            ])
            .or_else([TxnOp::get(cap_key.clone(), None)]);
        let resp = self.txn(txn).await?;
        if resp.succeeded() {
            return Ok(requested);
        }
        let ops = resp.op_responses();
        let stored = get_kvs(ops.first())
            .first()
            .and_then(|kv| CapValue::parse(kv.value()))
            .ok_or_else(|| Error::store(format!("unreadable capacity at {cap_key}")))?;
        if stored.capacity != requested {
            return Err(Error::CapacityMismatch {
                stored: stored.capacity,
                requested,
            });
        }
        Ok(stored.capacity)
    }

    async fn enqueue(&self, req: &EntryRequest) -> Result<Enqueued> {
        let key = self.keys.entry(&req.name, &req.id);
        // In flight until it ends, however it ends (this future may be dropped mid-request).
        let sending = self.strays.tracked.sending(key.into_bytes());
        let enqueued = self.enqueue_checked(req).await;
        if let Ok(enq) = &enqueued {
            sending.enqueued(enq.token as i64, enq.lost.clone());
        }
        enqueued
    }

    fn set_orphan_sink(&self, sink: super::OrphanSink) {
        let _ = self.strays.sink.set(sink);
    }

    async fn wait_outcome(&self, req: &EntryRequest, enq: &Enqueued) -> Result<Outcome> {
        let watch = match lock(&self.watches).get(&req.name) {
            Some(w) if !w.is_stopped() => w.clone(),
            // Stopped with the backend or its session: the entry went with the lease.
            _ => return Err(Error::SessionLost),
        };
        // A watch that stops drops its waiters: the entry's fate is unknown, its session gone.
        watch
            .register(enq.token, req.permits)
            .await
            .map_err(|_| Error::SessionLost)
    }

    async fn remove(&self, name: &str, id: &str) -> Result<()> {
        let key = self.keys.entry(name, id);
        // An entry whose enqueue never answered can still be written after this delete (an
        // attempt a hung member buffered): see `watch_for_late_puts`.
        let unanswered = !self.strays.tracked.is_live(key.as_bytes());
        // Forget it first: our own delete must not look like a key deleted behind our back.
        self.strays.tracked.removing(key.as_bytes());
        if self.stop.is_stopped() {
            return Ok(()); // close() ended the session, and every entry of it with the lease
        }
        self.retry(RequestKind::Delete, |mut c| {
            let k = key.clone();
            async move { c.delete(k, None).await }
        })
        .await?;
        if unanswered {
            self.watch_for_late_puts(name).await;
        }
        Ok(())
    }

    async fn status(&self, name: &str) -> Result<Status> {
        let (_, kvs) = self.read_semaphore(name).await?;
        let cap_key = self.keys.cap(name);
        let cap = kvs
            .iter()
            .find(|kv| kv.key() == cap_key.as_bytes())
            .and_then(|kv| CapValue::parse(kv.value()))
            .ok_or_else(|| Error::NotFound(name.to_string()))?;
        let queue_prefix = self.keys.queue_prefix(name);
        let entries: Vec<_> = queue_of(&queue_prefix, &kvs).collect();
        for (_, kv) in &entries {
            self.strays.check(name, &queue_prefix, kv);
        }
        let n = queue::holders(entries.iter().map(|(e, _)| *e), cap.capacity, cap.floor);
        let mut rows: Vec<Holder> = entries
            .iter()
            .map(|(e, kv)| {
                let v = EntryValue::parse(kv.value());
                Holder {
                    owner: v.as_ref().map_or_else(|| "?".into(), |v| v.owner.clone()),
                    permits: e.permits,
                    fencing_token: e.token,
                    since_unix_ms: v.map_or(0, |v| v.since_unix_ms),
                }
            })
            .collect();
        let waiters = rows.split_off(n);
        Ok(Status::from_queue(name, cap.capacity, rows, waiters))
    }

    async fn set_capacity(&self, name: &str, capacity: u32) -> Result<()> {
        let cap_key = self.keys.cap(name);
        let queue_prefix = self.keys.queue_prefix(name);
        // Read, compute, compare-and-set; a write that lost a race reads again (a retried
        // write whose first attempt was applied finds its own capacity and writes it again).
        let mut attempts = Attempts::new(self.config.request_timeout);
        loop {
            let (revision, kvs) = self.read_semaphore(name).await?;
            let Some(cap_kv) = kvs.iter().find(|kv| kv.key() == cap_key.as_bytes()) else {
                return Err(Error::NotFound(name.to_string()));
            };
            let old = CapValue::parse(cap_kv.value())
                .ok_or_else(|| Error::store(format!("unreadable capacity at {cap_key}")))?;
            let entries: Vec<_> = queue_of(&queue_prefix, &kvs).collect();
            let queue: Vec<queue::Entry> = entries.iter().map(|(e, _)| *e).collect();
            let floor = queue::floor_after_resize(&queue, old.capacity, capacity, old.floor);
            // Apply only if nothing that decides who holds changed since the read: the
            // capacity, no new entry, and (on a shrink, to grandfather exactly the holders
            // read) every holder and the first waiter still there.
            let mut when = vec![
                Compare::mod_revision(cap_key.clone(), CompareOp::Equal, cap_kv.mod_revision()),
                Compare::create_revision(queue_prefix.clone(), CompareOp::Less, revision + 1)
                    .with_prefix(),
            ];
            if floor != old.floor {
                let n = queue::holders(queue.iter().copied(), old.capacity, old.floor);
                // etcd allows 128 compares per Txn; past that the grandfathering is best effort.
                when.extend(entries.iter().take((n + 1).min(120)).map(|(e, kv)| {
                    Compare::create_revision(kv.key().to_vec(), CompareOp::Equal, e.token as i64)
                }));
            }
            let txn = Txn::new().when(when).and_then([TxnOp::put(
                cap_key.clone(),
                CapValue { capacity, floor }.encode(),
                None,
            )]);
            let resp = self.txn(txn).await?;
            if resp.succeeded() {
                return Ok(());
            }
            if !attempts.again(true).await {
                return Err(Error::store(format!(
                    "semaphore {name:?} kept changing; capacity not set, try again"
                )));
            }
        }
    }

    async fn list(&self) -> Result<Vec<String>> {
        self.names_under(self.keys.names_prefix()).await
    }

    async fn announce(&self, board: &str, id: &str, value: &[u8]) -> Result<()> {
        self.put_announcement(board, id, value).await
    }

    async fn announcements(&self, board: &str) -> Result<Vec<(String, Vec<u8>)>> {
        self.read_announcements(board).await
    }

    async fn withdraw(&self, board: &str, id: &str) -> Result<()> {
        self.delete_announcement(board, id).await
    }

    /// The member list, and who leads from one member's status (two requests).
    async fn members(&self) -> Result<Vec<crate::StoreMember>> {
        let list = self
            .retry(
                RequestKind::Range,
                |mut c| async move { c.member_list().await },
            )
            .await?;
        let leader = self
            .retry(RequestKind::Range, |mut c| async move { c.status().await })
            .await?
            .leader();
        Ok(list
            .members()
            .iter()
            .map(|m| crate::StoreMember {
                name: if m.name().is_empty() {
                    format!("{:x} (not started)", m.id())
                } else {
                    m.name().to_string()
                },
                address: m.client_urls().first().cloned().unwrap_or_default(),
                role: if m.id() == leader {
                    "leader"
                } else {
                    "follower"
                }
                .to_string(),
            })
            .collect())
    }

    fn stats(&self) -> RequestStats {
        self.stats.snapshot()
    }

    fn rate_store(&self) -> Option<&dyn super::RateStore> {
        Some(self)
    }

    fn session_ttl(&self) -> Duration {
        self.config.session_ttl
    }

    async fn session_signal(&self) -> Option<LostSignal> {
        self.session.live_signal().await
    }

    async fn end_session(&self, of: &LostSignal) {
        let Some(session) = self.session.end_if_current(of).await else {
            return;
        };
        self.strays.tracked.forget_lost();
        if let Err(e) = self.revoke(&session, Until::Deadline).await {
            tracing::warn!(lease = session.lease, error = %e, "revoking an ended session failed; etcd expires it within the TTL");
        }
    }

    async fn close(&self) -> Result<()> {
        self.end_locally();
        match self.session.end().await {
            Some(session) => self.revoke(&session, Until::Closing).await,
            None => Ok(()),
        }
    }

    fn shutdown(&self) {
        self.end_locally();
        if let Some(session) = self.session.try_end() {
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                let (_, client) = self.endpoints.pick();
                let timeout = self.config.request_timeout;
                self.stats.count(RequestKind::Lease);
                handle.spawn(async move {
                    let _ =
                        tokio::time::timeout(timeout, client.lease_client().revoke(session.lease))
                            .await;
                });
            }
        }
    }
}
