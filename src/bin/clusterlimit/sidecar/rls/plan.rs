//! The first step of answering a request (`request.rs`): each descriptor matched to its rule,
//! its cost and key worked out, and its limit opened: what to count, and what not to.

use super::lib_error::status;
use super::matcher::{self, Entry};
use super::rules::{Domain, Rule};
use super::service::Rls;
use clusterlimit::{Error, RateLimit, StoreDownPolicy};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;
use tonic::Status;

/// What to do with one descriptor.
pub enum Plan {
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

/// One descriptor as matched: its rule (none: no limit), its entries as counted (from the
/// request, or the rule's wildcards), its hits.
pub struct Picked<'r> {
    pub rule: Option<Arc<Rule>>,
    pub entries: Vec<Entry<'r>>,
    pub cost: u64,
}

impl Rls {
    /// Every descriptor of `req` picked and planned, in order. Opening a new override's limit
    /// keeps within `budget`; one the store cannot open in time is planned as store-down.
    pub(super) async fn plan<'r>(
        &self,
        req: &'r RateLimitRequest,
        domain: &'r Domain,
        policy: StoreDownPolicy,
        budget: Duration,
    ) -> Result<(Vec<Picked<'r>>, Vec<Plan>), Status> {
        let picked = req
            .descriptors
            .iter()
            .enumerate()
            .map(|(i, d)| self.pick(domain, i, d, req.hits_addend))
            .collect::<Result<Vec<_>, Status>>()?;
        // `replaces`: a matched rule drops every matched rule it names.
        let replaced: HashSet<String> = picked
            .iter()
            .filter_map(|p| p.rule.as_ref())
            .flat_map(|r| r.replaces.iter().cloned())
            .collect();
        let mut plans = Vec::with_capacity(picked.len());
        for p in &picked {
            plans.push(self.plan_one(p, &replaced, policy, budget).await?);
        }
        Ok((picked, plans))
    }

    /// Descriptor `i`'s rule (its own `limit` override, else the domain's match), entries and
    /// cost.
    fn pick<'r>(
        &self,
        domain: &'r Domain,
        i: usize,
        d: &'r RateLimitDescriptor,
        request_hits: u32,
    ) -> Result<Picked<'r>, Status> {
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
            None => u64::from(request_hits.max(1)),
        };
        Ok(Picked {
            rule,
            entries,
            cost,
        })
    }

    /// The plan of one picked descriptor.
    async fn plan_one(
        &self,
        p: &Picked<'_>,
        replaced: &HashSet<String>,
        policy: StoreDownPolicy,
        budget: Duration,
    ) -> Result<Plan, Status> {
        let r = match &p.rule {
            None => return Ok(Plan::NoLimit),
            // envoyproxy sets unlimited aside before it applies `replaces`.
            Some(r) if r.unlimited => return Ok(Plan::Unlimited),
            Some(r) if !r.name.is_empty() && replaced.contains(&r.name) => {
                return Ok(Plan::NoLimit)
            }
            Some(r) => r,
        };
        let counted = counted_alone(r);
        let Some(quota) = r.quota else {
            return Ok(Plan::AlwaysOver(counted, p.cost));
        };
        // Configured rules are open since the start; a new override opens here, within the
        // store timeout like every check.
        let opened = tokio::time::timeout(budget, self.open(&r.limit_name, quota))
            .await
            .unwrap_or(Err(Error::Timeout));
        let limit = match opened {
            Ok(limit) => limit,
            Err(Error::Store(_) | Error::SessionLost | Error::Timeout | Error::Closed) => {
                tracing::warn!(limit = %r.limit_name, %policy, "store down while opening a limit override; answering by the store-down policy");
                return Ok(Plan::StoreDown(r.clone(), p.cost));
            }
            Err(e) => return Err(status(e)),
        };
        let too_big = p.cost > quota.max_cost();
        Ok(Plan::Check {
            rule: counted,
            limit,
            key: matcher::counter_key(&p.entries),
            cost: if too_big { 0 } else { p.cost },
            too_big,
        })
    }
}

/// The matched rule behind the `counted` one of a plan (see [`counted_alone`]).
pub fn configured<'a>(matched: &'a Option<Arc<Rule>>, counted: &'a Arc<Rule>) -> &'a Rule {
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
