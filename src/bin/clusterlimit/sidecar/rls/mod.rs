//! `serve --grpc-listen`: Envoy's global rate limit service (RLS v3 gRPC, the protocol of
//! envoyproxy/ratelimit) on the sidecar's Limiter, with envoyproxy's YAML rules.

mod answer;
mod charge;
mod count;
mod flags;
mod grpc;
mod lib_error;
mod load;
mod matcher;
#[cfg(test)]
mod parity_tests;
mod parse;
mod parse_classes;
mod parse_ctx;
#[cfg(test)]
mod parse_tests;
mod plan;
mod reload;
pub mod reload_report;
mod request;
mod rules;
mod service;
mod settings;
mod yaml;

pub use flags::RlsFlags;
pub use grpc::Service;
pub use settings::{FileKeys, GrpcListen, Settings};

use super::metrics::Metrics;
use super::token::Token;
use crate::common::{exit, Failure};
use clusterlimit::Limiter;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use std::future::Future;
use std::sync::Arc;

/// A bound gRPC listener, served by [`serve`].
pub enum Bound {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener),
}

/// Binds the gRPC address (a Unix socket with `socket_mode`). Returns what to print:
/// `grpc://IP:PORT` or `unix:PATH`.
pub async fn bind(settings: &Settings, socket_mode: u32) -> Result<(Bound, String), Failure> {
    match &settings.listen {
        GrpcListen::Tcp(addr) => {
            let fail = |e: std::io::Error| {
                Failure::new(
                    exit::UNAVAILABLE,
                    format!("cannot listen on grpc://{addr}: {e}"),
                )
            };
            let tcp = tokio::net::TcpListener::bind(addr).await.map_err(fail)?;
            let local = tcp.local_addr().map_err(fail)?;
            Ok((Bound::Tcp(tcp), format!("grpc://{local}")))
        }
        GrpcListen::Unix(path) => {
            let unix = super::unix_socket::bind(path, socket_mode)?;
            Ok((Bound::Unix(unix), format!("unix:{}", path.display())))
        }
    }
}

/// The service, with every configured limit opened, and its rules reloaded from then on when
/// their files change or on SIGHUP (reload.rs).
pub async fn start(
    settings: &Settings,
    limiter: Limiter,
    metrics: Arc<Metrics>,
) -> Result<grpc::Service, Failure> {
    let behaviour = service::Behaviour {
        store_down: settings.store_down,
        store_timeout: settings.store_timeout,
        shadow: settings.shadow,
        headers: settings.headers,
    };
    let rls = service::Rls::start(limiter, settings.rules.clone(), behaviour, metrics.clone())
        .await
        .map_err(Failure::from_lib)?;
    let rls = Arc::new(rls);
    reload::spawn(
        rls.clone(),
        settings.files.clone(),
        settings.loading,
        settings.files_seen.clone(),
        metrics,
    );
    Ok(grpc::Service(rls))
}

/// Serves `svc` on `bound` until `shutdown` completes.
pub async fn serve(
    svc: grpc::Service,
    bound: Bound,
    token: Option<Token>,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let svc = RateLimitServiceServer::with_interceptor(svc, grpc::require_token(token, metrics));
    let router = tonic::transport::Server::builder().add_service(svc);
    let served = match bound {
        Bound::Tcp(tcp) => {
            let incoming =
                tonic::transport::server::TcpIncoming::from(tcp).with_nodelay(Some(true));
            router
                .serve_with_incoming_shutdown(incoming, shutdown)
                .await
        }
        Bound::Unix(unix) => {
            let incoming = futures::stream::unfold(unix, |l| async move {
                let conn = l.accept().await.map(|(s, _)| s);
                Some((conn, l))
            });
            router
                .serve_with_incoming_shutdown(incoming, shutdown)
                .await
        }
    };
    served.map_err(std::io::Error::other)
}
