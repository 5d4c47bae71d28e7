//! What `Semaphore::status` reports.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A snapshot of one semaphore, read from the store.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> clusterlimit::Result<()> {
/// let limiter = clusterlimit::Limiter::builder("memory://status-doc").owner("host-a").connect().await?;
/// let sem = limiter.semaphore("exports", 3).await?;
/// let _permit = sem.acquire_many(2).await?;
/// let st = sem.status().await?;
/// assert_eq!((st.capacity, st.used, st.waiting), (3, 2, 0));
/// assert_eq!(st.holders[0].owner, "host-a");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct Status {
    /// Semaphore name.
    pub name: String,
    /// Capacity stored now.
    pub capacity: u32,
    /// Permits held (may exceed `capacity` right after a shrink: shrinking never revokes).
    pub used: u32,
    /// Holders in grant order.
    pub holders: Vec<Holder>,
    /// Requests waiting.
    pub waiting: usize,
    /// Permits those waiting requests ask for in total.
    pub waiting_permits: u64,
    /// The waiting requests in FIFO order: who waits, for how many permits, since when
    /// (`fencing_token` is the token the grant will carry).
    pub waiters: Vec<Holder>,
    /// On a fair semaphore, each class's guaranteed permits, permits held and requests waiting,
    /// in the class table's order (borrowing shows as `held` above `guaranteed`); empty on a
    /// plain semaphore.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub classes: Vec<ClassUsage>,
}

/// One class of a fair semaphore in [`Status::classes`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct ClassUsage {
    /// The class's name.
    pub name: String,
    /// Permits guaranteed to it at the current capacity.
    pub guaranteed: u32,
    /// Permits its requests hold.
    pub held: u32,
    /// Its requests waiting.
    pub waiting: usize,
    /// Flows with requests waiting in it, by name, sorted.
    pub waiting_flows: Vec<String>,
}

/// One holder of permits, or one request waiting for them (in [`Status::waiters`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct Holder {
    /// Owner label given by the holder's [`Limiter`](crate::Limiter) or acquire call.
    pub owner: String,
    /// Permits held.
    pub permits: u32,
    /// Fencing token of the grant.
    pub fencing_token: u64,
    /// When the request was made, in milliseconds since the Unix epoch (holder's clock).
    pub since_unix_ms: u64,
    /// On a fair semaphore, the request's flow (`None` on a plain one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flow: Option<String>,
    /// On a fair semaphore, the request's class (`None` on a plain one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
}

impl Holder {
    /// A holder (or waiting request) as a backend reports it, for [`Status::from_queue`].
    pub fn new(owner: &str, permits: u32, fencing_token: u64, since_unix_ms: u64) -> Holder {
        Holder {
            owner: owner.to_string(),
            permits,
            fencing_token,
            since_unix_ms,
            flow: None,
            class: None,
        }
    }

    /// The same request with its flow and class on a fair semaphore.
    pub fn in_flow(mut self, flow: &str, class: &str) -> Holder {
        self.flow = Some(flow.to_string());
        self.class = Some(class.to_string());
        self
    }

    /// When the request was made (holder's clock).
    pub fn since(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.since_unix_ms)
    }
}

impl Status {
    /// The status of a queue whose first `holders.len()` entries hold (in grant order, as
    /// [`crate::queue::holders`] counts them) and whose other entries, `waiting`, wait. The one
    /// place every backend builds a status; sums saturate.
    pub fn from_queue(
        name: &str,
        capacity: u32,
        holders: Vec<Holder>,
        waiters: Vec<Holder>,
    ) -> Status {
        Status {
            name: name.to_string(),
            capacity,
            used: holders
                .iter()
                .fold(0u32, |sum, h| sum.saturating_add(h.permits)),
            holders,
            waiting: waiters.len(),
            waiting_permits: waiters
                .iter()
                .fold(0u64, |sum, w| sum.saturating_add(u64::from(w.permits))),
            waiters,
            classes: Vec::new(),
        }
    }

    /// The same status with the classes of a fair semaphore: each class's usage is summed from
    /// the holders' and waiters' `class` (a request without one counts in the first class).
    pub fn with_classes(mut self, classes: &crate::fair::Classes) -> Status {
        let mins = classes.mins(self.capacity);
        let first = classes.name(0).unwrap_or_default();
        self.classes = (0..classes.len())
            .filter_map(|id| {
                let name = classes.name(id)?;
                let mine = |h: &&Holder| h.class.as_deref().unwrap_or(first) == name;
                let mut waiting_flows: Vec<String> = self
                    .waiters
                    .iter()
                    .filter(mine)
                    .filter_map(|w| w.flow.clone())
                    .collect();
                waiting_flows.sort();
                waiting_flows.dedup();
                Some(ClassUsage {
                    name: name.to_string(),
                    guaranteed: mins.get(id).copied().unwrap_or(0),
                    held: self
                        .holders
                        .iter()
                        .filter(mine)
                        .fold(0u32, |sum, h| sum.saturating_add(h.permits)),
                    waiting: self.waiters.iter().filter(mine).count(),
                    waiting_flows,
                })
            })
            .collect();
        self
    }
}

pub(crate) fn unix_ms_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
