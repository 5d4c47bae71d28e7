//! The one error type of the crate.

/// A boxed error from a store client, kept as the source of [`Error::Store`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong when taking, holding or managing permits.
///
/// Match the variants a caller can act on; the rest are failures to report:
///
/// ```
/// # async fn f(sem: clusterlimit::Semaphore) -> clusterlimit::Result<()> {
/// use clusterlimit::Error;
/// match sem.try_acquire().await {
///     Ok(permit) => permit.release().await?,
///     Err(Error::NoPermits) => println!("busy, try later"),
///     Err(Error::SessionLost) => println!("the store session ended; the next call starts a new one"),
///     Err(e @ Error::InvalidArgument(_)) => return Err(e), // a bug in the caller: the text says why
///     Err(e) => return Err(e),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The call's arguments are wrong (bad name, weight, capacity, URL, option); the text says why.
    /// Nothing was changed in the store.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// `try_acquire` found no free permits (or others waiting ahead in the FIFO queue).
    #[error("no permits available")]
    NoPermits,
    /// The wait ran out of time: for permits (the queue entry was removed), or for a rate
    /// limit to admit (nothing was consumed).
    #[error("timed out waiting for permits")]
    Timeout,
    /// The semaphore exists with another capacity than the one asked for.
    #[error("semaphore exists with capacity {stored}, not {requested}")]
    CapacityMismatch {
        /// Capacity stored in the store.
        stored: u32,
        /// Capacity the caller asked for.
        requested: u32,
    },
    /// The rate limit exists with another quota than the one asked for (open it with
    /// `open_rate_limit`, or change it with `set_quota`).
    #[error("rate limit exists with quota {stored}, not {requested}")]
    QuotaMismatch {
        /// Quota stored in the store (boxed: it keeps every `Result` of the crate small).
        stored: Box<crate::rate::quota::Quota>,
        /// Quota the caller asked for.
        requested: Box<crate::rate::quota::Quota>,
    },
    /// No semaphore or rate limit has this name (open one with a capacity or a quota to create
    /// it). Holds the name.
    #[error("no semaphore or rate limit named {0:?} exists")]
    NotFound(String),
    /// The store session (etcd lease, ZooKeeper session) this call depended on is gone or may be
    /// gone: permits of that session can no longer be trusted and waits are abandoned.
    #[error("store session lost")]
    SessionLost,
    /// The [`Limiter`](crate::Limiter) was closed.
    #[error("limiter is closed")]
    Closed,
    /// The store failed or could not be reached in time.
    #[error("store error: {}", chain(.0.as_ref()))]
    Store(#[source] BoxError),
}

/// `e`'s text followed by its sources' (each once): "a: b: c". Logs and messages show an error
/// this way, never as a debug dump.
pub(crate) fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let s_text = s.to_string();
        if !text.contains(&s_text) {
            text.push_str(": ");
            text.push_str(&s_text);
        }
        source = s.source();
    }
    text
}

impl Error {
    /// An [`InvalidArgument`](Error::InvalidArgument) saying what is wrong with the input.
    pub fn invalid(msg: impl Into<String>) -> Self {
        Error::InvalidArgument(msg.into())
    }

    /// A [`Store`](Error::Store) error: the store failed or did not answer in time.
    pub fn store(e: impl Into<BoxError>) -> Self {
        Error::Store(e.into())
    }

    /// The same error again, for each of several callers of one failed request (a store
    /// error's source becomes its text).
    pub(crate) fn copy(&self) -> Error {
        match self {
            Error::InvalidArgument(m) => Error::InvalidArgument(m.clone()),
            Error::NoPermits => Error::NoPermits,
            Error::Timeout => Error::Timeout,
            Error::CapacityMismatch { stored, requested } => Error::CapacityMismatch {
                stored: *stored,
                requested: *requested,
            },
            Error::QuotaMismatch { stored, requested } => Error::QuotaMismatch {
                stored: stored.clone(),
                requested: requested.clone(),
            },
            Error::NotFound(n) => Error::NotFound(n.clone()),
            Error::SessionLost => Error::SessionLost,
            Error::Closed => Error::Closed,
            Error::Store(s) => Error::store(s.to_string()),
        }
    }
}

/// Shorthand for `std::result::Result<T, clusterlimit::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;
