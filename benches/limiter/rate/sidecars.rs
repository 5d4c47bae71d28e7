//! Row 4b's sidecars (issue 28): one `clusterlimit serve --store <etcd>` per worker process,
//! each with row 4b's quota (100/s burst 10, GCRA: every fresh key admitted and written),
//! defined through the HTTP API or through an RLS rule file. SIGKILLed on drop.

use super::protocol::WorkerSetup;
use super::rls_server::Rls;
use crate::binary::Sidecar;
use anyhow::{ensure, Context as _};
use std::time::Duration;

/// The RLS rule's descriptor key (the workers' `key`): no value in the rule, so each value is
/// limited apart.
pub const RLS_KEY: &str = "user";

/// Which API the workers call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    Http,
    Rls,
}

/// One running sidecar, what its worker connects to, and its pid (for its CPU).
enum Running {
    Http(Sidecar),
    Rls(Rls),
}

impl Running {
    fn pid(&self) -> u32 {
        match self {
            Running::Http(s) => s.pid(),
            Running::Rls(r) => r.pid(),
        }
    }

    /// The worker's target: the HTTP base URL, or the gRPC address.
    fn target(&self) -> String {
        match self {
            Running::Http(s) => s.url.clone(),
            Running::Rls(r) => r.listen.clone(),
        }
    }
}

/// The sidecars of one run, and the directory of their rule file (RLS).
pub struct Sidecars {
    all: Vec<Running>,
    _rules: tempfile::TempDir,
}

impl Sidecars {
    /// Each worker's target, one per sidecar.
    pub fn targets(&self) -> Vec<String> {
        self.all.iter().map(Running::target).collect()
    }

    pub fn pids(&self) -> Vec<u32> {
        self.all.iter().map(Running::pid).collect()
    }
}

/// Starts `n` sidecars on `setup.target` (a store URL), each with the quota of `setup`
/// (`limit` per `period_ms`, GCRA with `burst`) as the limit `setup.limit_name` (for the RLS:
/// the domain, its rule on the descriptor key `setup.key`).
pub async fn start(api: Api, n: usize, setup: &WorkerSetup) -> anyhow::Result<Sidecars> {
    let rules = tempfile::tempdir().context("a directory for the RLS rules")?;
    let (store, name) = (setup.target.as_str(), setup.limit_name.as_str());
    let (limit, period_ms, burst) = (setup.limit, setup.period_ms, setup.burst);
    let mut all = Vec::with_capacity(n);
    match api {
        Api::Http => {
            let http = reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .context("build the HTTP client")?;
            for _ in 0..n {
                let s = Sidecar::start(&["--store", store]).await;
                // Each sidecar defines it (the same quota: the store keeps one).
                let r = http
                    .put(format!("{}/v1/ratelimits/{name}", s.url))
                    .json(&serde_json::json!({
                        "limit": limit, "period_ms": period_ms, "burst": burst, "algorithm": "gcra"
                    }))
                    .send()
                    .await
                    .context("define the sidecar's rate limit")?;
                ensure!(r.status().is_success(), "PUT ratelimit: {}", r.status());
                all.push(Running::Http(s));
            }
        }
        Api::Rls => {
            let unit = match period_ms {
                1_000 => "second",
                60_000 => "minute",
                other => anyhow::bail!("an RLS rule has no unit of {other} ms"),
            };
            let config = rules.path().join(format!("{name}.yaml"));
            let text = format!(
                "domain: {name}\ndescriptors:\n  - key: {key}\n    rate_limit: {{unit: {unit}, requests_per_unit: {limit}}}\n    algorithm: gcra\n    burst: {burst}\n",
                key = setup.key
            );
            std::fs::write(&config, text).context("write the RLS rule file")?;
            for _ in 0..n {
                all.push(Running::Rls(Rls::start(store, &config, &[]).await?));
            }
        }
    }
    Ok(Sidecars { all, _rules: rules })
}
