//! The tonic service: `ShouldRateLimit` on the sidecar's Limiter, through one
//! [`StoreDownGuard`] per store-down policy.

use super::answer::{self, from_pb_unit, HeaderMode, Outcome};
use super::config::{limit_name, Domain, Rule, Rules};
use super::matcher::{self, Entry};
use super::reload::{ReloadError, Reloaded};
use crate::common::lock;
use crate::sidecar::auth::Token;
use crate::sidecar::metrics::Metrics;
use clusterlimit::{
    Check, Error, Guarded, Limiter, Quota, RateLimit, Source, StoreDownGuard, StoreDownPolicy,
};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use tonic::{Request, Response, Status};

/// At most this many distinct `limit` override rules (domain, entry keys, requests_per_unit,
/// unit) per process: each one is a rate limit kept in memory and in the store, and the
/// requests choose them, so a misconfigured or hostile client must not grow them forever.
pub const MAX_OVERRIDE_RULES: usize = 1024;

/// At most this many descriptors per request: a request is counted in one store transaction,
/// and etcd's (`--max-txn-ops`, 128 by default) takes a write and a quota check per
/// descriptor. envoyproxy has no such limit; Envoy sends one descriptor per `rate_limits`
/// action list that applies, a handful in practice.
pub const MAX_DESCRIPTORS: usize = 64;

/// At most this many distinct metric labels per `detailed_metric` rule (one per descriptor
/// value, chosen by the requests); past it the rule's path labels the rest, so a rule on
/// `key: user` cannot grow the metrics forever.
pub const MAX_DETAILED_LABELS: usize = 1000;

/// The RLS: rules, the rate limits behind them, and the guards.
pub struct Rls {
    limiter: Limiter,
    /// The rules in force, swapped whole by [`Rls::reload`]; a request clones the `Arc` once,
    /// so it finishes on the set it started with and no lock is held across an await.
    rules: RwLock<Arc<Rules>>,
    /// Opened rate limits, by name.
    limits: Mutex<HashMap<String, RateLimit>>,
    /// Rules made from requests' `limit` overrides, by limit name.
    overrides: Mutex<HashMap<String, Arc<Rule>>>,
    /// The detailed metric labels given so far, by rule limit name.
    detailed: Mutex<HashMap<String, HashSet<String>>>,
    guards: HashMap<StoreDownPolicy, StoreDownGuard>,
    default_policy: StoreDownPolicy,
    /// How long opening a new override's rate limit may take before the store counts as down.
    store_timeout: Duration,
    metrics: Arc<Metrics>,
    shadow: bool,
    headers: HeaderMode,
}

/// How the service answers (from the settings).
#[derive(Debug, Clone, Copy)]
pub struct Behaviour {
    pub store_down: StoreDownPolicy,
    pub store_timeout: Duration,
    pub shadow: bool,
    pub headers: HeaderMode,
}

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
    /// The service on `limiter`; opens every configured limit now (the config's quota wins
    /// over a stored one), so the first request costs no extra store round trip.
    pub async fn start(
        limiter: Limiter,
        rules: Arc<Rules>,
        behaviour: Behaviour,
        metrics: Arc<Metrics>,
    ) -> clusterlimit::Result<Rls> {
        let mut policies: HashSet<StoreDownPolicy> = rules
            .domains
            .values()
            .filter_map(|d| d.store_down)
            .collect();
        policies.insert(behaviour.store_down);
        let guards = policies
            .into_iter()
            .map(|p| {
                let guard = StoreDownGuard::new(p).store_timeout(behaviour.store_timeout);
                metrics.watch_breaker(&format!("rls:{p}"), guard.clone());
                (p, guard)
            })
            .collect();
        let rls = Rls {
            limiter,
            rules: RwLock::new(rules),
            limits: Mutex::new(HashMap::new()),
            overrides: Mutex::new(HashMap::new()),
            detailed: Mutex::new(HashMap::new()),
            guards,
            default_policy: behaviour.store_down,
            store_timeout: behaviour.store_timeout,
            metrics,
            shadow: behaviour.shadow,
            headers: behaviour.headers,
        };
        let rules = rls.rules();
        for rule in rules.all() {
            if let Some(quota) = rule.quota {
                rls.open(&rule.limit_name, quota).await?;
            }
        }
        Ok(rls)
    }

    /// The rate limit `name` at `quota`, created if absent, its quota set if it differs.
    async fn open(&self, name: &str, quota: Quota) -> clusterlimit::Result<RateLimit> {
        if let Some(rl) = lock(&self.limits).get(name) {
            return Ok(rl.clone());
        }
        let rl = match self.limiter.rate_limit(name, quota).await {
            Ok(rl) => rl,
            Err(Error::QuotaMismatch { .. }) => {
                let rl = self.limiter.open_rate_limit(name).await?;
                rl.set_quota(quota).await?;
                tracing::info!(limit = name, %quota, "rate limit had another quota; set the config's");
                rl
            }
            Err(e) => return Err(e),
        };
        lock(&self.limits).insert(name.to_string(), rl.clone());
        Ok(rl)
    }

    /// The rules in force now.
    pub fn rules(&self) -> Arc<Rules> {
        // A poisoned lock still holds a whole set: the swap is one assignment.
        self.rules.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Puts `new` in force: first opens the rate limit of every rule it counts (created, or
    /// its quota set when the config changed it; an unchanged rule costs nothing and its
    /// counters go on, since a rule's limit is named by its domain and path), then swaps the
    /// set whole. Requests in flight finish on the old set. On an error nothing is swapped.
    pub async fn reload(&self, new: Rules) -> Result<Reloaded, ReloadError> {
        // The guards are made at start, one per policy: a new policy needs a restart.
        for d in new.domains.values() {
            if let Some(p) = d.store_down.filter(|p| !self.guards.contains_key(p)) {
                return Err(ReloadError::Invalid(format!(
                    "{}: domain {:?} sets store_down {p}, a policy this sidecar did not start \
                     with; restart the sidecar to use it, or use a policy already in force",
                    d.files
                        .iter()
                        .map(|f| f.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", "),
                    d.name
                )));
            }
        }
        let mut done = Reloaded::default();
        for rule in new.all() {
            let Some(quota) = rule.quota else { continue };
            let cached = lock(&self.limits).get(&rule.limit_name).cloned();
            match cached {
                Some(rl) if rl.quota() == quota => done.unchanged += 1,
                Some(rl) => {
                    // Key states carry over: the counts go on under the new quota.
                    rl.set_quota(quota).await.map_err(ReloadError::Store)?;
                    tracing::info!(limit = %rule.limit_name, %quota, "rls rule's quota changed");
                    done.changed += 1;
                }
                None => {
                    self.open(&rule.limit_name, quota)
                        .await
                        .map_err(ReloadError::Store)?;
                    done.opened += 1;
                }
            }
        }
        done.rules = new.all().count();
        done.domains = new.domains.len();
        let kept: HashSet<String> = new.all().map(|r| r.limit_name.clone()).collect();
        *self.rules.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(new);
        // Forget the handles of removed rules (their counters stay in the store); overrides
        // keep theirs.
        let overrides: HashSet<String> = lock(&self.overrides).keys().cloned().collect();
        lock(&self.limits).retain(|name, _| kept.contains(name) || overrides.contains(name));
        Ok(done)
    }

    /// A rule for a request descriptor's `limit` override: a fixed window of its own, one rate
    /// limit per (domain, entry keys, limit), counted per entry values.
    fn override_rule(
        &self,
        domain: &Domain,
        index: usize,
        entries: &[Entry<'_>],
        o: &RateLimitOverride,
    ) -> Result<Arc<Rule>, Status> {
        let unit = from_pb_unit(o.unit).ok_or_else(|| {
            Status::invalid_argument(format!(
                "descriptors[{index}].limit.unit must be SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR"
            ))
        })?;
        let keys: Vec<&str> = entries.iter().map(|(k, _)| *k).collect();
        let path = format!(
            "override.{}.{}_per_{}",
            keys.join("."),
            o.requests_per_unit,
            unit.name()
        );
        let name = limit_name(&domain.name, &path);
        // One lock for the look-up, the cap and the insert: concurrent requests cannot pass it.
        let mut overrides = lock(&self.overrides);
        if let Some(rule) = overrides.get(&name) {
            return Ok(rule.clone());
        }
        if overrides.len() >= MAX_OVERRIDE_RULES {
            return Err(Status::resource_exhausted(format!(
                "descriptors[{index}].limit: this sidecar already holds {MAX_OVERRIDE_RULES} \
                 distinct limit overrides (domain, entry keys, requests_per_unit, unit), its cap; \
                 put the limit in the rls_config YAML instead"
            )));
        }
        let quota = (o.requests_per_unit > 0).then(|| {
            Quota::new(u64::from(o.requests_per_unit), unit.period())
                .algorithm(clusterlimit::Algorithm::FixedWindow)
        });
        let rule = Arc::new(Rule {
            domain: domain.name.clone(),
            path,
            name: String::new(),
            unit,
            requests_per_unit: o.requests_per_unit,
            unlimited: false,
            shadow: false,
            quota_mode: false,
            // Labelled by the rule, not the request's values: metrics stay bounded.
            detailed_metric: false,
            replaces: Vec::new(),
            quota,
            limit_name: name.clone(),
            origin: "request override".to_string(),
        });
        overrides.insert(name, rule.clone());
        Ok(rule)
    }

    /// The metrics label of a descriptor on `rule`: its own key for a `detailed_metric` rule
    /// while the rule has fewer than [`MAX_DETAILED_LABELS`], else the rule's path.
    fn metric_label(&self, rule: &Rule, entries: &[Entry<'_>]) -> String {
        if !rule.detailed_metric {
            return rule.path.clone();
        }
        let key = matcher::descriptor_key(entries);
        let mut detailed = lock(&self.detailed);
        let seen = detailed.entry(rule.limit_name.clone()).or_default();
        if seen.contains(&key) {
            return key;
        }
        if seen.len() >= MAX_DETAILED_LABELS {
            return rule.path.clone();
        }
        seen.insert(key.clone());
        key
    }

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
                        store: c.guarded.source == Source::Store,
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
                    checks.push(Check::new(
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
    guarded: Guarded,
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

/// What a caller that sent `grpc-timeout` leaves this service for its store calls: the
/// timeout less a margin for the answer's way back (a fifth of it, at least 2 ms). Envoy sends
/// its rate limit filter's `timeout` (20 ms by default) this way.
fn budget_of(metadata: &tonic::metadata::MetadataMap) -> Option<Duration> {
    let timeout = parse_grpc_timeout(metadata.get("grpc-timeout")?.to_str().ok()?)?;
    let margin = (timeout / 5).max(Duration::from_millis(2));
    Some(timeout.saturating_sub(margin).max(Duration::from_millis(1)))
}

/// gRPC's `grpc-timeout`: up to 8 digits and a unit (`H`, `M`, `S`, `m`, `u`, `n`).
fn parse_grpc_timeout(text: &str) -> Option<Duration> {
    let (digits, unit) = text.split_at(text.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.checked_mul(3600)?),
        "M" => Duration::from_secs(n.checked_mul(60)?),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// The tonic service around a shared [`Rls`].
#[derive(Clone)]
pub struct Service(pub Arc<Rls>);

#[tonic::async_trait]
impl RateLimitService for Service {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        // Boxed: the answer's future is deep enough to overflow the compiler's layout query
        // inside tonic's own.
        let answer: std::pin::Pin<Box<dyn std::future::Future<Output = _> + Send + '_>> =
            Box::pin(self.0.answer(
                request.get_ref(),
                budget_of(request.metadata()).unwrap_or(Duration::MAX),
            ));
        answer.await.map(Response::new)
    }
}

/// With a token configured, every call needs `authorization: Bearer TOKEN` metadata.
pub fn require_token(
    token: Option<Token>,
    metrics: Arc<Metrics>,
) -> impl FnMut(Request<()>) -> Result<Request<()>, Status> + Clone {
    move |req: Request<()>| {
        let Some(token) = &token else {
            return Ok(req);
        };
        let presented = req
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        match presented {
            Some(p) if token.matches(p.as_bytes()) => Ok(req),
            _ => {
                metrics.unauthorized();
                Err(Status::unauthenticated(
                    "this RLS needs `authorization: Bearer TOKEN` metadata \
                     (Envoy: grpc_service.initial_metadata)",
                ))
            }
        }
    }
}

#[cfg(test)]
mod grpc_timeout_tests {
    use super::*;

    #[test]
    fn grpc_timeouts_parse_as_the_spec_says_and_leave_a_margin() {
        assert_eq!(parse_grpc_timeout("20m"), Some(Duration::from_millis(20)));
        assert_eq!(parse_grpc_timeout("1S"), Some(Duration::from_secs(1)));
        assert_eq!(parse_grpc_timeout("2M"), Some(Duration::from_secs(120)));
        assert_eq!(parse_grpc_timeout("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_grpc_timeout("500u"), Some(Duration::from_micros(500)));
        assert_eq!(parse_grpc_timeout("7n"), Some(Duration::from_nanos(7)));
        for bad in ["", "m", "20", "20x", "-1m", "123456789m", "1.5S"] {
            assert_eq!(parse_grpc_timeout(bad), None, "{bad:?}");
        }
        let mut md = tonic::metadata::MetadataMap::new();
        assert_eq!(budget_of(&md), None);
        md.insert(
            "grpc-timeout",
            tonic::metadata::MetadataValue::from_static("20m"),
        );
        assert_eq!(budget_of(&md), Some(Duration::from_millis(16)));
        md.insert(
            "grpc-timeout",
            tonic::metadata::MetadataValue::from_static("5m"),
        );
        assert_eq!(budget_of(&md), Some(Duration::from_millis(3)));
        md.insert(
            "grpc-timeout",
            tonic::metadata::MetadataValue::from_static("1m"),
        );
        assert_eq!(budget_of(&md), Some(Duration::from_millis(1)));
    }
}
