//! The steps of `serve` (mod.rs) once bound: the servers started, run until a signal, then
//! drained and the session closed.

use super::rls;
use super::routes::Shared;
use super::settings::ServeSettings;
use super::startup::Listeners;
use crate::common::out::out_line;
use crate::common::{exit, Failure};
use clusterlimit::Limiter;
use std::future::IntoFuture as _;
use std::io::Write as _;
use std::time::Duration;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::task::{JoinHandle, JoinSet};

/// How long in-flight requests get to finish after SIGTERM before we close anyway (with
/// CLOSE_TIMEOUT and the runtime shutdown, the exit stays within 5 s).
const DRAIN_TIMEOUT: Duration = Duration::from_millis(2500);
/// Bound on revoking the session at shutdown (the TTL is the backstop).
const CLOSE_TIMEOUT: Duration = Duration::from_millis(1500);
/// How often the store health gauge is refreshed between `/readyz` calls.
const PROBE_INTERVAL: Duration = Duration::from_secs(5);

/// SIGTERM and SIGINT, listened for before anything else starts.
pub struct Signals {
    term: Signal,
    int: Signal,
}

impl Signals {
    pub fn listen() -> Result<Signals, Failure> {
        let sig = |kind| {
            signal(kind).map_err(|e| Failure::new(exit::SOFTWARE, format!("signal handler: {e}")))
        };
        Ok(Signals {
            term: sig(SignalKind::terminate())?,
            int: sig(SignalKind::interrupt())?,
        })
    }
}

/// Starts a server on every listener, each stopping when `state.shutdown` is cancelled, and
/// prints where they listen (on stdout, so scripts and tests learn a port picked with :0).
pub fn start(
    cfg: &ServeSettings,
    state: &Shared,
    app: axum::Router,
    listeners: Listeners,
    store: &str,
) -> JoinSet<std::io::Result<()>> {
    let Listeners {
        tcp,
        addr,
        unix,
        rls,
    } = listeners;
    out_line!("clusterlimit serve: listening on http://{addr} (store {store})");
    // Each request's server span, joined to the caller's trace: only when traces are exported.
    let app = match cfg.tracing.endpoint {
        Some(_) => app.layer(axum::middleware::from_fn(super::otel_http::server_span)),
        None => app,
    };
    let mut servers = JoinSet::new();
    servers.spawn(
        axum::serve(tcp, app.clone())
            .with_graceful_shutdown(state.shutdown.clone().cancelled_owned())
            .into_future(),
    );
    if let (Some(unix), Some(path)) = (unix, &cfg.unix) {
        out_line!("clusterlimit serve: listening on unix:{}", path.display());
        servers.spawn(
            axum::serve(unix, app)
                .with_graceful_shutdown(state.shutdown.clone().cancelled_owned())
                .into_future(),
        );
    }
    if let Some((svc, bound, shown)) = rls {
        out_line!("clusterlimit serve: rls listening on {shown}");
        servers.spawn(rls::serve(
            svc,
            bound,
            cfg.token.clone(),
            state.metrics.clone(),
            state.shutdown.clone().cancelled_owned(),
        ));
    }
    let _ = std::io::stdout().flush();
    tracing::info!(
        %addr,
        %store,
        token = cfg.token.is_some(),
        metrics_without_token = cfg.metrics_without_token,
        "serving"
    );
    if let Some(e) = &cfg.tracing.endpoint {
        tracing::info!(
            "exporting traces over OTLP to {} (from {}) as service {}",
            e.url,
            e.from,
            cfg.tracing.service_name
        );
    }
    servers
}

/// Refreshes the store health gauge every [`PROBE_INTERVAL`] until aborted.
pub fn probe(state: &Shared) -> JoinHandle<()> {
    let state = state.clone();
    tokio::spawn(async move {
        loop {
            state.store_healthy().await;
            tokio::time::sleep(PROBE_INTERVAL).await;
        }
    })
}

/// Waits for SIGTERM, SIGINT, or a server that stops on its own.
pub async fn until_signal(signals: &mut Signals, servers: &mut JoinSet<std::io::Result<()>>) {
    tokio::select! {
        _ = signals.term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = signals.int.recv() => tracing::info!("SIGINT: shutting down"),
        Some(r) = servers.join_next() => match r {
            Ok(Ok(())) => tracing::error!("a listener (HTTP, Unix socket or RLS) stopped by itself; shutting down"),
            Ok(Err(e)) => tracing::error!("a listener (HTTP, Unix socket or RLS) failed: {e}; shutting down"),
            Err(e) if e.is_panic() => tracing::error!("a listener (HTTP, Unix socket or RLS) panicked; shutting down"),
            Err(_) => tracing::error!("a listener (HTTP, Unix socket or RLS) was cancelled; shutting down"),
        },
    }
}

/// Stops accepting; long-polls answer 503; in-flight requests get [`DRAIN_TIMEOUT`]; then
/// the session is revoked, which releases every permit at once, and the sockets removed.
pub async fn drain(
    cfg: &ServeSettings,
    state: &Shared,
    limiter: &Limiter,
    mut servers: JoinSet<std::io::Result<()>>,
    tasks: [JoinHandle<()>; 2],
) {
    state.table.begin_shutdown();
    state.shutdown.cancel();
    for task in tasks {
        task.abort();
    }
    if tokio::time::timeout(DRAIN_TIMEOUT, async {
        while servers.join_next().await.is_some() {}
    })
    .await
    .is_err()
    {
        tracing::warn!(
            "connections still open after {}; closing anyway",
            humantime::format_duration(DRAIN_TIMEOUT)
        );
        servers.abort_all();
    }
    match tokio::time::timeout(CLOSE_TIMEOUT, limiter.close()).await {
        Ok(Ok(())) => tracing::info!("session closed: every permit released"),
        Ok(Err(e)) => tracing::warn!(error = %e, "closing the session; the TTL frees its permits"),
        Err(_) => tracing::warn!("closing the session timed out; the TTL frees its permits"),
    }
    if let Some(path) = &cfg.unix {
        let _ = std::fs::remove_file(path);
    }
    if let Some(rls::GrpcListen::Unix(path)) = cfg.rls.as_ref().map(|r| &r.listen) {
        let _ = std::fs::remove_file(path);
    }
}
