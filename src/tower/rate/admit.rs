//! Admission of one request: its key and cost checked through the store-down guard, at once
//! or waiting up to a deadline.

use super::error::{RateLimitError, RateLimitInfo};
use super::options::{OnLimit, OnMissingKey};
use super::settle::OnNoResponse;
use super::settling::{SettleCounts, Unsettled};
use crate::error::Error;
use crate::rate::headers::{rate_limit_headers, HeaderNames};
use crate::rate::FlowId;
use crate::rate_limit::handle::{validate_key, RateLimit};
use crate::rate_limit::options::CheckOptions;
use crate::rate_limit::reservation::Opening;
use crate::store_down::{DecisionSource, GuardedDecision, StoreDownGuard};
use std::convert::Infallible;
use std::sync::Arc;

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
    /// Admitted requests are reservations of their cost, settled from the response.
    pub(crate) reserve: bool,
    pub(crate) on_no_response: OnNoResponse,
    pub(crate) settle_counts: Arc<SettleCounts>,
}

/// What one request gets.
pub(crate) enum Admission {
    /// Run it; the decision if it was checked, the fields to add to its response, and its
    /// reservation if it is to be settled.
    Pass(Option<RateLimitInfo>, Fields, Option<Box<Unsettled>>),
    /// Do not run it.
    Reject(RateLimitError<Infallible>, Fields),
}

/// What the request's key and cost call for, decided in `call` (the request is not kept for
/// the check).
pub(crate) enum Plan {
    /// Check the key as the options say (its cost, its class).
    Check(String, CheckOptions),
    /// Run the request unchecked (cost 0, or no key and `OnMissingKey::Admit`).
    Free,
    /// Refuse it without asking the store.
    Refuse(RateLimitError<Infallible>),
}

impl Policy {
    /// The plan for a request whose key function answered `key`, whose cost is `cost` and
    /// whose class and flow are `asker`.
    pub(crate) fn plan(
        &self,
        key: Result<String, String>,
        cost: u64,
        asker: (Option<String>, Option<String>),
    ) -> Plan {
        let (class, flow) = asker;
        // A free request is not checked, so it needs no key either. Settled, an estimate of 0
        // is a peek: admitted while the key is not in debt, charged afterwards.
        if cost == 0 && !self.reserve {
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
        let options = match flow {
            Some(flow) => match FlowId::of(&flow) {
                Ok(_) => CheckOptions::new().cost(cost).flow(flow),
                Err(why) => {
                    return Plan::Refuse(RateLimitError::InvalidRequest {
                        field: "flow",
                        source: Error::invalid(why),
                    })
                }
            },
            None => CheckOptions::new().cost(cost),
        };
        let Some(class) = class else {
            return Plan::Check(key, options);
        };
        // A class the quota lacks, or a cost the class can never take: the class's fault.
        let quota = self.limit.quota();
        if let Err(source) = quota.check_class(self.limit.name(), Some(&class), cost) {
            return Plan::Refuse(RateLimitError::InvalidRequest {
                field: "class",
                source,
            });
        }
        Plan::Check(key, options.class(class))
    }

    /// Carries out `plan`. Never waits on the store past the guard's store timeout per check,
    /// nor (in wait mode) past the deadline plus one check.
    pub(crate) async fn admit(&self, plan: Plan) -> Admission {
        let (key, options) = match plan {
            Plan::Check(key, options) => (key, options),
            Plan::Free => return Admission::Pass(None, Vec::new(), None),
            Plan::Refuse(e) => return Admission::Reject(e, Vec::new()),
        };
        // The guard's timeouts and the waits need Tokio's timer: say so instead of panicking.
        if tokio::runtime::Handle::try_current().is_err() {
            return Admission::Reject(
                RateLimitError::Limiter(Error::invalid("clusterlimit needs a Tokio runtime")),
                Vec::new(),
            );
        }
        let opening = match self.reserve.then(|| self.limit.open_reservation(&options)) {
            Some(Err(e)) => return Admission::Reject(RateLimitError::Limiter(e), Vec::new()),
            Some(Ok(opening)) => Some(opening),
            None => None,
        };
        let options = match opening {
            Some(_) => options.reserving(),
            None => options,
        };
        let estimate = options.cost_of();
        let answer = match self.on_limit {
            // A wait needs a cost: an estimate of 0 (a peek) is checked once.
            OnLimit::WaitUpTo(up_to) if estimate > 0 => {
                self.wait(&key, options.within(up_to)).await
            }
            _ => self.guard.check_with(&self.limit, &key, options).await,
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
            let unsettled = opening.and_then(|o| self.reserved(o, &key, estimate, &guarded));
            Admission::Pass(Some(info), fields, unsettled)
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

    /// The reservation an admitted request holds, opened as `opening`: none when the store did
    /// not decide (a store-down answer took nothing in the store, so there is nothing there to
    /// settle). Called within a Tokio runtime (checked by `admit`).
    fn reserved(
        &self,
        opening: Opening,
        key: &str,
        estimate: u64,
        guarded: &GuardedDecision,
    ) -> Option<Box<Unsettled>> {
        if guarded.source != DecisionSource::Store {
            return None;
        }
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let reservation = opening.decided(&self.limit, key, estimate, guarded.decision);
        Some(Box::new(Unsettled::new(
            reservation,
            self.limit.name(),
            self.on_no_response.clone(),
            self.settle_counts.clone(),
            runtime,
        )))
    }

    /// [`StoreDownGuard::wait_with`] up to the options' budget, keeping the last denial for
    /// the 429's headers (a fallback's answer is final: waiting would not bring the store
    /// back).
    async fn wait(
        &self,
        key: &str,
        options: CheckOptions,
    ) -> crate::error::Result<GuardedDecision> {
        let waited = self.guard.wait_with(&self.limit, key, options).await?;
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
