//! Connecting to etcd, and the lease sessions of a connected backend: granted on first use,
//! again after a loss, revoked when ended.

use super::attempt::{attempt_timeout, Until, FIRST_ATTEMPT};
use super::config::EtcdConfig;
use super::endpoints::Endpoints;
use super::keys::Keys;
use super::security::{self, Security};
use super::session::Session;
use super::strays::Strays;
use super::sweep_state::EtcdSweep;
use super::sweeper::Sweeper;
use super::{describe, tls_probe, EtcdBackend};
use crate::backend::{lock, reach, SessionSlot, Stop};
use crate::error::{Error, Result};
use crate::stats::{RequestCounters, RequestKind};
use etcd_client::ConnectOptions;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long an entry nobody owns is left alone before it is removed (see `strays.rs`).
const STRAY_GRACE: Duration = Duration::from_millis(200);

impl EtcdBackend {
    /// Connects and grants the session lease (fails fast if no member answers).
    ///
    /// TLS files and the password are read first: a missing, unreadable or garbled one is an
    /// `InvalidArgument` naming it, before any network traffic. A refusal by etcd (untrusted or
    /// rejected certificate, wrong password, no permission on the prefix) is a `Store` error
    /// naming the cause, returned without retrying.
    pub async fn connect(config: EtcdConfig) -> Result<EtcdBackend> {
        let backend = Self::connect_rate_only(config).await?;
        backend.session().await?;
        Ok(backend)
    }

    /// [`connect`](Self::connect) without the session lease, for a cluster that keeps
    /// rate-limit keys alone (a sharded store's clusters after the first): rate-limit keys
    /// are bound to no lease, so none is granted (and none can be reported lost) until a
    /// semaphore or an announcement needs one. Connects the members (and authenticates)
    /// but sends no request.
    pub async fn connect_rate_only(config: EtcdConfig) -> Result<EtcdBackend> {
        // No HTTP/2 pings (see endpoints.rs): a hung member is found by the bounded attempts,
        // keepalive rounds and watch progress checks, which then move on to the next member.
        let opts = ConnectOptions::new()
            .with_timeout(attempt_timeout(config.request_timeout))
            .with_connect_timeout(attempt_timeout(config.request_timeout));
        let secured = security::secure(
            opts,
            config.tls.as_ref(),
            config.user.as_ref(),
            &config.prefix,
        )?;
        let security = secured.security;
        // TLS given by the builder for an etcd:// URL: the same members, over TLS.
        let urls: Vec<String> = config
            .endpoints
            .iter()
            .map(|u| match u.strip_prefix("http://") {
                Some(rest) if security.tls => format!("https://{rest}"),
                _ => u.clone(),
            })
            .collect();
        let addrs: Vec<String> = urls
            .iter()
            .map(|u| reach::host_port(u).to_string())
            .collect();
        reach::any_reachable("etcd", &addrs).await?;
        let deadline = tokio::time::Instant::now() + config.request_timeout;
        let connecting = Endpoints::connect(
            &urls,
            &secured.options,
            security.user.is_some(),
            deadline,
            |e| security.refusal(e).is_some(),
        );
        // Each authentication is bounded by the options' timeouts; this is a safety net.
        let safety = config.request_timeout + attempt_timeout(config.request_timeout);
        let connected = tokio::time::timeout(safety, connecting)
            .await
            .map_err(|_| Error::store("timed out connecting to etcd"))?;
        let endpoints = match connected {
            Ok(endpoints) => endpoints,
            Err(e) => return Err(connect_failure(&security, &urls, e).await),
        };
        let stop = Stop::default();
        let keys = Keys::new(&config.prefix);
        let stats = Arc::new(RequestCounters::default());
        let sweep = EtcdSweep {
            endpoints: endpoints.clone(),
            stats: stats.clone(),
            request_timeout: config.request_timeout,
            prefix: keys.rate_keys_prefix(),
        };
        let sweeper = Sweeper::new(sweep, stop.child_token());
        let backend = EtcdBackend {
            endpoints,
            security,
            keys,
            strays: Strays::new(STRAY_GRACE),
            config,
            stats,
            session: SessionSlot::default(),
            watches: Mutex::new(HashMap::new()),
            enqueued: Mutex::new(HashSet::new()),
            stop,
            sweeper,
        };
        Ok(backend)
    }

    /// The live session, or a new lease if the last one was lost.
    pub(super) async fn session(&self) -> Result<Arc<Session>> {
        self.session
            .live_or_start(&self.stop, |_| {}, || self.start_session())
            .await
    }

    /// Grants a lease and starts its keeper.
    async fn start_session(&self) -> Result<Arc<Session>> {
        // Retried like any request: a lease whose grant reply was lost holds no keys and
        // simply expires.
        let ttl = Session::ttl_secs(self.config.session_ttl);
        let (sent, granted) = self
            .retry(RequestKind::Lease, |c| async move {
                let sent = tokio::time::Instant::now();
                c.lease_client().grant(ttl, None).await.map(|g| (sent, g))
            })
            .await?;
        let s = Session::start(
            self.endpoints.clone(),
            sent,
            &granted,
            self.config.session_ttl,
            self.config.request_timeout,
            self.stats.clone(),
        );
        *lock(&self.strays.session) = Some((s.lease, s.lost.clone()));
        Ok(s)
    }

    /// Asks etcd to end the lease of a session already ended locally (retried through a
    /// failover; etcd expires it within the TTL anyway, as nothing keeps it alive).
    pub(super) async fn revoke(&self, session: &Session, until: Until<'_>) -> Result<()> {
        let lease = session.lease;
        let revoked = self
            .retry_until(RequestKind::Lease, until, |c| async move {
                c.lease_client().revoke(lease).await
            })
            .await;
        match revoked {
            // "Not found": it is gone already, which is the goal.
            Ok(_) | Err(Error::SessionLost) => Ok(()),
            Err(e) => Err(e),
        }
    }

    pub(super) fn end_locally(&self) {
        self.stop.stop();
        self.strays.tracked.end_all();
    }
}

/// Why connecting (authenticating, with a user) failed: a refusal named as such, else the
/// store error (a TLS connection closed under the authentication gets one probe, as in
/// `EtcdBackend::refused`).
async fn connect_failure(security: &Security, urls: &[String], e: etcd_client::Error) -> Error {
    if let Some(refused) = security.refusal(&e) {
        return refused;
    }
    if let (Some(tls), Some(url)) = (security.closed_under_us(&e), urls.first()) {
        if let Some(text) = tls_probe::failure(url, tls, FIRST_ATTEMPT * 5).await {
            if let Some(refused) = security.tls_refusal(&text) {
                return refused;
            }
        }
    }
    match security.hint(&e) {
        Some(hint) => Error::store(format!("{hint}; last failure: {}", describe::failure(&e))),
        None => Error::store(describe::failure(&e)),
    }
}
