//! Rows 1–2: one caller checks one cached key under a quota it never exhausts (every check
//! admitted, one write each), against the store's floor, a raw compare-and-swap with the same
//! client library. Every path is measured in the same interleaved rounds (a batch of each,
//! the order rotating), so a load change on this shared machine hits a floor and the checks
//! on its store alike.

use super::rls_server::Rls;
use crate::binary::Sidecar;
use crate::stats::Samples;
use anyhow::{ensure, Context as _};
use clusterlimit::{Limiter, Quota, RateLimit};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use std::time::{Duration, Instant};

/// Bound on one call: a healthy one takes milliseconds.
const CALL_BOUND: Duration = Duration::from_secs(10);
/// A quota no sequential loop exhausts: every check is admitted and written.
pub const ROOMY: u64 = 1_000_000;
/// The one key every path checks (cached after the warm-up).
const KEY: &str = "k";
/// About what a key state weighs in the store, for the floor's value.
const FLOOR_VALUE: &str = "g:1764000000000000000:1";

pub fn roomy() -> Quota {
    Quota::per_second(ROOMY).burst(ROOMY)
}

/// One way of making an admitted decision (or the floor's write).
pub enum Path {
    /// etcd `Txn` comparing the key's `mod_revision` with the last one written, then a put.
    EtcdFloor {
        client: Box<etcd_client::Client>,
        revision: i64,
    },
    /// ZooKeeper `setData` with the version last written.
    ZkFloor {
        client: zookeeper_client::Client,
        version: i32,
    },
    Library(RateLimit),
    /// The sidecar's `POST /v1/ratelimits/{name}/check` over one kept-alive connection.
    Http {
        _sidecar: Sidecar,
        http: reqwest::Client,
        url: String,
    },
    /// `ShouldRateLimit` through `serve --grpc-listen` (one HTTP/2 connection).
    Rls(Box<Rls>),
}

const FLOOR_KEY: &str = "rate-floor";

impl Path {
    pub async fn etcd_floor(endpoints: &[String]) -> anyhow::Result<Path> {
        let mut client = crate::support::connect(endpoints).await;
        let put = client
            .put(FLOOR_KEY, FLOOR_VALUE, None)
            .await
            .context("put the floor's key")?;
        let revision = put.header().map_or(0, |h| h.revision());
        Ok(Path::EtcdFloor {
            client: Box::new(client),
            revision,
        })
    }

    pub async fn zk_floor(connect: &str) -> anyhow::Result<Path> {
        use zookeeper_client::{Acls, CreateMode};
        let client = crate::support::zk_connect(connect).await;
        let mode = CreateMode::Persistent.with_acls(Acls::anyone_all());
        let (stat, _) = client
            .create("/rate-floor", FLOOR_VALUE.as_bytes(), &mode)
            .await
            .context("create the floor's node")?;
        Ok(Path::ZkFloor {
            client,
            version: stat.version,
        })
    }

    /// A check of `name` (created with the roomy quota) through the sidecar on `store`.
    pub async fn http(store: &str, name: &str) -> anyhow::Result<Path> {
        let sidecar = Sidecar::start(&["--store", store]).await;
        let http = reqwest::Client::builder()
            .timeout(CALL_BOUND)
            .build()
            .context("build the HTTP client")?;
        let base = sidecar.url.clone();
        let r = http
            .put(format!("{base}/v1/ratelimits/{name}"))
            .json(&serde_json::json!({"limit": ROOMY, "period": "1s", "burst": ROOMY}))
            .send()
            .await
            .context("create the sidecar's rate limit")?;
        ensure!(r.status().is_success(), "PUT ratelimit: {}", r.status());
        Ok(Path::Http {
            _sidecar: sidecar,
            http,
            url: format!("{base}/v1/ratelimits/{name}/check"),
        })
    }

    /// ShouldRateLimit of one descriptor value under a roomy GCRA rule, through the sidecar
    /// on `store`; the rule file goes into `dir`.
    pub async fn rls(store: &str, dir: &std::path::Path) -> anyhow::Result<Path> {
        let config = dir.join("rate-bench.yaml");
        let text = format!(
            "domain: {DOMAIN}\ndescriptors:\n  - key: {KEY}\n    rate_limit: {{unit: second, requests_per_unit: {ROOMY}}}\n    algorithm: gcra\n    burst: {ROOMY}\n"
        );
        std::fs::write(&config, text).context("write the RLS rule file")?;
        Ok(Path::Rls(Box::new(Rls::start(store, &config, &[]).await?)))
    }

    /// One call; its latency. An error unless admitted.
    pub async fn once(&mut self) -> anyhow::Result<Duration> {
        let started = Instant::now();
        tokio::time::timeout(CALL_BOUND, self.call())
            .await
            .context("a call took over 10 s")??;
        Ok(started.elapsed())
    }

    async fn call(&mut self) -> anyhow::Result<()> {
        match self {
            Path::EtcdFloor { client, revision } => {
                let txn = Txn::new()
                    .when([Compare::mod_revision(
                        FLOOR_KEY,
                        CompareOp::Equal,
                        *revision,
                    )])
                    .and_then([TxnOp::put(FLOOR_KEY, FLOOR_VALUE, None)]);
                let r = client.txn(txn).await.context("floor txn")?;
                ensure!(r.succeeded(), "the floor's compare-and-swap is uncontended");
                *revision = r.header().map_or(0, |h| h.revision());
            }
            Path::ZkFloor { client, version } => {
                let stat = client
                    .set_data("/rate-floor", FLOOR_VALUE.as_bytes(), Some(*version))
                    .await
                    .context("floor setData")?;
                *version = stat.version;
            }
            Path::Library(rl) => {
                let d = rl.check(KEY).await.context("check")?;
                ensure!(d.allowed, "a roomy check was denied: {d:?}");
            }
            Path::Http { http, url, .. } => {
                let r = http
                    .post(url.as_str())
                    .json(&serde_json::json!({"key": KEY}))
                    .send()
                    .await
                    .context("sidecar check")?;
                ensure!(
                    r.status().is_success(),
                    "sidecar check answered {}",
                    r.status()
                );
                r.bytes().await.context("sidecar check body")?;
            }
            Path::Rls(rls) => {
                let req = RateLimitRequest {
                    domain: DOMAIN.to_string(),
                    descriptors: vec![RateLimitDescriptor {
                        entries: vec![Entry {
                            key: KEY.to_string(),
                            value: "v".to_string(),
                        }],
                        ..Default::default()
                    }],
                    hits_addend: 1,
                };
                let answer = rls
                    .client
                    .should_rate_limit(req)
                    .await
                    .context("ShouldRateLimit")?
                    .into_inner();
                ensure!(
                    answer.overall_code == Code::Ok as i32,
                    "ShouldRateLimit answered {answer:?}"
                );
            }
        }
        Ok(())
    }
}

/// The RLS rule's domain.
const DOMAIN: &str = "rate-bench";

/// A Limiter on `url` and its handle on a roomy limit.
pub async fn library(url: &str) -> anyhow::Result<(Limiter, Path)> {
    let l = crate::stores::limiter(url, "rate-uncontended").await?;
    let rl = l
        .rate_limit("uncontended", roomy())
        .await
        .with_context(|| format!("open the uncontended limit on {url}"))?;
    Ok((l, Path::Library(rl)))
}

/// A path with the processes whose CPU it is charged: this one, its sidecar (if any), the
/// store's servers.
pub struct Measured {
    pub path: Path,
    pub store: Vec<u32>,
}

impl Measured {
    fn sidecar(&self) -> Vec<u32> {
        match &self.path {
            Path::Http { _sidecar, .. } => vec![_sidecar.pid()],
            Path::Rls(rls) => vec![rls.pid()],
            _ => Vec::new(),
        }
    }
}

/// CPU spent per call, µs: this client, the sidecar, the store's servers.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuPerCall {
    pub client: f64,
    pub sidecar: f64,
    pub store: f64,
}

/// CPU of `[client, sidecar, store]` now, ns.
fn cpu_now(m: &Measured) -> [u64; 3] {
    let read = |pids: &[u32]| crate::cpu::cpu_ns(pids).unwrap_or(0);
    [
        read(&[std::process::id()]),
        read(&m.sidecar()),
        read(&m.store),
    ]
}

/// `warmup` unmeasured calls of each path, then `rounds` rounds of `batch` calls per path,
/// the order rotating by one each round; the latencies and the CPU per call of each path.
pub async fn interleaved(
    paths: &mut [Measured],
    warmup: usize,
    rounds: usize,
    batch: usize,
) -> anyhow::Result<Vec<(Samples, CpuPerCall)>> {
    for m in paths.iter_mut() {
        for _ in 0..warmup {
            m.path.once().await?;
        }
    }
    let n = paths.len();
    let mut all = vec![Vec::with_capacity(rounds * batch); n];
    let mut cpu = vec![[0u64; 3]; n];
    for round in 0..rounds {
        for k in 0..n {
            let i = (round + k) % n;
            let before = cpu_now(&paths[i]);
            for _ in 0..batch {
                all[i].push(paths[i].path.once().await?);
            }
            let after = cpu_now(&paths[i]);
            for (c, (a, b)) in cpu[i].iter_mut().zip(after.iter().zip(before)) {
                *c += a.saturating_sub(b);
            }
        }
    }
    let calls = (rounds * batch).max(1) as f64;
    Ok(all
        .into_iter()
        .zip(cpu)
        .map(|(v, [client, sidecar, store])| {
            let per = |ns: u64| ns as f64 / 1e3 / calls;
            let cpu = CpuPerCall {
                client: per(client),
                sidecar: per(sidecar),
                store: per(store),
            };
            (Samples::new(v), cpu)
        })
        .collect())
}
