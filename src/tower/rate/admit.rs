//! Admission of one request: its key and cost checked through the store-down guard, at once
//! or waiting up to a deadline.

use super::error::{RateLimitError, RateLimitInfo};
use super::options::{OnLimit, OnMissingKey};
use crate::error::Error;
use crate::rate::headers::{rate_limit_headers, HeaderNames};
use crate::rate_limit::handle::{validate_key, RateLimit};
use crate::store_down::{DecisionSource, GuardedDecision, StoreDownGuard};
use std::convert::Infallible;
use std::time::Duration;
use tokio::time::Instant;

/// Header fields to put on the response: name (lower case, static) and value.
pub(crate) type Fields = Vec<(&'static str, String)>;

/// Everything a layer decided, shared by the services it made.
#[derive(Debug, Clone)]
pub(crate) struct Policy {
    pub(crate) limit: RateLimit,
    pub(crate) guard: StoreDownGuard,
    pub(crate) on_limit: OnLimit,
    pub(crate) on_missing_key: OnMissingKey,
    pub(crate) headers: Option<HeaderNames>,
}

/// What one request gets.
pub(crate) enum Admission {
    /// Run it; the decision if it was checked, and the fields to add to its response.
    Pass(Option<RateLimitInfo>, Fields),
    /// Do not run it.
    Reject(RateLimitError<Infallible>, Fields),
}

/// What the request's key and cost call for, decided in `call` (the request is not kept for
/// the check).
pub(crate) enum Plan {
    /// Check `cost` for the key.
    Check(String, u64),
    /// Run the request unchecked (cost 0, or no key and `OnMissingKey::Admit`).
    Free,
    /// Refuse it without asking the store.
    Refuse(RateLimitError<Infallible>),
}

impl Policy {
    /// The plan for a request whose key function answered `key` and whose cost is `cost`.
    pub(crate) fn plan(&self, key: Result<String, String>, cost: u64) -> Plan {
        // A free request is not checked, so it needs no key either.
        if cost == 0 {
            return Plan::Free;
        }
        let key = match (key, &self.on_missing_key) {
            (Ok(key), _) => key,
            (Err(_), OnMissingKey::UseKey(default)) => default.clone(),
            (Err(_), OnMissingKey::Admit) => return Plan::Free,
            (Err(reason), OnMissingKey::Reject) => {
                return Plan::Refuse(RateLimitError::MissingKey {
                    limit: self.limit.name().to_string(),
                    reason,
                })
            }
        };
        if let Err(source) = validate_key(&key) {
            return Plan::Refuse(RateLimitError::InvalidRequest {
                field: "key",
                source,
            });
        }
        if let Err(source) = self.limit.quota().check_cost(self.limit.name(), cost) {
            return Plan::Refuse(RateLimitError::InvalidRequest {
                field: "cost",
                source,
            });
        }
        Plan::Check(key, cost)
    }

    /// Carries out `plan`. Never waits on the store past the guard's store timeout per check,
    /// nor (in wait mode) past the deadline plus one check.
    pub(crate) async fn admit(&self, plan: Plan) -> Admission {
        let (key, cost) = match plan {
            Plan::Check(key, cost) => (key, cost),
            Plan::Free => return Admission::Pass(None, Vec::new()),
            Plan::Refuse(e) => return Admission::Reject(e, Vec::new()),
        };
        // The guard's timeouts and the waits need Tokio's timer: say so instead of panicking.
        if tokio::runtime::Handle::try_current().is_err() {
            return Admission::Reject(
                RateLimitError::Limiter(Error::invalid("clusterlimit needs a Tokio runtime")),
                Vec::new(),
            );
        }
        let answer = match self.on_limit {
            OnLimit::Reject => self.guard.check_n(&self.limit, &key, cost).await,
            OnLimit::WaitUpTo(up_to) => self.wait(&key, cost, up_to).await,
        };
        let guarded = match answer {
            Ok(g) => g,
            // The guard answers store failures with its policy: what is left is not the store's.
            Err(e) => return Admission::Reject(RateLimitError::Limiter(e), Vec::new()),
        };
        let fields = self.fields(&guarded);
        let info = RateLimitInfo {
            limit: self.limit.name().to_string(),
            decision: guarded.decision,
            source: guarded.source,
        };
        if guarded.decision.allowed {
            Admission::Pass(Some(info), fields)
        } else {
            Admission::Reject(
                RateLimitError::RateLimited {
                    limit: info.limit,
                    decision: info.decision,
                    source: info.source,
                },
                fields,
            )
        }
    }

    /// [`StoreDownGuard::wait_until`] up to `up_to`, keeping the last denial for the 429's
    /// headers (a fallback's answer is final: waiting would not bring the store back).
    async fn wait(
        &self,
        key: &str,
        cost: u64,
        up_to: Duration,
    ) -> crate::error::Result<GuardedDecision> {
        // `None`: a deadline too far to represent, i.e. none.
        let deadline = Instant::now().checked_add(up_to);
        let waited = self
            .guard
            .wait_until(&self.limit, key, cost, deadline)
            .await?;
        // Without a stop future a wait ends with an answer.
        waited
            .into_answer()
            .ok_or_else(|| Error::invalid("the wait was stopped"))
    }

    /// The RateLimit fields of a decision the store or the local share made (a fail-open or
    /// fail-closed answer is made up: it gets none).
    fn fields(&self, g: &GuardedDecision) -> Fields {
        match (self.headers, g.source) {
            (Some(names), DecisionSource::Store | DecisionSource::Local) => {
                rate_limit_headers(self.limit.name(), &self.limit.quota(), &g.decision, names)
            }
            _ => Vec::new(),
        }
    }
}
