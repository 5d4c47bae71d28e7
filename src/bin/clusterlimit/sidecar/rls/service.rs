//! The RLS on the sidecar's Limiter: the rules in force (swapped whole by a reload), the rate
//! limits behind them and the requests' `limit` overrides, and one [`StoreDownGuard`] per
//! store-down policy. A request is answered in `request.rs`, served over gRPC by `grpc.rs`.

use super::answer::from_pb_unit;
use super::matcher::{self, Entry};
use super::reload_report::{ReloadError, Reloaded};
use super::rules::{limit_name, Domain, Rule, Rules};
use crate::common::lock;
use crate::sidecar::header_mode::HeaderMode;
use crate::sidecar::metrics::Metrics;
use clusterlimit::{Error, Limiter, Quota, RateLimit, StoreDownGuard, StoreDownPolicy};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tonic::Status;

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
    pub(super) limiter: Limiter,
    /// The rules in force, swapped whole by [`Rls::reload`]; a request clones the `Arc` once,
    /// so it finishes on the set it started with and no lock is held across an await.
    pub(super) rules: RwLock<Arc<Rules>>,
    /// Opened rate limits, by name.
    pub(super) limits: Mutex<HashMap<String, RateLimit>>,
    /// Rules made from requests' `limit` overrides, by limit name.
    pub(super) overrides: Mutex<HashMap<String, Arc<Rule>>>,
    /// The detailed metric labels given so far, by rule limit name.
    pub(super) detailed: Mutex<HashMap<String, HashSet<String>>>,
    pub(super) guards: HashMap<StoreDownPolicy, StoreDownGuard>,
    pub(super) default_policy: StoreDownPolicy,
    /// How long opening a new override's rate limit may take before the store counts as down.
    pub(super) store_timeout: Duration,
    pub(super) metrics: Arc<Metrics>,
    pub(super) shadow: bool,
    pub(super) headers: HeaderMode,
}

/// How the service answers (from the settings).
#[derive(Debug, Clone, Copy)]
pub struct Behaviour {
    pub store_down: StoreDownPolicy,
    pub store_timeout: Duration,
    pub shadow: bool,
    pub headers: HeaderMode,
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
                metrics.watch_breaker(&format!("rls:{p}"), guard.clone(), limiter.clusters().len());
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
    pub(super) async fn open(&self, name: &str, quota: Quota) -> clusterlimit::Result<RateLimit> {
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
    pub(super) fn override_rule(
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
            charge: false,
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
    pub(super) fn metric_label(&self, rule: &Rule, entries: &[Entry<'_>]) -> String {
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
}
