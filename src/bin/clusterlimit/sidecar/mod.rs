//! `clusterlimit serve`: the sidecar. One store session for the host; an HTTP/JSON API to
//! take, keep alive and release permits; Prometheus metrics; graceful shutdown that releases
//! every permit at once.

mod adaptive_metrics;
mod adaptive_settings;
pub mod adaptive_view;
mod auth;
mod body;
mod body_words;
mod flags;
mod header_mode;
mod metrics;
mod path_param;
mod problem;
mod rate_metrics;
mod rate_settings;
mod release_body;
mod rls;
mod routes;
mod sem_label;
mod settings;
mod token;
mod ui;
mod unix_socket;

pub use flags::{ServeArgs, StoreSecurityFlags};

use crate::common::out::out_line;
use crate::common::{connect, exit, Failure};
use settings::ServeSettings;
use std::future::IntoFuture as _;
use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;
use tokio::signal::unix::{signal, SignalKind};

/// How long in-flight requests get to finish after SIGTERM before we close anyway (with
/// CLOSE_TIMEOUT and the runtime shutdown, the exit stays within 5 s).
const DRAIN_TIMEOUT: Duration = Duration::from_millis(2500);
/// Bound on revoking the session at shutdown (the TTL is the backstop).
const CLOSE_TIMEOUT: Duration = Duration::from_millis(1500);
/// How often the store health gauge is refreshed between `/readyz` calls.
const PROBE_INTERVAL: Duration = Duration::from_secs(5);

/// Runs the sidecar until SIGTERM/SIGINT, then releases every permit and returns 0.
pub async fn serve(args: ServeArgs) -> Result<ExitCode, Failure> {
    let check_only = args.check_config;
    let cfg = ServeSettings::resolve(args)?;
    cfg.check()?;
    cfg.check_adaptive()?;
    if check_only {
        crate::common::out::text(cfg.describe());
        return Ok(ExitCode::SUCCESS);
    }
    let sig = |kind| {
        signal(kind).map_err(|e| Failure::new(exit::SOFTWARE, format!("signal handler: {e}")))
    };
    let mut term = sig(SignalKind::terminate())?;
    let mut int = sig(SignalKind::interrupt())?;

    // The URL as printed and logged: credential-like values blanked.
    let store = clusterlimit::redact(&cfg.store);
    if matches!(
        clusterlimit::StoreUrl::parse(&cfg.store),
        Ok(clusterlimit::StoreUrl::Memory { .. })
    ) {
        tracing::info!(
            store = %store,
            "memory store: shared by this sidecar's clients only, gone when it stops"
        );
    }
    let limiter = connect(
        &cfg.store,
        cfg.session_ttl,
        cfg.owner.as_deref(),
        &cfg.security,
        cfg.timeouts,
    )
    .await?;
    for d in &cfg.semaphores {
        match limiter.semaphore(&d.name, d.capacity).await {
            Ok(_) => tracing::info!(semaphore = %d.name, capacity = d.capacity, "declared"),
            // Capacity changes are explicit (PUT, set-capacity): the stored one stays.
            Err(clusterlimit::Error::CapacityMismatch { stored, .. }) => tracing::warn!(
                semaphore = %d.name, stored, configured = d.capacity,
                "semaphore exists with another capacity; keeping the stored one"
            ),
            Err(e) => return Err(Failure::from_lib(e)),
        }
    }

    let rate = routes::RateApi::new(&cfg.rate);
    for rl in rate_settings::declare(&limiter, &cfg.rate_limits).await? {
        rate.remember(rl);
    }
    let state = routes::AppState::new(limiter.clone(), cfg.permit_ttl, cfg.timeouts.request, rate);
    // Opened once and kept: the handles keep this sidecar's window task (its outcomes, and
    // its place in the controller's queue) alive.
    for (name, table) in &cfg.adaptive {
        let settings = table.settings().map_err(Failure::usage)?;
        let sem = limiter
            .adaptive_semaphore(name, settings)
            .await
            .map_err(Failure::from_lib)?;
        tracing::info!(semaphore = %name, "adaptive semaphore declared");
        state.declare_adaptive(sem);
    }
    state.metrics.watch_breaker(
        &format!("http:{}", cfg.rate.store_down),
        state.rate.guard().clone(),
        limiter.clusters().len(),
    );
    // The web view (ui/): its pictures are taken only while a page or `top` watches.
    let gatherer = crate::live::gather::Gatherer::new(
        limiter.clone(),
        crate::live::gather::Viewer {
            source: limiter.owner().to_string(),
            store_url: store.to_string(),
            timeout: cfg.timeouts.request,
            session_ttl: cfg.session_ttl,
        },
    );
    // Every sidecar publishes its summary for the fleet view, watched or not.
    let publisher = tokio::spawn(crate::live::fleet::publish_forever(
        limiter.clone(),
        state.metrics.rate.live.clone(),
        state.shutdown.clone(),
    ));
    let logins = std::sync::Arc::new(ui::Logins::default());
    let view = ui::Ui {
        feed: ui::Feed::new(gatherer, state.metrics.clone(), state.shutdown.clone()),
        logins: logins.clone(),
        token: cfg.token.clone(),
        shutdown: state.shutdown.clone(),
    };
    let access = auth::Access {
        token: cfg.token.clone(),
        metrics_without_token: cfg.metrics_without_token,
        metrics: state.metrics.clone(),
        logins,
    };
    let app = routes::router(state.clone()).merge(ui::router(view)).layer(
        axum::middleware::from_fn_with_state(access, auth::require_token),
    );
    let listen_err = |what: String, e: std::io::Error| {
        Failure::new(exit::UNAVAILABLE, format!("cannot listen on {what}: {e}"))
    };
    let tcp = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .map_err(|e| listen_err(cfg.listen.to_string(), e))?;
    let addr = tcp
        .local_addr()
        .map_err(|e| listen_err(cfg.listen.to_string(), e))?;
    // Every listener is bound before the first line is printed: whoever waits for that line
    // (scripts, tests) can use the socket too.
    let unix = match &cfg.unix {
        Some(path) => Some(unix_socket::bind(path, cfg.socket_mode)?),
        None => None,
    };
    // --- Envoy's rate limit service: limits opened and socket bound before the first line.
    let rls = match &cfg.rls {
        Some(settings) => {
            let svc = rls::start(settings, limiter.clone(), state.metrics.clone()).await?;
            let (bound, shown) = rls::bind(settings, cfg.socket_mode).await?;
            Some((svc, bound, shown))
        }
        None => None,
    };
    // Printed on stdout so scripts (and tests) can learn a port picked with :0.
    out_line!("clusterlimit serve: listening on http://{addr} (store {store})");
    let mut servers = tokio::task::JoinSet::new();
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

    let probe_state = state.clone();
    let probe = tokio::spawn(async move {
        loop {
            probe_state.store_healthy().await;
            tokio::time::sleep(PROBE_INTERVAL).await;
        }
    });

    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = int.recv() => tracing::info!("SIGINT: shutting down"),
        Some(r) = servers.join_next() => match r {
            Ok(Ok(())) => tracing::error!("a listener (HTTP, Unix socket or RLS) stopped by itself; shutting down"),
            Ok(Err(e)) => tracing::error!("a listener (HTTP, Unix socket or RLS) failed: {e}; shutting down"),
            Err(e) if e.is_panic() => tracing::error!("a listener (HTTP, Unix socket or RLS) panicked; shutting down"),
            Err(_) => tracing::error!("a listener (HTTP, Unix socket or RLS) was cancelled; shutting down"),
        },
    }
    // Stop accepting; long-polls answer 503; then revoke the session, which releases every
    // permit at once.
    state.table.begin_shutdown();
    state.shutdown.cancel();
    probe.abort();
    publisher.abort();
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
    Ok(ExitCode::SUCCESS)
}
