//! Connecting a front end to its store.

use super::exit;
use super::failure::Failure;
use clusterlimit::{Error, Limiter};
use std::time::Duration;

/// Connects to `store` with the session TTL and owner label given on the command line or in
/// the sidecar's config. A bad URL or option is a usage failure (exit 64); a store that cannot
/// be reached exits 69.
pub async fn connect(
    store: &str,
    session_ttl: Duration,
    owner: Option<&str>,
) -> Result<Limiter, Failure> {
    let mut builder = Limiter::builder(store).session_ttl(session_ttl);
    if let Some(owner) = owner {
        builder = builder.owner(owner);
    }
    builder.connect().await.map_err(|e| match e {
        Error::InvalidArgument(_) => Failure::usage(e.to_string()),
        e => Failure::new(exit::UNAVAILABLE, format!("cannot connect to {store}: {e}")),
    })
}
