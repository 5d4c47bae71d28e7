//! Opening a fair semaphore: [`Limiter::fair_semaphore`].

use crate::error::Result;
use crate::fair::Classes;
use crate::limiter::Limiter;
use crate::semaphore::Semaphore;
use crate::validate;

impl Limiter {
    /// Creates the **fair** semaphore `name` with `capacity` and `classes` if absent, or opens
    /// it. A fair semaphore shares its capacity between the flows of its acquires by weight
    /// (one flow's 1,000 waiters delay another flow's next request by at most one grant) and
    /// between its classes, each with a guaranteed share it lends while idle and gets back
    /// release by release (see [`crate::fair`] for the rule and
    /// [`AcquireOptions::flow`](crate::AcquireOptions::flow) for how an acquire names its
    /// flow, class and weight). Holders are never revoked; fencing, `lost()`, timeouts and
    /// weights work as on a plain semaphore, and an acquire that names nothing is in the flow
    /// `"default"` of the first class. `Classes::single()` (one class): flows only.
    ///
    /// Errors: `InvalidArgument` for a bad name or capacity, classes whose guaranteed permits do
    /// not fit in the capacity, a store that keeps no fair semaphores (every store of the crate
    /// keeps them; a backend written outside it may not), a plain semaphore of that name, or one with other
    /// classes (the message names both tables); `CapacityMismatch` as for
    /// [`semaphore`](Limiter::semaphore). [`open_semaphore`](Limiter::open_semaphore) opens a
    /// fair semaphore too, and [`set_capacity`](Limiter::set_capacity) resizes it (refusing a
    /// capacity the classes' guaranteed permits do not fit in).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> clusterlimit::Result<()> {
    /// use clusterlimit::{fair::Classes, AcquireOptions, Limiter};
    /// let limiter = Limiter::connect("memory://fair-doc").await?;
    /// let classes: Classes = "critical=25%,batch".parse()?;
    /// let db = limiter.fair_semaphore("db", 8, classes).await?;
    /// let p = db.acquire_with(AcquireOptions::new().flow("tenant-a").class("batch")).await?;
    /// let st = db.status().await?;
    /// assert_eq!((st.classes[1].name.as_str(), st.classes[1].held), ("batch", 1));
    /// assert_eq!(st.holders[0].flow.as_deref(), Some("tenant-a"));
    /// p.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn fair_semaphore(
        &self,
        name: &str,
        capacity: u32,
        classes: Classes,
    ) -> Result<Semaphore> {
        validate::name(name)?;
        validate::capacity(capacity)?;
        classes.check(capacity)?;
        self.inner.check_open()?;
        let ensured = self
            .inner
            .backend
            .ensure_fair_semaphore(name, Some(capacity), Some(&classes))
            .await;
        self.inner.closed_or_result(ensured)?;
        Ok(Semaphore::new(self.inner.clone(), name))
    }
}
