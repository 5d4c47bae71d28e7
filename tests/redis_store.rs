//! Rate limits on Redis: the shared rate-limit contract (`clusterlimit::testing::rate_cases`)
//! on one real Redis, a 3-primary Redis Cluster and a Sentinel-watched primary, then what is
//! Redis's own: slots and hash tags, foreign values, a read-only replica, a flushed script
//! cache, an unreachable server, and keys expired by Redis itself.
//!
//! Each deployment is started once per test binary; every test uses a prefix of its own.

mod support;

use clusterlimit::testing::{DoomedHolder, Harness, LimiterOptions};
use clusterlimit::{Error, KeyCheck, Limiter, Quota, Result};
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

/// The rate-limit cases need a store and Limiters on it; a Redis store keeps no permits, so
/// the permit hooks of [`Harness`] are never called by them (and say so if they were).
macro_rules! redis_harness {
    ($name:ident, $url:expr) => {
        struct $name {
            url: String,
        }

        impl Harness for $name {
            const DEAD_HOLDER_FREED_WITHIN: Duration = Duration::from_secs(15);

            async fn start() -> Self {
                let url = tokio::task::spawn_blocking(|| $url(&unique_prefix()))
                    .await
                    .expect("start Redis");
                $name { url }
            }

            async fn connect(&self, opts: LimiterOptions) -> Result<Limiter> {
                opts.builder(&self.url).connect().await
            }

            async fn revoke_sessions(&self) {
                panic!("the rate-limit cases end no sessions; Redis keeps no permits yet");
            }

            async fn queue_entries(&self, _sem: &str) -> usize {
                panic!("the rate-limit cases read no queues; Redis keeps no permits yet");
            }

            async fn spawn_holder(&self, _sem: &str) -> DoomedHolder {
                panic!("the rate-limit cases hold no permits; Redis keeps no permits yet");
            }
        }
    };
}

redis_harness!(SingleHarness, |p: &str| single().url(p));
redis_harness!(ClusterHarness, |p: &str| cluster().url(p));
redis_harness!(SentinelHarness, |p: &str| sentinel().url(p));

clusterlimit::rate_contract_suite!(redis_single, SingleHarness, rate_only);
clusterlimit::rate_contract_suite!(redis_cluster, ClusterHarness, rate_only);
clusterlimit::rate_contract_suite!(redis_sentinel, SentinelHarness, rate_only);

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

/// Permits are refused with a message that says where to keep them; the store lists none.
#[test]
fn permits_are_refused_with_the_way_out() {
    let url = single().url(&unique_prefix());
    run(async move {
        let l = Limiter::connect(&url).await.unwrap();
        let text = l.semaphore("jobs", 2).await.unwrap_err().to_string();
        assert!(text.contains("etcd or ZooKeeper"), "{text}");
        assert!(l.semaphores().await.unwrap().is_empty());
        l.close().await.unwrap();
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

/// 16 callers spend a hot key's daily quota while the Sentinel-watched primary is SIGKILLed
/// a third of the way in, cut off from its first replica half a second before; they go on
/// through the failover until the quota is spent.
fn failover_run(wait_replicas: bool) -> FailoverRun {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    const QUOTA: u64 = 6_000;
    // WAIT needs a replica after the failover too: one is promoted, one follows it.
    let mut s = RedisSentinel::start_with_replicas(if wait_replicas { 2 } else { 1 });
    // The first replica follows the primary through a proxy the test can cut.
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
