//! The bound under every wait of the suite: a future awaited for at most a given time.

use std::future::Future;
use std::time::Duration;

/// Awaits `fut`; panics if it takes longer than `limit`, naming `what`.
pub async fn within<T>(what: &str, limit: Duration, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(limit, fut).await {
        Ok(v) => v,
        Err(_) => panic!("{what}: did not complete within {limit:?}"),
    }
}
