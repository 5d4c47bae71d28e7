//! etcd's part of the sweeper (`sweeper.rs`) and the slow scan (`scan.rs`): what they reach
//! etcd with, and the revision-checked delete of expired keys, [`PER_TXN`] per Txn.

use super::client::{kv, most_nested};
use super::endpoints::Endpoints;
use crate::stats::{RequestCounters, RequestKind};
use etcd_client::{Compare, CompareOp, Txn, TxnOp, TxnOpResponse};
use futures::StreamExt;
use std::sync::Arc;
use std::time::Duration;

/// Most keys deleted by one Txn (each nested Txn holds one compare and one delete).
pub(super) const PER_TXN: usize = most_nested(1);
/// Most delete Txns in flight at once.
pub(super) const CONCURRENCY: usize = 2;

/// What the sweep and the scan reach etcd with.
pub(super) struct EtcdSweep {
    pub(super) endpoints: Arc<Endpoints>,
    pub(super) stats: Arc<RequestCounters>,
    pub(super) request_timeout: Duration,
    /// Prefix of every rate-limit key (`<root>/rk/`).
    pub(super) prefix: String,
}

impl EtcdSweep {
    /// Deletes each (key, revision) still at that revision, [`PER_TXN`] per Txn, at most
    /// [`CONCURRENCY`] at once. Returns how many were deleted and the keys of the batches that
    /// failed (their outcome unknown).
    pub(super) async fn delete_at(
        &self,
        targets: Vec<(String, i64)>,
    ) -> (usize, Vec<(String, i64)>) {
        let batches: Vec<Vec<(String, i64)>> = targets
            .chunks(PER_TXN)
            .map(<[(String, i64)]>::to_vec)
            .collect();
        let mut sent = futures::stream::iter(batches)
            .map(|batch| async move {
                let r = self.delete_batch(&batch).await;
                (batch, r)
            })
            .buffer_unordered(CONCURRENCY);
        let (mut deleted, mut failed) = (0, Vec::new());
        while let Some((batch, r)) = sent.next().await {
            match r {
                Some(n) => deleted += n,
                None => failed.extend(batch),
            }
        }
        (deleted, failed)
    }

    /// One Txn of nested `mod_revision == rev → delete`; `None` if it failed or timed out.
    async fn delete_batch(&self, batch: &[(String, i64)]) -> Option<usize> {
        let nested: Vec<TxnOp> = batch
            .iter()
            .map(|(key, rev)| {
                TxnOp::txn(
                    Txn::new()
                        .when([Compare::mod_revision(key.clone(), CompareOp::Equal, *rev)])
                        .and_then([TxnOp::delete(key.clone(), None)]),
                )
            })
            .collect();
        self.stats.count(RequestKind::Delete);
        let (member, client) = self.endpoints.pick();
        let sent = tokio::time::timeout(
            self.request_timeout,
            kv(&client).txn(Txn::new().and_then(nested)),
        )
        .await;
        match sent {
            Ok(Ok(resp)) => Some(
                resp.op_responses()
                    .iter()
                    .filter(|op| matches!(op, TxnOpResponse::Txn(t) if t.succeeded()))
                    .count(),
            ),
            Ok(Err(e)) => {
                tracing::debug!(error = %e, keys = batch.len(), "deleting expired rate-limit keys failed; retrying later");
                self.endpoints.failed(member);
                None
            }
            Err(_) => {
                tracing::debug!(
                    keys = batch.len(),
                    "deleting expired rate-limit keys timed out; retrying later"
                );
                self.endpoints.failed(member);
                None
            }
        }
    }
}
