//! The in-process limits of [`StoreDownPolicy::Local`](super::StoreDownPolicy::Local): one
//! `memory://` Limiter of this guard's own, opened at the first store failure, holding each
//! limit at its local share.

use super::policy::StoreDownPolicy;
use crate::backend::lock;
use crate::error::{Error, Result};
use crate::limiter::Limiter;
use crate::rate::Quota;
use crate::rate_limit::handle::RateLimit;
use std::collections::HashMap;
use std::sync::Mutex;
use tokio::sync::OnceCell;

#[derive(Debug)]
pub(super) struct LocalLimits {
    replicas: u32,
    limiter: OnceCell<Limiter>,
    /// Limit name → its local twin.
    limits: Mutex<HashMap<String, RateLimit>>,
}

impl LocalLimits {
    pub(super) fn new(replicas: u32) -> Self {
        LocalLimits {
            replicas,
            limiter: OnceCell::new(),
            limits: Mutex::new(HashMap::new()),
        }
    }

    /// The in-process Limiter (its own `memory://` store, gone with the guard).
    pub(super) async fn limiter(&self) -> Result<&Limiter> {
        self.limiter
            .get_or_try_init(|| async {
                let name = uuid::Uuid::new_v4().simple();
                Limiter::connect(&format!("memory://clusterlimit-local-{name}")).await
            })
            .await
    }

    /// The local twin of `global`, at its share of `global`'s current quota.
    pub(super) async fn twin(&self, global: &RateLimit) -> Result<RateLimit> {
        let share = StoreDownPolicy::local_share(&global.quota(), self.replicas);
        let cached = lock(&self.limits).get(global.name()).cloned();
        if let Some(local) = cached {
            if local.quota() != share {
                local.set_quota(share).await?;
            }
            return Ok(local);
        }
        let limiter = self.limiter().await?;
        let local = match limiter.rate_limit(global.name(), share).await {
            Ok(local) => local,
            // A racing first use created it at an older share.
            Err(Error::QuotaMismatch { .. }) => {
                let local = limiter.open_rate_limit(global.name()).await?;
                local.set_quota(share).await?;
                local
            }
            Err(e) => return Err(e),
        };
        lock(&self.limits).insert(global.name().to_string(), local.clone());
        Ok(local)
    }
}

/// Whether a check of `cost` of `class` fits the local `quota` at all (a share can be smaller
/// than a cost the whole limit admits).
pub(super) fn fits(quota: &Quota, cost: u64, class: Option<&str>) -> bool {
    cost.saturating_add(quota.reserves.reserve_of(class)) <= quota.max_cost()
}
