//! Connecting a front end to its store.

use super::exit;
use super::failure::Failure;
use super::store_security::StoreSecurity;
use clusterlimit::{redact, Error, Limiter, LimiterBuilder};
use std::time::Duration;

/// How long a front end waits for its store: to connect (reaching it, the session), and for
/// each request after that.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreTimeouts {
    /// Bound on the connect as a whole (`--connect-timeout`, `connect_timeout`).
    pub connect: Duration,
    /// Bound on each store request (`--request-timeout`, `request_timeout`).
    pub request: Duration,
}

impl Default for StoreTimeouts {
    fn default() -> Self {
        StoreTimeouts {
            connect: clusterlimit::Limiter::DEFAULT_REQUEST_TIMEOUT,
            request: clusterlimit::Limiter::DEFAULT_REQUEST_TIMEOUT,
        }
    }
}

/// Connects to `store` with the session TTL, owner label, store credentials and timeouts given
/// on the command line or in the sidecar's config. A bad URL or option is a usage failure
/// (exit 64); a store that cannot be reached, refuses or does not answer within the connect
/// timeout exits 69. Messages show the URL redacted.
pub async fn connect(
    store: &str,
    session_ttl: Duration,
    owner: Option<&str>,
    security: &StoreSecurity,
    timeouts: StoreTimeouts,
) -> Result<Limiter, Failure> {
    let builder = builder(store, session_ttl, owner, security, timeouts)?;
    open(store, builder).await
}

/// The builder [`connect`] connects with, for a front end that sets more options on it (the
/// sidecar's hot-key leases) before [`open`]. Refuses credentials in the URL and store
/// credentials that do not fit the store (exit 64).
pub fn builder(
    store: &str,
    session_ttl: Duration,
    owner: Option<&str>,
    security: &StoreSecurity,
    timeouts: StoreTimeouts,
) -> Result<LimiterBuilder, Failure> {
    refuse_userinfo(store)?;
    security.check(store)?;
    let mut builder = Limiter::builder(store)
        .session_ttl(session_ttl)
        .connect_timeout(timeouts.connect)
        .request_timeout(timeouts.request);
    if let Some(owner) = owner {
        builder = builder.owner(owner);
    }
    Ok(security.apply(store, builder))
}

/// Connects `builder` (made by [`builder`] for `store`): a bad option exits 64, a store that
/// cannot be reached, refuses or does not answer within the connect timeout exits 69.
pub async fn open(store: &str, builder: LimiterBuilder) -> Result<Limiter, Failure> {
    builder.connect().await.map_err(|e| match e {
        Error::InvalidArgument(_) => Failure::usage(e.to_string()),
        // The store's own words, without the "store error:" every store failure starts with.
        Error::Store(why) => Failure::new(
            exit::UNAVAILABLE,
            format!("cannot connect to {}: {why}", redact(store)),
        ),
        e => Failure::new(
            exit::UNAVAILABLE,
            format!("cannot connect to {}: {e}", redact(store)),
        ),
    })
}

/// Refuses a `user:password@` part in the store URL before the library sees it: the library
/// would refuse it too, but may quote the host part, password included, in its message.
pub fn refuse_userinfo(store: &str) -> Result<(), Failure> {
    let Some((_, rest)) = store.split_once("://") else {
        return Ok(());
    };
    let authority = rest.split(['/', '?']).next().unwrap_or("");
    if authority.contains('@') {
        return Err(Failure::usage(format!(
            "store URL {}: credentials are never put in a URL; use --etcd-user with \
             --etcd-password-file (etcd), --zk-digest-file (ZooKeeper), or ?user=NAME&password_file=PATH \
             (Redis)",
            redact(store)
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userinfo_is_refused_without_quoting_it() {
        let e = refuse_userinfo("etcd://u:hunter2@10.0.0.1:2379/p").unwrap_err();
        assert!(e.message.contains("never put in a URL"), "{}", e.message);
        assert!(!e.message.contains("hunter2"), "{}", e.message);
        assert!(refuse_userinfo("etcd://10.0.0.1:2379/p?user=u").is_ok());
        assert!(refuse_userinfo("memory://x").is_ok());
    }
}
