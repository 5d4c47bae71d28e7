//! The first step of answering a request (`request.rs`): each descriptor matched to its rule,
//! its cost and key worked out, and its limit opened: what to count, and what not to.

use super::lib_error::status;
use super::matcher::{self, Entry};
use super::rules::{Domain, Rule};
use super::service::Rls;
use clusterlimit::{Error, RateLimit, StoreDownPolicy, MAX_CHARGE};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
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
    /// The descriptor names a priority class its rule's quota does not declare (or two
    /// classes): over, nothing counted, so an unknown class never gets the whole quota.
    BadClass(Arc<Rule>, u64),
    /// Check `cost` on `limit`, as `class` if any; `too_big`: the cost is above what the
    /// limit (or the class) ever admits at once, so the descriptor is over (envoyproxy answers
    /// OVER_LIMIT, not an error) and the check only reads the key (cost 0).
    Check {
        rule: Arc<Rule>,
        limit: RateLimit,
        key: String,
        cost: u64,
        class: Option<String>,
        too_big: bool,
        /// A `charge` rule's hits 0: over while the key cannot take 1 (spent or in debt).
        peek: bool,
    },
    /// A `charge` rule's hits: `amount` charged to `key` whatever it holds (given back when
    /// `refund`: Envoy's `is_negative_hits`), never over.
    Charge {
        rule: Arc<Rule>,
        limit: RateLimit,
        key: String,
        amount: u64,
        refund: bool,
    },
}

/// One descriptor as matched: its rule (none: no limit), its entries as counted (from the
/// request, or the rule's wildcards; without the class entry), its hits, its class.
pub struct Picked<'r> {
    pub rule: Option<Arc<Rule>>,
    pub entries: Vec<Entry<'r>>,
    pub cost: u64,
    pub class: Asked<'r>,
    /// `is_negative_hits` (on a `charge` rule only): the hits are given back.
    pub refund: bool,
}

/// The priority class a descriptor asks for, by its domain's `class_key` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asked<'r> {
    /// No class entry: the descriptor may use its rule's whole quota.
    None,
    /// One class (the entry given more than once with one value counts once).
    Class(&'r str),
    /// Two different values: no class can be chosen.
    Conflict(&'r str, &'r str),
}

impl<'r> Asked<'r> {
    /// The class entries of `entries` (keyed `class_key`) taken out, and the class they name.
    fn take(class_key: Option<&str>, entries: &mut Vec<Entry<'r>>) -> Asked<'r> {
        let Some(class_key) = class_key else {
            return Asked::None;
        };
        let mut asked = Asked::None;
        entries.retain(|(k, v)| {
            if *k != class_key {
                return true;
            }
            asked = match asked {
                Asked::None => Asked::Class(v),
                Asked::Class(c) if c != *v => Asked::Conflict(c, v),
                kept => kept,
            };
            false
        });
        asked
    }
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
        let mut entries: Vec<Entry<'_>> = d
            .entries
            .iter()
            .map(|e| (e.key.as_str(), e.value.as_str()))
            .collect();
        // The class entry says how to check, not what: it neither matches nor counts.
        let class = Asked::take(domain.class_key.as_deref(), &mut entries);
        let rule = match &d.limit {
            Some(o) => Some(self.override_rule(domain, i, &entries, o)?),
            // Counted (and labelled) by the entries as matched: share_threshold values
            // stand as their wildcard.
            None => matcher::find(domain, &entries).map(|found| {
                entries = found.entries;
                found.rule.clone()
            }),
        };
        let charge = rule.as_ref().is_some_and(|r| r.charge);
        let cost = hits(i, d, request_hits, charge)?;
        Ok(Picked {
            rule,
            entries,
            cost,
            class,
            refund: d.is_negative_hits,
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
        let key = matcher::counter_key(&p.entries);
        if r.charge && (p.cost > 0 || p.refund) {
            return Ok(Plan::Charge {
                rule: counted,
                limit,
                key,
                amount: p.cost,
                refund: p.refund,
            });
        }
        let class = match p.class {
            Asked::None => None,
            Asked::Class(c) if quota.reserves.get(c).is_some() => Some(c),
            asked => {
                bad_class(r, asked);
                return Ok(Plan::BadClass(counted, p.cost));
            }
        };
        let reserve = class.and_then(|c| quota.reserves.get(c)).unwrap_or(0);
        let too_big = p.cost.saturating_add(reserve) > quota.max_cost();
        Ok(Plan::Check {
            rule: counted,
            limit,
            key,
            cost: if too_big { 0 } else { p.cost },
            class: class.map(str::to_string),
            too_big,
            peek: r.charge,
        })
    }
}

/// Descriptor `i`'s hits. envoyproxy: its own hits_addend wins (0 there only reads); the
/// request's counts as 1 when 0. On a `charge` rule the request's 0 stays 0 (a peek: Envoy's
/// request-time call, which sets no hits), and a charge or a refund is bounded by what one
/// may move a key by. `is_negative_hits` is a refund of a charge: on other rules it is
/// refused.
fn hits(i: usize, d: &RateLimitDescriptor, request_hits: u32, charge: bool) -> Result<u64, Status> {
    if d.is_negative_hits && !charge {
        return Err(Status::invalid_argument(format!(
            "descriptors[{i}].is_negative_hits gives usage back, which only a rule with \
             `charge: true` takes (a refund of what was charged); the descriptor's rule has no \
             charge, or it matched none"
        )));
    }
    let cost = match &d.hits_addend {
        Some(h) => h.value,
        None if charge => u64::from(request_hits),
        None => u64::from(request_hits.max(1)),
    };
    if charge && cost > MAX_CHARGE {
        return Err(Status::invalid_argument(format!(
            "descriptors[{i}].hits_addend: {cost} is above {MAX_CHARGE}, the most one charge or \
             refund may move a key by (Envoy's own bound on hits_addend)"
        )));
    }
    Ok(cost)
}

/// Unix second of the last warning of a bad class (at most one per [`WARN_EVERY_S`]: every
/// request of a misconfigured Envoy would log one).
static BAD_CLASS_WARNED: AtomicU64 = AtomicU64::new(0);
const WARN_EVERY_S: u64 = 10;

/// Logs (now and then) a descriptor whose class `rule` cannot check: what was asked, what
/// the rule declares, and what the descriptor got.
fn bad_class(rule: &Rule, asked: Asked<'_>) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let last = BAD_CLASS_WARNED.load(Ordering::Relaxed);
    if now < last + WARN_EVERY_S
        || BAD_CLASS_WARNED
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
    {
        return;
    }
    let declared = rule.quota.map_or(String::new(), |q| q.reserves.to_string());
    let why = match asked {
        Asked::Conflict(a, b) => format!("two classes, {a:?} and {b:?}"),
        Asked::Class(c) => format!("class {c:?}"),
        Asked::None => "no class".to_string(),
    };
    tracing::warn!(
        domain = %rule.domain, rule = %rule.path, origin = %rule.origin,
        "a descriptor asks for {why}, which this rule does not declare (its reserves: {}); \
         answered OVER_LIMIT, nothing counted (declare the class under the rule's reserves, \
         or fix the Envoy action that sets it); further such warnings within {WARN_EVERY_S} s \
         are not logged",
        if declared.is_empty() { "none" } else { &declared }
    );
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
