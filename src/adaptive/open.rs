//! Opening an adaptive semaphore (`Limiter::adaptive_semaphore`) and reading how it adapts
//! (`Semaphore::adaptive_status`).

use super::adaptivity::Adaptivity;
use super::config::Adaptive;
use super::control::{self, Decision, Report};
use super::names::{board_of, controller_of};
use crate::error::{Error, Result};
use crate::limiter_inner::LimiterInner;
use crate::per_member::names::board_of as per_member_board_of;
use crate::semaphore::Semaphore;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// How an adaptive semaphore adapts now, as its Limiters announce it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct AdaptiveStatus {
    /// Limiters announcing outcomes for it now.
    pub reporters: usize,
    /// The newest step of the controller, if one is in control (`None` right after a
    /// controller died, until the next one's first window).
    pub last: Option<Decision>,
}

/// [`Limiter::adaptive_semaphore`]: the semaphore and its controller seat ensured, and this
/// Limiter's window task started once per name.
pub(crate) async fn open(
    inner: &Arc<LimiterInner>,
    name: &str,
    config: Adaptive,
) -> Result<Semaphore> {
    config.check(name)?;
    inner.check_open()?;
    refuse_if_per_member(inner, name).await?;
    let opened = match inner.backend.ensure_semaphore(name, None).await {
        Err(Error::NotFound(_)) => {
            match inner
                .backend
                .ensure_semaphore(name, Some(config.first_capacity()))
                .await
            {
                // Created by someone else meanwhile, with another capacity: theirs stands.
                Err(Error::CapacityMismatch { stored, .. }) => Ok(stored),
                other => other,
            }
        }
        other => other,
    };
    inner.closed_or_result(opened)?;
    let controller = controller_of(name);
    let ensured = inner.backend.ensure_semaphore(&controller, Some(1)).await;
    match inner.closed_or_result(ensured) {
        Ok(_) => {}
        Err(Error::CapacityMismatch { .. }) => {
            return Err(Error::invalid(format!(
                "semaphore {controller:?} exists with a capacity other than 1: it is the controller seat of adaptive semaphore {name:?}; delete it or choose another name"
            )))
        }
        Err(e) => return Err(e),
    }
    let adaptivity = {
        let mut open = inner
            .adaptive
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        open.retain(|_, a| a.strong_count() > 0);
        match open.get(name).and_then(std::sync::Weak::upgrade) {
            Some(a) => a,
            None => {
                let a = Arc::new(Adaptivity {
                    reporter: Arc::default(),
                    stop: CancellationToken::new(),
                });
                inner.runtime.spawn(control::run(
                    inner.clone(),
                    name.to_string(),
                    config,
                    a.reporter.clone(),
                    Semaphore::new(inner.clone(), &controller),
                    a.stop.clone(),
                ));
                open.insert(name.to_string(), Arc::downgrade(&a));
                a
            }
        }
    };
    Ok(Semaphore::adaptive(inner.clone(), name, adaptivity))
}

/// `InvalidArgument` if `name` is open as a per-member semaphore, in this Limiter or, as its
/// board shows, in another: two controllers would fight over its capacity.
async fn refuse_if_per_member(inner: &LimiterInner, name: &str) -> Result<()> {
    let here = inner
        .per_member
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(name)
        .is_some_and(|m| m.strong_count() > 0);
    // A store that keeps no boards has no per-member semaphores: nothing to refuse.
    let read = inner
        .backend
        .announcements(&per_member_board_of(name))
        .await;
    let elsewhere = read.map_or(0, |all| all.len());
    if here || elsewhere > 0 {
        let by = if here {
            "in this Limiter".to_string()
        } else {
            format!("by {elsewhere} Limiter(s)")
        };
        return Err(Error::invalid(format!(
            "semaphore {name:?} is open as a per-member semaphore ({by}): its capacity cannot also adapt to outcomes; close it there or choose another name"
        )));
    }
    Ok(())
}

impl Semaphore {
    /// How this semaphore adapts, as the Limiters that have it open as an adaptive semaphore
    /// announce it: `None` if none does. One store read. Cancel-safe.
    pub async fn adaptive_status(&self) -> Result<Option<AdaptiveStatus>> {
        let inner = self.limiter();
        inner.check_open()?;
        let read = inner.backend.announcements(&board_of(self.name())).await;
        let reports: Vec<Report> = inner
            .closed_or_result(read)?
            .into_iter()
            .filter_map(|(_, v)| serde_json::from_slice(&v).ok())
            .collect();
        if reports.is_empty() {
            return Ok(None);
        }
        let last = reports
            .iter()
            .filter_map(|r| r.decision.clone())
            .max_by_key(|d| (d.window, d.at_unix_ms));
        Ok(Some(AdaptiveStatus {
            reporters: reports.len(),
            last,
        }))
    }
}
