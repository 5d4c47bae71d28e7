//! The charges of a request (`request.rs`): a `charge` rule's hits are usage already spent
//! (Envoy's `apply_on_stream_done` call, its `hits_addend` the usage the upstream reported),
//! charged whatever the key holds, into debt if need be, and never answered over; a denial
//! would undo nothing, the work being done. `is_negative_hits` gives usage back.

use super::plan::Plan;
use super::service::Rls;
use clusterlimit::{Balance, Error};
use std::time::Duration;
use tonic::Status;

impl Rls {
    /// Every charge (and refund) of `plans`, at once, each within `budget`. Per plan: the
    /// key's balance afterwards (`None` for a plan that charges nothing).
    ///
    /// A charge the store does not take in time is an UNAVAILABLE error naming it: whether it
    /// applied is unknown, and Envoy does not retry a stream-done call (its answer is only
    /// logged), so the error is for the log and the metrics, not for a retry.
    pub(super) async fn charge(
        &self,
        plans: &[Plan],
        budget: Duration,
    ) -> Result<Vec<Option<Balance>>, Status> {
        let charges = plans.iter().enumerate().filter_map(|(i, p)| match p {
            Plan::Charge {
                rule,
                limit,
                key,
                amount,
                refund,
            } => Some(async move {
                let moved = async {
                    if *refund {
                        limit.refund(key, *amount).await
                    } else {
                        limit.charge(key, *amount).await
                    }
                };
                let done = tokio::time::timeout(budget, moved)
                    .await
                    .unwrap_or(Err(Error::Timeout));
                (i, rule, key, *amount, *refund, done)
            }),
            _ => None,
        });
        let done = futures::future::join_all(charges).await;
        let mut out = vec![None; plans.len()];
        for (i, rule, key, amount, refund, result) in done {
            let what = if refund { "refund" } else { "charge" };
            match result {
                Ok(balance) => {
                    tracing::debug!(domain = %rule.domain, rule = %rule.path, key, amount, debt = balance.debt, "rls {what}");
                    out[i] = Some(balance);
                }
                Err(e) => {
                    tracing::warn!(domain = %rule.domain, rule = %rule.path, key, amount, "rls {what} not recorded: {e}");
                    let why = format!(
                        "descriptors[{i}]: the {what} of {amount} to key {key:?} on rule {}.{} \
                         was not recorded: {e}",
                        rule.domain, rule.path
                    );
                    return Err(match e {
                        Error::InvalidArgument(_) => Status::invalid_argument(why),
                        _ => Status::unavailable(format!(
                            "{why}; it may or may not have applied, and it is not retried"
                        )),
                    });
                }
            }
        }
        Ok(out)
    }
}
