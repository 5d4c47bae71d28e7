//! Every request to ZooKeeper goes through here: one request bounded by the request timeout
//! (`call`), or retried across connection errors and lost sessions (`session_call`), and
//! ZooKeeper's errors as the crate's (`NoAuth` named after what it denied).

use super::view::{is_connection_error, is_terminal};
use super::ZkBackend;
use crate::backend::retry::Attempts;
use crate::error::{Error, Result};
use crate::stats::RequestKind;
use std::future::Future;
use zookeeper_client as zk;

impl ZkBackend {
    /// One store request, bounded by the request timeout; `kind` is counted.
    pub(super) async fn call<T>(
        &self,
        kind: RequestKind,
        request: impl Future<Output = std::result::Result<T, zk::Error>>,
    ) -> Result<T> {
        self.stats.count(kind);
        match tokio::time::timeout(self.config.request_timeout, request).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(self.map_error(e)),
            Err(_) => Err(Error::store("ZooKeeper did not answer in time")),
        }
    }

    pub(super) fn map_error(&self, e: zk::Error) -> Error {
        match e {
            zk::Error::AuthFailed => self.identity.rejected(),
            e if is_terminal(&e) => Error::SessionLost,
            e => Error::store(e),
        }
    }

    /// `e`, or if it is a `NoAuth` answer, an error saying that the ACL denied `what`.
    pub(super) fn denied_as(&self, e: Error, what: impl FnOnce() -> String) -> Error {
        if is_zk(&e, &zk::Error::NoAuth) {
            self.identity.denied(&what())
        } else {
            e
        }
    }

    /// [`rate_call`](Self::rate_call) for any request run in the live session (started if
    /// needed); `sweeps`: the client is handed to the rate-limit sweeper too.
    pub(super) async fn session_call<T, F, Fut>(
        &self,
        kind: RequestKind,
        what: &str,
        sweeps: bool,
        mut op: F,
    ) -> Result<T>
    where
        F: FnMut(zk::Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, zk::Error>>,
    {
        let mut attempts = Attempts::new(self.config.request_timeout);
        loop {
            let session = match self.session().await {
                Ok(s) => s,
                Err(Error::Closed) => return Err(Error::Closed),
                Err(e) => {
                    if attempts.again(true).await {
                        continue;
                    }
                    return Err(e);
                }
            };
            let client = match session.client() {
                Ok(c) => c,
                // Ended just now: the next turn starts a new session.
                Err(e) => {
                    if attempts.again(false).await {
                        continue;
                    }
                    return Err(e);
                }
            };
            if sweeps {
                self.sweeper.use_client(&client, session.stop_token());
            }
            self.stats.count(kind);
            let bound = tokio::time::Instant::now() + self.config.request_timeout;
            let r = tokio::time::timeout_at(bound.min(attempts.deadline()), op(client)).await;
            let e = match r {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) => e,
                Err(_) => {
                    return Err(Error::store(format!(
                        "ZooKeeper did not answer in time ({what})"
                    )))
                }
            };
            match &e {
                zk::Error::NoAuth => return Err(self.identity.denied(what)),
                zk::Error::AuthFailed => return Err(self.identity.rejected()),
                // Gone for good: end it here (the keeper may not have noticed yet), retry on
                // a new one.
                e if is_terminal(e) => session.end(),
                e if is_connection_error(e) => {}
                _ => return Err(self.map_error(e)),
            }
            tracing::debug!(error = %e, what, "ZooKeeper request failed; retrying");
            if !attempts.again(true).await {
                return Err(self.map_error(e));
            }
        }
    }
}

/// Whether `e` is the ZooKeeper error `z`.
pub(super) fn is_zk(e: &Error, z: &zk::Error) -> bool {
    matches!(e, Error::Store(inner) if inner.downcast_ref::<zk::Error>() == Some(z))
}

/// A `NoNode` store error for the semaphore's node means the semaphore does not exist.
pub(super) fn not_found_as(e: Error, name: &str) -> Error {
    if is_zk(&e, &zk::Error::NoNode) {
        Error::NotFound(name.to_string())
    } else {
        e
    }
}
