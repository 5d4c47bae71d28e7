//! The twelve failure scenarios, each written once for both stores (and the list of every
//! scenario: the rate-limit ones run apart, `rate.rs` and `rate_kill.rs`). Every one runs a contended
//! workload (≥ 8 Limiters, capacity 3, mixed weights, random holds) on a fresh 3-member
//! cluster, injects its failure (recording each fault's window), and ends with the same checks:
//! the history is safe (never more than the capacity held, no token granted twice), no call
//! hung, the queue never stood still with waiters outside the fault windows (+ 2 × TTL), no
//! entry of a live session is left once the workers stopped, and nothing is left in the store
//! once every client closed.

use crate::child::ChildHolder;
use crate::cluster::{Cluster, Kind, REQUEST_TIMEOUT, TTL};
use crate::history::{self, Grant};
use crate::rate::RateCase;
use crate::report::{ms, Row};
use crate::store_probe;
use crate::workload::{
    self, hang_bound, hold_and_record, Client, Log, Workload, CAPACITY, SEMAPHORE,
};
use clusterlimit::{Error, Permit};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout};

/// How big a run is: the CI default, or a soak (`CLUSTERLIMIT_SOAK=1`).
#[derive(Clone, Copy, Debug)]
pub struct Size {
    pub workers: usize,
    /// Leader kills in scenario 1.
    pub leader_kills: usize,
    /// Holder processes SIGKILLed in scenario 6.
    pub child_kills: usize,
    /// Compactions in scenario 8.
    pub compactions: usize,
    /// Leader kills in each rate-limit scenario.
    pub rate_kills: usize,
    /// Limiter processes SIGKILLed mid-lease in scenario 17, one after the other.
    pub rate_child_kills: usize,
    /// Contended running before and between injections.
    pub phase: Duration,
}

impl Size {
    pub fn ci() -> Size {
        Size {
            workers: 8,
            leader_kills: 5,
            child_kills: 2,
            compactions: 3,
            rate_kills: 2,
            rate_child_kills: 2,
            phase: Duration::from_millis(1000),
        }
    }

    pub fn soak() -> Size {
        Size {
            workers: 12,
            leader_kills: 25,
            child_kills: 6,
            compactions: 10,
            rate_kills: 10,
            rate_child_kills: 6,
            phase: Duration::from_secs(4),
        }
    }
}

/// The scenarios, in the order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    LeaderKill,
    FollowerKill,
    WholeCluster,
    Partition,
    Blip,
    HolderKilled,
    SlowStore,
    Compaction,
    HungMember,
    HungFollower,
    SlowMember,
    CancelBurst,
    RateGcra,
    RateWindow,
    RateLeasedGcra,
    RateLeasedWindow,
    RateLeasedLimiterKilled,
}

impl Scenario {
    pub const ALL: [Scenario; 17] = [
        Scenario::LeaderKill,
        Scenario::FollowerKill,
        Scenario::WholeCluster,
        Scenario::Partition,
        Scenario::Blip,
        Scenario::HolderKilled,
        Scenario::SlowStore,
        Scenario::Compaction,
        Scenario::HungMember,
        Scenario::HungFollower,
        Scenario::SlowMember,
        Scenario::CancelBurst,
        Scenario::RateGcra,
        Scenario::RateWindow,
        Scenario::RateLeasedGcra,
        Scenario::RateLeasedWindow,
        Scenario::RateLeasedLimiterKilled,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::LeaderKill => "1 leader SIGKILL",
            Scenario::FollowerKill => "2 follower SIGKILL + restart",
            Scenario::WholeCluster => "3 whole cluster down + restart",
            Scenario::Partition => "4 holder partitioned > TTL",
            Scenario::Blip => "5 short blips < TTL",
            Scenario::HolderKilled => "6 holder process SIGKILL",
            Scenario::SlowStore => "7 slow store (+200 ms)",
            Scenario::Compaction => "8 compaction while waiting",
            Scenario::HungMember => "9 SIGSTOP of the client's member",
            Scenario::HungFollower => "10 SIGSTOP of a follower every worker uses",
            Scenario::SlowMember => "11 one member slow (+200 ms pipelined)",
            Scenario::CancelBurst => "12 200 cancelled acquires + leader restart",
            Scenario::RateGcra => "13 rate GCRA hot key, leader SIGKILLs",
            Scenario::RateWindow => "14 rate fixed window hot key, leader SIGKILLs",
            Scenario::RateLeasedGcra => "15 rate GCRA hot key with leases, leader SIGKILLs",
            Scenario::RateLeasedWindow => {
                "16 rate fixed window hot key with leases, leader SIGKILLs"
            }
            Scenario::RateLeasedLimiterKilled => {
                "17 rate leased hot key, a Limiter process SIGKILLed mid-lease"
            }
        }
    }

    /// The rate-limit case of a rate scenario (run by `rate::run`, not on the semaphore
    /// workload).
    fn rate_case(self) -> Option<RateCase> {
        match self {
            Scenario::RateGcra => Some(RateCase::Gcra),
            Scenario::RateWindow => Some(RateCase::FixedWindow),
            Scenario::RateLeasedGcra => Some(RateCase::LeasedGcra),
            Scenario::RateLeasedWindow => Some(RateCase::LeasedWindow),
            _ => None,
        }
    }

    /// Why the scenario does not apply to a store, if it does not.
    fn not_applicable(self, kind: Kind) -> Option<&'static str> {
        match (self, kind) {
            (Scenario::Compaction, Kind::Zk) => {
                Some("ZooKeeper keeps no history: a watch never resumes from a compacted revision")
            }
            _ => None,
        }
    }

    async fn body(self, cluster: &mut Cluster, load: &Workload, size: Size, row: &mut Row) {
        match self {
            Scenario::LeaderKill => leader_kill(cluster, load, size, row).await,
            Scenario::FollowerKill => follower_kill(cluster, load, size, row).await,
            Scenario::WholeCluster => whole_cluster(cluster, load, size, row).await,
            Scenario::Partition => partition(cluster, load, size, row).await,
            Scenario::Blip => blip(cluster, load, size, row).await,
            Scenario::HolderKilled => holder_killed(cluster, load, size, row).await,
            Scenario::SlowStore => slow_store(load, size, row).await,
            Scenario::Compaction => compaction(cluster, load, size, row).await,
            Scenario::HungMember => hung_member(cluster, load, size, row).await,
            Scenario::HungFollower => hung_follower(cluster, load, size, row).await,
            Scenario::SlowMember => slow_member(cluster, load, size, row).await,
            Scenario::CancelBurst => cancel_burst(cluster, load, size, row).await,
            Scenario::RateGcra
            | Scenario::RateWindow
            | Scenario::RateLeasedGcra
            | Scenario::RateLeasedWindow
            | Scenario::RateLeasedLimiterKilled => {
                unreachable!("run() hands rate scenarios to rate::run and rate_kill::run")
            }
        }
    }
}

/// Runs one scenario on a fresh cluster and returns its row.
pub async fn run(kind: Kind, scenario: Scenario, size: Size, seed: u64) -> Row {
    if let Some(case) = scenario.rate_case() {
        return crate::rate::run(kind, case, scenario.name(), size, seed).await;
    }
    if scenario == Scenario::RateLeasedLimiterKilled {
        return crate::rate_kill::run(kind, scenario.name(), size, seed).await;
    }
    let started = Instant::now();
    let mut row = Row::new(kind, scenario.name());
    if let Some(why) = scenario.not_applicable(kind) {
        row.applicable = false;
        row.note(format!("not applicable: {why}"));
        return row;
    }
    let mut cluster = tokio::task::block_in_place(|| Cluster::start(kind));
    let mut members: Vec<usize> = (0..cluster.len()).collect();
    if scenario == Scenario::HungMember && kind == Kind::Etcd {
        // On etcd the workers keep off the follower that will hang: see `hung_member`.
        let leader = cluster.leader().await;
        members.retain(|&m| m != (leader + 1) % cluster.len());
    }
    let mut load = Workload::start(&cluster, &members, size.workers, seed).await;
    sleep(size.phase).await;
    scenario.body(&mut cluster, &load, size, &mut row).await;
    still_moving(&load.log, &mut row).await;
    load.stop_workers().await;
    let leftovers = live_leftovers(&cluster, &load.live_owners(), &mut row).await;
    let log = load.close().await;
    if !leftovers.is_empty() {
        after_close(&cluster, &leftovers, &mut row).await;
    }
    conclude(&cluster, &log, &mut row).await;
    row.took = started.elapsed();
    row
}

/// How long the queue may stand still outside the fault windows while waiters exist: the
/// issue's example, 2 × TTL (a lost session's entries are gone after one TTL; one more for an
/// election or reconnect on top).
pub const STALL_BOUND: Duration = Duration::from_secs(2 * TTL.as_secs());

/// The liveness judge can only see a stall that the record covers: a stall that begins just
/// before the workers stop would be cut off. So the run ends only after one more grant, and
/// fails if none comes within [`STALL_BOUND`].
async fn still_moving(log: &Log, row: &mut Row) {
    let now = Instant::now();
    if first_grant(log, now, STALL_BOUND).await.is_none() {
        row.fail(format!(
            "stall: no grant in the {} before the workers were stopped",
            ms(STALL_BOUND)
        ));
    }
}

/// How long the library may take to remove the entries of cancelled waits and dropped permits
/// of sessions that are still alive: the background releaser's retries (each bounded by the
/// request timeout), plus the TTL in which the store itself frees an entry of a session the
/// client already gave up on (a lost session of a worker that then opened a new one).
const LIVE_LEFTOVER_BOUND: Duration =
    Duration::from_secs(REQUEST_TIMEOUT.as_secs() + TTL.as_secs());

/// After every worker released or cancelled and before any Limiter closes (the sessions still
/// live), no entry of theirs may stay in the store: the TTL cannot hide a failed removal here.
/// Reads the store directly, not through the library.
async fn live_leftovers(cluster: &Cluster, owners: &[String], row: &mut Row) -> Vec<String> {
    let stopped = Instant::now();
    let deadline = stopped + LIVE_LEFTOVER_BOUND;
    let mut polls = 0;
    let left = loop {
        polls += 1;
        let left: Vec<(String, String)> = cluster
            .queue_entries(SEMAPHORE)
            .await
            .into_iter()
            .filter(|(_, value)| owners.iter().any(|o| owner_is(value, o)))
            .collect();
        if left.is_empty() || Instant::now() >= deadline || polls > 1000 {
            break left;
        }
        sleep(Duration::from_millis(100)).await;
    };
    if left.is_empty() {
        row.note(format!(
            "live sessions' entries all gone {} after the workers stopped",
            ms(stopped.elapsed())
        ));
    } else {
        let mut shown = Vec::new();
        for (k, v) in left.iter().take(5) {
            let id = k.rsplit('/').next().unwrap_or(k);
            let detail = cluster.describe_entry(SEMAPHORE, id).await;
            shown.push(format!("{k} = {v} [{detail}]"));
        }
        if let Some(r) = cluster.revision().await {
            shown.push(format!("store revision now {r}"));
        }
        row.fail(format!(
            "{} entries of live sessions still in the store {} after the workers stopped: {}",
            left.len(),
            ms(LIVE_LEFTOVER_BOUND),
            shown.join("; ")
        ));
    }
    left.into_iter().map(|(k, _)| k).collect()
}

/// For a failure report: whether leftover entries went once every Limiter closed (then a
/// Limiter still held their session) or stay past one more TTL (then nothing of ours did).
async fn after_close(cluster: &Cluster, leftovers: &[String], row: &mut Row) {
    let closed = Instant::now();
    let deadline = closed + TTL + Duration::from_secs(1);
    loop {
        let now: Vec<String> = cluster
            .queue_entries(SEMAPHORE)
            .await
            .into_iter()
            .map(|(k, _)| k)
            .filter(|k| leftovers.contains(k))
            .collect();
        if now.is_empty() {
            row.note(format!(
                "the leftover entries went {} after every Limiter closed",
                ms(closed.elapsed())
            ));
            return;
        }
        if Instant::now() >= deadline {
            row.note(format!(
                "{} leftover entries still there {} after every Limiter closed",
                now.len(),
                ms(closed.elapsed())
            ));
            return;
        }
        sleep(Duration::from_millis(100)).await;
    }
}

/// True if an entry's JSON value names `owner` as its owner.
fn owner_is(value: &str, owner: &str) -> bool {
    value.contains(&format!("\"owner\":\"{owner}\""))
}

/// The checks every scenario ends with.
async fn conclude(cluster: &Cluster, log: &Log, row: &mut Row) {
    let grants = log.grants();
    let failures = log.failures();
    let verdict = history::check(&grants, CAPACITY);
    row.violations = verdict.violations.len();
    row.max_held = verdict.max_held;
    row.acquisitions = grants.len();
    row.lost = grants.iter().filter(|g| g.lost).count();
    row.failed_calls = failures.iter().filter(|f| !f.hang).count();
    for v in verdict.violations.iter().take(5) {
        row.fail(format!("safety violation: {v}"));
    }
    if !verdict.duplicate_tokens.is_empty() {
        row.fail(format!(
            "fencing tokens granted twice: {:?}",
            verdict.duplicate_tokens
        ));
    }
    for f in failures.iter().filter(|f| f.hang).take(5) {
        row.fail(format!("{} hung: {}", f.holder, f.error));
    }
    if verdict.handoff_overlaps > 0 {
        row.note(format!(
            "{} grants came while the previous holder's release() call had not returned yet \
             (normal handoff: the store deletes before it answers)",
            verdict.handoff_overlaps
        ));
    }
    let mut kinds: std::collections::BTreeMap<&str, usize> = Default::default();
    for f in &failures {
        *kinds.entry(f.error.as_str()).or_default() += 1;
    }
    if !kinds.is_empty() {
        row.note(format!("failed calls by error: {kinds:?}"));
    }
    row.check(grants.len() > 10, || {
        format!("only {} acquisitions in the run", grants.len())
    });
    let windows = log.windows();
    let granted: Vec<Instant> = grants.iter().map(|g| g.granted_at).collect();
    let live = history::liveness(&log.waits(), &granted, &windows, STALL_BOUND);
    row.longest_pause = Some((live.longest_pause, live.longest_outside));
    for stall in live.stalls.iter().take(5) {
        row.fail(format!("stall: {stall}"));
    }
    if !windows.is_empty() {
        let what: Vec<String> = windows
            .iter()
            .map(|w| {
                // Wall-clock start, to line up with the library's logs and the store's times.
                let ago = w.start.elapsed().as_millis();
                format!(
                    "{} {} (from unix ms {})",
                    w.what,
                    ms(w.end - w.start),
                    unix_ms().saturating_sub(ago)
                )
            })
            .collect();
        row.note(format!("fault windows: {}", what.join(", ")));
    }
    leftovers(cluster, row).await;
}

/// Once every client stopped, nothing of theirs may stay in the store (no orphaned waiter or
/// holder): what was not released is expired by the store within the TTL.
async fn leftovers(cluster: &Cluster, row: &mut Row) {
    let checker =
        Client::connect(cluster, "checker", &(0..cluster.len()).collect::<Vec<_>>()).await;
    let sem = checker.semaphore(SEMAPHORE, CAPACITY).await;
    let deadline = Instant::now() + TTL * 2 + Duration::from_secs(5);
    let mut last = None;
    while Instant::now() < deadline {
        match sem.status().await {
            Ok(st) if st.holders.is_empty() && st.waiting == 0 => {
                last = None;
                break;
            }
            Ok(st) => {
                last = Some(format!(
                    "{} holders, {} waiting",
                    st.holders.len(),
                    st.waiting
                ))
            }
            Err(e) => last = Some(format!("status failed: {e}")),
        }
        sleep(Duration::from_millis(200)).await;
    }
    if let Some(left) = last {
        row.fail(format!(
            "entries left in the store after every client stopped: {left}"
        ));
    }
    let _ = checker.limiter.close().await;
}

/// Polls the log every 10 ms for at most `limit` until `found` finds an instant in the grants;
/// returns how long after `t` that instant is.
async fn poll_log(
    log: &Log,
    t: Instant,
    limit: Duration,
    found: impl Fn(&[Grant]) -> Option<Instant>,
) -> Option<Duration> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(at) = found(&log.grants()) {
            return Some(at.saturating_duration_since(t));
        }
        if Instant::now() >= deadline {
            return None;
        }
        sleep(Duration::from_millis(10)).await;
    }
}

/// How long after `t` the first grant at or after `t` came (waiting at most `limit`).
async fn first_grant(log: &Log, t: Instant, limit: Duration) -> Option<Duration> {
    poll_log(log, t, limit, |g| history::first_grant_after(g, t)).await
}

/// How long after `t` the permits of `victim` (weight `weight`, stopped at `t`) went to
/// somebody else (waiting at most `limit`).
async fn regrant(
    log: &Log,
    victim: &str,
    weight: u32,
    t: Instant,
    limit: Duration,
) -> Option<Duration> {
    poll_log(log, t, limit, |g| {
        history::regranted_at(g, CAPACITY, victim, weight, t)
    })
    .await
}

/// A dedicated holder of `weight` permits of the contended semaphore, outside the workload.
async fn take(
    client: &Client,
    weight: u32,
    row: &mut Row,
) -> Option<(clusterlimit::Permit, Instant)> {
    let sem = client.semaphore(SEMAPHORE, CAPACITY).await;
    match timeout(
        Duration::from_secs(30),
        sem.acquire_many_timeout(weight, Duration::from_secs(25)),
    )
    .await
    {
        Ok(Ok(p)) => Some((p, Instant::now())),
        Ok(Err(e)) => {
            row.fail(format!(
                "{} could not take {weight} permits: {e}",
                client.name
            ));
            None
        }
        Err(_) => {
            row.fail(format!("{}'s acquire hung", client.name));
            None
        }
    }
}

/// Watches a held permit's `lost()` in its own task, so the moment it fires is known exactly
/// while the scenario awaits other calls. Gives the permit back with that moment, `None` if it
/// did not fire within `limit`.
fn watch_lost(permit: Permit, limit: Duration) -> JoinHandle<(Permit, Option<Instant>)> {
    tokio::spawn(async move {
        let fired = timeout(limit, permit.lost())
            .await
            .ok()
            .map(|()| Instant::now());
        (permit, fired)
    })
}

/// Records a dedicated holder's permit that worked from `granted_at` until its `lost()` fired
/// at `lost_at`, and drops it.
fn record_lost(log: &Log, holder: &str, permit: Permit, granted_at: Instant, lost_at: Instant) {
    log.grant(Grant {
        holder: holder.to_string(),
        weight: permit.permits(),
        token: permit.fencing_token(),
        granted_at,
        work_end: lost_at,
        released_at: None,
        lost: true,
    });
}

/// How late after `TTL` a `lost()` may fire (timer and scheduling slack on a busy machine).
const LOST_SLACK: Duration = Duration::from_millis(500);

// ---------------------------------------------------------------------------------------------

/// SIGKILLs `member` and measures, from that instant, the first grant and the store's own
/// failover (a raw client's write succeeding again), recording both in `row` (a failure if
/// either does not come). Returns the kill instant and both durations.
async fn kill_and_measure(
    cluster: &mut Cluster,
    load: &Workload,
    member: usize,
    what: &str,
    row: &mut Row,
) -> (Instant, Option<Duration>, Option<Duration>) {
    let rejected_before = cluster.rejected_newleader_acks();
    let t = Instant::now();
    cluster.kill(member);
    let store = store_probe::spawn(cluster.kind(), survivors(cluster, member), t, PROBE_LIMIT);
    let first = first_grant(&load.log, t, Duration::from_secs(20)).await;
    let store = store.await.ok().flatten();
    if store.is_none() && end_zookeeper_election_loop(cluster, member, rejected_before, what, row) {
        // The library is judged from the moment the store serves again.
        let back = Instant::now();
        match first_grant(&load.log, back, Duration::from_secs(20)).await {
            Some(d) => row.note(format!(
                "first grant {} after the ensemble served again",
                ms(d)
            )),
            None => row.fail(format!(
                "no grant within 20 s of the ensemble serving again after {what}"
            )),
        }
        return (t, None, None);
    }
    match first {
        Some(d) => row.recovery.push(d),
        None => row.fail(format!("no grant within 20 s of {what}")),
    }
    match store {
        Some(s) => row.store_failover.push(s),
        None => row.fail(format!(
            "no raw write succeeded within {} of {what}; the survivors' logs:{}",
            ms(PROBE_LIMIT),
            cluster.election_log(&others(cluster, member))
        )),
    }
    (t, first, store)
}

/// Scenario 1: The leader is SIGKILLed during a contended run, again and again.
async fn leader_kill(cluster: &mut Cluster, load: &Workload, size: Size, row: &mut Row) {
    for i in 0..size.leader_kills {
        let leader = cluster.leader().await;
        let (t, first, store) = kill_and_measure(
            cluster,
            load,
            leader,
            &format!("leader kill {}", i + 1),
            row,
        )
        .await;
        // Item 3 of issue 12: the library resumes as fast as the store (+ 0.5 s). Enforced on
        // etcd. On ZooKeeper the target is not met yet, and the miss is reported, not failed:
        // zookeeper-client 0.11 backs off its reconnects (from the second round over the
        // servers, 100 ms × servers + jitter, doubling), which the library does not control yet.
        if let (Some(first), Some(store)) = (first, store) {
            let what = || {
                format!(
                    "leader kill {}: first grant {} after the kill, the store's own failover {} \
                     (allowed: + {})",
                    i + 1,
                    ms(first),
                    ms(store),
                    ms(RESUME_SLACK)
                )
            };
            match cluster.kind() {
                Kind::Etcd => row.check(first <= store + RESUME_SLACK, what),
                Kind::Zk if first > store + RESUME_SLACK => {
                    row.note(format!("TARGET NOT MET (known, issue 12): {}", what()))
                }
                Kind::Zk => {}
            }
        }
        cluster.restart_if_down(leader);
        load.log.fault("leader kill + restart", t);
        sleep(size.phase).await;
    }
}

/// How long a raw write may take to succeed after a kill before the store counts as down.
pub const PROBE_LIMIT: Duration = Duration::from_secs(20);
/// Issue 12, item 3: the first grant after a leader kill comes within the store's own failover
/// time plus this.
pub const RESUME_SLACK: Duration = Duration::from_millis(500);

/// Client addresses of every member but `dead`.
pub fn survivors(cluster: &Cluster, dead: usize) -> Vec<std::net::SocketAddr> {
    let addrs = cluster.member_addrs();
    (0..addrs.len())
        .filter(|&m| m != dead)
        .map(|m| addrs[m])
        .collect()
}

/// After a kill the store did not serve within [`PROBE_LIMIT`]: if ZooKeeper's own
/// re-election loop is why (a new leader rejected `NEWLEADER` acknowledgements since
/// `rejected_before`, see `support::zookeeper::REJECTED_NEWLEADER_ACK`), notes it with the
/// survivors' logs, restarts `member` to end it (a third member without the stale proposals
/// lets a quorum form, as an operator's restart would) and returns true: not the library's
/// failure, which the caller judges from now on. False otherwise: the caller fails the row.
pub fn end_zookeeper_election_loop(
    cluster: &mut Cluster,
    member: usize,
    rejected_before: usize,
    what: &str,
    row: &mut Row,
) -> bool {
    let rejected = cluster
        .rejected_newleader_acks()
        .saturating_sub(rejected_before);
    if rejected == 0 {
        return false;
    }
    row.note(format!(
        "STORE DID NOT SERVE within {} of {what}: ZooKeeper 3.8.0's re-election loop \
         ({rejected} NEWLEADER acknowledgements rejected, see \
         support::zookeeper::REJECTED_NEWLEADER_ACK); the killed member was restarted to end \
         it. The survivors' logs:{}",
        ms(PROBE_LIMIT),
        cluster.election_log(&others(cluster, member))
    ));
    cluster.restart(member);
    true
}

/// Indexes of every member but `dead`.
pub fn others(cluster: &Cluster, dead: usize) -> Vec<usize> {
    (0..cluster.len()).filter(|&m| m != dead).collect()
}

/// Scenario 2: A follower is SIGKILLed, the run goes on, the follower comes back.
async fn follower_kill(cluster: &mut Cluster, load: &Workload, size: Size, row: &mut Row) {
    let leader = cluster.leader().await;
    let follower = (leader + 1) % cluster.len();
    let (t, _, _) = kill_and_measure(cluster, load, follower, "the follower kill", row).await;
    sleep(size.phase).await;
    let during = history::grants_between(&load.log.grants(), t, Instant::now());
    row.note(format!("{during} acquisitions with the follower down"));
    cluster.restart_if_down(follower);
    let back = load.log.fault("follower kill + restart", t);
    sleep(size.phase).await;
    let after = history::grants_between(&load.log.grants(), back, Instant::now());
    row.check(after > 0, || {
        "no acquisition after the follower came back".into()
    });
}

/// Scenario 3: Every member is killed and stays down longer than the TTL: every session is lost,
/// every holder's `lost()` fires, waits fail with `SessionLost`; after the restart new
/// acquisitions work.
async fn whole_cluster(cluster: &mut Cluster, load: &Workload, size: Size, row: &mut Row) {
    const SENTINEL: &str = "sentinel";
    let all: Vec<usize> = (0..cluster.len()).collect();
    // Three holders of a capacity-3 semaphore that hold until lost, and one waiter behind them.
    let mut holders = Vec::new();
    for i in 0..3 {
        let c = Client::connect(cluster, &format!("sentinel{i}"), &all).await;
        let sem = c.semaphore(SENTINEL, 3).await;
        let p = sem.acquire_timeout(Duration::from_secs(10)).await;
        match p {
            Ok(p) => holders.push((c, p)),
            Err(e) => row.fail(format!("sentinel{i} could not take a permit: {e}")),
        }
    }
    let waiter_client = Client::connect(cluster, "sentinel-waiter", &all).await;
    let waiter_sem = waiter_client.semaphore(SENTINEL, 3).await;
    let waiter =
        tokio::spawn(async move { waiter_sem.acquire_timeout(Duration::from_secs(60)).await });
    sleep(TTL / 2).await; // past the sessions' first deadline: see `partition`

    let watchers: Vec<_> = holders
        .into_iter()
        .map(|(c, p)| (c, watch_lost(p, TTL + Duration::from_secs(5))))
        .collect();
    let t = Instant::now();
    cluster.kill_all();
    // Every holder's lost() fires within the TTL: the outage began at most TTL after the last
    // acknowledged keepalive or probe was sent.
    let mut holders = Vec::new();
    let mut latest = Duration::ZERO;
    for (c, w) in watchers {
        match w.await {
            Ok((p, Some(at))) => {
                let after = at.saturating_duration_since(t);
                latest = latest.max(after);
                row.check(after <= TTL + LOST_SLACK, || {
                    format!(
                        "{}'s lost() fired {} after the outage, later than the TTL",
                        c.name,
                        ms(after)
                    )
                });
                holders.push((c, p));
            }
            Ok((_, None)) => row.fail(format!("{}'s lost() never fired after the outage", c.name)),
            Err(e) => row.fail(format!("{}'s lost() watcher failed: {e}", c.name)),
        }
    }
    row.note(format!(
        "{} sentinel holders saw lost() at most {} after the outage (TTL {})",
        holders.len(),
        ms(latest),
        ms(TTL)
    ));
    match timeout(TTL + hang_bound(), waiter).await {
        Ok(Ok(Err(Error::SessionLost))) => {
            let after = t.elapsed();
            row.note(format!(
                "the waiter got SessionLost {} after the outage",
                ms(after)
            ));
            row.check(after <= TTL + Duration::from_secs(1), || {
                format!(
                    "the waiter got SessionLost only {} after the outage",
                    ms(after)
                )
            });
        }
        Ok(Ok(other)) => row.fail(format!(
            "the waiter got {:?}, expected SessionLost",
            other.map(|p| p.fencing_token())
        )),
        Ok(Err(e)) => row.fail(format!("the waiter task failed: {e}")),
        Err(_) => row.fail("the waiter hung through the outage"),
    }
    // Stay down past every deadline, then come back.
    let down_until = t + TTL + Duration::from_secs(1);
    sleep(down_until.saturating_duration_since(Instant::now())).await;
    // The store's own recovery counts from the restart (its downtime is the scenario's).
    let restart = Instant::now();
    let addrs = cluster.member_addrs();
    let store = store_probe::spawn(cluster.kind(), addrs, restart, PROBE_LIMIT);
    cluster.restart_all();
    let up = load.log.fault("whole cluster down + restart", t);
    match first_grant(&load.log, up, TTL * 3 + Duration::from_secs(20)).await {
        Some(d) => {
            row.recovery.push(d);
            row.note(format!(
                "cluster down {}; first grant {} after restart_all returned, {} after it began \
                 (old sessions expire on the restarted servers first)",
                ms(up - t),
                ms(d),
                ms(up + d - restart)
            ));
        }
        None => row.fail("no acquisition after the restart"),
    }
    match store.await.ok().flatten() {
        Some(s) => row.store_failover.push(s),
        None => row.fail("no raw write succeeded after the restart"),
    }
    // The sentinels work again, with new sessions.
    drop(holders);
    let again = waiter_client.semaphore(SENTINEL, 3).await;
    match timeout(
        Duration::from_secs(30),
        again.acquire_timeout(Duration::from_secs(25)),
    )
    .await
    {
        Ok(Ok(p)) => {
            let _ = p.release().await;
        }
        Ok(Err(e)) => row.fail(format!(
            "acquire on a fresh session after the restart failed: {e}"
        )),
        Err(_) => row.fail("acquire after the restart hung"),
    }
    sleep(size.phase).await;
}

/// Scenario 4: A holder's client is partitioned longer than its TTL: its `lost()` must fire before any
/// other client is granted its permits; healed, it works again.
async fn partition(cluster: &mut Cluster, load: &Workload, size: Size, row: &mut Row) {
    const WEIGHT: u32 = 2;
    let all: Vec<usize> = (0..cluster.len()).collect();
    let victim = Client::connect(cluster, "victim", &all).await;
    let Some((permit, granted_at)) = take(&victim, WEIGHT, row).await else {
        return;
    };
    // Hold a while first, so the deadline has been moved on by acknowledged keepalives/probes
    // (the partition then tests the running rule, not the session's first deadline).
    sleep(TTL / 2).await;
    let t = Instant::now();
    victim.proxies.blackhole();
    let lost_at = match timeout(TTL + Duration::from_secs(3), permit.lost()).await {
        Ok(()) => Instant::now(),
        Err(_) => {
            row.fail("the partitioned holder's lost() did not fire within TTL + 3 s");
            Instant::now()
        }
    };
    row.note(format!(
        "lost() fired {} after the partition began (TTL {})",
        ms(lost_at - t),
        ms(TTL)
    ));
    record_lost(&load.log, &victim.name, permit, granted_at, lost_at);
    // Looked for from the start of the partition, so a regrant before lost() shows as a
    // negative margin (and as violations in the history).
    let limit = TTL * 2 + Duration::from_secs(5);
    match regrant(&load.log, &victim.name, WEIGHT, t, limit).await {
        Some(after_partition) => {
            let lost_after = (lost_at - t).as_secs_f64() * 1e3;
            let margin = after_partition.as_secs_f64() * 1e3 - lost_after;
            row.margin_ms = Some(margin);
            row.check(margin >= 0.0, || {
                format!("the partitioned holder's permits were given away {:.0} ms before its lost() fired", -margin)
            });
            row.recovery.push(after_partition);
        }
        None => row.fail("the partitioned holder's permits were never given to anyone else"),
    }
    victim.proxies.pass();
    load.log.fault("holder partitioned", t);
    // Healed, the victim works again (a new session).
    if let Some((p, at)) = take(&victim, 1, row).await {
        hold_and_record(&load.log, &victim.name, p, at, Duration::from_millis(20)).await;
    }
    let _ = victim.limiter.close().await;
    sleep(size.phase).await;
}

/// Scenario 5: Short blips (a blackhole shorter than the TTL, then connection resets): nothing is
/// lost and nobody is granted twice.
async fn blip(cluster: &mut Cluster, load: &Workload, size: Size, row: &mut Row) {
    let all: Vec<usize> = (0..cluster.len()).collect();
    let steady = Client::connect(cluster, "steady", &all).await;
    let Some((permit, granted_at)) = take(&steady, 1, row).await else {
        return;
    };
    let blackout = TTL / 6;
    for _ in 0..2 {
        let t = Instant::now();
        load.each_proxy(|p| p.blackhole());
        steady.proxies.blackhole();
        sleep(blackout).await;
        load.each_proxy(|p| p.pass());
        steady.proxies.pass();
        load.log.fault("blackout", t);
        match first_grant(&load.log, t, Duration::from_secs(15)).await {
            Some(d) => row.recovery.push(d),
            None => row.fail("no grant within 15 s of a blip"),
        }
        sleep(size.phase).await;
        let t = Instant::now();
        load.each_proxy(|p| p.reset());
        steady.proxies.reset();
        sleep(Duration::from_millis(100)).await;
        load.each_proxy(|p| p.pass());
        steady.proxies.pass();
        load.log.fault("connection resets", t);
        match first_grant(&load.log, t, Duration::from_secs(15)).await {
            Some(d) => row.recovery.push(d),
            None => row.fail("no grant within 15 s of a connection reset"),
        }
        sleep(size.phase).await;
    }
    row.note(format!(
        "blackouts of {} and 100 ms of connection resets, twice each",
        ms(blackout)
    ));
    row.check(!permit.is_lost(), || {
        "a holder across the blips lost its permit".into()
    });
    hold_and_record(&load.log, &steady.name, permit, granted_at, Duration::ZERO).await;
    let lost: Vec<String> = load
        .log
        .grants()
        .iter()
        .filter(|g| g.lost)
        .map(|g| g.holder.clone())
        .collect();
    row.check(lost.is_empty(), || {
        format!("permits lost in blips shorter than the TTL: {lost:?}")
    });
    let _ = steady.limiter.close().await;
}

/// Scenario 6: A holder process is SIGKILLed: its permits come back within TTL + 2 s.
async fn holder_killed(cluster: &mut Cluster, load: &Workload, size: Size, row: &mut Row) {
    let url = cluster.direct_url("failover");
    for i in 0..size.child_kills {
        let child = ChildHolder::spawn(&url, SEMAPHORE, 1).await;
        let (token, weight, granted_at) = (child.token, child.weight, child.granted_at);
        sleep(Duration::from_millis(200)).await;
        let killed = child.kill().await;
        let name = format!("child{i}");
        load.log.grant(Grant {
            holder: name.clone(),
            weight,
            token,
            granted_at,
            work_end: killed,
            released_at: None,
            lost: false,
        });
        match regrant(
            &load.log,
            &name,
            weight,
            killed,
            TTL + Duration::from_secs(10),
        )
        .await
        {
            Some(d) => {
                row.recovery.push(d);
                row.check(d <= TTL + Duration::from_secs(2), || {
                    format!(
                        "the killed holder's permit came back after {}, more than TTL + 2 s",
                        ms(d)
                    )
                });
            }
            None => row.fail("the killed holder's permit never came back"),
        }
        // Until its session expired the dead holder's permit was held: a fault for the queue.
        load.log
            .fault("holder killed, until its permit came back", killed);
        sleep(size.phase).await;
    }
}

/// Scenario 7: Every client's link gets 200 ms slower each way: still safe, acquisitions continue.
async fn slow_store(load: &Workload, size: Size, row: &mut Row) {
    let t = Instant::now();
    load.each_proxy(|p| p.delay(Duration::from_millis(200)));
    match first_grant(&load.log, t, Duration::from_secs(15)).await {
        Some(d) => row.recovery.push(d),
        None => row.fail("no grant within 15 s with a slow store"),
    }
    sleep(size.phase * 4).await;
    let during = history::grants_between(&load.log.grants(), t, Instant::now());
    row.check(during > 0, || {
        "no acquisition while the store was slow".into()
    });
    row.note(format!(
        "{during} acquisitions in {} with +200 ms each way",
        ms(t.elapsed())
    ));
    load.each_proxy(|p| p.pass());
    load.log.fault("slow links", t);
    sleep(size.phase).await;
}

/// Scenario 8: etcd compacts its history while half the workers are cut off and waiting; when they
/// reconnect their watches resume from a compacted revision, and they must still be woken.
async fn compaction(cluster: &mut Cluster, load: &Workload, size: Size, row: &mut Row) {
    let half = load.clients.len() / 2;
    for _ in 0..size.compactions {
        let cut = &load.clients[..half];
        let t = Instant::now();
        for c in cut {
            c.proxies.blackhole();
        }
        // The other half keeps writing, moving the revision on; then compact past it all.
        sleep(TTL / 4).await;
        let revision = cluster.compact().await;
        sleep(Duration::from_millis(100)).await;
        for c in cut {
            c.proxies.pass();
        }
        let healed = load.log.fault("half cut off + compaction", t);
        // Each cut-off worker is granted again (bounded).
        let deadline = healed + Duration::from_secs(20);
        for c in cut {
            loop {
                let got = load
                    .log
                    .grants()
                    .iter()
                    .filter(|g| g.holder == c.name && g.granted_at >= healed)
                    .map(|g| g.granted_at)
                    .min();
                if let Some(at) = got {
                    row.recovery.push(at - healed);
                    break;
                }
                if Instant::now() >= deadline {
                    row.fail(format!(
                        "{} was never granted after compaction to {revision:?}",
                        c.name
                    ));
                    break;
                }
                sleep(Duration::from_millis(20)).await;
            }
        }
        sleep(size.phase).await;
    }
    row.note(format!(
        "{} compactions to the current revision while {half} workers were cut off; recovery = heal → each cut-off worker's next grant",
        size.compactions
    ));
}

/// Scenario 9: The member a client is connected to is SIGSTOPped (a hung server): its calls time out
/// instead of hanging, its `lost()` fires, the others go on, and it recovers on SIGCONT.
async fn hung_member(cluster: &mut Cluster, load: &Workload, size: Size, row: &mut Row) {
    // ZooKeeper: the leader hangs, with every worker connected to it too. etcd: a follower
    // only the probe uses. Two etcd problems keep it there (see the closing note of issue 5):
    // a leader of etcd before the 2024 fix of etcd #15247 (Debian's 3.4.23 included) that
    // resumes after hanging longer than an election revokes every lease it thinks expired,
    // live ones too, so holders hear lost() only as their keys vanish, a few ms after the next
    // holders were granted (no client can prevent that); and with the workers also connected
    // to a hung follower, the queue sometimes stalls for 25 s after SIGCONT (open).
    let leader = cluster.leader().await;
    let member = match (0..cluster.len()).find(|m| !load.members.contains(m)) {
        Some(spare) => spare,
        None => leader,
    };
    row.note(format!(
        "SIGSTOPped {}",
        if member == leader {
            "the leader"
        } else {
            "a follower only the probe uses"
        }
    ));
    hang_with_probe(cluster, load, size, row, member).await;
}

/// The body of scenarios 9 and 10: a probe client that reaches only `member` holds a permit,
/// `member` is SIGSTOPped; the probe's calls fail in bounded time and its `lost()` fires within
/// the TTL, the others go on; on SIGCONT the probe recovers.
async fn hang_with_probe(
    cluster: &mut Cluster,
    load: &Workload,
    size: Size,
    row: &mut Row,
    member: usize,
) {
    let probe = Client::connect(cluster, "probe", &[member]).await;
    let Some((permit, granted_at)) = take(&probe, 1, row).await else {
        return;
    };
    sleep(TTL / 2).await; // past the session's first deadline: see `partition`
    let sem = probe.semaphore(SEMAPHORE, CAPACITY).await;
    let watcher = watch_lost(permit, Duration::from_secs(30));
    let t = Instant::now();
    cluster.pause(member);
    // Calls through the hung member return an error in bounded time: an acquire within its
    // own timeout plus the 1 s allowed for removing its entry, a status within the request
    // timeout and its retry.
    let call = Instant::now();
    match timeout(hang_bound(), sem.acquire_timeout(Duration::from_secs(1))).await {
        Ok(Ok(p)) => {
            row.fail("an acquire through a hung member succeeded");
            drop(p);
        }
        Ok(Err(e)) => {
            let took = call.elapsed();
            row.note(format!(
                "acquire_timeout(1 s) through the hung member: {} after {}",
                workload::describe(&e),
                ms(took)
            ));
            row.check(took <= Duration::from_millis(2500), || {
                format!(
                    "acquire_timeout(1 s) through the hung member took {}",
                    ms(took)
                )
            });
        }
        Err(_) => row.fail(format!(
            "an acquire through the hung member hung past {}",
            ms(hang_bound())
        )),
    }
    let call = Instant::now();
    match timeout(hang_bound(), sem.status()).await {
        Ok(Ok(_)) => row.fail("status through a hung member succeeded"),
        Ok(Err(e)) => row.note(format!(
            "status through the hung member failed after {}: {}",
            ms(call.elapsed()),
            workload::describe(&e)
        )),
        Err(_) => row.fail(format!(
            "status through the hung member hung past {}",
            ms(hang_bound())
        )),
    }
    let (permit, lost_at) = match watcher.await {
        Ok((p, Some(at))) => (p, at),
        Ok((p, None)) => {
            row.fail("the probe's lost() never fired while its member hung");
            (p, Instant::now())
        }
        Err(e) => panic!("the probe's lost() watcher failed: {e}"),
    };
    row.check(lost_at - t <= TTL + LOST_SLACK, || {
        format!(
            "the probe's lost() fired {} after its member hung, later than the TTL",
            ms(lost_at - t)
        )
    });
    row.note(format!(
        "the probe's lost() fired {} after its member hung (request timeout {})",
        ms(lost_at - t),
        ms(REQUEST_TIMEOUT)
    ));
    record_lost(&load.log, &probe.name, permit, granted_at, lost_at);
    match first_grant(&load.log, t, Duration::from_secs(20)).await {
        Some(d) => row.recovery.push(d),
        None => row.fail("no grant to the other clients while a member hung"),
    }
    let during = history::grants_between(&load.log.grants(), t, Instant::now());
    row.note(format!(
        "{during} acquisitions by the others while the member hung"
    ));
    // An entry whose create revision is above this was written after SIGCONT.
    if let Some(r) = cluster.revision().await {
        row.note(format!("store revision just before SIGCONT: {r}"));
    }
    cluster.resume(member);
    load.log.fault("member SIGSTOPped", t);
    row.note(format!("SIGCONT at unix ms {}", unix_ms()));
    // The probe recovers on SIGCONT.
    if let Some((p, at)) = take(&probe, 1, row).await {
        hold_and_record(&load.log, &probe.name, p, at, Duration::from_millis(20)).await;
    }
    let _ = probe.limiter.close().await;
    sleep(size.phase).await;
}

/// Scenario 10: etcd scenario 9 in its first form, on both stores: a *follower* is SIGSTOPped
/// while every worker uses it. A client of either store talks to one member at a time (etcd:
/// the member its Limiter started on, at random, until a call there fails; ZooKeeper: its
/// session's server), so each worker is first steered onto the follower (its links to the other
/// members reset until it talks to the follower) and then seen to send to the follower only.
/// The liveness judge then watches the queue through the hang and after SIGCONT: issue 12 saw
/// it stall 25 s after SIGCONT in 2 of 8 runs on etcd.
async fn hung_follower(cluster: &mut Cluster, load: &Workload, size: Size, row: &mut Row) {
    let leader = cluster.leader().await;
    let follower = (leader + 1) % cluster.len();
    steer_to(load, follower, row).await;
    let on_it = sending_only_to(load, follower).await;
    row.note(format!(
        "SIGSTOPped a follower; {on_it} of {} workers sent to it and to no other member in the {} before",
        load.clients.len(),
        ms(USE_WINDOW)
    ));
    row.check(on_it == load.clients.len(), || {
        format!(
            "only {on_it} of {} workers were using the follower (and only it) before it hung",
            load.clients.len()
        )
    });
    hang_with_probe(cluster, load, size, row, follower).await;
    // A while after SIGCONT, when late writes the hung member still held land (see the
    // leftovers these runs found on etcd); `still_moving` then waits up to STALL_BOUND more.
    sleep(TTL).await;
}

/// How long `sending_only_to` watches: longer than a session's keepalive period (TTL / 3), so
/// even a worker that waits or holds sends something.
const USE_WINDOW: Duration = Duration::from_secs(2);

/// How many workers sent bytes to `member` and to no other member within `USE_WINDOW` (read
/// from their proxies' request byte counters).
async fn sending_only_to(load: &Workload, member: usize) -> usize {
    let bytes = |c: &Client| -> Vec<u64> {
        c.proxies
            .proxies()
            .iter()
            .map(|p| p.client_bytes())
            .collect()
    };
    let before: Vec<Vec<u64>> = load.clients.iter().map(|c| bytes(c)).collect();
    sleep(USE_WINDOW).await;
    load.clients
        .iter()
        .zip(before)
        .filter(|(c, before)| {
            let sent: Vec<u64> = bytes(c).iter().zip(before).map(|(a, b)| a - b).collect();
            sent.iter()
                .enumerate()
                .all(|(i, &n)| (i == member) == (n > 0))
        })
        .count()
}

/// Moves every worker onto `member`: resets its links to the other members until it sent to
/// `member` (bounded; a fault window for the judge). On etcd a Limiter moves to the next member
/// when a call fails, so it passes the reset ones and stays on `member` after they heal; a
/// ZooKeeper client reconnects to another server of its list until one answers.
async fn steer_to(load: &Workload, member: usize, row: &mut Row) {
    let t = Instant::now();
    let others =
        |c: &Client| -> Vec<usize> { (0..c.proxies.len()).filter(|&i| i != member).collect() };
    let start: Vec<u64> = load
        .clients
        .iter()
        .map(|c| c.proxies.proxies()[member].client_bytes())
        .collect();
    for c in &load.clients {
        for i in others(c) {
            c.proxies[i].reset();
        }
    }
    let deadline = t + Duration::from_secs(15);
    let arrived = |load: &Workload| {
        load.clients
            .iter()
            .zip(&start)
            .all(|(c, &b)| c.proxies.proxies()[member].client_bytes() > b)
    };
    while Instant::now() < deadline && !arrived(load) {
        sleep(Duration::from_millis(50)).await;
    }
    // Calls already under way on the reset links fail within their attempt timeout; let them
    // end while the links are still reset, so none lands on a healed link.
    sleep(Duration::from_secs(1)).await;
    for c in &load.clients {
        for i in others(c) {
            c.proxies[i].pass();
        }
    }
    let end = load.log.fault("workers steered onto the follower", t);
    row.note(format!(
        "steering the workers onto the follower took {}",
        ms(end - t)
    ));
}

/// Scenario 11: one member becomes slow: every worker's link to the leader gains 200 ms each
/// way, pipelined (`Lag`: per-chunk deadlines, so throughput stays; the serial `Delay` of
/// scenario 7 also narrows the link). Peer traffic is not delayed: this is a member slow to
/// answer its clients (a slow disk or a congested NIC on its client side), not a slow quorum.
/// Clients should keep working, at most slower; nothing is lost.
async fn slow_member(cluster: &mut Cluster, load: &Workload, size: Size, row: &mut Row) {
    let leader = cluster.leader().await;
    let before = history::grants_between(
        &load.log.grants(),
        Instant::now() - size.phase,
        Instant::now(),
    );
    let t = Instant::now();
    for c in &load.clients {
        c.proxies[leader].lag(Duration::from_millis(200));
    }
    match first_grant(&load.log, t, Duration::from_secs(15)).await {
        Some(d) => row.recovery.push(d),
        None => row.fail("no grant within 15 s with a slow member"),
    }
    sleep(size.phase * 4).await;
    let slow_for = t.elapsed();
    let during = history::grants_between(&load.log.grants(), t, Instant::now());
    for c in &load.clients {
        c.proxies[leader].pass();
    }
    load.log.fault("one member slow", t);
    row.check(during > 0, || {
        "no acquisition while a member was slow".into()
    });
    row.note(format!(
        "{during} acquisitions in {} with the leader's client links +200 ms each way \
         (pipelined), against {before} in the {} before",
        ms(slow_for),
        ms(size.phase)
    ));
    let lost = load.log.grants().iter().filter(|g| g.lost).count();
    row.check(lost == 0, || {
        format!("{lost} permits lost while a member was only slow")
    });
    sleep(size.phase).await;
}

/// How many acquires scenario 12 starts and cancels.
const BURST: usize = 200;

/// Scenario 12: a burst of 200 acquires on clients of their own, each cancelled at a random
/// point (by `select!` against a sleep, by `timeout`, by aborting its task, or by the library's
/// own `acquire_timeout`), while the leader is SIGKILLed and restarted. Some are granted before
/// their cancellation: those are released or dropped. Afterwards, nothing of theirs may stay in
/// the store while their sessions live (the live leftover check at the end of the run), and the
/// queue keeps moving (the liveness judge).
async fn cancel_burst(cluster: &mut Cluster, load: &Workload, size: Size, row: &mut Row) {
    let all: Vec<usize> = (0..cluster.len()).collect();
    let mut sems = Vec::new();
    for i in 0..4 {
        let c = std::sync::Arc::new(Client::connect(cluster, &format!("burst{i}"), &all).await);
        sems.push(c.semaphore(SEMAPHORE, CAPACITY).await);
        load.adopt(c);
    }
    let mut rng = workload::Rng(load.seed ^ 0x9e37_79b9_7f4a_7c15 | 1);
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(BURST);
    for i in 0..BURST {
        let sem = sems[i % sems.len()].clone();
        let log = load.log.clone();
        let start_in = Duration::from_millis(rng.below(2000));
        let cancel_after = Duration::from_millis(rng.below(400));
        let weight = [1, 1, 2][rng.below(3) as usize];
        let style = rng.below(4);
        let release = rng.below(2) == 0;
        tasks.push(tokio::spawn(async move {
            sleep(start_in).await;
            burst_one(
                &log,
                &format!("burst{}", i % 4),
                sem,
                weight,
                style,
                cancel_after,
                release,
            )
            .await
        }));
    }
    sleep(Duration::from_millis(700)).await;
    let leader = cluster.leader().await;
    let (t, _, _) = kill_and_measure(cluster, load, leader, "the leader kill", row).await;
    cluster.restart_if_down(leader);
    load.log.fault("leader kill + restart", t);
    let mut outcomes: std::collections::BTreeMap<String, usize> = Default::default();
    for task in tasks {
        match timeout(hang_bound() * 2, task).await {
            Ok(Ok(what)) => *outcomes.entry(what).or_default() += 1,
            Ok(Err(e)) => row.fail(format!("a burst task failed: {e}")),
            Err(_) => row.fail("a burst acquire hung"),
        }
    }
    row.note(format!(
        "{BURST} acquires over {} on 4 clients, leader killed {} in: {outcomes:?}",
        ms(Duration::from_millis(2000)),
        ms(t - started)
    ));
    sleep(size.phase).await;
}

/// One acquire of the burst, cancelled after `cancel_after` in the way `style` picks; returns
/// how it ended, for the note.
async fn burst_one(
    log: &std::sync::Arc<Log>,
    name: &str,
    sem: clusterlimit::Semaphore,
    weight: u32,
    style: u64,
    cancel_after: Duration,
    release: bool,
) -> String {
    let start = Instant::now();
    let got: Result<Permit, &'static str> = match style {
        0 => tokio::select! {
            r = sem.acquire_many(weight) => r.map_err(|_| "error"),
            () = sleep(cancel_after) => Err("select! cancelled"),
        },
        1 => match timeout(cancel_after, sem.acquire_many(weight)).await {
            Ok(r) => r.map_err(|_| "error"),
            Err(_) => Err("timeout() cancelled"),
        },
        2 => {
            // Aborted with its task: a permit granted inside is dropped with it, and the
            // grant is recorded from inside, where its moment is known.
            let inner_log = log.clone();
            let inner_name = name.to_string();
            let task = tokio::spawn(async move {
                let p = sem.acquire_many(weight).await;
                if let Ok(p) = p {
                    let granted_at = Instant::now();
                    let slot = (p, granted_at);
                    // Hold until aborted; the abort drops the permit.
                    let _guard = AbortRecord(inner_log, inner_name, Some(slot));
                    std::future::pending::<()>().await;
                }
            });
            sleep(cancel_after).await;
            task.abort();
            let _ = task.await;
            Err("task aborted")
        }
        _ => sem
            .acquire_many_timeout(weight, cancel_after)
            .await
            .map_err(|_| "acquire_timeout expired"),
    };
    log.wait(name, start, got.is_ok());
    match got {
        Ok(permit) if release => {
            hold_and_record(log, name, permit, Instant::now(), Duration::ZERO).await;
            "granted, released".into()
        }
        Ok(permit) => {
            let granted_at = Instant::now();
            log.grant(Grant {
                holder: name.to_string(),
                weight: permit.permits(),
                token: permit.fencing_token(),
                granted_at,
                work_end: Instant::now(),
                released_at: None,
                lost: false,
            });
            drop(permit);
            "granted, dropped".into()
        }
        Err(what) => what.into(),
    }
}

/// Records the permit of an aborted burst task as worked until the abort dropped it.
struct AbortRecord(std::sync::Arc<Log>, String, Option<(Permit, Instant)>);

impl Drop for AbortRecord {
    fn drop(&mut self) {
        if let Some((permit, granted_at)) = self.2.take() {
            self.0.grant(Grant {
                holder: self.1.clone(),
                weight: permit.permits(),
                token: permit.fencing_token(),
                granted_at,
                work_end: Instant::now(),
                released_at: None,
                lost: false,
            });
        }
    }
}

/// Wall-clock time in ms since the epoch, to compare with the times the store and the
/// entries carry.
fn unix_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}
