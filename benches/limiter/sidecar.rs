//! The real `clusterlimit serve` (built by cargo with this bench) and one HTTP client of it,
//! taking and releasing permits the way a program in another language would: one POST to
//! acquire, one DELETE to release, over a kept-alive HTTP/1.1 connection.

use crate::binary::Sidecar;
use anyhow::{ensure, Context as _};
use reqwest::StatusCode;
use serde_json::json;
use std::time::Duration;

/// A sidecar process (SIGKILLed on drop) and a client of one of its semaphores.
pub struct SidecarClient {
    process: Sidecar,
    http: reqwest::Client,
    permits_url: String,
    base: String,
}

impl SidecarClient {
    /// Starts `serve --store URL` and creates `semaphore` with `capacity` once, so acquires
    /// need not name the capacity (with it, each acquire would also re-check the stored one).
    pub async fn start(store: &str, semaphore: &str, capacity: u32) -> anyhow::Result<Self> {
        let process = Sidecar::start(&["--store", store]).await;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .context("build the HTTP client")?;
        let base = process.url.clone();
        let r = http
            .put(format!("{base}/v1/semaphores/{semaphore}"))
            .json(&json!({ "capacity": capacity }))
            .send()
            .await
            .context("create the sidecar's semaphore")?;
        ensure!(r.status().is_success(), "PUT semaphore: {}", r.status());
        Ok(SidecarClient {
            process,
            http,
            permits_url: format!("{base}/v1/semaphores/{semaphore}/permits"),
            base,
        })
    }

    /// The sidecar's process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// POST: waits for one permit; returns its id.
    pub async fn acquire(&self) -> anyhow::Result<String> {
        let r = self
            .http
            .post(&self.permits_url)
            .json(&json!({ "ttl_ms": 15_000 }))
            .send()
            .await
            .context("sidecar acquire")?;
        ensure!(
            r.status() == StatusCode::CREATED,
            "sidecar acquire answered {}",
            r.status()
        );
        let body: serde_json::Value = r.json().await.context("sidecar acquire body")?;
        body["id"]
            .as_str()
            .map(str::to_string)
            .context("sidecar acquire: no id in the answer")
    }

    /// DELETE: releases the permit `id`.
    pub async fn release(&self, id: &str) -> anyhow::Result<()> {
        let r = self
            .http
            .delete(format!("{}/v1/permits/{id}", self.base))
            .send()
            .await
            .context("sidecar release")?;
        ensure!(
            r.status() == StatusCode::NO_CONTENT,
            "sidecar release answered {}",
            r.status()
        );
        Ok(())
    }
}
