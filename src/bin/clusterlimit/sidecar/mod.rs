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
mod lease_metrics;
mod metrics;
mod openapi;
pub mod otel_export;
mod otel_http;
mod otel_rpc;
mod otel_settings;
mod path_param;
mod per_member_settings;
pub mod per_member_view;
mod problem;
mod rate_metrics;
mod rate_settings;
mod registered;
mod release_body;
mod rls;
mod routes;
mod running;
mod schemas;
mod sem_label;
mod settings;
mod settle_metrics;
mod startup;
mod token;
mod ui;
mod unix_socket;

pub use flags::{ServeArgs, StoreSecurityFlags};

use crate::common::Failure;
use running::Signals;
use settings::ServeSettings;
use std::process::ExitCode;

/// Runs the sidecar until SIGTERM/SIGINT, then releases every permit and returns 0: the
/// store opened (`startup.rs`), the routers built, every listener bound, then served until
/// a signal and drained (`running.rs`).
pub async fn serve(args: ServeArgs) -> Result<ExitCode, Failure> {
    let check_only = args.check_config;
    let cfg = ServeSettings::resolve(args)?;
    cfg.check()?;
    cfg.check_adaptive()?;
    cfg.check_per_member()?;
    if check_only {
        crate::common::out::text(cfg.describe());
        return Ok(ExitCode::SUCCESS);
    }
    let mut signals = Signals::listen()?;
    // The URL as printed and logged: credential-like values blanked.
    let store = clusterlimit::redact(&cfg.store);
    let (limiter, state) = startup::open_store(&cfg, &store).await?;
    let (app, publisher) = startup::app(&cfg, &limiter, &state, &store);
    let listeners = startup::bind(&cfg, &limiter, &state).await?;
    let mut servers = running::start(&cfg, &state, app, listeners, &store);
    let probe = running::probe(&state);
    running::until_signal(&mut signals, &mut servers).await;
    running::drain(&cfg, &state, &limiter, servers, [probe, publisher]).await;
    Ok(ExitCode::SUCCESS)
}
