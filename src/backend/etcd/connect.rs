//! Connecting to etcd: the TLS files and password read, the members connected (and
//! authenticated), a refusal named as such; what it makes is the [`Link`] every part of the
//! backend shares.

use super::attempt::{attempt_timeout, FIRST_ATTEMPT};
use super::calls::Link;
use super::config::EtcdConfig;
use super::endpoints::Endpoints;
use super::keys::Keys;
use super::security::{self, Security};
use super::{describe, tls_probe};
use crate::backend::{reach, Stop};
use crate::error::{Error, Result};
use crate::stats::RequestCounters;
use etcd_client::ConnectOptions;
use std::sync::Arc;

/// Connects the members (and authenticates) but sends no request (see
/// `EtcdBackend::connect_rate_only`).
pub(super) async fn connect(config: EtcdConfig) -> Result<Link> {
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
    Ok(Link {
        endpoints,
        security,
        keys: Keys::new(&config.prefix),
        config,
        stats: Arc::new(RequestCounters::default()),
        stop: Stop::default(),
    })
}

/// Why connecting (authenticating, with a user) failed: a refusal named as such, else the
/// store error (a TLS connection closed under the authentication gets one probe, as in
/// `Link::refused`).
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
