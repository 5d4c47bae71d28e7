//! The steps of `serve` (mod.rs) before it serves: the store opened and the configured
//! limits declared, the routers built, every listener bound.

use super::routes::{self, Shared};
use super::settings::ServeSettings;
use super::{auth, openapi, rate_settings, rls, ui, unix_socket};
use crate::common::{connect, exit, Failure};
use clusterlimit::Limiter;
use std::sync::Arc;
use tokio::task::JoinHandle;

/// The store session, with the config's semaphores, rate limits, adaptive and per-member
/// semaphores declared, and the HTTP routes' state on it.
pub async fn open_store(cfg: &ServeSettings, store: &str) -> Result<(Limiter, Shared), Failure> {
    if matches!(
        clusterlimit::StoreUrl::parse(&cfg.store),
        Ok(clusterlimit::StoreUrl::Memory { .. })
    ) {
        tracing::info!(
            store = %store,
            "memory store: shared by this sidecar's clients only, gone when it stops"
        );
    }
    let builder = connect::builder(
        &cfg.store,
        cfg.session_ttl,
        cfg.owner.as_deref(),
        &cfg.security,
        cfg.timeouts,
    )?
    // A Limiter build option: set at start, for the HTTP routes and the RLS alike.
    .hot_key_leases(cfg.rate.hot_key_leases)
    .approximate_hot_keys(cfg.rate.approximate_hot_keys);
    let limiter = connect::open(&cfg.store, builder).await?;
    if cfg.rate.hot_key_leases {
        tracing::info!("hot keys are served from leased units (hot_key_leases)");
    }
    if cfg.rate.approximate_hot_keys {
        tracing::info!(
            "hot keys are decided locally and reported every ~100 ms (approximate_hot_keys): \
             checks never wait on the store, and a key may be over-admitted by up to about 5%"
        );
    }
    declare_semaphores(cfg, &limiter).await?;
    let rate = routes::RateApi::new(&cfg.rate);
    for rl in rate_settings::declare(&limiter, &cfg.rate_limits).await? {
        rate.remember(rl);
    }
    let state = routes::AppState::new(limiter.clone(), cfg.permit_ttl, cfg.timeouts.request, rate);
    declare_adaptive(cfg, &limiter, &state).await?;
    declare_per_member(cfg, &limiter, &state).await?;
    tokio::spawn(routes::sweep_reservations(state.clone()));
    state.metrics.watch_breaker(
        &format!("http:{}", cfg.rate.store_down),
        state.rate.guard().clone(),
        limiter.clusters().len(),
    );
    Ok((limiter, state))
}

/// The config's semaphores, created where absent (fair ones with their classes).
async fn declare_semaphores(cfg: &ServeSettings, limiter: &Limiter) -> Result<(), Failure> {
    for d in &cfg.semaphores {
        // Checked by `ServeSettings::check`.
        let classes = d.classes().map_err(Failure::from_lib)?;
        let declared = match &classes {
            Some(c) => limiter.fair_semaphore(&d.name, d.capacity, c.clone()).await,
            None => limiter.semaphore(&d.name, d.capacity).await,
        };
        match declared {
            Ok(_) => {
                tracing::info!(semaphore = %d.name, capacity = d.capacity, classes = ?d.classes, "declared")
            }
            // Capacity changes are explicit (PUT, set-capacity): the stored one stays.
            Err(clusterlimit::Error::CapacityMismatch { stored, .. }) => tracing::warn!(
                semaphore = %d.name, stored, configured = d.capacity,
                "semaphore exists with another capacity; keeping the stored one"
            ),
            Err(clusterlimit::Error::InvalidArgument(why)) => {
                return Err(Failure::usage(format!(
                    "cannot declare semaphore {:?} of the config: {why}",
                    d.name
                )))
            }
            Err(e) => return Err(Failure::from_lib(e)),
        }
    }
    Ok(())
}

/// The config's adaptive semaphores, opened once and kept: the handles keep this sidecar's
/// window task (its outcomes, and its place in the controller's queue) alive.
async fn declare_adaptive(
    cfg: &ServeSettings,
    limiter: &Limiter,
    state: &Shared,
) -> Result<(), Failure> {
    for (name, table) in &cfg.adaptive {
        let settings = table.settings().map_err(Failure::usage)?;
        let sem = limiter
            .adaptive_semaphore(name, settings)
            .await
            .map_err(Failure::from_lib)?;
        tracing::info!(semaphore = %name, "adaptive semaphore declared");
        state.declare_adaptive(sem);
    }
    Ok(())
}

/// The config's per-member semaphores, opened once and kept: the handles make this sidecar one
/// member of each for as long as it runs.
async fn declare_per_member(
    cfg: &ServeSettings,
    limiter: &Limiter,
    state: &Shared,
) -> Result<(), Failure> {
    for (name, table) in &cfg.per_member {
        let config = table.settings().map_err(Failure::usage)?;
        let sem = limiter
            .per_member_semaphore(name, config)
            .await
            .map_err(Failure::from_lib)?;
        tracing::info!(semaphore = %name, "per-member semaphore declared");
        state.declare_per_member(sem);
    }
    Ok(())
}

/// The HTTP app (the API and the web view, behind the token), and the task that publishes
/// this sidecar's summary for the fleet view, watched or not.
pub fn app(
    cfg: &ServeSettings,
    limiter: &Limiter,
    state: &Shared,
    store: &str,
) -> (axum::Router, JoinHandle<()>) {
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
    let publisher = tokio::spawn(crate::live::fleet::publish_forever(
        limiter.clone(),
        state.metrics.rate.live.clone(),
        state.shutdown.clone(),
    ));
    let logins = Arc::new(ui::Logins::default());
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
    let app = routes::router(state.clone())
        .merge(ui::router(view))
        .merge(openapi::router())
        .layer(axum::middleware::from_fn_with_state(
            access,
            auth::require_token,
        ));
    (app, publisher)
}

/// Every listener, bound: HTTP on TCP (and its address, for a port picked with :0), HTTP on
/// a Unix socket, Envoy's RLS (its service, socket, and how to print it).
pub struct Listeners {
    pub tcp: tokio::net::TcpListener,
    pub addr: std::net::SocketAddr,
    pub unix: Option<tokio::net::UnixListener>,
    pub rls: Option<(rls::Service, rls::Bound, String)>,
}

/// Binds every listener (and opens the RLS's limits), so that all are ready before the
/// first line is printed: whoever waits for that line (scripts, tests) can use them all.
pub async fn bind(
    cfg: &ServeSettings,
    limiter: &Limiter,
    state: &Shared,
) -> Result<Listeners, Failure> {
    let listen_err = |e: std::io::Error| {
        Failure::new(
            exit::UNAVAILABLE,
            format!("cannot listen on {}: {e}", cfg.listen),
        )
    };
    let tcp = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .map_err(listen_err)?;
    let addr = tcp.local_addr().map_err(listen_err)?;
    let unix = match &cfg.unix {
        Some(path) => Some(unix_socket::bind(path, cfg.socket_mode)?),
        None => None,
    };
    let rls = match &cfg.rls {
        Some(settings) => {
            let svc = rls::start(settings, limiter.clone(), state.metrics.clone()).await?;
            let (bound, shown) = rls::bind(settings, cfg.socket_mode).await?;
            Some((svc, bound, shown))
        }
        None => None,
    };
    Ok(Listeners {
        tcp,
        addr,
        unix,
        rls,
    })
}
