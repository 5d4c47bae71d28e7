//! What every `rate` subcommand starts with: its NAME and KEY checked, a one-shot connection
//! closed whatever the outcome, and (`status`, `reset`) the limit as stored.

use crate::cli::deadline::{self, Deadline};
use crate::cli::store_arg::StoreArg;
use crate::common::{exit, Failure};
use clusterlimit::{Error, Limiter, RateLimit};

/// Runs `body` on a one-shot connection, closing it whatever the outcome.
pub async fn with_limiter<T>(
    store: &StoreArg,
    body: impl AsyncFnOnce(&Limiter) -> Result<T, Failure>,
) -> Result<T, Failure> {
    with_limiter_by(store, Deadline::after(None), body).await
}

/// [`with_limiter`], the connect bounded by `deadline` too (`rate wait --timeout`).
pub async fn with_limiter_by<T>(
    store: &StoreArg,
    deadline: Deadline,
    body: impl AsyncFnOnce(&Limiter) -> Result<T, Failure>,
) -> Result<T, Failure> {
    let connecting = format!("connecting to {}", clusterlimit::redact(&store.store));
    let limiter = deadline.bound(&connecting, store.connect_once()).await?;
    let result = body(&limiter).await;
    let store_failed = matches!(&result, Err(f) if f.code == exit::UNAVAILABLE);
    deadline::close(&limiter, store_failed, store.request_timeout).await;
    result
}

pub fn check_key(key: &str) -> Result<(), Failure> {
    if key.is_empty() || key.len() > RateLimit::MAX_KEY_LEN {
        return Err(Failure::usage(format!(
            "KEY must be 1-{} bytes of UTF-8, got {} bytes",
            RateLimit::MAX_KEY_LEN,
            key.len()
        )));
    }
    Ok(())
}

pub fn name_error(e: Error) -> Failure {
    match e {
        Error::InvalidArgument(why) => Failure::usage(format!("NAME: {why}")),
        e => Failure::from_lib(e),
    }
}

/// Opens an existing `name` (`status`, `reset`: they take no quota). Absent: exit 1, as
/// `status NAME`, with how to create it.
pub async fn open_existing(limiter: &Limiter, name: &str) -> Result<RateLimit, Failure> {
    let hint = format!("create it with `clusterlimit rate set-quota {name} --limit N --per DUR`");
    open_stored(limiter, name, &hint).await
}

/// Opens `name` as stored; absent: exit 1 with `hint`.
pub async fn open_stored(limiter: &Limiter, name: &str, hint: &str) -> Result<RateLimit, Failure> {
    limiter.open_rate_limit(name).await.map_err(|e| match e {
        Error::NotFound(_) => Failure::new(
            exit::FAILURE,
            format!("rate limit {name:?} does not exist; {hint}"),
        ),
        e => name_error(e),
    })
}
