//! Redis as a store: the shared contract suites (permits, `clusterlimit::testing::cases`; rate
//! limits, `rate_cases`) on one real Redis, a 3-primary Redis Cluster and a Sentinel-watched
//! primary, then what is Redis's own: slots and hash tags, foreign values, a read-only replica, a flushed script
//! cache, an unreachable server, and keys expired by Redis itself. The fair contract
//! (`fair_contract_suite!`) runs on the same three; what is Redis's own about fair semaphores is
//! in `redis_store/fair.rs`; a Sentinel failover under a leased hot key in
//! `redis_store/leased_failover.rs`.
//!
//! Each deployment is started once per test binary; every test uses a prefix of its own.

use crate::support;

#[path = "redis_store/fair.rs"]
mod fair;
#[path = "redis_store/leased_failover.rs"]
mod leased_failover;

use clusterlimit::testing::{within, DoomedHolder, Harness, LimiterOptions, SHORT_TTL};
use clusterlimit::{AcquireOptions, Error, KeyCheck, Limiter, Quota, Result};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use support::redis::{RedisCluster, RedisSentinel, RedisServer};

fn single() -> &'static RedisServer {
    static S: OnceLock<RedisServer> = OnceLock::new();
    S.get_or_init(RedisServer::start)
}

fn cluster() -> &'static RedisCluster {
    static C: OnceLock<RedisCluster> = OnceLock::new();
    C.get_or_init(|| RedisCluster::start(3))
}

fn sentinel() -> &'static RedisSentinel {
    static S: OnceLock<RedisSentinel> = OnceLock::new();
    S.get_or_init(RedisSentinel::start)
}

/// A prefix no other test of this binary uses.
fn unique_prefix() -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    format!(
        "t{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// The contract cases' hooks, on any Redis deployment: `nodes` are its primaries (where the
/// harness reads and ends sessions behind the library's back).
macro_rules! redis_harness {
    ($name:ident, $url:expr, $nodes:expr) => {
        struct $name {
            url: String,
            prefix: String,
        }

        impl Harness for $name {
            const DEAD_HOLDER_FREED_WITHIN: Duration = Duration::from_secs(SHORT_TTL.as_secs() + 2);
            // Redis lowers a held weight on a fair semaphore too (the waiters' Limiters grant).
            const SHRINKS_FAIR_PERMITS: bool = true;

            async fn start() -> Self {
                let prefix = unique_prefix();
                let p = prefix.clone();
                let url = tokio::task::spawn_blocking(move || $url(&p))
                    .await
                    .expect("start Redis");
                $name { url, prefix }
            }

            async fn connect(&self, opts: LimiterOptions) -> Result<Limiter> {
                opts.builder(&self.url).connect().await
            }

            async fn revoke_sessions(&self) {
                let prefix = self.prefix.clone();
                let ended = tokio::task::spawn_blocking(move || {
                    $nodes()
                        .iter()
                        .map(|n| end_sessions(n, &prefix))
                        .sum::<usize>()
                })
                .await
                .expect("end the sessions");
                assert!(
                    ended > 0,
                    "no Redis session to end under prefix {:?}",
                    self.prefix
                );
            }

            async fn queue_entries(&self, sem: &str) -> usize {
                let key = format!("{{{}:s:{sem}}}:q", self.prefix);
                tokio::task::spawn_blocking(move || {
                    let node = $nodes()[0];
                    let out = node.cli(&["-c", "ZCARD", &key]);
                    out.trim()
                        .parse()
                        .unwrap_or_else(|_| panic!("ZCARD {key}: {out:?}"))
                })
                .await
                .expect("count the queue")
            }

            async fn spawn_holder(&self, sem: &str) -> DoomedHolder {
                spawn_child_holder(&self.url, sem).await
            }
        }
    };
}

redis_harness!(SingleHarness, |p: &str| single().url(p), || vec![single()]);
redis_harness!(ClusterHarness, |p: &str| cluster().url(p), || cluster()
    .nodes
    .iter()
    .collect::<Vec<_>>());
redis_harness!(SentinelHarness, |p: &str| sentinel().url(p), || vec![
    &sentinel().primary
]);

clusterlimit::contract_suite!(redis_single_permits, SingleHarness);
clusterlimit::contract_suite!(redis_cluster_permits, ClusterHarness);
clusterlimit::contract_suite!(redis_sentinel_permits, SentinelHarness);
clusterlimit::fair_contract_suite!(redis_single_fair, SingleHarness);
clusterlimit::fair_contract_suite!(redis_cluster_fair, ClusterHarness);
clusterlimit::fair_contract_suite!(redis_sentinel_fair, SentinelHarness);
clusterlimit::rate_contract_suite!(redis_single, SingleHarness);
clusterlimit::rate_contract_suite!(redis_cluster, ClusterHarness);
clusterlimit::rate_contract_suite!(redis_sentinel, SentinelHarness);

/// Ends every session under `prefix` on `node` behind the library's back, as an expiry would:
/// each session's deadline is set in the past (the next script there drops its entries), the
/// semaphore's waiters are told, and the announcements go. Returns how many sessions and
/// boards it ended.
fn end_sessions(node: &RedisServer, prefix: &str) -> usize {
    let boards = node.cli(&["--scan", "--pattern", &format!("{{{prefix}}}:board:*")]);
    let boards = boards
        .lines()
        .filter(|k| !k.is_empty())
        .map(|board| {
            node.cli(&["DEL", board])
                .trim()
                .parse::<usize>()
                .unwrap_or(0)
        })
        .sum::<usize>();
    const END: &str = "local f = redis.call('HKEYS', KEYS[1]) \
        for _, s in ipairs(f) do redis.call('HSET', KEYS[1], s, 0) end \
        redis.call('PUBLISH', ARGV[1], 'ended') return #f";
    let pattern = format!("{{{prefix}:s:*}}:sessions");
    let keys = node.cli(&["--scan", "--pattern", &pattern]);
    keys.lines()
        .filter(|k| !k.is_empty())
        .map(|key| {
            let channel = key.replace(":sessions", ":changed");
            let out = node.cli(&["EVAL", END, "1", key, &channel]);
            out.trim()
                .parse::<usize>()
                .unwrap_or_else(|_| panic!("ending sessions at {key}: {out:?}"))
        })
        .sum::<usize>()
        + boards
}

/// Re-executes this test binary as a holder of one permit of `sem` at `url`.
async fn spawn_child_holder(url: &str, sem: &str) -> DoomedHolder {
    support::holder_process::doomed(module_path!(), url, sem).await
}

/// Not a test of its own: the body of the child process of `*::holder_dies`.
#[test]
fn child_holder_process() {
    support::holder_process::hold_if_child();
}

fn run<F: std::future::Future>(f: F) -> F::Output {
    clusterlimit::testing::block_on(f)
}

/// On a Redis Cluster, a joint check of keys in different slots is refused before anything is
/// counted, naming the keys and the fix; keys sharing a `{tag}` are checked all-or-nothing.
#[test]
fn cluster_joint_checks_need_one_slot() {
    let url = cluster().url(&unique_prefix());
    run(async move {
        let l = Limiter::connect(&url).await.unwrap();
        let a = l.rate_limit("per-ip", Quota::per_minute(2)).await.unwrap();
        let b = l
            .rate_limit("per-path", Quota::per_minute(1))
            .await
            .unwrap();
        // Probe pairs until one is refused (pairs in one slot are simply counted).
        let mut apart = None;
        for i in 0..50 {
            let (x, y) = (format!("x{i}"), format!("y{i}"));
            let checks = [
                KeyCheck::new(&a, x.as_str(), 1),
                KeyCheck::new(&b, y.as_str(), 1),
            ];
            match l.check_all(&checks).await {
                Err(err) => {
                    apart = Some((x, err));
                    break;
                }
                Ok(_) => continue,
            }
        }
        let (x, err) = apart.expect("some pair of keys lands in two slots");
        let text = err.to_string();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
        assert!(
            text.contains("hash tag") && text.contains("Redis Cluster"),
            "{text}"
        );
        // Nothing was counted: x still has its whole burst.
        assert!(a.check(&x).await.unwrap().allowed);
        assert!(a.check(&x).await.unwrap().allowed);

        let both = [
            KeyCheck::new(&a, "{user1}:ip", 1),
            KeyCheck::new(&b, "{user1}:path", 1),
        ];
        let first = l.check_all(&both).await.unwrap();
        assert!(first.iter().all(|d| d.allowed), "{first:?}");
        // b's quota is spent, so the pair is refused as a whole and a's key keeps its count.
        let second = l.check_all(&both).await.unwrap();
        assert!(!second.iter().all(|d| d.allowed), "{second:?}");
        assert!(
            a.check("{user1}:ip").await.unwrap().allowed,
            "a kept its second unit"
        );
        l.close().await.unwrap();
    });
}

/// A key under the prefix holding a value clusterlimit did not write is an error naming the
/// key, never a miscount; a key of another type too.
#[test]
fn foreign_values_are_refused_by_name() {
    let server = single();
    let prefix = unique_prefix();
    let url = server.url(&prefix);
    run(async move {
        let l = Limiter::connect(&url).await.unwrap();
        let rl = l.rate_limit("api", Quota::per_minute(5)).await.unwrap();
        let key = format!("{{{prefix}:b0}}:k:api:alice");
        server.cli(&["set", &key, "not ours"]);
        let err = rl.check("alice").await.unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("clusterlimit did not write") && text.contains("alice"),
            "{text}"
        );
        server.cli(&["del", &key]);
        server.cli(&["hset", &key, "f", "v"]);
        let text = rl.check("alice").await.unwrap_err().to_string();
        assert!(text.contains("another type of value"), "{text}");
        server.cli(&["del", &key]);
        assert!(rl.check("alice").await.unwrap().allowed);
        l.close().await.unwrap();
    });
}

/// A flushed script cache (a restart, `SCRIPT FLUSH`) is reloaded transparently.
#[test]
fn a_flushed_script_cache_is_reloaded() {
    let server = single();
    let url = server.url(&unique_prefix());
    run(async move {
        let l = Limiter::connect(&url).await.unwrap();
        let rl = l.rate_limit("api", Quota::per_minute(3)).await.unwrap();
        assert!(rl.check("k").await.unwrap().allowed);
        server.cli(&["script", "flush"]);
        assert!(rl.check("k").await.unwrap().allowed);
        assert!(rl.check("k").await.unwrap().allowed);
        assert!(
            !rl.check("k").await.unwrap().allowed,
            "exactly three admitted"
        );
        l.close().await.unwrap();
    });
}

/// A URL naming a replica gets a message that says so and what to use instead.
#[test]
fn a_read_only_replica_is_named() {
    let s = sentinel();
    let url = format!("redis://{}/{}", s.replicas[0].host(), unique_prefix());
    run(async move {
        let err = match Limiter::connect(&url).await {
            Ok(l) => l.rate_limit("api", Quota::per_minute(3)).await.unwrap_err(),
            Err(e) => e,
        };
        let text = err.to_string();
        assert!(
            text.contains("read-only replica") && text.contains("redis+sentinel://"),
            "{text}"
        );
    });
}

/// Nothing listening: connecting fails within the request timeout (plus a margin), naming the
/// server.
#[test]
fn an_unreachable_server_fails_in_time_by_name() {
    let port = support::process::free_ports(1)[0];
    let url = format!("redis://127.0.0.1:{port}/x");
    run(async move {
        let started = Instant::now();
        let err = Limiter::builder(&url)
            .request_timeout(Duration::from_millis(500))
            .connect()
            .await
            .unwrap_err();
        assert!(
            started.elapsed() < Duration::from_millis(600),
            "{:?}",
            started.elapsed()
        );
        let text = err.to_string();
        assert!(
            text.contains(&format!("Redis at 127.0.0.1:{port}")),
            "{text}"
        );
        assert!(!text.contains("Io") && !text.contains("Error {"), "{text}");
    });
}

/// Redis expires a key by itself, GRACE after its state is worth nothing.
#[test]
fn keys_expire_in_redis() {
    let server = single();
    let prefix = unique_prefix();
    let url = server.url(&prefix);
    run(async move {
        let l = Limiter::connect(&url).await.unwrap();
        let rl = l.rate_limit("api", Quota::per_second(10)).await.unwrap();
        assert!(rl.check("k").await.unwrap().allowed);
        let ttl: i64 = server
            .cli(&["pttl", &format!("{{{prefix}:b0}}:k:api:k")])
            .trim()
            .parse()
            .unwrap();
        // The state is worth nothing after 0.1 s; Redis keeps it 10 s longer.
        assert!((9_000..=10_200).contains(&ttl), "pttl {ttl}");
        l.close().await.unwrap();
    });
}

/// Announcements (the sidecars' fleet view): one value per Limiter and board, replaced by a
/// second announce, removed by withdraw and by close, and lapsing within a session TTL once a
/// Limiter stops refreshing them (its process died); kept alive while it lives.
#[test]
fn announcements_live_as_long_as_their_limiter() {
    let url = cluster().url(&unique_prefix());
    run(async move {
        let ttl = Duration::from_secs(2);
        let connect = || Limiter::builder(&url).session_ttl(ttl).connect();
        let (a, b, reader) = (
            connect().await.unwrap(),
            connect().await.unwrap(),
            connect().await.unwrap(),
        );
        let board = |l: &Limiter| {
            let l = l.clone();
            async move {
                l.announcements("fleet")
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|x| (x.id, x.value))
                    .collect::<Vec<_>>()
            }
        };
        a.announce("fleet", b"a1").await.unwrap();
        b.announce("fleet", b"b1").await.unwrap();
        a.announce("fleet", b"a2").await.unwrap();
        let mut want = vec![
            (a.announcer_id().to_string(), b"a2".to_vec()),
            (b.announcer_id().to_string(), b"b1".to_vec()),
        ];
        want.sort();
        assert_eq!(board(&reader).await, want);
        // Alive well past the TTL: refreshed.
        tokio::time::sleep(ttl * 3).await;
        assert_eq!(board(&reader).await, want);
        b.withdraw("fleet").await.unwrap();
        b.withdraw("fleet").await.unwrap();
        assert_eq!(board(&reader).await.len(), 1);
        b.announce("fleet", b"b2").await.unwrap();
        a.close().await.unwrap();
        assert_eq!(
            board(&reader).await,
            vec![(b.announcer_id().to_string(), b"b2".to_vec())]
        );
        // A Limiter that stops refreshing (dropped without close, as a killed process): its
        // value lapses within one TTL.
        drop(b);
        tokio::time::sleep(ttl + Duration::from_millis(300)).await;
        assert_eq!(board(&reader).await, vec![]);
        reader.close().await.unwrap();
    });
}

/// What one failover run came to: admitted in all, the quota, and how long checks failed.
struct FailoverRun {
    /// The run ended on a denial: the quota was spent (not the time bound).
    spent: bool,
    admitted: u64,
    quota: u64,
    refilled: f64,
    errors: u64,
    outage: Duration,
}

impl FailoverRun {
    /// Admitted beyond what the quota allowed over the run: requests whose counting the
    /// failover lost.
    fn over_admitted(&self) -> i64 {
        self.admitted as i64 - self.quota as i64 - self.refilled.ceil() as i64
    }
}

/// A Sentinel-watched primary whose first replica follows it through a proxy the test can cut
/// (and, with `wait_replicas`, a second replica: WAIT needs one after the failover too), and
/// the URL to it.
fn partitioned_sentinel(wait_replicas: bool) -> (RedisSentinel, support::FaultProxy, String) {
    let s = RedisSentinel::start_with_replicas(if wait_replicas { 2 } else { 1 });
    let partition = support::FaultProxy::start(s.primary.host().as_str());
    let proxied = partition.port().to_string();
    s.replicas[0].cli(&["replicaof", "127.0.0.1", &proxied]);
    let synced = Instant::now() + Duration::from_secs(20);
    while !s.replicas[0]
        .cli(&["info", "replication"])
        .contains("master_link_status:up")
    {
        assert!(
            Instant::now() < synced,
            "the replica did not sync through the proxy"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut url = s.url(&unique_prefix());
    if wait_replicas {
        url.push_str("?wait_replicas=1");
    }
    (s, partition, url)
}

/// 16 callers spend a hot key's daily quota while the Sentinel-watched primary is SIGKILLed
/// a third of the way in, cut off from its first replica half a second before; they go on
/// through the failover until the quota is spent.
fn failover_run(wait_replicas: bool) -> FailoverRun {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    const QUOTA: u64 = 6_000;
    let (mut s, partition, url) = partitioned_sentinel(wait_replicas);
    let admitted = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let spent = Arc::new(AtomicBool::new(false));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let l = rt
        .block_on(
            Limiter::builder(&url)
                .request_timeout(Duration::from_secs(2))
                .connect(),
        )
        .unwrap();
    let rl = rt
        .block_on(l.rate_limit("hot", Quota::per_day(QUOTA).burst(QUOTA)))
        .unwrap();
    let started = Instant::now();
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let (rl, admitted, errors, spent) =
                (rl.clone(), admitted.clone(), errors.clone(), spent.clone());
            rt.spawn(async move {
                let until = Instant::now() + Duration::from_secs(40);
                while Instant::now() < until && !spent.load(Ordering::Relaxed) {
                    match rl.check("k").await {
                        Ok(d) if d.allowed => {
                            admitted.fetch_add(1, Ordering::Relaxed);
                            // About 3,000 checks/s in all: the quota lasts past the failover.
                            tokio::time::sleep(Duration::from_millis(5)).await;
                        }
                        Ok(_) => spent.store(true, Ordering::Relaxed),
                        Err(_) => {
                            errors.fetch_add(1, Ordering::Relaxed);
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    }
                }
            })
        })
        .collect();
    let bound = Instant::now() + Duration::from_secs(20);
    while admitted.load(Ordering::Relaxed) < QUOTA / 3 && Instant::now() < bound {
        std::thread::sleep(Duration::from_millis(5));
    }
    // Half a second before the primary dies, its link to the first replica stops carrying
    // anything (a partition), while the primary goes on admitting.
    partition.blackhole();
    std::thread::sleep(Duration::from_millis(500));
    s.primary.kill();
    let killed = Instant::now();
    let errors_at_kill = errors.load(Ordering::Relaxed);
    // The outage: from the kill until checks succeed again (admitted grows).
    let at_kill = admitted.load(Ordering::Relaxed);
    let mut outage = Duration::ZERO;
    while Instant::now() < killed + Duration::from_secs(30) {
        if admitted.load(Ordering::Relaxed) > at_kill + 16 || spent.load(Ordering::Relaxed) {
            outage = killed.elapsed();
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    for t in tasks {
        rt.block_on(t).unwrap();
    }
    let run = FailoverRun {
        spent: spent.load(Ordering::Relaxed),
        admitted: admitted.load(Ordering::Relaxed),
        quota: QUOTA,
        refilled: started.elapsed().as_secs_f64() * QUOTA as f64 / 86_400.0,
        errors: errors.load(Ordering::Relaxed) - errors_at_kill,
        outage,
    };
    rt.block_on(l.close()).ok();
    run
}

/// Redis replicates asynchronously: a failover to a replica that lags loses the counts of what
/// the old primary admitted meanwhile, and the quota is exceeded by that much. With
/// `wait_replicas=1` a write counts only once a replica has it (the sentinel promotes the one
/// most up to date), and nothing is lost. Both runs report their losses; the first must show
/// one (else the test proves nothing), the second none.
#[test]
fn sentinel_failover_losses_with_and_without_wait() {
    let plain = failover_run(false);
    println!(
        "failover without WAIT: {} admitted of a quota of {} (+{:.1} refilled): {} over-admitted; checks failed for {:?} ({} errors)",
        plain.admitted, plain.quota, plain.refilled, plain.over_admitted(), plain.outage, plain.errors
    );
    let waited = failover_run(true);
    println!(
        "failover with wait_replicas=1: {} admitted of a quota of {} (+{:.1} refilled): {} over-admitted; checks failed for {:?} ({} errors)",
        waited.admitted, waited.quota, waited.refilled, waited.over_admitted(), waited.outage, waited.errors
    );
    for run in [&plain, &waited] {
        assert!(
            run.outage > Duration::ZERO,
            "checks resumed after the failover"
        );
        // Spent, not timed out. (With WAIT a check whose write the replica did not
        // acknowledge in time is not admitted though counted: a few fewer than the quota.)
        assert!(run.spent, "the quota was spent after the failover");
    }
    assert!(
        plain.over_admitted() > 0,
        "a replica half a second behind lost nothing: the test no longer shows the risk"
    );
    assert!(
        waited.over_admitted() <= 0,
        "with WAIT no admitted request is lost: {} over",
        waited.over_admitted()
    );
}

/// `rediss://` with the CA that signed the server and an ACL user whose password is in a file:
/// checks are counted; a wrong password, an unknown CA and a missing password file each fail
/// with a message that says which.
#[test]
fn tls_and_acl_users() {
    let pki = support::certs::TestPki::new();
    let (server, tls_port) =
        RedisServer::start_tls(&pki, &["--user", "limiter", "on", ">s3cret", "~*", "+@all"]);
    let dir = pki.dir().to_path_buf();
    let good = dir.join("password");
    let bad = dir.join("wrong");
    std::fs::write(&good, "s3cret\n").unwrap();
    std::fs::write(&bad, "nope\n").unwrap();
    let url = |ca: &std::path::Path, pw: &std::path::Path| {
        format!(
            "rediss://127.0.0.1:{tls_port}/tls?cacert={}&user=limiter&password_file={}",
            ca.display(),
            pw.display()
        )
    };
    let (ok, wrong_pw, wrong_ca, no_file) = (
        url(&pki.ca, &good),
        url(&pki.ca, &bad),
        url(&pki.other_ca, &good),
        url(&pki.ca, &dir.join("absent")),
    );
    run(async move {
        let l = Limiter::connect(&ok).await.unwrap();
        let rl = l.rate_limit("api", Quota::per_minute(2)).await.unwrap();
        assert!(rl.check("k").await.unwrap().allowed);
        assert!(rl.check("k").await.unwrap().allowed);
        assert!(!rl.check("k").await.unwrap().allowed);
        l.close().await.unwrap();

        let text = Limiter::connect(&wrong_pw).await.unwrap_err().to_string();
        assert!(text.contains("authentication failed"), "{text}");
        assert!(!text.contains("s3cret") && !text.contains("nope"), "{text}");
        // A refused certificate is final: said at once, not retried until the timeout.
        let started = Instant::now();
        let text = Limiter::builder(&wrong_ca)
            .request_timeout(Duration::from_secs(5))
            .connect()
            .await
            .unwrap_err()
            .to_string();
        assert!(
            text.contains("TLS handshake failed") && text.contains("cacert="),
            "{text}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        let err = Limiter::connect(&no_file).await.unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
        assert!(err.to_string().contains("password file"), "{err}");
    });
    drop(server);
}

/// The members the views list: Sentinel's primary and its replica, a cluster's three primaries.
#[test]
fn members_name_primaries_and_replicas() {
    let (s, c) = (sentinel(), cluster());
    let (surl, curl) = (s.url(&unique_prefix()), c.url(&unique_prefix()));
    let (primary, replica) = (s.primary.host(), s.replicas[0].host());
    let nodes: Vec<String> = c.nodes.iter().map(RedisServer::host).collect();
    run(async move {
        let l = Limiter::connect(&surl).await.unwrap();
        let m = l.store_members().await.unwrap();
        let roles: Vec<(&str, &str)> = m
            .iter()
            .map(|m| (m.address.as_str(), m.role.as_str()))
            .collect();
        assert_eq!(
            roles,
            vec![(primary.as_str(), "primary"), (replica.as_str(), "replica")]
        );
        l.close().await.unwrap();
        let l = Limiter::connect(&curl).await.unwrap();
        let m = l.store_members().await.unwrap();
        let mut want = nodes.clone();
        want.sort();
        assert_eq!(
            m.iter().map(|m| m.address.clone()).collect::<Vec<_>>(),
            want
        );
        assert!(m.iter().all(|m| m.role == "primary"), "{m:?}");
        l.close().await.unwrap();
    });
}

/// What one permit failover run came to.
struct PermitFailoverRun {
    /// The permits one Limiter took just before the failover that reported `lost()`.
    lost: usize,
    /// Grants to the other Limiter while some of those were still held and not reported lost:
    /// permits held twice.
    over_grants: u64,
    /// How long both held at once (from the other's first grant until the last of the early
    /// permits reported lost).
    overlap: Duration,
    /// From the kill until the other Limiter's first grant.
    first_grant: Option<Duration>,
}

/// A semaphore of 4: Limiter B takes all 4 permits in the half second before the
/// Sentinel-watched primary is SIGKILLed, while its first replica is cut off; then 4 workers of
/// Limiter C take turns at it (200 ms holds) for 12 s. Each grant to C counts B's permits that
/// are still held and not reported lost.
fn permit_failover_run(wait_replicas: bool) -> PermitFailoverRun {
    use std::sync::{Arc, Mutex};
    const CAPACITY: u32 = 4;
    let (mut s, partition, url) = partitioned_sentinel(wait_replicas);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let connect = || {
        rt.block_on(
            Limiter::builder(&url)
                .request_timeout(Duration::from_secs(2))
                .connect(),
        )
        .unwrap()
    };
    let (b, c) = (connect(), connect());
    let b_sem = rt.block_on(b.semaphore("jobs", CAPACITY)).unwrap();
    let c_sem = rt.block_on(c.open_semaphore("jobs")).unwrap();
    partition.blackhole();
    std::thread::sleep(Duration::from_millis(200));
    let b_permits: Arc<Vec<clusterlimit::Permit>> = Arc::new(
        (0..CAPACITY)
            .map(|_| rt.block_on(b_sem.try_acquire()).expect("B takes a permit"))
            .collect(),
    );
    std::thread::sleep(Duration::from_millis(300));
    s.primary.kill();
    let killed = Instant::now();
    let last_lost = Arc::new(Mutex::new(None::<Instant>));
    let watchers: Vec<_> = (0..b_permits.len())
        .map(|i| {
            let (permits, last_lost) = (b_permits.clone(), last_lost.clone());
            rt.spawn(async move {
                if tokio::time::timeout(Duration::from_secs(15), permits[i].lost())
                    .await
                    .is_ok()
                {
                    let mut last = last_lost.lock().unwrap();
                    *last = Some(last.map_or(Instant::now(), |l: Instant| l.max(Instant::now())));
                }
            })
        })
        .collect();
    let over_grants = Arc::new(AtomicU64::new(0));
    let first_grant = Arc::new(Mutex::new(None::<Instant>));
    let workers: Vec<_> = (0..CAPACITY)
        .map(|_| {
            let (sem, b_permits) = (c_sem.clone(), b_permits.clone());
            let (over_grants, first_grant) = (over_grants.clone(), first_grant.clone());
            rt.spawn(async move {
                let until = Instant::now() + Duration::from_secs(12);
                while Instant::now() < until {
                    match tokio::time::timeout(Duration::from_secs(2), sem.acquire()).await {
                        Ok(Ok(p)) => {
                            first_grant.lock().unwrap().get_or_insert(Instant::now());
                            if b_permits.iter().any(|p| !p.is_lost()) {
                                over_grants.fetch_add(1, Ordering::Relaxed);
                            }
                            tokio::time::sleep(Duration::from_millis(200)).await;
                            let _ = p.release().await;
                        }
                        _ => tokio::time::sleep(Duration::from_millis(50)).await,
                    }
                }
            })
        })
        .collect();
    for t in workers.into_iter().chain(watchers) {
        rt.block_on(t).unwrap();
    }
    let first = *first_grant.lock().unwrap();
    let last = *last_lost.lock().unwrap();
    let run = PermitFailoverRun {
        lost: b_permits.iter().filter(|p| p.is_lost()).count(),
        over_grants: over_grants.load(Ordering::Relaxed),
        overlap: match (first, last) {
            (Some(f), Some(l)) => l.saturating_duration_since(f),
            (Some(_), None) => Duration::MAX,
            _ => Duration::ZERO,
        },
        first_grant: first.map(|f| f - killed),
    };
    drop(b_permits);
    for l in [&b, &c] {
        rt.block_on(l.close()).ok();
    }
    run
}

/// Permits through a failover. Without WAIT, the grants of the last replication lag are lost:
/// the new primary hands those permits to someone else, and their first holder learns it
/// (`lost()`) from its next keepalive — permits are held twice meanwhile; the test reports
/// how long. With `wait_replicas=1` a grant counts only once a replica has it: the permits
/// survive the failover, nobody else gets them, and nothing reports lost.
#[test]
fn sentinel_failover_permits_with_and_without_wait() {
    let plain = permit_failover_run(false);
    let waited = permit_failover_run(true);
    for (run, how) in [(&plain, "without WAIT"), (&waited, "with wait_replicas=1")] {
        println!(
            "permits through a failover {how}: {} of 4 permits taken just before it reported lost; {} grants to another Limiter while they were held (held twice for {:?}); the other's first grant {:?} after the kill",
            run.lost, run.over_grants, run.overlap, run.first_grant
        );
    }
    assert_eq!(
        plain.lost, 4,
        "the permits whose grants the failover lost report it"
    );
    assert!(
        plain.first_grant.is_some(),
        "the other Limiter got permits after the failover"
    );
    assert_eq!(waited.over_grants, 0, "with WAIT no permit is held twice");
    assert_eq!(waited.lost, 0, "with WAIT the permits survive the failover");
}

/// The id and raw value of the one entry of semaphore `sem` (holders and waiters) on `node`.
fn only_entry(node: &RedisServer, prefix: &str, sem: &str) -> (String, String, String) {
    let entries = format!("{{{prefix}:s:{sem}}}:e");
    let all = node.cli(&["hgetall", &entries]);
    let lines: Vec<&str> = all.lines().collect();
    assert_eq!(lines.len(), 2, "one entry in {entries}: {all:?}");
    let queue = format!("{{{prefix}:s:{sem}}}:q");
    let token = node.cli(&["zscore", &queue, lines[0]]).trim().to_string();
    (lines[0].to_string(), lines[1].to_string(), token)
}

/// Semaphore records that are not ours are refused with a message naming the semaphore, and
/// nothing panics.
#[test]
fn permits_on_foreign_values_are_refused_by_name() {
    let server = single();
    let prefix = unique_prefix();
    let url = server.url(&prefix);
    run(async move {
        let l = Limiter::connect(&url).await.unwrap();
        server.cli(&["set", &format!("{{{prefix}:s:db}}:cap"), "not ours"]);
        let text = l.semaphore("db", 2).await.unwrap_err().to_string();
        assert!(text.contains("another type of value"), "{text}");
        let sem = l.semaphore("jobs", 2).await.unwrap();
        let _held = sem.acquire().await.unwrap();
        let entries = format!("{{{prefix}:s:jobs}}:e");
        let (id, _, _) = only_entry(server, &prefix, "jobs");
        server.cli(&["hset", &entries, &id, "garbage"]);
        let text = sem.status().await.unwrap_err().to_string();
        assert!(
            text.contains("\"jobs\"") && text.contains("did not write"),
            "{text}"
        );
    });
}

/// An entry removed behind the holder's back: its next keepalive finds it gone and the permit
/// reports lost, within a third of the TTL (plus a margin).
#[test]
fn a_vanished_entry_reports_lost() {
    let server = single();
    let prefix = unique_prefix();
    let url = server.url(&prefix);
    run(async move {
        let l = Limiter::builder(&url)
            .session_ttl(Duration::from_secs(3))
            .connect()
            .await
            .unwrap();
        let sem = l.semaphore("db", 1).await.unwrap();
        let p = sem.acquire().await.unwrap();
        let (id, _, _) = only_entry(server, &prefix, "db");
        server.cli(&["zrem", &format!("{{{prefix}:s:db}}:q"), &id]);
        server.cli(&["hdel", &format!("{{{prefix}:s:db}}:e"), &id]);
        within(
            "lost() after the entry vanished",
            Duration::from_secs(3),
            p.lost(),
        )
        .await;
        l.close().await.unwrap();
    });
}

/// `Permit::shrink_to` on entries changed behind the holder: a value not ours is refused by
/// name and left as it was, the weight kept; an entry gone is `SessionLost` and the permit
/// reports lost.
#[test]
fn shrink_of_foreign_or_vanished_entries() {
    let server = single();
    let prefix = unique_prefix();
    let url = server.url(&prefix);
    run(async move {
        let l = Limiter::connect(&url).await.unwrap();
        let sem = l.semaphore("db", 4).await.unwrap();
        let opts = clusterlimit::AcquireOptions::new().permits(4);
        let mut p = sem.acquire_with(opts.clone()).await.unwrap();
        let entries = format!("{{{prefix}:s:db}}:e");
        let (id, _, _) = only_entry(server, &prefix, "db");
        server.cli(&["hset", &entries, &id, "garbage"]);
        let text = p.shrink_to(2).await.unwrap_err().to_string();
        assert!(
            text.contains("\"db\"") && text.contains("did not write"),
            "{text}"
        );
        assert_eq!(p.permits(), 4);
        assert_eq!(server.cli(&["hget", &entries, &id]).trim(), "garbage");
        server.cli(&["hdel", &entries, &id]);
        server.cli(&["zrem", &format!("{{{prefix}:s:db}}:q"), &id]);
        let lost = p.shrink_to(2).await;
        assert!(
            matches!(lost, Err(clusterlimit::Error::SessionLost)),
            "{lost:?}"
        );
        assert!(p.is_lost() && p.permits() == 4);
        l.close().await.unwrap();
    });
}

/// A release a failover lost brings the entry back (simulated: written again as it was): the
/// holder's next keepalive removes it, and a waiter elsewhere gets the permit; the holder's
/// other permit stays good.
#[test]
fn a_released_entry_brought_back_is_removed_by_its_session() {
    let server = single();
    let prefix = unique_prefix();
    let url = server.url(&prefix);
    run(async move {
        let connect = || {
            Limiter::builder(&url)
                .session_ttl(Duration::from_secs(3))
                .connect()
        };
        let (a, b) = (connect().await.unwrap(), connect().await.unwrap());
        let sem = a.semaphore("db", 2).await.unwrap();
        let first = sem.acquire().await.unwrap();
        let (id, value, token) = only_entry(server, &prefix, "db");
        let second = sem.acquire().await.unwrap();
        first.release().await.unwrap();
        server.cli(&["zadd", &format!("{{{prefix}:s:db}}:q"), &token, &id]);
        server.cli(&["hset", &format!("{{{prefix}:s:db}}:e"), &id, &value]);
        let other = b.open_semaphore("db").await.unwrap();
        assert!(
            matches!(other.try_acquire().await, Err(Error::NoPermits)),
            "the stray holds a permit until it is found"
        );
        let p = within("the stray removed", Duration::from_secs(3), other.acquire())
            .await
            .expect("granted once the keepalive removed the stray");
        assert!(!second.is_lost(), "the holder's own permit is untouched");
        drop(p);
        a.close().await.unwrap();
        b.close().await.unwrap();
    });
}

/// Redis going away under a wait: the acquire keeps its deadline (within 100 ms) and says
/// what failed; a flushed script cache under waiters changes nothing.
#[test]
fn waits_keep_their_deadline_when_redis_dies() {
    let mut server = RedisServer::start();
    let url = server.url("gone");
    run(async {
        let l = Limiter::builder(&url)
            .request_timeout(Duration::from_millis(500))
            .connect()
            .await
            .unwrap();
        let sem = l.semaphore("db", 1).await.unwrap();
        let held = sem.acquire().await.unwrap();
        server.cli(&["script", "flush"]);
        let waiting = tokio::spawn({
            let sem = sem.clone();
            async move {
                sem.acquire_with(AcquireOptions::new().timeout(Duration::from_secs(5)))
                    .await
            }
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        held.release().await.unwrap();
        let p = within("the waiter granted", Duration::from_secs(3), waiting)
            .await
            .unwrap()
            .expect("granted after the release");
        drop(p);
        server.kill();
        let started = Instant::now();
        let err = sem
            .acquire_with(AcquireOptions::new().timeout(Duration::from_millis(800)))
            .await
            .unwrap_err();
        let took = started.elapsed();
        assert!(took < Duration::from_millis(900), "took {took:?}: {err}");
        let text = err.to_string();
        assert!(!text.contains("Error {"), "{text}");
    });
}

/// On a Redis Cluster of 3 primaries (slots split evenly), a limit's keys land in 12 buckets,
/// 4 on each primary, so a batch is a few script calls and every primary takes a third.
#[test]
fn cluster_buckets_spread_evenly_over_the_primaries() {
    let c = cluster();
    let prefix = unique_prefix();
    let url = c.url(&prefix);
    run(async move {
        let l = Limiter::connect(&url).await.unwrap();
        let rl = l.rate_limit("spread", Quota::per_minute(5)).await.unwrap();
        for i in 0..300 {
            assert!(rl.check(&format!("k{i}")).await.unwrap().allowed);
        }
        l.close().await.unwrap();
    });
    let pattern = format!("{{{prefix}:b*}}:k:spread:*");
    let mut all = std::collections::HashSet::new();
    for node in &c.nodes {
        let keys = node.cli(&["--scan", "--pattern", &pattern]);
        let buckets: std::collections::HashSet<&str> = keys
            .lines()
            .filter_map(|k| k.split_once('}').map(|(tag, _)| tag))
            .collect();
        assert_eq!(
            buckets.len(),
            4,
            "{} holds buckets {buckets:?}",
            node.host()
        );
        all.extend(buckets.into_iter().map(str::to_string));
    }
    assert_eq!(all.len(), 12, "{all:?}");
}

/// Permits taken and released as fast as they come while the keepalive runs (a round every
/// 2/3 s): a release that lands between a round's list of entries and its check is the
/// holder's own doing, never a lost session.
#[test]
fn busy_releases_never_look_lost() {
    let url = single().url(&unique_prefix());
    run(async move {
        let l = Limiter::builder(&url)
            .session_ttl(Duration::from_secs(2))
            .connect()
            .await
            .unwrap();
        let sem = l.semaphore("busy", 4).await.unwrap();
        let lost = std::sync::Arc::new(AtomicU64::new(0));
        let workers: Vec<_> = (0..8)
            .map(|_| {
                let (sem, lost) = (sem.clone(), lost.clone());
                tokio::spawn(async move {
                    let until = Instant::now() + Duration::from_secs(4);
                    let mut rounds = 0u64;
                    while Instant::now() < until && rounds < 100_000 {
                        rounds += 1;
                        let p = sem.acquire().await.expect("acquire");
                        if p.is_lost() {
                            lost.fetch_add(1, Ordering::Relaxed);
                        }
                        p.release().await.expect("release");
                    }
                    rounds
                })
            })
            .collect();
        let mut total = 0;
        for w in workers {
            total += w.await.unwrap();
        }
        assert!(total > 100, "only {total} acquires in 4 s");
        assert_eq!(lost.load(Ordering::Relaxed), 0, "of {total} permits");
        l.close().await.unwrap();
    });
}
