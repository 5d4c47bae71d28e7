//! The real `clusterlimit serve` with the RLS on (started with the tests' `Sidecar::start`),
//! its rule file, and one ShouldRateLimit call that must answer OK.

use crate::binary::Sidecar;
use anyhow::{bail, Context as _};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tonic::transport::{Channel, Endpoint};

pub type Client = RateLimitServiceClient<Channel>;

/// Domain and descriptor key of the rule every call hits.
pub const DOMAIN: &str = "bench";
pub const KEY: &str = "k";
/// High enough that nothing in a run is denied (keys are distinct anyway).
pub const PER_SECOND: u32 = 1_000_000;

/// One rule, fixed window (the RLS's default algorithm): `PER_SECOND` per second per value.
pub fn write_config(dir: &Path) -> anyhow::Result<PathBuf> {
    let path = dir.join("bench.yaml");
    let text = format!(
        "domain: {DOMAIN}\ndescriptors:\n  - key: {KEY}\n    rate_limit: {{unit: second, requests_per_unit: {PER_SECOND}}}\n"
    );
    std::fs::write(&path, text).with_context(|| format!("write {}", path.display()))?;
    Ok(path)
}

/// A running RLS sidecar and a client on one kept-alive HTTP/2 connection to it.
pub struct Rls {
    /// Kept for its lifetime: SIGKILLed when the `Rls` is dropped.
    _sidecar: Sidecar,
    pub client: Client,
    /// The RLS's gRPC address (`127.0.0.1:PORT`), for more connections.
    pub listen: String,
}

impl Rls {
    /// `serve --store URL --grpc-listen 127.0.0.1:PORT --rls-config CONFIG EXTRA…`.
    pub async fn start(url: &str, config: &Path, extra: &[&str]) -> anyhow::Result<Rls> {
        let port = free_port()?;
        let listen = format!("127.0.0.1:{port}");
        let config = config.to_str().context("config path is not UTF-8")?;
        let mut args = vec![
            "--store",
            url,
            "--grpc-listen",
            &listen,
            "--rls-config",
            config,
        ];
        args.extend_from_slice(extra);
        let sidecar = Sidecar::start(&args).await;
        // serve binds every listener before it prints its first line, so one connect suffices.
        let channel = Endpoint::from_shared(format!("http://{listen}"))?
            .connect_timeout(Duration::from_secs(10))
            .connect()
            .await
            .with_context(|| format!("connect to the RLS on {listen}"))?;
        Ok(Rls {
            _sidecar: sidecar,
            client: RateLimitServiceClient::new(channel),
            listen,
        })
    }

    /// `n` more clients, each on its own HTTP/2 connection (one connection multiplexes every
    /// call through one task: many callers on it would measure the client, not the sidecar).
    #[allow(dead_code)] // used by this bench's edge rows, not the limiter bench
    pub async fn connections(&self, n: usize) -> anyhow::Result<Vec<Client>> {
        let mut clients = Vec::with_capacity(n);
        for _ in 0..n {
            let channel = Endpoint::from_shared(format!("http://{}", self.listen))?
                .connect_timeout(Duration::from_secs(10))
                .connect()
                .await
                .with_context(|| format!("connect to the RLS on {}", self.listen))?;
            clients.push(RateLimitServiceClient::new(channel));
        }
        Ok(clients)
    }

    /// The sidecar's HTTP API (`http://127.0.0.1:PORT`): its `/metrics`.
    #[allow(dead_code)] // used by this bench's edge rows, not the limiter bench
    pub fn http_url(&self) -> &str {
        &self._sidecar.url
    }

    /// The sidecar's process id (the limiter bench's rate rows read its CPU).
    #[allow(dead_code)] // used by the limiter bench, not this one
    pub fn pid(&self) -> u32 {
        self._sidecar.pid()
    }
}

/// A port the kernel just handed out (free a moment later; serve binds it right away).
fn free_port() -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("bind a probe port")?;
    Ok(l.local_addr()?.port())
}

/// A key never used before in this run, so no window or GCRA state is shared between calls.
pub fn fresh_key() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("v{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// One ShouldRateLimit for a fresh value of `KEY`; an error unless the answer is OK.
pub async fn should_rate_limit(client: &mut Client) -> anyhow::Result<()> {
    let req = RateLimitRequest {
        domain: DOMAIN.to_string(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: KEY.to_string(),
                value: fresh_key(),
            }],
            ..Default::default()
        }],
        hits_addend: 1,
    };
    let answer = tokio::time::timeout(Duration::from_secs(10), client.should_rate_limit(req))
        .await
        .context("ShouldRateLimit took over 10 s")?
        .context("ShouldRateLimit failed")?
        .into_inner();
    if answer.overall_code != Code::Ok as i32 {
        bail!("ShouldRateLimit answered {answer:?}, expected OK");
    }
    Ok(())
}
