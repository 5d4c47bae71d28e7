//! What the routes read of adaptive semaphores: a status with its adaptive state
//! (`GET /v1/semaphores/{name}`), and the adaptive metrics brought up to date at a scrape.

use super::state::AppState;
use crate::common::lock;
use crate::sidecar::adaptive_view::{AdaptiveView, StatusView};
use crate::sidecar::per_member_view::PerMemberView;
use crate::sidecar::problem::Problem;
use futures::future::join_all;

impl AppState {
    /// The status of `name` with its adaptive or per-member state, if its Limiters announce
    /// one (any semaphore: one adapted by other sidecars or services shows too). Three store
    /// reads, side by side, within the store timeout.
    pub(super) async fn status_view(&self, name: &str) -> Result<StatusView, Problem> {
        let read = async {
            let sem = self.semaphore(name, None).await?;
            let (status, adaptive, per_member) =
                tokio::join!(sem.status(), sem.adaptive_status(), sem.per_member_status());
            let status = status.map_err(|e| Problem::from_lib(e, "name"))?;
            let adaptive = adaptive.map_err(|e| Problem::from_lib(e, "name"))?;
            let per_member = per_member.map_err(|e| Problem::from_lib(e, "name"))?;
            Ok(StatusView {
                status,
                adaptive: adaptive.as_ref().map(AdaptiveView::from),
                per_member: per_member.as_ref().map(PerMemberView::from),
            })
        };
        self.bounded(read).await
    }

    /// Reads every declared adaptive semaphore's capacity and state into the metrics, all
    /// within one store timeout; what is not read in time keeps its last values (a scrape
    /// must answer even when the store does not).
    pub(super) async fn observe_adaptive(&self) {
        let declared: Vec<_> = lock(&self.adaptive).values().cloned().collect();
        if declared.is_empty() {
            return;
        }
        let reads = join_all(declared.iter().map(|sem| async move {
            let (status, adaptive) = tokio::join!(sem.status(), sem.adaptive_status());
            (sem.name(), status, adaptive)
        }));
        let Ok(reads) = tokio::time::timeout(self.store_timeout, reads).await else {
            tracing::debug!("adaptive metrics: the store did not answer within the request timeout; keeping the last values");
            return;
        };
        for (name, status, adaptive) in reads {
            match (status, adaptive) {
                (Ok(status), Ok(adaptive)) => {
                    self.metrics
                        .adaptive
                        .observe(name, status.capacity, adaptive.as_ref());
                }
                (Err(e), _) | (_, Err(e)) => {
                    tracing::debug!(semaphore = %name, error = %e, "adaptive metrics: read failed; keeping the last values");
                }
            }
        }
    }
}
