//! `Limiter`: a connection to one store with one session, and the factory of semaphores,
//! adaptive semaphores and rate limits (every method of it is here; what they start lives in
//! `semaphore.rs`, `adaptive/`, `rate_limit/`).

use crate::adaptive::config::Adaptive;
use crate::announce::Announcement;
use crate::backend::Backend;
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::limiter_inner::LimiterInner;
use crate::members::StoreMember;
use crate::per_member::config::PerMember;
use crate::rate::{Decision, Quota};
use crate::rate_limit::batch::rate_store;
use crate::rate_limit::check_all::{self, KeyCheck};
use crate::rate_limit::handle::RateLimit;
use crate::release::Releaser;
use crate::semaphore::Semaphore;
use crate::stats::RequestStats;
use crate::store_open::{check_credentials_fit, open_store, StoreOptions};
use crate::store_url::{EtcdUser, StoreUrl, TlsFiles};
use crate::validate;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use crate::timing::{
    DEFAULT_REQUEST_TIMEOUT, DEFAULT_SESSION_TTL, MAX_REQUEST_TIMEOUT, MIN_SESSION_TTL,
};

/// A handle to a store with one session (an etcd lease, a ZooKeeper session, or an in-process
/// session for `memory://`). Every permit taken through it belongs to that session, so when the
/// process dies, its permits come back within the session TTL.
///
/// Cheap to clone (`Arc` inside), `Send + Sync`.
///
/// ```
/// # async fn f() -> clusterlimit::Result<()> {
/// let limiter = clusterlimit::Limiter::connect("memory://docs").await?;
/// let exports = limiter.semaphore("nightly-export", 4).await?;
/// let permit = exports.acquire().await?;
/// println!("export slot taken, fencing token {}", permit.fencing_token());
/// permit.release().await?;
/// limiter.close().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Limiter {
    pub(crate) inner: Arc<LimiterInner>,
}

impl Limiter {
    /// Connects with default options. See [`LimiterBuilder`] for the URL forms.
    ///
    /// Cancel-safe: dropping the future leaves nothing behind (a half-made session expires).
    pub async fn connect(url: &str) -> Result<Limiter> {
        Self::builder(url).connect().await
    }

    /// Starts a builder for options.
    pub fn builder(url: &str) -> LimiterBuilder {
        LimiterBuilder {
            url: url.to_string(),
            session_ttl: DEFAULT_SESSION_TTL,
            owner: None,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            connect_timeout: None,
            tls: None,
            etcd_user: None,
            zk_digest_file: None,
            clock: Clock::system(),
            hot_key_leases: false,
            approximate_hot_keys: false,
        }
    }

    /// Wraps a custom [`Backend`].
    pub fn from_backend(backend: Arc<dyn Backend>, owner: impl Into<String>) -> Result<Limiter> {
        Self::wrap(
            backend,
            owner.into(),
            Clock::system(),
            crate::timing::DEFAULT_REQUEST_TIMEOUT,
            HotKeys::default(),
        )
    }

    fn wrap(
        backend: Arc<dyn Backend>,
        owner: String,
        clock: Clock,
        request_timeout: Duration,
        hot: HotKeys,
    ) -> Result<Limiter> {
        validate::owner(&owner)?;
        let handle = tokio::runtime::Handle::try_current()
            .map_err(|_| Error::invalid("clusterlimit needs a Tokio runtime"))?;
        let releaser = Releaser::spawn(backend.clone(), &handle);
        backend.set_orphan_sink(releaser.orphan_sink());
        let mut inner = LimiterInner::new(backend, releaser, owner, handle);
        inner.clock = clock;
        inner.request_timeout = request_timeout;
        inner.set_leasing(hot.leases);
        inner.set_approximating(hot.approximate);
        Ok(Limiter {
            inner: Arc::new(inner),
        })
    }

    /// Creates the semaphore `name` with `capacity` if absent, or opens it.
    ///
    /// Errors: `InvalidArgument` for a bad name or capacity, `CapacityMismatch` if it exists
    /// with another capacity. Cancel-safe (creation is atomic; a dropped call either created
    /// the semaphore or not).
    pub async fn semaphore(&self, name: &str, capacity: u32) -> Result<Semaphore> {
        validate::name(name)?;
        validate::capacity(capacity)?;
        self.inner.check_open()?;
        let ensured = self
            .inner
            .backend
            .ensure_semaphore(name, Some(capacity))
            .await;
        self.inner.closed_or_result(ensured)?;
        Ok(Semaphore::new(self.inner.clone(), name))
    }

    /// Opens an existing semaphore whatever its capacity; `NotFound` if it does not exist.
    /// Cancel-safe.
    pub async fn open_semaphore(&self, name: &str) -> Result<Semaphore> {
        validate::name(name)?;
        self.inner.check_open()?;
        let ensured = self.inner.backend.ensure_semaphore(name, None).await;
        self.inner.closed_or_result(ensured)?;
        Ok(Semaphore::new(self.inner.clone(), name))
    }

    /// Sets the capacity of `name` for every client, creating the semaphore with it if absent:
    /// what `clusterlimit set-capacity` and the sidecar's `PUT /v1/semaphores/{name}` do.
    ///
    /// Shrinking never revokes current holders; new grants wait until usage fits. If another
    /// client creates the semaphore at the same moment with another capacity, ours is set over
    /// it (last writer wins). Returns [`CapacityChange::Set`] also when the capacity already
    /// was `capacity`.
    ///
    /// Errors: `InvalidArgument` for a bad name or capacity (checked before any store request).
    /// Cancel-safe step by step: a dropped call leaves the semaphore absent, created with
    /// `capacity`, or as it was with or without our capacity set (each change is atomic).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> clusterlimit::Result<()> {
    /// use clusterlimit::{CapacityChange, Limiter};
    /// let limiter = Limiter::connect("memory://set-capacity-doc").await?;
    /// assert_eq!(limiter.set_capacity("exports", 4).await?, CapacityChange::Created);
    /// assert_eq!(limiter.set_capacity("exports", 2).await?, CapacityChange::Set);
    /// assert_eq!(limiter.open_semaphore("exports").await?.status().await?.capacity, 2);
    /// # Ok(()) }
    /// ```
    pub async fn set_capacity(&self, name: &str, capacity: u32) -> Result<CapacityChange> {
        validate::name(name)?;
        validate::capacity(capacity)?;
        match self.open_semaphore(name).await {
            Ok(sem) => sem
                .set_capacity(capacity)
                .await
                .map(|()| CapacityChange::Set),
            Err(Error::NotFound(_)) => match self.semaphore(name, capacity).await {
                Ok(_) => Ok(CapacityChange::Created),
                // Created concurrently with another capacity: set ours, last writer wins.
                Err(Error::CapacityMismatch { .. }) => {
                    let sem = self.open_semaphore(name).await?;
                    sem.set_capacity(capacity)
                        .await
                        .map(|()| CapacityChange::Set)
                }
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        }
    }

    /// Names of every semaphore in the store (under this URL's prefix), sorted. Cancel-safe.
    pub async fn semaphores(&self) -> Result<Vec<String>> {
        self.inner.check_open()?;
        let names = self.inner.backend.list().await;
        self.inner.closed_or_result(names)
    }

    /// Owner label recorded with this Limiter's permits.
    pub fn owner(&self) -> &str {
        &self.inner.owner
    }

    /// Requests sent to the store so far, by kind, and the state of background removals.
    pub fn stats(&self) -> RequestStats {
        let removals = self.inner.releaser.counters();
        let (rate_batches, rate_local_answers) = self.inner.rates.counted();
        let leases = self.inner.rates.lease_counts();
        let (approx_admitted, approx_reports) = self.inner.rates.approx_counts();
        RequestStats {
            rate_approximate_admitted: approx_admitted,
            rate_approximate_reports: approx_reports,
            rate_lease_admitted: leases.admitted,
            rate_leases: leases.leases,
            rate_leased_units: leases.leased_units,
            rate_lease_returned_units: leases.returned_units,
            rate_lease_lost_units: leases.lost_units,
            pending_removals: removals.pending(),
            removal_session_ends: removals.sessions_ended(),
            rate_batches,
            rate_local_answers,
            acquires_refused_store_busy: self.inner.admission.refused(),
            ..self.inner.backend.stats()
        }
    }

    /// Creates the rate limit `name` with `quota` if absent, or opens it.
    ///
    /// Errors: `InvalidArgument` for a bad name or quota, `QuotaMismatch` if it exists with
    /// another quota (open it with [`open_rate_limit`](Limiter::open_rate_limit), change it
    /// with [`RateLimit::set_quota`]). One store request. Cancel-safe (creation is atomic).
    pub async fn rate_limit(&self, name: &str, quota: Quota) -> Result<RateLimit> {
        validate::name(name)?;
        quota.validate()?;
        self.open_rate(name, Some(quota)).await
    }

    /// Opens an existing rate limit whatever its quota; `NotFound` if it does not exist.
    pub async fn open_rate_limit(&self, name: &str) -> Result<RateLimit> {
        validate::name(name)?;
        self.open_rate(name, None).await
    }

    /// Names of every rate limit in the store (under this URL's prefix), sorted.
    pub async fn rate_limits(&self) -> Result<Vec<String>> {
        self.inner.check_open()?;
        let store = rate_store(&self.inner)?;
        self.inner.closed_or_result(store.limits().await)
    }

    async fn open_rate(&self, name: &str, quota: Option<Quota>) -> Result<RateLimit> {
        self.inner.check_open()?;
        let store = rate_store(&self.inner)?;
        let encoded = quota.map(|q| q.encode());
        let stored = store.ensure_limit(name, encoded.as_deref()).await;
        let stored = self.inner.closed_or_result(stored)?;
        let found = Quota::decode(&stored.value)?;
        if let Some(requested) = quota.filter(|q| *q != found) {
            return Err(Error::QuotaMismatch {
                stored: Box::new(found),
                requested: Box::new(requested),
            });
        }
        let shared = self.inner.rates.limit(name, found, stored.version);
        Ok(RateLimit::new(self.inner.clone(), shared))
    }

    /// Checks several keys, of one or several rate limits of this Limiter, all or nothing:
    /// every check is admitted (and consumed) in one atomic store write, or none is, and then
    /// nothing is consumed.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> clusterlimit::Result<()> {
    /// use clusterlimit::{KeyCheck, Limiter, Quota};
    /// let limiter = Limiter::connect("memory://check-all-doc").await?;
    /// let per_user = limiter.rate_limit("per-user", Quota::per_second(10)).await?;
    /// let global = limiter.rate_limit("global", Quota::per_second(1)).await?;
    /// let ds = limiter
    ///     .check_all(&[KeyCheck::new(&per_user, "user-42", 1), KeyCheck::new(&global, "all", 1)])
    ///     .await?;
    /// assert!(ds.iter().all(|d| d.allowed));
    /// let ds = limiter
    ///     .check_all(&[KeyCheck::new(&per_user, "user-42", 1), KeyCheck::new(&global, "all", 1)])
    ///     .await?;
    /// assert!(ds.iter().all(|d| !d.allowed)); // global is spent, so user-42 is not charged
    /// assert_eq!(ds[0].remaining, 9);
    /// # Ok(()) }
    /// ```
    ///
    /// Returns one decision per check, in order. When any is denied, all are: the ones that
    /// would have passed say `allowed: false`, their `remaining` as it is, and the longest
    /// `retry_after` of the denials. Checks of the same key are decided in order, in one write.
    ///
    /// Errors: `InvalidArgument` for no checks, a bad key or cost, or a limit of another
    /// Limiter; the rest as [`RateLimit::check_n`]. Costs: a call of one check is that check's
    /// [`RateLimit::check_n`] (coalesced with the key's concurrent checks, paced), so a caller
    /// need not choose; for several, a denial the known states prove takes no request, and
    /// calls made while this Limiter's previous joint write is in flight go together in the
    /// next one (decided in arrival order, all or nothing each), so concurrent calls sharing a
    /// hot key cost one request per batch, one more per conflict.
    pub async fn check_all(&self, checks: &[KeyCheck<'_>]) -> Result<Vec<Decision>> {
        check_all::run(&self.inner, checks, None).await
    }

    /// Opens the adaptive semaphore `name`, creating it with `config`'s initial capacity if it
    /// does not exist: a cluster semaphore whose capacity follows the outcomes its holders
    /// report ([`Permit::release_with`](crate::Permit::release_with)).
    ///
    /// Every Limiter that has it open sums its holders' outcomes per window and announces the
    /// sum; one of them at a time (the holder of the semaphore `<name>.controller`, taken over
    /// within a session TTL when it dies) merges the sums, takes one step of `config`'s
    /// algorithm and stores the new capacity. The capacity stays within `config`'s bounds; a
    /// change is an ordinary live capacity change (holders are never revoked). The controller
    /// uses its own `config`: give every Limiter the same one. Opening the same name again in
    /// this Limiter shares the first one's window and task; they stop when the last handle is
    /// dropped or the Limiter closes.
    ///
    /// Errors: `InvalidArgument` for a bad name (at most
    /// [`MAX_NAME_LEN`](crate::Limiter::MAX_NAME_LEN) − 11 characters, room for `.controller`) or
    /// setting, checked before any store request.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> clusterlimit::Result<()> {
    /// use clusterlimit::adaptive::{Adaptive, Outcome};
    /// use std::time::Duration;
    /// let limiter = clusterlimit::Limiter::connect("memory://adaptive-doc").await?;
    /// let config = Adaptive::gradient().min(2).max(100).initial(10);
    /// let payments = limiter.adaptive_semaphore("payments-api", config).await?;
    /// let permit = payments.acquire().await?;
    /// // ... call the payments API ...
    /// permit.release_with(Outcome::Success(Duration::from_millis(40))).await?;
    /// assert_eq!(payments.status().await?.capacity, 10); // until the first window's step
    /// # Ok(()) }
    /// ```
    pub async fn adaptive_semaphore(&self, name: &str, config: Adaptive) -> Result<Semaphore> {
        crate::adaptive::open::open(&self.inner, name, config).await
    }

    /// Opens the per-member semaphore `name`: a cluster semaphore whose capacity is
    /// `ceil(per_member × members)` within `config`'s bounds, where `members` counts the live
    /// Limiters that have it open this way ("each replica's worth of connections to the
    /// database", without editing a number on every deploy). Created, if absent, with the
    /// capacity of one member.
    ///
    /// This Limiter counts as a member from the moment this returns until its last handle of
    /// `name` is dropped or it closes (then at once), or it dies (then when its session
    /// expires). One of the members at a time (the holder of the semaphore
    /// `<name>.controller`, taken over within a session TTL when it dies) counts them every
    /// third of a session TTL (at most every second) and stores the capacity when the stored
    /// one differs: after a join or a close the capacity follows within one count, after a
    /// death within the session's expiry (about one session TTL) and one count (measured
    /// 2.0–2.7 s at a TTL of 2 s, BENCHMARKS.md). A change is an
    /// ordinary live capacity change (holders are never revoked); a capacity set by hand is
    /// put back at the next count. The controller uses its own `config`: give every Limiter
    /// the same one. Opening the same name again in this Limiter shares its membership.
    ///
    /// A name open as an adaptive semaphore ([`adaptive_semaphore`](Self::adaptive_semaphore))
    /// is refused, and the other way round: two controllers would fight over one capacity
    /// (both use the same controller seat, so if both are opened at the same instant only one
    /// writes at a time). [`open_semaphore`](Self::open_semaphore) (or
    /// [`semaphore`](Self::semaphore) with the current capacity; another one is refused with
    /// `CapacityMismatch`) opens it as a plain semaphore: such a handle acquires as usual but
    /// does not count as a member.
    ///
    /// Errors: `InvalidArgument` for a bad name (at most
    /// [`MAX_NAME_LEN`](crate::Limiter::MAX_NAME_LEN) − 11 characters, room for `.controller`)
    /// or config (checked before any store request), for a name open as an adaptive semaphore,
    /// or for a store that keeps no announcements; the store's errors.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> clusterlimit::Result<()> {
    /// use clusterlimit::{Limiter, PerMember};
    /// let a = Limiter::connect("memory://per-member-doc").await?;
    /// let b = Limiter::connect("memory://per-member-doc").await?;
    /// let config = PerMember::new(10.0).min(5).max(200);
    /// let db = a.per_member_semaphore("db-connections", config.clone()).await?;
    /// let _also = b.per_member_semaphore("db-connections", config).await?;
    /// assert_eq!(db.per_member_status().await?.map(|s| s.members), Some(2));
    /// let permit = db.acquire().await?; // capacity 20 once the controller counted both
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn per_member_semaphore(&self, name: &str, config: PerMember) -> Result<Semaphore> {
        crate::per_member::open::open(&self.inner, name, config).await
    }

    /// The store's members, as the store reports them now: etcd's member list with the
    /// leader marked; ZooKeeper's configuration (`/zookeeper/config`; who leads is not told to
    /// clients); one `embedded` member for memory://; every cluster's members for a sharded
    /// store. Empty for a backend that cannot tell. Bounded by the request timeout.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> clusterlimit::Result<()> {
    /// let limiter = clusterlimit::Limiter::connect("memory://members-doc").await?;
    /// let members = limiter.store_members().await?;
    /// assert_eq!(members[0].role, "embedded");
    /// # Ok(()) }
    /// ```
    pub async fn store_members(&self) -> Result<Vec<StoreMember>> {
        self.inner.check_open()?;
        let read = self.inner.backend.members().await;
        self.inner.closed_or_result(read)
    }

    /// Publishes `value` on `board` under this Limiter's own id (one value per Limiter and
    /// board; a second call replaces it). Bound to the Limiter's store session: it vanishes when
    /// the Limiter closes, its process dies (within the session TTL) or its session is lost;
    /// after a lost session call it again (it is not re-published by itself).
    ///
    /// Errors: `InvalidArgument` for a board name the semaphore names' rules refuse or a value
    /// over [`MAX_ANNOUNCEMENT_BYTES`](crate::validate::MAX_ANNOUNCEMENT_BYTES) (64 KiB),
    /// checked before any store request.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> clusterlimit::Result<()> {
    /// use clusterlimit::Limiter;
    /// let a = Limiter::connect("memory://announce-doc").await?;
    /// let b = Limiter::connect("memory://announce-doc").await?;
    /// a.announce("sidecars", br#"{"permits":3}"#).await?;
    /// b.announce("sidecars", br#"{"permits":1}"#).await?;
    /// assert_eq!(b.announcements("sidecars").await?.len(), 2);
    /// a.close().await?; // a's value goes with its session
    /// let left = b.announcements("sidecars").await?;
    /// assert_eq!((left.len(), left[0].id.as_str()), (1, b.announcer_id()));
    /// # Ok(()) }
    /// ```
    pub async fn announce(&self, board: &str, value: &[u8]) -> Result<()> {
        validate::name(board)?;
        validate::announcement(value)?;
        self.inner.check_open()?;
        let put = self
            .inner
            .backend
            .announce(board, &self.inner.id, value)
            .await;
        self.inner.closed_or_result(put)
    }

    /// Every value on `board` now, one per live announcer, sorted by id (empty for a board
    /// nobody announced on). `InvalidArgument` for a bad board name.
    pub async fn announcements(&self, board: &str) -> Result<Vec<Announcement>> {
        validate::name(board)?;
        self.inner.check_open()?;
        let read = self.inner.backend.announcements(board).await;
        let mut all: Vec<Announcement> = self
            .inner
            .closed_or_result(read)?
            .into_iter()
            .map(|(id, value)| Announcement { id, value })
            .collect();
        all.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(all)
    }

    /// Removes this Limiter's value from `board`; absent counts as removed.
    pub async fn withdraw(&self, board: &str) -> Result<()> {
        validate::name(board)?;
        self.inner.check_open()?;
        let removed = self.inner.backend.withdraw(board, &self.inner.id).await;
        self.inner.closed_or_result(removed)
    }

    /// The id this Limiter announces under (the [`Announcement::id`] of its values).
    pub fn announcer_id(&self) -> &str {
        &self.inner.id
    }

    /// Ends the session: every permit of this Limiter is released at once (one request on
    /// etcd: the lease is revoked), its permits report lost, waits fail with `Closed`, and later
    /// calls fail with `Closed`. Calling it again does nothing.
    ///
    /// Cancel-safe in effect: once started, the session is marked closed; if the revoke does not
    /// reach the store, the TTL frees the permits.
    pub async fn close(&self) -> Result<()> {
        if self.inner.is_closed() {
            return Ok(());
        }
        crate::rate_limit::lease_close::give_back_all(&self.inner).await;
        crate::rate_limit::approx_close::report_all(&self.inner).await;
        if self.inner.mark_closed() {
            return Ok(());
        }
        self.inner.backend.close().await
    }
}

/// What [`Limiter::set_capacity`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CapacityChange {
    /// The semaphore was absent: it was created with the capacity given.
    Created,
    /// The semaphore existed (or was just created by another client): its capacity is now the
    /// one given, whether or not it was before.
    Set,
}

/// Options for [`Limiter::builder`].
///
/// URL forms:
/// * `memory://NAME` — in-process; Limiters on the same NAME share semaphores.
/// * `etcd://HOST:PORT[,HOST:PORT…][/PREFIX]` — etcd v3 (3.4+); keys live under `PREFIX/`
///   (default `clusterlimit`).
/// * `zk://HOST:PORT[,HOST:PORT…][/CHROOT]` — ZooKeeper 3.6+ (persistent recursive watches);
///   nodes live under `/CHROOT` (default `/clusterlimit`), created if absent.
/// * `URL;URL[;URL…]` — rate-limit keys spread over several clusters of one kind, each key on
///   one (consistent hashing; `{tag}` keeps keys together); semaphores on the first. See
///   `docs/rate-limits.md`, "Sharding".
///
/// ```no_run
/// # async fn f() -> clusterlimit::Result<()> {
/// use std::time::Duration;
/// let limiter = clusterlimit::Limiter::builder("etcd://127.0.0.1:2379/myapp")
///     .session_ttl(Duration::from_secs(10))
///     .owner("host-a/worker-3")
///     .connect()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct LimiterBuilder {
    url: String,
    session_ttl: Duration,
    owner: Option<String>,
    request_timeout: Duration,
    connect_timeout: Option<Duration>,
    tls: Option<TlsFiles>,
    etcd_user: Option<EtcdUser>,
    zk_digest_file: Option<PathBuf>,
    clock: Clock,
    hot_key_leases: bool,
    approximate_hot_keys: bool,
}

/// How hot keys are served: from leases, or decided locally (at most one of them).
#[derive(Debug, Clone, Copy, Default)]
struct HotKeys {
    leases: bool,
    approximate: bool,
}

impl LimiterBuilder {
    /// Whether keys this Limiter checks hot are served from leases (default: no). A lease is
    /// a slice of a key's units taken in one write and spent here with no request, sized to
    /// about 100 ms of this Limiter's demand on the key: a key checked at any rate costs at
    /// most about 20 writes a second per Limiter, and never admits more than its quota (see
    /// `docs/rate-limits.md`, "Hot keys: leased units"). The price: while a key is leased, a
    /// check its slice does not cover is denied here until the next lease (up to ~100 ms),
    /// though the key may have units when demand jumps. Off: every check that admits goes to
    /// the store in its key's batch.
    pub fn hot_key_leases(mut self, on: bool) -> Self {
        self.hot_key_leases = on;
        self
    }

    /// Whether keys this Limiter checks hot are decided **locally, approximately** (default:
    /// no): checks never wait on the store, and the limit **may over-admit**. A hot key (the
    /// same test as [`hot_key_leases`](Self::hot_key_leases)) is decided on an in-memory meter
    /// holding this Limiter's max-min share of the quota (rate × share, burst × share), and
    /// every ~100 ms one write per key reports what was admitted and asked here since the
    /// last report, and reads back the share for the next interval and what the key owes. The
    /// key is charged what was admitted (past its limit if need be: its debt), and every
    /// holder's meter is brought up to the key's, so what was admitted beyond the quota is paid
    /// back and the long-run total converges to the quota.
    ///
    /// GCRA quotas only: a window's units are all there at its start, so shares settling
    /// after it started could let it admit far past its limit; window quotas keep the
    /// per-check path.
    ///
    /// **Overshoot bound.** It comes only from shares not yet converged: roughly `quota ×
    /// report interval × (holders joining ÷ holders)` per join (the new holders take their
    /// share at once, the others give theirs up at their next report) — Limiters starting
    /// together over-admit by up to about the quota's rate for two or three report intervals
    /// (~250 ms; longer while the store answers reports slowly) — plus what is admitted
    /// here while reports fail (checks stay local for at most ~1 s after the last report the
    /// store answered, then go to the store per check until one is answered again); the debt
    /// pays it back. Measured: within 5% of the quota over a run with holders joining (see
    /// `docs/rate-limits.md`, "Hot keys: approximate mode"). A Limiter closed cleanly reports
    /// what it admitted; one that dies leaves up to one report interval of its share
    /// uncounted.
    ///
    /// Exact leases, which never over-admit but may deny while a lease is asked, are
    /// [`hot_key_leases`](Self::hot_key_leases); both on is refused at
    /// [`connect`](Self::connect) (`InvalidArgument`). Off: every check that admits goes to
    /// the store in its key's batch.
    pub fn approximate_hot_keys(mut self, on: bool) -> Self {
        self.approximate_hot_keys = on;
        self
    }

    /// Session TTL (default 10 s, minimum 2 s; etcd rounds up to whole seconds; on ZooKeeper it
    /// is the session timeout, which the server may move into its own bounds, by default 2–20
    /// ticks). A dead holder's permits come back within it; a live holder's keepalives go out
    /// every TTL/3.
    pub fn session_ttl(mut self, ttl: Duration) -> Self {
        self.session_ttl = ttl;
        self
    }

    /// Owner label stored with every permit (default `HOSTNAME/PID`).
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }

    /// Bound on each store request (default 5 s).
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Bound on [`connect`](Self::connect) as a whole: reaching the store, authenticating and
    /// starting the session. A store that does not answer within it fails the connect with
    /// [`Error::Store`]. Without it, connect keeps to the bounds of its requests (about twice
    /// the request timeout), which leaves room to name a likely cause (e.g. TLS to a
    /// plain-text server); a refused connection or a host name that does not resolve fails at
    /// once either way.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// TLS for the store connection. etcd: overrides the URL's `cacert`/`cert`/`key` as a
    /// whole (files left out fall back to `ETCDCTL_*`) and makes an `etcd://` URL connect as
    /// `etcds://`. ZooKeeper: connects to the servers' `secureClientPort` (the CA is required;
    /// feature `zk-tls`). See `docs/security.md`.
    pub fn tls(mut self, files: TlsFiles) -> Self {
        self.tls = Some(files);
        self
    }

    /// etcd user authentication (overrides the URL's `user`/`password_file`).
    pub fn etcd_user(mut self, user: EtcdUser) -> Self {
        self.etcd_user = Some(user);
        self
    }

    /// ZooKeeper digest authentication from a file holding `user:password` (overrides the URL's
    /// `digest_file`).
    pub fn zk_digest_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.zk_digest_file = Some(path.into());
        self
    }

    /// The wall clock rate limits read (default: the system clock). Rate-limit state holds
    /// absolute times shared by every client, so clients' clocks should agree: a clock `Δ`
    /// ahead of the others can admit up to `Δ × limit / period` more on a key (see
    /// `docs/rate-limits.md`, "Clocks"). Semaphores do not read it.
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Connects and starts the session. Fails fast if the store does not answer.
    ///
    /// Cancel-safe: a session started by a dropped call is never used and expires by its TTL.
    pub async fn connect(self) -> Result<Limiter> {
        if self.session_ttl < MIN_SESSION_TTL {
            return Err(Error::invalid(format!(
                "session TTL must be at least {MIN_SESSION_TTL:?}, got {:?}",
                self.session_ttl
            )));
        }
        if self.request_timeout.is_zero() || self.request_timeout > MAX_REQUEST_TIMEOUT {
            return Err(Error::invalid(format!(
                "request timeout must be above zero and at most {MAX_REQUEST_TIMEOUT:?}, got {:?}",
                self.request_timeout
            )));
        }
        if let Some(t) = self.connect_timeout {
            if t.is_zero() || t > MAX_REQUEST_TIMEOUT {
                return Err(Error::invalid(format!(
                    "connect timeout must be above zero and at most {MAX_REQUEST_TIMEOUT:?}, got {t:?}"
                )));
            }
        }
        if self.hot_key_leases && self.approximate_hot_keys {
            return Err(Error::invalid(
                "hot keys are served either from exact leases (hot_key_leases) or decided \
                 approximately (approximate_hot_keys), not both: turn one of them off",
            ));
        }
        let url = StoreUrl::parse(&self.url)?;
        let options = StoreOptions {
            session_ttl: self.session_ttl,
            request_timeout: self.request_timeout,
            tls: self.tls.clone(),
            etcd_user: self.etcd_user.clone(),
            zk_digest_file: self.zk_digest_file.clone(),
            connect_timeout: self.connect_timeout,
            rate_only: false,
        };
        check_credentials_fit(&url, &options)?;
        let owner = self.owner.clone().unwrap_or_else(default_owner);
        validate::owner(&owner)?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::invalid("clusterlimit needs a Tokio runtime"));
        }
        // A sharded store bounds its opening itself, naming the cluster that did not answer.
        let bounded_here = !matches!(url, StoreUrl::Sharded { .. });
        let opening = open_store(url, &options);
        let backend = match self.connect_timeout.filter(|_| bounded_here) {
            None => opening.await?,
            Some(t) => tokio::time::timeout(t, opening).await.map_err(|_| {
                Error::store(format!(
                    "the store did not answer within {t:?} (the connect timeout)"
                ))
            })??,
        };
        Limiter::wrap(
            backend,
            owner,
            self.clock,
            self.request_timeout,
            HotKeys {
                leases: self.hot_key_leases,
                approximate: self.approximate_hot_keys,
            },
        )
    }
}

fn default_owner() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown-host".to_string());
    format!("{host}/{}", std::process::id())
}
