//! Row 4b's sidecar workers (issue 28): the closed loop of `peers::drive` through one
//! `clusterlimit serve`, each call a key never checked before, over HTTP (one POST per check)
//! or over the RLS (one `ShouldRateLimit` of one descriptor, one hit).

use super::protocol::{Contender, Mode, WorkerReport, WorkerSetup};
use super::rls_server::Client;
use crate::peers::drive;
use anyhow::{bail, ensure, Context as _};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use reqwest::StatusCode;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Bound on one call and on connecting: a healthy one takes milliseconds.
const BOUND: Duration = Duration::from_secs(10);

/// Runs one sidecar worker: `setup.mode` must be `Fresh`.
pub fn run_worker(setup: &WorkerSetup) -> anyhow::Result<WorkerReport> {
    ensure!(
        setup.mode == Mode::Fresh,
        "the sidecar workers check fresh keys only"
    );
    // One worker thread, as the library's and the floors' workers have.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .context("build the worker's runtime")?;
    let prefix = format!("{}-{}", setup.key, std::process::id());
    let n = Arc::new(AtomicU64::new(0));
    let next = move || format!("{prefix}-{}", n.fetch_add(1, Ordering::Relaxed));
    rt.block_on(async {
        match setup.contender {
            Contender::SidecarHttp => http(setup, next).await,
            Contender::SidecarRls => rls(setup, next).await,
            other => bail!("{other:?} is no sidecar"),
        }
    })
}

/// One `POST …/check` per decision; reqwest keeps one connection per concurrent caller alive.
async fn http(
    setup: &WorkerSetup,
    next: impl Fn() -> String + Send + Sync + 'static,
) -> anyhow::Result<WorkerReport> {
    let client = reqwest::Client::builder()
        .timeout(BOUND)
        .build()
        .context("build the HTTP client")?;
    let url = format!("{}/v1/ratelimits/{}/check", setup.target, setup.limit_name);
    drive::run(setup, "gcra", move || {
        let call = client
            .post(url.as_str())
            .json(&serde_json::json!({ "key": next() }))
            .send();
        async move {
            let r = call.await.context("sidecar check")?;
            let status = r.status();
            // Read the body so the connection goes back to the pool.
            r.bytes().await.context("sidecar check body")?;
            match status {
                StatusCode::OK => Ok(true),
                StatusCode::TOO_MANY_REQUESTS => Ok(false),
                other => bail!("sidecar check answered {other}"),
            }
        }
    })
    .await
}

/// One `ShouldRateLimit` per decision, over one HTTP/2 connection per caller, taken in turn
/// (one connection carries every call through one task: as many as the HTTP worker's
/// connections keep the two transports alike).
async fn rls(
    setup: &WorkerSetup,
    next: impl Fn() -> String + Send + Sync + 'static,
) -> anyhow::Result<WorkerReport> {
    let mut clients: Vec<Client> = Vec::new();
    for _ in 0..setup.callers.max(1) {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", setup.target))?
            .connect_timeout(BOUND)
            .timeout(BOUND)
            .connect()
            .await
            .with_context(|| format!("connect to the RLS on {}", setup.target))?;
        clients.push(Client::new(channel));
    }
    let turn = AtomicUsize::new(0);
    let (domain, key) = (setup.limit_name.clone(), setup.key.clone());
    drive::run(setup, "gcra", move || {
        let i = turn.fetch_add(1, Ordering::Relaxed) % clients.len();
        let mut client = clients[i].clone();
        let req = RateLimitRequest {
            domain: domain.clone(),
            descriptors: vec![RateLimitDescriptor {
                entries: vec![Entry {
                    key: key.clone(),
                    value: next(),
                }],
                ..Default::default()
            }],
            hits_addend: 1,
        };
        async move {
            let answer = client
                .should_rate_limit(req)
                .await
                .context("ShouldRateLimit")?
                .into_inner();
            match Code::try_from(answer.overall_code) {
                Ok(Code::Ok) => Ok(true),
                Ok(Code::OverLimit) => Ok(false),
                _ => bail!("ShouldRateLimit answered {answer:?}"),
            }
        }
    })
    .await
}
