//! [`RateLimit`]: a handle to one cluster-wide rate limit ("at most N per period, per key"):
//! validates a check and hands it to its key's batch (`batch.rs`).

use super::batch::{self, Leased};
use super::options::{Asker, CheckOptions};
use super::registry::LimitShared;
use super::wait::{self, Waited};
use crate::error::{Error, Result};
use crate::limiter_inner::LimiterInner;
use crate::rate::reserves::ClassName;
use crate::rate::{Decision, Quota};
use crate::spans;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tracing::Instrument as _;

/// Longest key, in bytes of UTF-8.
pub const MAX_KEY_LEN: usize = 512;

/// A rate limit: at most [`Quota::limit`] per [`Quota::period`] for each key, across every
/// client of the store. Made by [`Limiter::rate_limit`](crate::Limiter::rate_limit) (create or
/// open) or [`Limiter::open_rate_limit`](crate::Limiter::open_rate_limit).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> clusterlimit::Result<()> {
/// use clusterlimit::{Limiter, Quota};
/// let limiter = Limiter::connect("memory://rate-doc").await?;
/// let api = limiter.rate_limit("api", Quota::per_second(100).burst(20)).await?;
/// let d = api.check("user-42").await?;
/// assert!(d.allowed);
/// assert_eq!(d.remaining, 19);
/// # Ok(()) }
/// ```
///
/// Cheap to clone; handles of one Limiter share what it knows of each key, so their concurrent
/// checks of a key coalesce into one store write.
#[derive(Debug, Clone)]
pub struct RateLimit {
    inner: Arc<LimiterInner>,
    limit: Arc<LimitShared>,
}

impl RateLimit {
    pub(crate) fn new(inner: Arc<LimiterInner>, limit: Arc<LimitShared>) -> RateLimit {
        RateLimit { inner, limit }
    }

    /// The limit's name.
    pub fn name(&self) -> &str {
        &self.limit.name
    }

    /// The quota as this Limiter last saw it in the store (a `set_quota` elsewhere is seen at
    /// the next write, or within a second of checks).
    pub fn quota(&self) -> Quota {
        self.limit.quota().0
    }

    /// Checks one request for `key`: admitted (and counted) or denied. Same as `check_n(key, 1)`.
    pub async fn check(&self, key: &str) -> Result<Decision> {
        self.check_n(key, 1).await
    }

    /// Checks a request of `cost` for `key`, all or nothing: admitted and consumed whole, or
    /// denied with nothing consumed. Cost 0 is a peek: `allowed` tells whether a request of 1
    /// would be admitted now, and nothing changes.
    ///
    /// Costs: a denial the last seen state proves takes no store request; an admitted check
    /// takes one compare-and-swap, shared with every concurrent check of the key in this
    /// Limiter; a conflict with another client takes one more (it brings the current state;
    /// from the third in a row, a short jittered pause and a fresh read come first).
    ///
    /// Errors: `InvalidArgument` for a bad key or a cost above the quota's burst (GCRA) or limit
    /// (windows), which could never be admitted; `NotFound` if the limit was deleted; `Store`
    /// if the store fails or no decision could be made within twice the request timeout (never
    /// a denial for that). Cancel-safe in that dropping the future never disturbs other
    /// checks; a dropped check may or may not have consumed its cost.
    pub async fn check_n(&self, key: &str, cost: u64) -> Result<Decision> {
        self.validate(key, cost)?;
        self.inner.check_open()?;
        self.decide(key, cost, Asker::default(), Leased::May, None)
            .await
    }

    /// A check as `options` say: its cost, its priority class, its flow, its budget.
    ///
    /// With a class, the check is admitted only if at least the class's reserve would still
    /// be left after it (so a check of `cost` passes exactly when one of `cost + reserve`
    /// without a class would, and takes `cost`); `remaining` and `retry_after` are the
    /// class's: what it can still take, when it could take `cost`. Checks of different classes
    /// coalesce into one write like any others, each decided in turn against what the ones
    /// before it left.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> clusterlimit::Result<()> {
    /// use clusterlimit::{CheckOptions, Limiter, Quota};
    /// let limiter = Limiter::connect("memory://check-with-doc").await?;
    /// let jobs = limiter
    ///     .rate_limit("jobs", Quota::per_minute(10).reserve("batch", 3))
    ///     .await?;
    /// let batch = CheckOptions::new().class("batch");
    /// let d = jobs.check_with("tenant-1", batch.clone().cost(7)).await?;
    /// assert!(d.allowed);
    /// assert_eq!(d.remaining, 0); // batch has used all it may: 3 are kept
    /// assert!(!jobs.check_with("tenant-1", batch).await?.allowed);
    /// assert!(jobs.check("tenant-1").await?.allowed); // no class: may use the reserve
    /// # Ok(()) }
    /// ```
    ///
    /// With a flow, on a quota with fair flows ([`Quota::fair_flows`]), the check must also
    /// leave the other flows checking the key what they are due and have not used yet;
    /// `remaining` and `retry_after` are the flow's. On other quotas the flow is ignored.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> clusterlimit::Result<()> {
    /// use clusterlimit::{CheckOptions, Limiter, Quota};
    /// let limiter = Limiter::connect("memory://check-flow-doc").await?;
    /// let api = limiter.rate_limit("api", Quota::per_hour(100).fair_flows()).await?;
    /// let of = |tenant: &str| CheckOptions::new().flow(tenant);
    /// assert!(api.check_with("all", of("light").cost(10)).await?.allowed);
    /// // Light has asked 10 and used them: heavy may take the other 90.
    /// let d = api.check_with("all", of("heavy").cost(90)).await?;
    /// assert!(d.allowed && d.remaining == 0);
    /// # Ok(()) }
    /// ```
    ///
    /// Errors as [`check_n`](Self::check_n) (and `Timeout` with a budget, as
    /// [`check_within`](Self::check_within)); `InvalidArgument` also for a class the quota
    /// does not declare, or a cost above what the class can ever take (the quota's burst, or
    /// limit for windows, less its reserve), or a flow name that is not one (1–128 bytes, no
    /// control characters). A class removed by a `set_quota` elsewhere
    /// after the check was validated is denied with a `retry_after` meaning never.
    pub async fn check_with(&self, key: &str, options: CheckOptions) -> Result<Decision> {
        let leased = match options.is_reserving() {
            true => Leased::Never,
            false => Leased::May,
        };
        let cost = options.cost_of();
        let asker = self.asker(key, &options)?;
        let deadline = options
            .budget_of()
            .and_then(|b| Instant::now().checked_add(b));
        self.check_leased_by(key, cost, asker, leased, deadline)
            .await
    }

    /// The key, the class and the flow of `options` checked: who the check is.
    fn asker(&self, key: &str, options: &CheckOptions) -> Result<Asker> {
        validate_key(key)?;
        // A name that is no class name is no class of the quota: refused as unknown.
        self.quota()
            .check_class(self.name(), options.class_of(), options.cost_of())?;
        Asker::new(options.class_of(), options.flow_of())
    }

    /// [`check_n`](Self::check_n) with a deadline: the decision, or `Timeout` once `budget`
    /// has passed. For callers that owe someone an answer by a time (an RLS answering Envoy,
    /// an HTTP request with a timeout): pacing never holds the check for more than half of
    /// what is left of its budget (a paced key then writes at once, with every check
    /// waiting), so a hot key answers as fast as a cold one. A check still waits for its key's
    /// write already in flight, and is not turned away by pacing while that write has waited
    /// on the store longer than the budget: its deadline answers then.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> clusterlimit::Result<()> {
    /// use clusterlimit::{Limiter, Quota};
    /// use std::time::Duration;
    /// let limiter = Limiter::connect("memory://check-within-doc").await?;
    /// let api = limiter.rate_limit("api", Quota::per_second(100)).await?;
    /// let d = api.check_within("user-42", 1, Duration::from_millis(20)).await?;
    /// assert!(d.allowed);
    /// # Ok(()) }
    /// ```
    ///
    /// A `Timeout` says nothing about the limit, and the check's write may still reach the
    /// store after it (so its cost may be consumed). Other errors as `check_n`.
    pub async fn check_within(&self, key: &str, cost: u64, budget: Duration) -> Result<Decision> {
        self.check_by(key, cost, Instant::now().checked_add(budget))
            .await
    }

    /// `check_n` answered by `deadline` (`None`: no deadline).
    pub(crate) async fn check_by(
        &self,
        key: &str,
        cost: u64,
        deadline: Option<Instant>,
    ) -> Result<Decision> {
        self.check_class_by(key, cost, None, deadline).await
    }

    /// `check_by` of priority class `class` (`None`: none); the class must be one of the
    /// quota's (`Quota::check_class`) or the check is refused.
    pub(crate) async fn check_class_by(
        &self,
        key: &str,
        cost: u64,
        class: Option<ClassName>,
        deadline: Option<Instant>,
    ) -> Result<Decision> {
        self.check_as_by(key, cost, Asker::of_class(class), deadline)
            .await
    }

    /// `check_by` by `asker`: its class must be one of the quota's (`Quota::check_class`) or
    /// the check is refused; its flow counts on a quota with fair flows.
    pub(crate) async fn check_as_by(
        &self,
        key: &str,
        cost: u64,
        asker: Asker,
        deadline: Option<Instant>,
    ) -> Result<Decision> {
        self.check_leased_by(key, cost, asker, Leased::May, deadline)
            .await
    }

    /// `check_as_by`, from a lease of this Limiter only if `leased` says it may be.
    async fn check_leased_by(
        &self,
        key: &str,
        cost: u64,
        asker: Asker,
        leased: Leased,
        deadline: Option<Instant>,
    ) -> Result<Decision> {
        validate_key(key)?;
        self.quota()
            .check_class(self.name(), asker.class_name(), cost)?;
        self.inner.check_open()?;
        self.decide(key, cost, asker, leased, deadline).await
    }

    /// The check in its batch (`batch.rs`), inside a `rate_limit.check` span that records the
    /// decision (`spans.rs`): the store request of its batch is a child.
    async fn decide(
        &self,
        key: &str,
        cost: u64,
        asker: Asker,
        leased: Leased,
        deadline: Option<Instant>,
    ) -> Result<Decision> {
        let span = spans::rate_check(self.name(), key, cost);
        let checked = batch::check(&self.inner, &self.limit, key, cost, asker, leased, deadline);
        spans::decided(&span, checked.instrument(span.clone()).await)
    }

    /// Waits until a request of 1 for `key` is admitted (shaping, like nginx's `limit_req`
    /// with delay): checks, and after a denial sleeps its `retry_after`, as long as it takes.
    pub async fn wait(&self, key: &str) -> Result<Decision> {
        self.wait_for(key, 1, None).await
    }

    /// Waits until a request of `cost` for `key` is admitted.
    pub async fn wait_n(&self, key: &str, cost: u64) -> Result<Decision> {
        self.wait_for(key, cost, None).await
    }

    /// Waits at most `timeout` for a request of `cost` for `key` to be admitted. `Timeout`
    /// consumes nothing; it comes at once when a denial's `retry_after` already reaches past the
    /// deadline, and at the deadline when the store does not answer (a check gets at least
    /// 100 ms, so a timeout of zero is one check; then, as for
    /// [`check_within`](Self::check_within), the last check's write may still land).
    /// Cancel-safe: dropping it between checks consumes nothing.
    pub async fn wait_timeout(&self, key: &str, cost: u64, timeout: Duration) -> Result<Decision> {
        // A timeout too long to represent is no timeout.
        self.wait_for(key, cost, Instant::now().checked_add(timeout))
            .await
    }

    /// Waits until a request of `cost` for `key` is admitted, or until `deadline` (`None`:
    /// none) would pass before its next chance: checks, and after a denial sleeps its
    /// `retry_after`. The one wait every waiting surface uses (the tower layer's wait mode
    /// through [`StoreDownGuard::wait_until`](crate::StoreDownGuard::wait_until),
    /// `clusterlimit rate wait`, the sidecar's `/wait`).
    ///
    /// Returns [`Waited::Admitted`] with the decision that consumed the cost,
    /// [`Waited::Denied`] with the last denial when the next chance lies past the deadline
    /// (at once, without sleeping, when the first denial already says so), or
    /// [`Waited::Never`] when the quota now stored can never admit the cost.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> clusterlimit::Result<()> {
    /// use clusterlimit::{Limiter, Quota, Waited};
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    /// let limiter = Limiter::connect("memory://wait-until-doc").await?;
    /// let jobs = limiter.rate_limit("jobs", Quota::per_minute(1)).await?;
    /// let soon = Instant::now() + Duration::from_millis(50);
    /// assert!(matches!(jobs.wait_until("host-a", 1, Some(soon)).await?, Waited::Admitted(_)));
    /// // The next one is a minute away: denied at once, nothing consumed.
    /// assert!(matches!(jobs.wait_until("host-a", 1, Some(soon)).await?, Waited::Denied(_)));
    /// # Ok(()) }
    /// ```
    ///
    /// Errors: `InvalidArgument` for a bad key, a cost of 0 (a peek: use
    /// [`check_n`](Self::check_n)) or above the quota; `Timeout` when the store does not
    /// answer a check by the deadline (a check gets at least 100 ms, so a deadline of now is
    /// one check; that check's write may still land); the rest as
    /// `check_n`. Cancel-safe: dropping it between checks consumes nothing.
    pub async fn wait_until(
        &self,
        key: &str,
        cost: u64,
        deadline: Option<Instant>,
    ) -> Result<Waited> {
        if cost == 0 {
            return Err(Error::invalid(
                "a wait needs a cost of at least 1 (cost 0 is a peek: use check_n)",
            ));
        }
        self.validate(key, cost)?;
        wait::until(deadline, std::future::pending(), |deadline| {
            // Each check answers by the deadline too: a hung store cannot stretch the wait.
            self.check_by(key, cost, deadline)
        })
        .instrument(spans::rate_wait(self.name(), key, cost))
        .await
    }

    /// [`wait_until`](Self::wait_until) as `options` say: their cost, priority class and flow
    /// (see [`check_with`](Self::check_with)), and their budget ([`CheckOptions::within`]) as the
    /// deadline (none: as long as it takes).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> clusterlimit::Result<()> {
    /// use clusterlimit::{CheckOptions, Limiter, Quota, Waited};
    /// use std::time::Duration;
    /// let limiter = Limiter::connect("memory://wait-with-doc").await?;
    /// let jobs = limiter.rate_limit("jobs", Quota::per_minute(10).reserve("batch", 9)).await?;
    /// let batch = CheckOptions::new().class("batch").within(Duration::from_millis(50));
    /// assert!(matches!(jobs.wait_with("host-a", batch.clone()).await?, Waited::Admitted(_)));
    /// // Batch may take 1 of 10; the next is 6 s away: denied at once, nothing consumed.
    /// assert!(matches!(jobs.wait_with("host-a", batch).await?, Waited::Denied(_)));
    /// # Ok(()) }
    /// ```
    ///
    /// Errors as [`wait_until`](Self::wait_until), and `InvalidArgument` for a class the
    /// quota does not declare, a cost above what the class can ever take, or a bad flow name.
    pub async fn wait_with(&self, key: &str, options: CheckOptions) -> Result<Waited> {
        let cost = options.cost_of();
        if cost == 0 {
            return Err(Error::invalid(
                "a wait needs a cost of at least 1 (cost 0 is a peek: use check_with)",
            ));
        }
        let asker = self.asker(key, &options)?;
        let deadline = options
            .budget_of()
            .and_then(|b| Instant::now().checked_add(b));
        wait::until(deadline, std::future::pending(), |deadline| {
            self.check_as_by(key, cost, asker, deadline)
        })
        .instrument(spans::rate_wait(self.name(), key, cost))
        .await
    }

    /// [`wait_until`](Self::wait_until) as the `wait*` methods answer: the admission, or an
    /// error for the rest.
    async fn wait_for(&self, key: &str, cost: u64, deadline: Option<Instant>) -> Result<Decision> {
        match self.wait_until(key, cost, deadline).await? {
            Waited::Admitted(d) => Ok(d),
            Waited::Never(_) => Err(Error::invalid(format!(
                "cost {cost} can never be admitted by the quota now stored ({})",
                self.quota()
            ))),
            Waited::Denied(_) | Waited::Stopped => Err(Error::Timeout),
        }
    }

    /// Forgets `key`: its next check starts from a full bucket or an empty window (and any ban
    /// ends). Other Limiters see it at their next write, or within a second of checks.
    pub async fn reset(&self, key: &str) -> Result<()> {
        validate_key(key)?;
        self.inner.check_open()?;
        let store = batch::rate_store(&self.inner)?;
        let deleted = store.delete_key(&self.limit.name, key).await;
        self.limit.forget(key);
        self.inner.closed_or_result(deleted)
    }

    /// Changes the quota for every client: each applies it from its next write (a write made
    /// with the old quota fails and is decided again), and within a second for checks answered
    /// without a write. Key states carry over (GCRA's arrival time and window counts are
    /// absolute); a state of another algorithm starts full.
    pub async fn set_quota(&self, quota: Quota) -> Result<()> {
        quota.validate()?;
        self.inner.check_open()?;
        let store = batch::rate_store(&self.inner)?;
        let version = self
            .inner
            .closed_or_result(store.put_limit(&self.limit.name, &quota.encode()).await)?;
        self.limit.learn_quota(quota, version);
        Ok(())
    }

    /// Key states this Limiter holds in memory for this limit (each at most a few hundred
    /// bytes). Bounded: when the map reaches 4,096 keys, or twice what it held after the last
    /// sweep, the idle ones (no check waiting, state back to full) are dropped.
    pub fn cached_keys(&self) -> usize {
        self.limit.cells()
    }

    fn validate(&self, key: &str, cost: u64) -> Result<()> {
        validate_key(key)?;
        self.quota().check_cost(self.name(), cost)
    }

    pub(crate) fn inner(&self) -> &Arc<LimiterInner> {
        &self.inner
    }

    pub(crate) fn shared(&self) -> &Arc<LimitShared> {
        &self.limit
    }
}

/// A key is any non-empty UTF-8 of at most [`MAX_KEY_LEN`] bytes.
pub(crate) fn validate_key(key: &str) -> Result<()> {
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        return Err(Error::invalid(format!(
            "rate-limit key must be 1-{MAX_KEY_LEN} bytes, got {}",
            key.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::{Limiter, Quota};
    use std::time::Duration;

    fn runtime() -> tokio::runtime::Runtime {
        match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => panic!("runtime: {e}"),
        }
    }

    /// The batch task is spawned on the Limiter's runtime: once that is gone, a check from
    /// another runtime fails instead of waiting forever for a task that never runs.
    #[test]
    fn a_check_after_the_limiters_runtime_is_gone_fails_instead_of_hanging() {
        let first = runtime();
        let (limiter, rl) = first.block_on(async {
            let l = Limiter::connect("memory://rate-runtime-gone")
                .await
                .expect("connect");
            let rl = l
                .rate_limit("x", Quota::per_second(10))
                .await
                .expect("open");
            (l, rl)
        });
        drop(first);
        let second = runtime();
        let answer = second
            .block_on(async { tokio::time::timeout(Duration::from_secs(5), rl.check("k")).await });
        assert!(matches!(answer, Ok(Err(_))), "{answer:?}");
        drop(limiter);
    }

    /// A caller looping on denials answered without a request (no sleep between checks) must
    /// still let other tasks of its thread run: `check` yields once the coop budget is spent.
    #[tokio::test(flavor = "current_thread")]
    async fn a_loop_on_local_denials_lets_other_tasks_run() {
        let l = Limiter::connect("memory://rate-coop")
            .await
            .expect("connect");
        let rl = l
            .rate_limit("x", Quota::per_minute(1).burst(1))
            .await
            .expect("open");
        assert!(rl.check("k").await.expect("first").allowed);
        let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let setter = flag.clone();
        tokio::spawn(async move { setter.store(true, std::sync::atomic::Ordering::SeqCst) });
        let mut spins = 0u32;
        while !flag.load(std::sync::atomic::Ordering::SeqCst) && spins < 100_000 {
            let d = rl.check("k").await.expect("check");
            assert!(!d.allowed);
            spins += 1;
        }
        assert!(
            flag.load(std::sync::atomic::Ordering::SeqCst),
            "the other task never ran in {spins} checks"
        );
    }

    #[tokio::test]
    async fn an_unrepresentable_request_timeout_is_refused() {
        let err = Limiter::builder("memory://rate-timeout")
            .request_timeout(Duration::MAX)
            .connect()
            .await
            .err();
        assert!(
            matches!(err, Some(crate::Error::InvalidArgument(_))),
            "{err:?}"
        );
    }
}
