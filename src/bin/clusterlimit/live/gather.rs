//! Takes the live picture from the store: every semaphore's holders and waiters, every rate
//! limit's quota, the store's latency, and the fleet's summaries; merged with what this
//! process recorded (a sidecar) or nothing (`clusterlimit top`). One gatherer per viewer
//! process; each call is bounded by the request timeout per store read.

use super::clock::unix_ms;
use super::clusters::ClusterMemory;
use super::fleet;
use super::kept::{KeptPanes, SemaphoresPane, Staleness};
use super::leases;
use super::picture::{
    ClassView, ClusterView, ControllerView, FleetMember, HealthEvent, HolderView, KeyView, Picture,
    RateLimitView, SemaphoreView, StaleView, StoreView,
};
use super::recorder::Recorder;
use super::seats;
use crate::common::lock;
use crate::common::quota_print::quota_text;
use clusterlimit::{Limiter, Status};
use futures::stream::{self, StreamExt};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Semaphores whose status one picture reads at most (sorted by name; the rest are counted).
pub const MAX_SEMAPHORES: usize = 2000;
/// Rate limits one picture shows at most.
pub const MAX_RATE_LIMITS: usize = 500;
/// Store reads in flight at once while taking a picture.
const READS_IN_FLIGHT: usize = 32;
/// Health events kept.
const EVENTS: usize = 20;
/// Holders and waiters listed per semaphore.
const SHOWN_PER_QUEUE: usize = 50;

/// Who takes the pictures, of what.
pub struct Viewer {
    /// Shown as the picture's source: the sidecar's owner label, or `top`.
    pub source: String,
    /// Shown as the store: redact it first.
    pub store_url: String,
    /// Bounds each store read.
    pub timeout: Duration,
    /// The Limiter's session TTL, shown.
    pub session_ttl: Duration,
}

/// The panes of one picture read from the store (the rate limits: why they could not be
/// listed, if they could not).
struct Panes {
    semaphores: SemaphoresPane,
    rate_limits: Result<Vec<RateLimitView>, String>,
    members: Vec<clusterlimit::StoreMember>,
    fleet: Vec<FleetMember>,
}

/// The panes a picture shows (read now or kept): semaphores, how many in the store, rate
/// limits, members, fleet, and the stale mark if some were kept.
type ShownPanes = (
    Vec<SemaphoreView>,
    usize,
    Vec<RateLimitView>,
    Vec<clusterlimit::StoreMember>,
    Vec<FleetMember>,
    Option<StaleView>,
);

/// Takes pictures for one viewer process.
pub struct Gatherer {
    limiter: Limiter,
    source: String,
    store_url: String,
    timeout: Duration,
    session_ttl: Duration,
    memory: Mutex<Memory>,
    /// Opened semaphores: a status read then costs one request.
    opened: Mutex<HashMap<String, clusterlimit::Semaphore>>,
}

/// What one picture remembers for the next: tokens seen (grants and releases between
/// pictures), each cluster's reachability (health events, since when), the last panes read.
#[derive(Default)]
struct Memory {
    tokens: HashMap<String, HashSet<u64>>,
    at: Option<Instant>,
    /// Each cluster's state and since when (health events, "unreachable since").
    clusters: ClusterMemory,
    /// The last panes read, shown (marked stale) while the store does not answer.
    kept: KeptPanes,
    /// The store's leader at the last picture (etcd).
    leader: Option<String>,
    events: VecDeque<HealthEvent>,
}

impl Gatherer {
    /// A gatherer reading through `limiter`.
    pub fn new(limiter: Limiter, viewer: Viewer) -> Gatherer {
        Gatherer {
            limiter,
            source: viewer.source,
            store_url: viewer.store_url,
            timeout: viewer.timeout,
            session_ttl: viewer.session_ttl,
            memory: Mutex::new(Memory::default()),
            opened: Mutex::new(HashMap::new()),
        }
    }

    /// Notes a health event (a breaker moved, …) shown with the store.
    pub fn event(&self, what: String) {
        let mut m = lock(&self.memory);
        m.events.push_back(HealthEvent {
            at_unix_ms: unix_ms(),
            what,
        });
        while m.events.len() > EVENTS {
            m.events.pop_front();
        }
    }

    /// The health events noted so far, oldest first.
    pub fn events(&self) -> Vec<HealthEvent> {
        lock(&self.memory).events.iter().cloned().collect()
    }

    /// One picture. `local`: what this process recorded of its rate checks. Panes that cannot
    /// be read now are the last ones read, and the picture says so (`stale`).
    pub async fn picture(&self, local: Option<&Recorder>) -> Picture {
        let now_ms = unix_ms();
        // The clusters' probes go beside the panes' reads: a cluster that does not answer
        // costs the picture one timeout, not one per step.
        let panes = async {
            let listed = self.list_semaphores().await;
            let fresh = match &listed.0 {
                Some(names) => Some(self.read_panes(names, local, now_ms).await),
                None => None,
            };
            (listed, fresh)
        };
        let ((listed, fresh), health) =
            tokio::join!(panes, self.limiter.cluster_health(self.timeout));
        let (names, latency, error) = listed;
        let clusters = self.note_clusters(health.unwrap_or_default(), error.as_deref(), now_ms);
        let why = error.clone().unwrap_or_default();
        let (semaphores, semaphores_total, rate_limits, members, fleet, stale) =
            self.fresh_or_kept(fresh, now_ms, &why);
        let unreachable = clusters.iter().find(|c| !c.reachable);
        let store_error = error.or_else(|| {
            unreachable.map(|c| format!("{}: {}", c.name, c.error.clone().unwrap_or_default()))
        });
        let reachable = store_error.is_none();
        Picture {
            at_unix_ms: now_ms,
            source: self.source.clone(),
            store: StoreView {
                url: self.store_url.clone(),
                reachable,
                latency_ms: names.is_some().then_some(latency.as_secs_f64() * 1000.0),
                error: store_error,
                session_ttl_ms: self.session_ttl.as_millis() as u64,
                members,
                breakers: Vec::new(),
                events: self.events(),
                clusters,
            },
            semaphores,
            semaphores_total,
            rate_limits,
            rls: Vec::new(),
            fleet,
            stale,
        }
    }

    /// The semaphores' names (`None` if the store did not list them), how long the list
    /// took, and why it failed.
    async fn list_semaphores(&self) -> (Option<Vec<String>>, Duration, Option<String>) {
        let started = Instant::now();
        let names = tokio::time::timeout(self.timeout, self.limiter.semaphores()).await;
        let latency = started.elapsed();
        match names {
            Ok(Ok(n)) => (Some(n), latency, None),
            Ok(Err(e)) => (None, latency, Some(e.to_string())),
            Err(_) => (
                None,
                latency,
                Some(format!(
                    "the store did not answer within {} ms",
                    self.timeout.as_millis()
                )),
            ),
        }
    }

    /// Each cluster's view, the first cluster unreachable too when it did not list the
    /// semaphores (they live there); a health event per cluster that changed state.
    fn note_clusters(
        &self,
        mut health: Vec<clusterlimit::ClusterHealth>,
        list_error: Option<&str>,
        now_ms: u64,
    ) -> Vec<ClusterView> {
        if let (Some(first), Some(e)) = (health.first_mut(), list_error) {
            if first.error.is_none() {
                first.error = Some(e.to_string());
                first.answered_in = None;
            }
        }
        let (views, events) = lock(&self.memory).clusters.note(&health, now_ms);
        for e in events {
            self.event(e);
        }
        views
    }

    /// Every pane read now, from the store that listed `names`.
    async fn read_panes(&self, names: &[String], local: Option<&Recorder>, now_ms: u64) -> Panes {
        let members = async {
            match tokio::time::timeout(self.timeout, self.limiter.store_members()).await {
                Ok(Ok(m)) => m,
                _ => Vec::new(),
            }
        };
        // Each read is bounded by the timeout; together they take the longest one's time.
        let (semaphores, members, (fleet, rate_limits)) =
            tokio::join!(self.semaphores(names, now_ms), members, async {
                let fleet = fleet::read(&self.limiter, self.timeout).await;
                let rate_limits = self.rate_limits(local, &fleet, now_ms).await;
                (fleet, rate_limits)
            });
        let total = names.len() - seats::grouped_seats(names);
        self.note_leader(&members);
        Panes {
            semaphores: (semaphores, total),
            rate_limits,
            members,
            fleet,
        }
    }

    /// The panes read now, or, for those not read, the last ones read, marked stale.
    fn fresh_or_kept(&self, fresh: Option<Panes>, now_ms: u64, why: &str) -> ShownPanes {
        let mut m = lock(&self.memory);
        let kept = &mut m.kept;
        let mut stale = Staleness::default();
        let (sems, rates, members, fleet) = match fresh {
            Some(p) => (
                Some(p.semaphores),
                Some(p.rate_limits),
                Some(p.members),
                Some(p.fleet),
            ),
            None => (None, None, None, None),
        };
        let rates_why = match &rates {
            Some(Err(e)) => format!("the rate limits could not be listed: {e}"),
            _ => why.to_string(),
        };
        let (semaphores, total) = stale.fresh_or_kept(&mut kept.semaphores, sems, now_ms, why);
        let rates = rates.and_then(Result::ok);
        let rate_limits = stale.fresh_or_kept(&mut kept.rate_limits, rates, now_ms, &rates_why);
        let members = stale.fresh_or_kept(&mut kept.members, members, now_ms, why);
        let fleet = stale.fresh_or_kept(&mut kept.fleet, fleet, now_ms, why);
        (semaphores, total, rate_limits, members, fleet, stale.view())
    }

    /// Notes a change of the store's leader as a health event (a failover).
    fn note_leader(&self, members: &[clusterlimit::StoreMember]) {
        let Some(leader) = members.iter().find(|m| m.role == "leader") else {
            return;
        };
        let before = lock(&self.memory).leader.replace(leader.name.clone());
        if before.as_ref().is_some_and(|b| b != &leader.name) {
            self.event(format!(
                "store leader changed: {} → {}",
                before.unwrap_or_default(),
                leader.name
            ));
        }
    }

    async fn semaphores(&self, names: &[String], now_ms: u64) -> Vec<SemaphoreView> {
        let shown = &names[..names.len().min(MAX_SEMAPHORES)];
        let statuses: Vec<(String, Result<Status, String>)> = stream::iter(shown.to_vec())
            .map(|name: String| async move {
                let r = self.status_of(&name).await;
                (name, r)
            })
            .buffered(READS_IN_FLIGHT)
            .collect()
            .await;
        let mut mem = lock(&self.memory);
        let elapsed = mem.at.replace(Instant::now()).map(|t| t.elapsed());
        let mut out = Vec::with_capacity(statuses.len());
        for (name, r) in statuses {
            out.push(match r {
                Ok(st) => semaphore_view(&mut mem, name, st, elapsed, now_ms),
                Err(e) => SemaphoreView {
                    name,
                    error: Some(e),
                    ..SemaphoreView::default()
                },
            });
        }
        // Forget semaphores that went away.
        let live: HashSet<&str> = out.iter().map(|s| s.name.as_str()).collect();
        mem.tokens.retain(|k, _| live.contains(k.as_str()));
        lock(&self.opened).retain(|k, _| live.contains(k.as_str()));
        // Controller seats go under their semaphores.
        seats::group(out, |s| s.name.as_str())
            .into_iter()
            .map(|(mut s, seat)| {
                s.controller = seat.map(controller_view);
                s
            })
            .collect()
    }

    /// The status of the semaphore `name` (opened once, then kept), or why it could not be read
    /// in time.
    async fn status_of(&self, name: &str) -> Result<Status, String> {
        let r = async {
            let known = lock(&self.opened).get(name).cloned();
            let sem = match known {
                Some(s) => s,
                None => {
                    let s = self.limiter.open_semaphore(name).await?;
                    lock(&self.opened).insert(name.to_string(), s.clone());
                    s
                }
            };
            sem.status().await
        };
        match tokio::time::timeout(self.timeout, r).await {
            Ok(Ok(s)) => Ok(s),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("the store did not answer in time".to_string()),
        }
    }

    async fn rate_limits(
        &self,
        local: Option<&Recorder>,
        fleet: &[FleetMember],
        now_ms: u64,
    ) -> Result<Vec<RateLimitView>, String> {
        let names = match tokio::time::timeout(self.timeout, self.limiter.rate_limits()).await {
            Ok(Ok(n)) => n,
            Ok(Err(e)) => return Err(e.to_string()),
            Err(_) => {
                let ms = self.timeout.as_millis();
                return Err(format!("the store did not answer within {ms} ms"));
            }
        };
        let shown = &names[..names.len().min(MAX_RATE_LIMITS)];
        let own = &leases::Own::of(&self.limiter);
        let views = stream::iter(shown.to_vec())
            .map(|name: String| async move {
                let opened =
                    tokio::time::timeout(self.timeout, self.limiter.open_rate_limit(&name)).await;
                let mut v = RateLimitView {
                    name: name.clone(),
                    ..RateLimitView::default()
                };
                match opened {
                    Ok(Ok(rl)) => {
                        let q = rl.quota();
                        v.quota = quota_text(&q);
                        v.algorithm = q.algorithm.to_string();
                        v.limit = q.limit;
                        v.period_ms = q.period.as_millis() as u64;
                        v.burst = q.burst;
                    }
                    Ok(Err(e)) => v.error = Some(e.to_string()),
                    Err(_) => v.error = Some("the store did not answer in time".to_string()),
                }
                if let Some(r) = local {
                    v.recorded = r.view(&name, now_ms);
                }
                merge_fleet(&mut v, fleet);
                leases::merge(&mut v, fleet, own);
                v
            })
            .buffered(READS_IN_FLIGHT)
            .collect()
            .await;
        Ok(views)
    }
}

/// The view of the semaphore `name` from its status `st`: grants and releases per second
/// from the fencing tokens that came and went since the last gathering (`elapsed` ago,
/// remembered in `mem`), the first holders and waiters with how long they have been there at
/// `now_ms`.
fn semaphore_view(
    mem: &mut Memory,
    name: String,
    st: Status,
    elapsed: Option<Duration>,
    now_ms: u64,
) -> SemaphoreView {
    let now_tokens: HashSet<u64> = st.holders.iter().map(|h| h.fencing_token).collect();
    let (mut grants_per_s, mut releases_per_s) = (0.0, 0.0);
    if let (Some(before), Some(dt)) = (mem.tokens.get(&name), elapsed) {
        let secs = dt.as_secs_f64().max(0.001);
        grants_per_s = now_tokens.difference(before).count() as f64 / secs;
        releases_per_s = before.difference(&now_tokens).count() as f64 / secs;
    }
    mem.tokens.insert(name, now_tokens);
    let view = |h: &clusterlimit::Holder| HolderView {
        owner: h.owner.clone(),
        permits: h.permits,
        fencing_token: h.fencing_token,
        for_ms: now_ms.saturating_sub(h.since_unix_ms),
        flow: h.flow.clone(),
        class: h.class.clone(),
    };
    let classes = st
        .classes
        .iter()
        .map(|c| ClassView {
            name: c.name.clone(),
            guaranteed: c.guaranteed,
            held: c.held,
            waiting: c.waiting,
            waiting_flows: c.waiting_flows.clone(),
        })
        .collect();
    SemaphoreView {
        name: st.name.clone(),
        capacity: st.capacity,
        used: st.used,
        holders: st.holders.iter().take(SHOWN_PER_QUEUE).map(view).collect(),
        waiters: st.waiters.iter().take(SHOWN_PER_QUEUE).map(view).collect(),
        grants_per_s,
        releases_per_s,
        losses_per_s: 0.0,
        error: None,
        controller: None,
        classes,
    }
}

/// Who holds a controller seat (its one permit), and who waits to take over.
fn controller_view(seat: SemaphoreView) -> ControllerView {
    ControllerView {
        waiting: seat.waiters.len(),
        holder: seat.holders.into_iter().next(),
    }
}

/// Keys listed in a fleet-wide list.
const FLEET_SHOWN: usize = 20;

/// Sums the fleet's rates of `v`'s limit and merges the keys each sidecar limits now.
fn merge_fleet(v: &mut RateLimitView, fleet: &[FleetMember]) {
    let mut keys: HashMap<String, KeyView> = HashMap::new();
    for m in fleet {
        for l in m.limits.iter().filter(|l| l.name == v.name) {
            v.fleet_reporters += 1;
            v.fleet_admitted_per_s += l.admitted_per_s;
            v.fleet_denied_per_s += l.denied_per_s;
            for k in &l.limited_now {
                let e = keys.entry(k.key.clone()).or_insert_with(|| KeyView {
                    key: k.key.clone(),
                    seen_ms_ago: u64::MAX,
                    ..KeyView::default()
                });
                e.checks_per_s += k.checks_per_s;
                e.denied_per_s += k.denied_per_s;
                // The freshest report's view of the key's meter.
                if k.seen_ms_ago < e.seen_ms_ago {
                    e.seen_ms_ago = k.seen_ms_ago;
                    e.remaining = k.remaining;
                    e.limit = k.limit;
                    e.reset_ms = k.reset_ms;
                }
                e.sidecars.push(m.owner.clone());
            }
        }
    }
    let mut merged: Vec<KeyView> = keys.into_values().collect();
    merged.sort_by(|a, b| {
        b.denied_per_s
            .total_cmp(&a.denied_per_s)
            .then_with(|| a.key.cmp(&b.key))
    });
    merged.truncate(FLEET_SHOWN);
    v.fleet_limited_now = merged;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::picture::FleetLimit;

    fn member(owner: &str, admitted: f64, keys: &[(&str, f64)]) -> FleetMember {
        FleetMember {
            id: owner.to_string(),
            owner: owner.to_string(),
            at_unix_ms: 0,
            limits: vec![FleetLimit {
                name: "api".to_string(),
                admitted_per_s: admitted,
                denied_per_s: keys.iter().map(|k| k.1).sum(),
                limited_now: keys
                    .iter()
                    .map(|(k, d)| KeyView {
                        key: k.to_string(),
                        denied_per_s: *d,
                        ..KeyView::default()
                    })
                    .collect(),
                ..FleetLimit::default()
            }],
        }
    }

    #[test]
    fn the_fleet_is_summed_and_keys_merged() {
        let mut v = RateLimitView {
            name: "api".to_string(),
            ..RateLimitView::default()
        };
        let fleet = [
            member("a", 10.0, &[("k1", 2.0), ("k2", 1.0)]),
            member("b", 5.0, &[("k1", 3.0)]),
        ];
        merge_fleet(&mut v, &fleet);
        assert_eq!(v.fleet_admitted_per_s, 15.0);
        assert_eq!(v.fleet_reporters, 2);
        assert_eq!(v.fleet_denied_per_s, 6.0);
        assert_eq!(v.fleet_limited_now[0].key, "k1");
        assert_eq!(v.fleet_limited_now[0].denied_per_s, 5.0);
        assert_eq!(v.fleet_limited_now[0].sidecars, ["a", "b"]);
    }
}
