//! Queue entries: the enqueue (a put and the grant decided from the view, or the
//! put-if-absent Txn that reads), the wait, the removal, and the watches that keep the views.
//! [`Entries`] owns what they need besides the link and the lease: the watches, the semaphores
//! enqueued on, and the record of this Limiter's entries that finds strays (`strays.rs`).

use super::attempt::LATENCY_FACTOR;
use super::calls::Link;
use super::client::{get_kvs, kv};
use super::fair_grants::{self, Granter};
use super::fair_record::FairRead;
use super::keys::{queue_of, EntryValue};
use super::lease::Leases;
use super::semaphore::{read_semaphore, sorted_prefix};
use super::session::Session;
use super::strays::Strays;
use super::view::{SemWatch, WatchConfig};
use super::view_state::{Seen, View, ViewKeys};
use crate::backend::capacity::CapValue;
use crate::backend::fair_checks;
use crate::backend::waiters::{self, WaitOutcome};
use crate::backend::{lock, Enqueued, EntryRequest, OrphanSink};
use crate::error::{Error, Result};
use crate::stats::RequestKind;
use crate::status::unix_ms_now;
use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Least time an enqueue waits for the view to show its put (see
/// `Entries::view_lag_bound`): a watch event follows the put's reply within a round trip,
/// so past this the watch lags or hangs, and a read costs less than waiting on.
const VIEW_LAG_MIN: Duration = Duration::from_millis(100);

/// The queue entries of a backend, and the views of the semaphores they wait in.
pub(super) struct Entries {
    link: Arc<Link>,
    leases: Arc<Leases>,
    /// Entries held or in flight, so a key deleted behind our back fires `lost()`, `close()`
    /// can mark every permit lost, and an entry nobody owns is found: see `strays.rs`.
    strays: Strays,
    watches: Mutex<HashMap<String, Arc<SemWatch>>>,
    /// Semaphores enqueued on through a read: the next enqueue on one starts its view.
    enqueued: Mutex<HashSet<String>>,
}

impl Entries {
    pub(super) fn new(link: Arc<Link>, leases: Arc<Leases>, strays: Strays) -> Entries {
        Entries {
            link,
            leases,
            strays,
            watches: Mutex::new(HashMap::new()),
            enqueued: Mutex::new(HashSet::new()),
        }
    }

    /// Appends `req`'s entry to the queue (see [`Backend::enqueue`](crate::backend::Backend::enqueue)).
    pub(super) async fn enqueue(&self, req: &EntryRequest) -> Result<Enqueued> {
        let key = self.link.keys.entry(&req.name, &req.id);
        // In flight until it ends, however it ends (this future may be dropped mid-request).
        let sending = self.strays.tracked.sending(key.into_bytes());
        let enqueued = self.enqueue_checked(req).await;
        if let Ok(enq) = &enqueued {
            sending.enqueued(enq.token as i64, enq.lost.clone());
        }
        enqueued
    }

    /// Where entries nobody owns are handed (the Limiter's background releaser).
    pub(super) fn set_orphan_sink(&self, sink: OrphanSink) {
        let _ = self.strays.sink.set(sink);
    }

    /// Waits until the entry `enq` of `req` holds, or cannot (see
    /// [`Backend::wait_outcome`](crate::backend::Backend::wait_outcome)).
    pub(super) async fn wait(&self, req: &EntryRequest, enq: &Enqueued) -> Result<WaitOutcome> {
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

    /// One enqueue under `session`: with a live view of the semaphore, a plain put and the
    /// grant decided from the view (no read); else the put-if-absent Txn that also reads.
    async fn enqueue_in(&self, req: &EntryRequest, session: &Arc<Session>) -> Result<Enqueued> {
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
                let (seen, read) = match seen {
                    Some(seen) => {
                        self.link.stats.decided_from_view();
                        (seen, None)
                    }
                    // The view lags (or its stream broke): never decide from it; read.
                    None => {
                        let (revision, kvs) = read_semaphore(&self.link, &req.name).await?;
                        let seen = self.decide_from_read(&req.name, &kvs, token);
                        (seen, Some((revision, kvs)))
                    }
                };
                (token, self.fair_verdict(req, seen, token, read).await?)
            }
            None => {
                let (token, resp) = self.put_entry(req, session).await?;
                let ops = resp.op_responses();
                let (revision, kvs) = (header_revision(&resp), get_kvs(ops.get(1)));
                let seen = self.decide_from_read(&req.name, kvs, token);
                let granted = self
                    .fair_verdict(req, seen, token, Some((revision, kvs.to_vec())))
                    .await?;
                // The Txn's own read is the view's starting point: no extra read.
                if (req.wait && !granted) || self.enqueued_before(&req.name) {
                    let view = View::from_kvs(revision, &self.view_keys(&req.name), kvs);
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

    /// [`verdict`], and on a fair semaphore the grant of our own entry when the rule gives
    /// it now (written here: `fair_grants.rs`), from `read` (a read of the semaphore at or
    /// past the entry's revision) or a fresh one. Flows on a plain semaphore and a class the
    /// semaphore lacks are refused (the caller removes the entry).
    async fn fair_verdict(
        &self,
        req: &EntryRequest,
        seen: Seen,
        token: u64,
        read: Option<(i64, Vec<etcd_client::KeyValue>)>,
    ) -> Result<bool> {
        let granted = verdict(req, seen)?;
        if !matches!(seen, Seen::Entry { fair: true, .. }) {
            return match req.fair {
                Some(_) => Err(fair_checks::not_fair(&req.name)),
                None => Ok(granted),
            };
        }
        if granted {
            return Ok(true);
        }
        if read.is_none() {
            if let Some(granted) = self.fair_verdict_from_view(req, token).await? {
                return Ok(granted);
            }
        }
        let (revision, kvs) = match read {
            Some(read) => read,
            None => read_semaphore(&self.link, &req.name).await?,
        };
        if let Some(r) = FairRead::of(&self.link, &req.name, &kvs)? {
            fair_checks::check_tag(&req.name, &r.fair.classes, req.fair.as_ref())?;
        }
        fair_grants::grant_own(&self.link, &req.name, (revision, &kvs), token).await
    }

    /// [`fair_verdict`](Self::fair_verdict) from the live view, once it shows our entry (no
    /// read): the tag checked against its classes, our grant written if the rule picks us now.
    /// `None` when the view does not get there in time (the caller reads).
    async fn fair_verdict_from_view(&self, req: &EntryRequest, token: u64) -> Result<Option<bool>> {
        let Some(watch) = self.live_watch(&req.name) else {
            return Ok(None);
        };
        if watch
            .when_seen(token, self.view_lag_bound())
            .await
            .is_none()
        {
            return Ok(None);
        }
        let Some(classes) = watch.classes() else {
            return Ok(None);
        };
        fair_checks::check_tag(&req.name, &classes, req.fair.as_ref())?;
        match watch.plan_with(token) {
            Some(plan) => Ok(Some(
                fair_grants::write_plan(&self.link, &req.name, &plan).await?,
            )),
            None => Ok(Some(false)),
        }
    }

    /// Where the view of `name` finds its keys.
    fn view_keys(&self, name: &str) -> ViewKeys {
        ViewKeys {
            cap: self.link.keys.cap(name),
            fair: self.link.keys.fair(name),
            queue_prefix: self.link.keys.queue_prefix(name),
        }
    }

    /// The value of `req`'s entry, written now.
    fn entry_value(req: &EntryRequest) -> Vec<u8> {
        let tag = req.fair.as_ref();
        EntryValue {
            permits: req.permits,
            owner: req.owner.clone(),
            since_unix_ms: unix_ms_now(),
            flow: tag.map(|t| t.flow.clone()),
            class: tag.and_then(|t| t.class.clone()),
            weight: tag.map(|t| t.weight),
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
        let key = self.link.keys.entry(&req.name, &req.id);
        let value = Self::entry_value(req);
        let opts = PutOptions::new().with_lease(session.lease).with_prev_key();
        let resp = self
            .link
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
        let key = self.link.keys.entry(&req.name, &req.id);
        let put = TxnOp::put(
            key.clone(),
            Self::entry_value(req),
            Some(PutOptions::new().with_lease(session.lease)),
        );
        let sem_prefix = self.link.keys.sem_prefix(&req.name);
        let read = || TxnOp::get(sem_prefix.clone(), Some(sorted_prefix()));
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([put, read()])
            .or_else([TxnOp::get(key, None), read()]);
        let resp = self
            .link
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
        let cap_key = self.link.keys.cap(name);
        let queue_prefix = self.link.keys.queue_prefix(name);
        for kv in queue_of(&queue_prefix, kvs).map(|(_, kv)| kv) {
            self.strays.check(name, &queue_prefix, kv);
        }
        let cap = kvs
            .iter()
            .find(|kv| kv.key() == cap_key.as_bytes())
            .and_then(|kv| CapValue::parse(kv.value()));
        let fair_key = self.link.keys.fair(name);
        let fair = kvs
            .iter()
            .find(|kv| kv.key() == fair_key.as_bytes())
            .map(|kv| {
                super::fair_record::FairState::parse(kv)
                    .map(|f| f.marks)
                    .unwrap_or_default()
            });
        let queue = queue_of(&queue_prefix, kvs).map(|(e, _)| e);
        Seen::decide(cap, queue, fair.as_ref(), token)
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
        let (revision, kvs) = match read_semaphore(&self.link, name).await {
            Ok(read) => read,
            Err(e) => {
                tracing::debug!(semaphore = %name, error = %e, "no view after removing an unanswered enqueue");
                return;
            }
        };
        let queue_prefix = self.link.keys.queue_prefix(name);
        for kv in queue_of(&queue_prefix, &kvs).map(|(_, kv)| kv) {
            self.strays.check(name, &queue_prefix, kv);
        }
        let view = View::from_kvs(revision, &self.view_keys(name), &kvs);
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
        (self.link.endpoints.latency() * LATENCY_FACTOR)
            .max(VIEW_LAG_MIN)
            .min((self.link.config.request_timeout / 4).max(VIEW_LAG_MIN))
    }

    /// Enqueues under the live session; if etcd no longer has its lease, under a new one.
    async fn enqueue_checked(&self, req: &EntryRequest) -> Result<Enqueued> {
        let session = self.leases.live().await?;
        match self.enqueue_in(req, &session).await {
            // The lease vanished before our keeper noticed (revoked, expired in a pause): the
            // session is lost for its permits, and this request starts a new one.
            Err(Error::SessionLost) if !session.lost.is_lost() => {
                session.lost.fire();
                let session = self.leases.live().await?;
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
        let (sem, queue_prefix) = (name.to_string(), self.link.keys.queue_prefix(name));
        let granter = Granter::new(self.link.clone(), name);
        let config = WatchConfig {
            endpoints: self.link.endpoints.clone(),
            sem_prefix: self.link.keys.sem_prefix(name),
            keys: self.view_keys(name),
            request_timeout: self.link.config.request_timeout,
            stats: self.link.stats.clone(),
            on_delete: Arc::new(move |key: &[u8]| {
                if let Some(lost) = tracked.vanished(key) {
                    tracing::warn!(key = %String::from_utf8_lossy(key), "permit key deleted behind our back; permit lost");
                    lost.fire();
                }
            }),
            on_put: Arc::new(move |kv| strays.check(&sem, &queue_prefix, kv)),
            on_grantable: Arc::new(move |plan| granter.kick(plan)),
        };
        let w = SemWatch::start(view, config, self.link.stop.child_token());
        watches.insert(name.to_string(), w.clone());
        w
    }

    /// Removes an entry (release or cancel); removing an absent entry succeeds.
    pub(super) async fn remove(&self, name: &str, id: &str) -> Result<()> {
        let key = self.link.keys.entry(name, id);
        // An entry whose enqueue never answered can still be written after this delete (an
        // attempt a hung member buffered): see `watch_for_late_puts`.
        let unanswered = !self.strays.tracked.is_live(key.as_bytes());
        // Forget it first: our own delete must not look like a key deleted behind our back.
        self.strays.tracked.removing(key.as_bytes());
        if self.link.stop.is_stopped() {
            return Ok(()); // close() ended the session, and every entry of it with the lease
        }
        match self
            .live_watch(name)
            .and_then(|w| w.release_plan(key.as_bytes()))
        {
            // A fair semaphore: the release grants the next in the same Txn, from the view.
            Some(plan) => fair_grants::release_granting(&self.link, name, &key, &plan).await?,
            None => {
                self.link
                    .retry(RequestKind::Delete, |mut c| {
                        let k = key.clone();
                        async move { c.delete(k, None).await }
                    })
                    .await?;
            }
        }
        if unanswered {
            self.watch_for_late_puts(name).await;
        }
        Ok(())
    }
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
