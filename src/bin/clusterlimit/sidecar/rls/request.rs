//! One `ShouldRateLimit` request answered in three steps: each descriptor matched to its rule
//! and planned (`plan.rs`), the planned ones counted through the domain's guard within the
//! caller's budget (`count.rs`), and the outcomes measured and shaped as envoyproxy's
//! response (here, and `answer.rs`).

use super::answer::{self, Outcome};
use super::count::Checked;
use super::plan::{configured, Picked, Plan};
use super::rules::{Domain, Rule};
use super::service::{Rls, MAX_DESCRIPTORS};
use clusterlimit::{Balance, DecisionSource, StoreDownPolicy};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use std::sync::Arc;
use std::time::Duration;
use tonic::Status;

impl Rls {
    /// The answer to one request whose caller waits at most `budget` (Envoy sends its filter
    /// timeout as `grpc-timeout`): every store call of the answer keeps within it, and what the
    /// store cannot decide in time gets the store-down policy's answer, so Envoy hears this
    /// service's policy instead of timing out into its own `failure_mode_deny`.
    pub async fn answer(
        &self,
        req: &RateLimitRequest,
        budget: Duration,
    ) -> Result<RateLimitResponse, Status> {
        let budget = budget.min(self.store_timeout);
        well_formed(req)?;
        let rules = self.rules();
        let Some(domain) = rules.domains.get(&req.domain) else {
            let none = vec![Outcome::NoLimit; req.descriptors.len()];
            return Ok(answer::response(&none, self.shadow, self.headers));
        };
        let policy = domain.store_down.unwrap_or(self.default_policy);
        let (picked, plans) = self.plan(req, domain, policy, budget).await?;
        let guard = self
            .guards
            .get(&policy)
            .ok_or_else(|| Status::internal("no guard for the domain's store_down policy"))?;
        // Charges go to the store whatever the checks say: the usage is spent already.
        let (decided, charged) = futures::future::join(
            self.count(guard, policy, &plans, budget),
            self.charge(&plans, budget),
        )
        .await;
        let (decided, charged) = (decided?, charged?);
        let mut outcomes = Vec::with_capacity(plans.len());
        for (((plan, picked), checked), balance) in
            plans.iter().zip(&picked).zip(&decided).zip(charged)
        {
            let outcome = match balance {
                Some(balance) => self.charged(domain, plan, picked, balance),
                None => self.respond(domain, policy, plan, picked, checked)?,
            };
            outcomes.push(outcome);
        }
        Ok(answer::response(&outcomes, self.shadow, self.headers))
    }

    /// One descriptor's outcome, recorded in the metrics. The rule as configured: a
    /// quota_mode one is checked as if shadow (see `plan.rs`) but answers and is measured as
    /// itself.
    fn respond<'p>(
        &self,
        domain: &Domain,
        policy: StoreDownPolicy,
        plan: &'p Plan,
        picked: &'p Picked<'_>,
        checked: &Option<Checked>,
    ) -> Result<Outcome<'p>, Status> {
        Ok(match plan {
            Plan::NoLimit => Outcome::NoLimit,
            Plan::Unlimited => Outcome::Unlimited,
            Plan::AlwaysOver(rule, cost) | Plan::BadClass(rule, cost) => {
                let rule = configured(&picked.rule, rule);
                self.metrics.rate.record_answer(
                    &domain.name,
                    &rule.path,
                    false,
                    false,
                    *cost,
                    self.shadowed(rule),
                );
                Outcome::Decided {
                    rule,
                    decision: None,
                    over: true,
                    store: true,
                }
            }
            Plan::StoreDown(rule, cost) => self.store_down(domain, policy, rule, *cost),
            Plan::Charge { .. } => {
                return Err(Status::internal("a charged descriptor got no balance"))
            }
            Plan::Check { .. } => {
                let c = checked
                    .ok_or_else(|| Status::internal("a checked descriptor got no decision"))?;
                self.checked(domain, plan, picked, c)
            }
        })
    }

    /// A rule whose limit could not be opened: fail_open, and local (this process has no
    /// share of a limit it never opened): OK without a limit; fail_closed: over.
    fn store_down<'p>(
        &self,
        domain: &Domain,
        policy: StoreDownPolicy,
        rule: &'p Arc<Rule>,
        cost: u64,
    ) -> Outcome<'p> {
        let closed = matches!(policy, StoreDownPolicy::FailClosed);
        self.metrics.rate.record_answer(
            &domain.name,
            &rule.path,
            !closed,
            true,
            cost,
            self.shadowed(rule),
        );
        if closed {
            Outcome::Decided {
                rule,
                decision: None,
                over: true,
                store: false,
            }
        } else {
            Outcome::NoLimit
        }
    }

    /// A counted descriptor's outcome. The metrics say what the answer says: over (with the
    /// hits it asked for, as envoyproxy's over_limit), or admitted with what was charged (0
    /// in a request denied as a whole: nothing counted).
    fn checked<'p>(
        &self,
        domain: &Domain,
        plan: &'p Plan,
        picked: &'p Picked<'_>,
        c: Checked,
    ) -> Outcome<'p> {
        let Plan::Check {
            rule,
            limit,
            key,
            class,
            too_big,
            ..
        } = plan
        else {
            return Outcome::NoLimit;
        };
        let rule = configured(&picked.rule, rule);
        let over = c.over || *too_big;
        let mut g = c.guarded;
        g.decision.allowed = !over;
        let hits = if over { picked.cost } else { c.charged };
        let label = self.metric_label(rule, &picked.entries);
        let rate = &self.metrics.rate;
        rate.record(
            &domain.name,
            &label,
            &g,
            hits,
            self.shadowed(rule),
            Some(c.latency),
        );
        rate.record_key(limit.name(), key, class.as_deref(), &g, hits);
        rate.keys_cached(limit.name(), limit.cached_keys());
        Outcome::Decided {
            rule,
            decision: Some(c.guarded.decision),
            over,
            store: c.guarded.source == DecisionSource::Store,
        }
    }

    /// A charged descriptor's outcome: OK, with the key's balance; measured as admitted
    /// with the hits charged (a refund: 0).
    fn charged<'p>(
        &self,
        domain: &Domain,
        plan: &'p Plan,
        picked: &'p Picked<'_>,
        balance: Balance,
    ) -> Outcome<'p> {
        let Plan::Charge {
            rule,
            amount,
            refund,
            ..
        } = plan
        else {
            return Outcome::NoLimit;
        };
        let rule = configured(&picked.rule, rule);
        let hits = if *refund { 0 } else { *amount };
        self.metrics.rate.record_answer(
            &domain.name,
            &rule.path,
            true,
            false,
            hits,
            self.shadowed(rule),
        );
        Outcome::Charged { rule, balance }
    }

    /// Whether `rule` is answered as shadow (its own setting, or the service's).
    fn shadowed(&self, rule: &Rule) -> bool {
        rule.shadow || self.shadow
    }
}

/// The request's shape as envoyproxy checks it (its errors are plain Go errors, which gRPC
/// sends as UNKNOWN), and this service's bound on descriptors.
fn well_formed(req: &RateLimitRequest) -> Result<(), Status> {
    if req.domain.is_empty() {
        return Err(Status::unknown("rate limit domain must not be empty"));
    }
    if req.descriptors.is_empty() {
        return Err(Status::unknown(
            "rate limit descriptor list must not be empty",
        ));
    }
    if req.descriptors.len() > MAX_DESCRIPTORS {
        return Err(Status::invalid_argument(format!(
            "descriptors: at most {MAX_DESCRIPTORS} per request (counted in one store \
             transaction), got {}",
            req.descriptors.len()
        )));
    }
    Ok(())
}
