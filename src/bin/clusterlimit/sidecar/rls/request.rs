//! One `ShouldRateLimit` request answered: each descriptor matched to its rule and planned,
//! the planned ones counted in one `check_all` through the domain's guard within the caller's
//! budget, and the outcomes shaped as envoyproxy's response (`answer.rs`).

use super::answer::{self, Outcome};
use super::matcher::{self, Entry};
use super::rules::Rule;
use super::service::{Rls, MAX_DESCRIPTORS};
use clusterlimit::{
    DecisionSource, Error, GuardedDecision, KeyCheck, RateLimit, StoreDownGuard, StoreDownPolicy,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tonic::Status;

/// What to do with one descriptor.
enum Plan {
    NoLimit,
    Unlimited,
    /// `requests_per_unit: 0`: over every time, nothing to count.
    AlwaysOver(Arc<Rule>, u64),
    /// The rule's rate limit could not be opened (a new override while the store is down or
    /// hung): answered by the domain's store-down policy, `cost` not counted.
    StoreDown(Arc<Rule>, u64),
    /// Check `cost` on `limit`; `too_big`: the cost is above what the limit ever admits at
    /// once, so the descriptor is over (envoyproxy answers OVER_LIMIT, not an error) and the
    /// check only reads the key (cost 0).
    Check {
        rule: Arc<Rule>,
        limit: RateLimit,
        key: String,
        cost: u64,
        too_big: bool,
    },
}

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
        // envoyproxy returns these as plain Go errors, which gRPC sends as UNKNOWN.
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
        let rules = self.rules();
        let Some(domain) = rules.domains.get(&req.domain) else {
            let none = vec![Outcome::NoLimit; req.descriptors.len()];
            return Ok(answer::response(&none, self.shadow, self.headers));
        };
        // Rules, costs and keys.
        let mut picked = Vec::with_capacity(req.descriptors.len());
        for (i, d) in req.descriptors.iter().enumerate() {
            if d.is_negative_hits {
                return Err(Status::invalid_argument(format!(
                    "descriptors[{i}].is_negative_hits is not supported"
                )));
            }
            let mut entries: Vec<Entry<'_>> = d
                .entries
                .iter()
                .map(|e| (e.key.as_str(), e.value.as_str()))
                .collect();
            let rule = match &d.limit {
                Some(o) => Some(self.override_rule(domain, i, &entries, o)?),
                // Counted (and labelled) by the entries as matched: share_threshold values
                // stand as their wildcard.
                None => matcher::find(domain, &entries).map(|found| {
                    entries = found.entries;
                    found.rule.clone()
                }),
            };
            // envoyproxy: a descriptor's own hits_addend wins (0 there only reads); the
            // request's counts as 1 when 0.
            let cost = match &d.hits_addend {
                Some(h) => h.value,
                None => u64::from(req.hits_addend.max(1)),
            };
            picked.push((rule, entries, cost));
        }
        // `replaces`: a matched rule drops every matched rule it names.
        let replaced: HashSet<String> = picked
            .iter()
            .filter_map(|(r, _, _)| r.as_ref())
            .flat_map(|r| r.replaces.iter().cloned())
            .collect();
        let policy = domain.store_down.unwrap_or(self.default_policy);
        let mut plans = Vec::with_capacity(picked.len());
        for (rule, entries, cost) in &picked {
            let plan = match rule {
                None => Plan::NoLimit,
                // envoyproxy sets unlimited aside before it applies `replaces`.
                Some(r) if r.unlimited => Plan::Unlimited,
                Some(r) if !r.name.is_empty() && replaced.contains(&r.name) => Plan::NoLimit,
                Some(r) => match (r.quota, counted_alone(r)) {
                    (None, counted) => Plan::AlwaysOver(counted, *cost),
                    (Some(quota), counted) => {
                        // Configured rules are open since the start; a new override opens
                        // here, within the store timeout like every check.
                        let opened = tokio::time::timeout(budget, self.open(&r.limit_name, quota))
                            .await
                            .unwrap_or(Err(Error::Timeout));
                        let limit = match opened {
                            Ok(limit) => limit,
                            Err(
                                Error::Store(_)
                                | Error::SessionLost
                                | Error::Timeout
                                | Error::Closed,
                            ) => {
                                tracing::warn!(limit = %r.limit_name, %policy, "store down while opening a limit override; answering by the store-down policy");
                                plans.push(Plan::StoreDown(r.clone(), *cost));
                                continue;
                            }
                            Err(e) => return Err(status(e)),
                        };
                        let too_big = *cost > quota.max_cost();
                        Plan::Check {
                            rule: counted,
                            limit,
                            key: matcher::counter_key(entries),
                            cost: if too_big { 0 } else { *cost },
                            too_big,
                        }
                    }
                },
            };
            plans.push(plan);
        }
        let guard = self
            .guards
            .get(&policy)
            .ok_or_else(|| Status::internal("no guard for the domain's store_down policy"))?;
        let decided = self.check(guard, policy, &plans, budget).await?;

        let mut outcomes = Vec::with_capacity(plans.len());
        for (i, plan) in plans.iter().enumerate() {
            let entries = &picked[i].1;
            // The rule as configured: a quota_mode one is checked as if shadow (see
            // `counted_alone`) but answers and is measured as itself.
            outcomes.push(match plan {
                Plan::NoLimit => Outcome::NoLimit,
                Plan::Unlimited => Outcome::Unlimited,
                Plan::AlwaysOver(rule, cost) => {
                    let rule = configured(&picked[i].0, rule);
                    self.metrics.rate.record_answer(
                        &domain.name,
                        &rule.path,
                        false,
                        false,
                        *cost,
                        rule.shadow || self.shadow,
                    );
                    Outcome::Decided {
                        rule,
                        decision: None,
                        over: true,
                        store: true,
                    }
                }
                // fail_open, and local (this process has no share of a limit it never
                // opened): OK without a limit; fail_closed: over.
                Plan::StoreDown(rule, cost) => {
                    let closed = matches!(policy, StoreDownPolicy::FailClosed);
                    self.metrics.rate.record_answer(
                        &domain.name,
                        &rule.path,
                        !closed,
                        true,
                        *cost,
                        rule.shadow || self.shadow,
                    );
                    match policy {
                        StoreDownPolicy::FailClosed => Outcome::Decided {
                            rule,
                            decision: None,
                            over: true,
                            store: false,
                        },
                        _ => Outcome::NoLimit,
                    }
                }
                Plan::Check {
                    rule,
                    limit,
                    key,
                    too_big,
                    ..
                } => {
                    let rule = configured(&picked[i].0, rule);
                    let c = decided[i]
                        .ok_or_else(|| Status::internal("a checked descriptor got no decision"))?;
                    let over = c.over || *too_big;
                    // The metrics say what the answer says: over (with the hits it asked
                    // for, as envoyproxy's over_limit), or admitted with what was charged (0
                    // in a request denied as a whole: nothing counted).
                    let mut g = c.guarded;
                    g.decision.allowed = !over;
                    let hits = if over { picked[i].2 } else { c.charged };
                    let label = self.metric_label(rule, entries);
                    let shadow = rule.shadow || self.shadow;
                    self.metrics.rate.record(
                        &domain.name,
                        &label,
                        &g,
                        hits,
                        shadow,
                        Some(c.latency),
                    );
                    self.metrics.rate.record_key(limit.name(), key, &g, hits);
                    self.metrics
                        .rate
                        .keys_cached(limit.name(), limit.cached_keys());
                    Outcome::Decided {
                        rule,
                        decision: Some(c.guarded.decision),
                        over,
                        store: c.guarded.source == DecisionSource::Store,
                    }
                }
            });
        }
        Ok(answer::response(&outcomes, self.shadow, self.headers))
    }

    /// Counts the checks: the enforced ones all or nothing in one `check_all` (reading only,
    /// when another descriptor is over anyway); shadow ones each on its own, since they must
    /// never stop the others. Per plan: the decision, whether it is over, the store time.
    async fn check(
        &self,
        guard: &StoreDownGuard,
        policy: StoreDownPolicy,
        plans: &[Plan],
        budget: Duration,
    ) -> Result<Vec<Option<Checked>>, Status> {
        let shadow = |rule: &Rule| rule.shadow || self.shadow;
        let over_anyway = plans.iter().any(|p| match p {
            Plan::AlwaysOver(rule, _) => !shadow(rule),
            Plan::StoreDown(rule, _) => {
                matches!(policy, StoreDownPolicy::FailClosed) && !shadow(rule)
            }
            Plan::Check { rule, too_big, .. } => *too_big && !shadow(rule),
            _ => false,
        });
        let mut enforced = Vec::new();
        let mut checks = Vec::new();
        let mut alone = Vec::new();
        for (i, p) in plans.iter().enumerate() {
            if let Plan::Check {
                rule,
                limit,
                key,
                cost,
                ..
            } = p
            {
                if shadow(rule) {
                    alone.push((i, limit, key.as_str(), *cost));
                } else {
                    enforced.push((i, *cost));
                    checks.push(KeyCheck::new(
                        limit,
                        key.clone(),
                        if over_anyway { 0 } else { *cost },
                    ));
                }
            }
        }
        let together = async {
            if checks.is_empty() {
                return Ok((Vec::new(), Duration::ZERO));
            }
            let start = Instant::now();
            let gs = match enforced.as_slice() {
                // One counter: the coalesced, paced path of `check_n` (a hot key's concurrent
                // requests share one store write; a saturated key's denials take none).
                [(i, cost)] => match &plans[*i] {
                    Plan::Check { limit, key, .. } => {
                        let cost = if over_anyway { 0 } else { *cost };
                        vec![guard.check_n_within(limit, key, cost, budget).await?]
                    }
                    _ => return Err(Error::invalid("an enforced descriptor without a check")),
                },
                _ => {
                    guard
                        .check_all_within(&self.limiter, &checks, budget)
                        .await?
                }
            };
            Ok::<_, Error>((gs, start.elapsed()))
        };
        let each =
            futures::future::join_all(alone.iter().map(|(_, limit, key, cost)| async move {
                let start = Instant::now();
                let g = guard.check_n_within(limit, key, *cost, budget).await?;
                Ok::<_, Error>((g, start.elapsed()))
            }));
        let (together, each) = futures::future::join(together, each).await;
        let (gs, latency) = together.map_err(status)?;
        let mut out = vec![None; plans.len()];
        let denied = gs.iter().any(|g| !g.decision.allowed);
        let mut marked = false;
        for ((i, cost), g) in enforced.iter().zip(&gs) {
            // In a denied batch every decision says denied: over are the ones that could not
            // take their cost.
            let over = !g.decision.allowed && *cost > 0 && g.decision.remaining < *cost;
            marked |= over;
            out[*i] = Some(Checked {
                guarded: *g,
                over,
                // All or nothing: a denied batch, or one only read, charged nobody.
                charged: if denied || over_anyway { 0 } else { *cost },
                latency,
            });
        }
        if denied && !marked {
            // Denied for a reason no remaining shows (a ban): every charged check is over.
            for (i, cost) in &enforced {
                if let Some(c) = out[*i].as_mut() {
                    c.over = *cost > 0 && !c.guarded.decision.allowed;
                }
            }
        }
        for ((i, _, _, cost), r) in alone.iter().zip(each) {
            let (g, latency) = r.map_err(status)?;
            let allowed = g.decision.allowed;
            out[*i] = Some(Checked {
                guarded: g,
                over: !allowed,
                charged: if allowed { *cost } else { 0 },
                latency,
            });
        }
        Ok(out)
    }
}

/// The matched rule behind the `counted` one of a plan (see [`counted_alone`]).
fn configured<'a>(matched: &'a Option<Arc<Rule>>, counted: &'a Arc<Rule>) -> &'a Rule {
    match matched {
        Some(r) if r.limit_name == counted.limit_name => r,
        _ => counted,
    }
}

/// The rule to check a matched `rule` as: a `quota_mode` rule as a shadow one, counted on its
/// own, so that its being over never stops the request's other descriptors from being counted
/// (envoyproxy answers OK overall while another quota-mode descriptor is within its limit).
fn counted_alone(rule: &Arc<Rule>) -> Arc<Rule> {
    if rule.quota_mode && !rule.shadow {
        Arc::new(Rule {
            shadow: true,
            ..Rule::clone(rule)
        })
    } else {
        rule.clone()
    }
}

/// How one checked descriptor came out.
#[derive(Clone, Copy)]
struct Checked {
    guarded: GuardedDecision,
    /// This descriptor is over its limit.
    over: bool,
    /// The hits actually counted for it.
    charged: u64,
    /// How long the store (or the guard) took.
    latency: Duration,
}

/// A library error as a gRPC status: bad input is INVALID_ARGUMENT; a store the guard could
/// not cover (a limit that cannot be opened while it is down) UNAVAILABLE, so Envoy applies
/// its own `failure_mode_deny`.
fn status(e: Error) -> Status {
    match e {
        Error::InvalidArgument(why) => Status::invalid_argument(why),
        Error::Store(_) | Error::SessionLost | Error::Timeout | Error::Closed => {
            Status::unavailable(e.to_string())
        }
        e => Status::internal(e.to_string()),
    }
}
