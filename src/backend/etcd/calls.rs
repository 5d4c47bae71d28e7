//! The link to etcd that every part of the backend shares ([`Link`]: members, key layout,
//! settings, security, counters, stop), and every request to etcd goes through it: sent to one
//! member at a time, each attempt bounded (`attempt.rs`), transient failures retried under the
//! shared policy ([`Attempts`]) until the call's deadline, refusals (TLS, authentication,
//! permissions) named and never retried. The parts (`lease.rs`, `entries.rs`, `semaphore.rs`,
//! `board.rs`, `rate.rs`) hold an `Arc` of it; it knows none of them.

use super::attempt::{
    attempt_timeout, is_transient, Until, AUTH_FACTOR, FIRST_ATTEMPT, LATENCY_FACTOR,
    SHORT_ATTEMPTS,
};
use super::config::EtcdConfig;
use super::endpoints::Endpoints;
use super::keys::Keys;
use super::security::Security;
use super::session::{self, Session};
use super::{describe, tls_probe};
use crate::backend::retry::Attempts;
use crate::backend::Stop;
use crate::error::{Error, Result};
use crate::stats::{RequestCounters, RequestKind};
use etcd_client::{Client, GetOptions, Txn};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// What every request needs: the connected members, the key layout, the settings, how the
/// connection is secured (to name the cause of a refusal), the request counters, and the stop
/// of the whole backend.
pub(super) struct Link {
    pub(super) endpoints: Arc<Endpoints>,
    pub(super) keys: Keys,
    pub(super) config: EtcdConfig,
    /// How the connection is secured, to name the cause of a refusal.
    pub(super) security: Security,
    pub(super) stats: Arc<RequestCounters>,
    /// Set by close/shutdown: stops every background task and retry of this backend.
    pub(super) stop: Stop,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Link {
    /// Sends an idempotent request, retrying transient failures under the shared policy
    /// ([`Attempts`]) until the call's deadline or the backend's stop.
    pub(super) async fn retry<T, F, Fut>(&self, kind: RequestKind, op: F) -> Result<T>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        self.retry_until(kind, Until::Deadline, op).await
    }

    /// [`retry`](Self::retry) of a write bound to `session`'s lease: it stops when the session
    /// is lost, and then fails with `SessionLost`.
    pub(super) async fn retry_in<T, F, Fut>(
        &self,
        session: &Session,
        kind: RequestKind,
        op: F,
    ) -> Result<T>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        self.retry_until(kind, Until::SessionLive(&session.lost), op)
            .await
            .map_err(|e| {
                if session.lost.is_lost() {
                    Error::SessionLost
                } else {
                    e
                }
            })
    }

    /// [`retry`](Self::retry), stopping also as `until` says.
    pub(super) async fn retry_until<T, F, Fut>(
        &self,
        kind: RequestKind,
        until: Until<'_>,
        mut op: F,
    ) -> Result<T>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        let mut attempts = Attempts::new(self.config.request_timeout);
        let max_attempt = attempt_timeout(self.config.request_timeout);
        let mut bound = FIRST_ATTEMPT
            .max(self.endpoints.latency() * LATENCY_FACTOR)
            // Room for one re-authentication (an expired token) within the attempt.
            .max(self.endpoints.auth_time() * AUTH_FACTOR)
            .min(max_attempt);
        let mut timeouts = 0u32;
        let mut probed = false;
        // A likely cause seen on any attempt (the last failure may be a mere timeout).
        let mut hint = None;
        loop {
            if !matches!(until, Until::Closing) {
                self.stop.check()?;
            }
            self.stats.count(kind);
            let (member, client) = self.endpoints.pick();
            let sent = tokio::time::Instant::now();
            let mut timed_out = false;
            let failure = match tokio::time::timeout(bound, op(client)).await {
                Ok(Ok(v)) => {
                    self.endpoints.answered_in(sent.elapsed());
                    return Ok(v);
                }
                Ok(Err(e)) => {
                    // Refused for TLS, authentication or permissions: no retry changes that.
                    if let Some(refused) = self.refused(&e, member, bound, &mut probed).await {
                        return Err(refused);
                    }
                    if is_transient(&e) {
                        hint = self.security.hint(&e).or(hint);
                        Error::store(describe::failure(&e))
                    } else if session::is_lease_not_found(&e) {
                        // A write bound to a lease that etcd no longer has: the session is gone.
                        return Err(Error::SessionLost);
                    } else {
                        return Err(Error::store(describe::failure(&e)));
                    }
                }
                Err(_) => {
                    let e = Error::store(format!("etcd did not answer within {bound:?}"));
                    timed_out = true;
                    timeouts += 1;
                    if timeouts >= SHORT_ATTEMPTS {
                        bound = (bound * 2).min(max_attempt);
                    }
                    e
                }
            };
            // Whatever failed here, the next attempt goes to another member.
            self.endpoints.failed(member);
            if matches!(until, Until::SessionLive(lost) if lost.is_lost()) {
                return Err(failure);
            }
            // After a timeout the time is spent already and the next member is another one:
            // ask at once. Fast failures (a member that refuses, no leader yet) back off.
            if !attempts.again(!timed_out).await {
                return Err(match (hint, failure) {
                    (Some(hint), Error::Store(last)) => {
                        Error::store(format!("{hint}; last failure: {last}"))
                    }
                    (_, failure) => failure,
                });
            }
            tracing::debug!(error = %failure, attempts = attempts.made(), "transient etcd failure; retrying");
        }
    }

    /// The clear error if etcd refused the request for TLS, authentication or permissions (no
    /// retry changes that). A TLS connection closed under the request gets one handshake of
    /// our own per call (`probed`), in case etcd's certificate alert lost a race (tls_probe.rs).
    async fn refused(
        &self,
        e: &etcd_client::Error,
        member: usize,
        bound: Duration,
        probed: &mut bool,
    ) -> Option<Error> {
        if let Some(refused) = self.security.refusal(e) {
            return Some(refused);
        }
        let tls = self.security.closed_under_us(e).filter(|_| !*probed)?;
        *probed = true;
        let text = tls_probe::failure(self.endpoints.url(member), tls, bound).await?;
        self.security.tls_refusal(&text)
    }

    /// Sends a Txn whose retry is harmless (its compares make a repeated apply a no-op).
    pub(super) async fn txn(&self, txn: Txn) -> Result<etcd_client::TxnResponse> {
        self.retry(RequestKind::Txn, |mut c| {
            let t = txn.clone();
            async move { c.txn(t).await }
        })
        .await
    }

    /// The sorted names of the keys under `prefix` (one keys-only range): semaphores under
    /// `names/`, rate limits under `rq/`.
    pub(super) async fn names_under(&self, prefix: String) -> Result<Vec<String>> {
        let resp = self
            .retry(RequestKind::Range, |mut c| {
                let p = prefix.clone();
                async move {
                    c.get(p, Some(GetOptions::new().with_prefix().with_keys_only()))
                        .await
                }
            })
            .await?;
        let mut names: Vec<String> = resp
            .kvs()
            .iter()
            .filter_map(|kv| kv.key_str().ok())
            .filter_map(|k| k.strip_prefix(prefix.as_str()))
            .map(str::to_string)
            .collect();
        names.sort();
        Ok(names)
    }
}
