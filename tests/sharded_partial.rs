//! A partial failure stays partial: a sharded store (`URL;URL`) of two real single-member etcd
//! clusters whose second cluster is SIGSTOPped (then SIGKILLed). Keys of the healthy first
//! cluster are still checked and counted, by the library's `StoreDownGuard` under every
//! store-down policy, the tower layer, the sidecar's HTTP routes and its RLS; only the down
//! cluster's keys get the policy's answer, each breaker and metric naming its cluster. A
//! Limiter (and the CLI) opens the store while the second cluster is down, and no session
//! lease is ever granted on it. The library's cases run on two ZooKeeper clusters too.

use crate::binary;
use crate::support;

use axum::http::Request;
use binary::{cmd, eventually, output, sample, within};
use clusterlimit::tower::{key, ClusterRateLimitLayer, RateLimitInfo};
use clusterlimit::{
    DecisionSource, Error, Limiter, Quota, RateLimit, StoreDownGuard, StoreDownPolicy,
};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::process::Stdio;
use std::time::{Duration, Instant};
use support::{EtcdCluster, Pausable, ZkCluster};
use tokio::io::{AsyncBufReadExt, BufReader};
use tower::{service_fn, Layer, ServiceExt};

const LIMIT: Duration = Duration::from_secs(30);

/// Two single-member etcd clusters as one sharded store under prefix `p`.
fn two_clusters() -> (EtcdCluster, EtcdCluster, String) {
    let (a, b) = (EtcdCluster::single(), EtcdCluster::single());
    let url = format!("{};{}", a.url("p"), b.url("p"));
    (a, b, url)
}

/// A key of `limit` that the sharded store keeps on the cluster at `position`.
fn key_on(limiter: &Limiter, limit: &str, position: usize, tag: &str) -> String {
    (0..1000)
        .map(|i| format!("{tag}-{i}"))
        .find(|k| limiter.cluster_of(limit, k).position == position)
        .expect("a key on each cluster within 1000 tries")
}

async fn connect(url: &str) -> Limiter {
    Limiter::builder(url)
        .request_timeout(Duration::from_millis(800))
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect("connect the sharded store")
}

/// Checks `key` through `guard` until the breaker of the cluster at `position` opens (each
/// check bounded by the guard's store timeout); panics past 20 checks.
async fn open_breaker(guard: &StoreDownGuard, rl: &RateLimit, key: &str, position: usize) {
    for _ in 0..20 {
        if guard.cluster_down(position) {
            return;
        }
        let g = within("a guarded check", LIMIT, guard.check_n(rl, key, 1))
            .await
            .expect("a guarded check");
        assert!(g.decision.limit > 0);
    }
    panic!("the breaker of cluster {position} never opened");
}

/// Five checks of `key` through `guard`: every one decided by the store and counted.
async fn counted(guard: &StoreDownGuard, rl: &RateLimit, key: &str, what: &str) {
    let mut last = u64::MAX;
    for _ in 0..5 {
        let g = guard.check_n(rl, key, 1).await.expect("a guarded check");
        assert_eq!(g.source, DecisionSource::Store, "{what}: {g:?}");
        assert!(g.decision.allowed, "{what}: {g:?}");
        assert!(g.decision.remaining < last, "{what}: not counted: {g:?}");
        last = g.decision.remaining;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_down_etcd_cluster_fails_over_alone_in_the_library_and_the_tower_layer() {
    let (_a, mut b, url) = two_clusters();
    fails_over_alone(&mut b, &url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_down_zookeeper_cluster_fails_over_alone_in_the_library_and_the_tower_layer() {
    let (a, mut b) = (ZkCluster::single(), ZkCluster::single());
    let url = format!("{};{}", Pausable::url(&a, "p"), Pausable::url(&b, "p"));
    fails_over_alone(&mut b, &url).await;
}

/// The second cluster `b` of the sharded store `url` SIGSTOPped, then SIGKILLed: the guard
/// under every policy and the tower layer answer its keys by their policy and count the
/// first cluster's.
async fn fails_over_alone(b: &mut impl Pausable, url: &str) {
    let limiter = connect(url).await;
    let clusters = limiter.clusters();
    assert_eq!(clusters.len(), 2, "{clusters:?}");
    let second = clusters[1].describe().to_string();
    assert!(second.starts_with("cluster 2 of 2 ("), "{second}");
    let rl = limiter
        .rate_limit("api", Quota::per_day(10_000))
        .await
        .expect("rate_limit");
    let policies = [
        StoreDownPolicy::FailOpen,
        StoreDownPolicy::FailClosed,
        StoreDownPolicy::Local { replicas: 2 },
    ];
    // A long retry interval: once open, a breaker answers at once (no probe in the test).
    let new_guards = || -> Vec<StoreDownGuard> {
        policies
            .iter()
            .map(|p| {
                StoreDownGuard::new(*p)
                    .store_timeout(Duration::from_millis(300))
                    .retry_interval(Duration::from_secs(60))
            })
            .collect()
    };
    let mut guards = new_guards();
    let layer = ClusterRateLimitLayer::new(rl.clone(), key::header("x-api-key"))
        .store_down(StoreDownPolicy::FailClosed)
        .store_timeout(Duration::from_millis(300));
    let svc = layer.layer(service_fn(|_req: Request<String>| async {
        Ok::<_, Infallible>(axum::http::Response::new(String::new()))
    }));
    let send = |k: String| {
        let svc = svc.clone();
        async move {
            let req = Request::builder()
                .header("x-api-key", k)
                .body(String::new())
                .unwrap();
            within("a request through the layer", LIMIT, svc.oneshot(req))
                .await
                .unwrap()
        }
    };
    // Every guard's and the layer's keys, one on each cluster, checked while both answer.
    let mut keys = Vec::new();
    for (i, g) in guards.iter().enumerate() {
        let (on_a, on_b) = (
            key_on(&limiter, "api", 0, &format!("g{i}a")),
            key_on(&limiter, "api", 1, &format!("g{i}b")),
        );
        for k in [&on_a, &on_b] {
            assert_eq!(
                g.check_n(&rl, k, 1).await.unwrap().source,
                DecisionSource::Store
            );
        }
        keys.push((on_a, on_b));
    }
    let (layer_a, layer_b) = (
        key_on(&limiter, "api", 0, "la"),
        key_on(&limiter, "api", 1, "lb"),
    );
    for k in [&layer_a, &layer_b] {
        assert_eq!(send(k.clone()).await.status(), 200);
    }

    b.pause();
    for (phase, down) in ["stopped", "killed"].into_iter().enumerate() {
        if phase == 1 {
            // Fresh breakers meet the killed cluster (refused connections, not silence).
            b.kill();
            guards = new_guards();
        }
        for ((g, p), (on_a, on_b)) in guards.iter().zip(&policies).zip(&keys) {
            let what = format!("{p} with cluster 2 {down}");
            open_breaker(g, &rl, on_b, 1).await;
            assert!(!g.cluster_down(0), "{what}: cluster 1's breaker opened too");
            counted(g, &rl, on_a, &what).await;
            let t = Instant::now();
            let down_answer = g.check_n(&rl, on_b, 1).await.unwrap();
            assert_ne!(down_answer.source, DecisionSource::Store, "{what}");
            assert!(
                t.elapsed() < Duration::from_millis(250),
                "{what}: {:?}",
                t.elapsed()
            );
            let each = g.breakers();
            assert_eq!(each.len(), 2, "{what}: {each:?}");
            assert!(
                !each[0].stats.open && each[1].stats.open,
                "{what}: {each:?}"
            );
            assert_eq!(each[1].cluster.as_deref(), Some(second.as_str()));
            assert!(
                g.breaker().open && g.store_down(),
                "{what}: any cluster down"
            );
        }
        // The tower layer (fail closed): the down cluster's keys 503, the other's counted.
        for _ in 0..20 {
            if layer.guard().cluster_down(1) {
                break;
            }
            send(layer_b.clone()).await;
        }
        assert!(
            layer.guard().cluster_down(1),
            "the layer's breaker for cluster 2"
        );
        assert_eq!(send(layer_b.clone()).await.status(), 503);
        let mut last = u64::MAX;
        for _ in 0..5 {
            let res = send(layer_a.clone()).await;
            assert_eq!(res.status(), 200, "{res:?}");
            let info = res.extensions().get::<RateLimitInfo>().unwrap().clone();
            assert_eq!(info.source, DecisionSource::Store);
            assert!(info.decision.remaining < last, "counted: {info:?}");
            last = info.decision.remaining;
        }
    }
    limiter.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_store_opens_with_a_later_cluster_down_and_holds_no_lease_there() {
    let (a, mut b, url) = two_clusters();
    let limiter = opens_with_a_later_cluster_down(&mut b, &url).await;
    // No lease on cluster 2 (nothing there is bound to a session); cluster 1 holds one.
    let leases = |endpoints: Vec<String>| async move {
        let mut c = support::connect(&endpoints).await;
        c.leases().await.expect("list leases").leases().len()
    };
    assert_eq!(leases(b.endpoints()).await, 0, "a lease on cluster 2");
    assert!(
        leases(a.endpoints()).await >= 1,
        "no session lease on cluster 1"
    );
    limiter.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zookeeper_store_opens_with_a_later_cluster_down() {
    let (a, mut b) = (ZkCluster::single(), ZkCluster::single());
    let url = format!("{};{}", Pausable::url(&a, "p"), Pausable::url(&b, "p"));
    let limiter = opens_with_a_later_cluster_down(&mut b, &url).await;
    limiter.close().await.expect("close");
}

/// Opens the sharded store `url` while its second cluster `b` is SIGSTOPped: semaphores and
/// the first cluster's keys work, the second's fail naming it, then answer once it is
/// resumed. Returns the Limiter, open.
async fn opens_with_a_later_cluster_down(b: &mut impl Pausable, url: &str) -> Limiter {
    b.pause();
    let t = Instant::now();
    let limiter = connect(url).await;
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "opening waited for the stopped cluster: {:?}",
        t.elapsed()
    );
    // Semaphores and the session are on the first cluster: they work.
    let sem = limiter.semaphore("jobs", 1).await.expect("semaphore");
    let permit = sem.acquire().await.expect("acquire");
    // A limit opens (its copies for cluster 2 are written later), its cluster-1 keys count.
    let rl = limiter
        .rate_limit("api", Quota::per_day(100))
        .await
        .expect("rate_limit with cluster 2 stopped");
    let on_a = key_on(&limiter, "api", 0, "a");
    let on_b = key_on(&limiter, "api", 1, "b");
    for left in [99, 98] {
        assert_eq!(rl.check(&on_a).await.expect("check").remaining, left);
    }
    // Cluster 2's keys fail, within about the request timeout, naming the cluster.
    for _ in 0..3 {
        let t = Instant::now();
        match rl.check(&on_b).await {
            Err(Error::Store(e)) => {
                let msg = e.to_string();
                assert!(msg.contains("cluster 2 of 2"), "{msg}");
            }
            Err(Error::Timeout) => {}
            other => panic!("a check on the stopped cluster: {other:?}"),
        }
        assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    }
    // The members: cluster 1's, and cluster 2 as one unreachable entry (not an error).
    let members = within("the members", LIMIT, limiter.store_members())
        .await
        .expect("members with cluster 2 stopped");
    assert!(
        members.iter().any(|m| m.role == "unreachable")
            && members.iter().any(|m| m.role != "unreachable"),
        "{members:?}"
    );
    b.resume();
    let back = eventually("cluster 2's keys answer again", LIMIT, || {
        let (rl, k) = (rl.clone(), on_b.clone());
        async move { rl.check(&k).await.ok() }
    })
    .await;
    assert!(back.allowed);
    permit.release().await.expect("release");
    limiter
}

/// `serve` with HTTP and the RLS on; both addresses read from its stdout.
struct Served {
    _child: tokio::process::Child,
    http: String,
    grpc: String,
}

async fn serve(args: &[&str]) -> Served {
    let mut all = vec![
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--grpc-listen",
        "127.0.0.1:0",
    ];
    all.extend_from_slice(args);
    let mut c = cmd(&all);
    c.stdout(Stdio::piped()).stderr(Stdio::inherit());
    let mut child = c.spawn().expect("spawn clusterlimit serve");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let (http, grpc) = within("serve to print its addresses", LIMIT, async {
        let (mut http, mut grpc) = (None, None);
        for _ in 0..20 {
            let line = lines.next_line().await.unwrap().expect("serve exited");
            if let Some(rest) = line.split("listening on http://").nth(1) {
                http = Some(format!(
                    "http://{}",
                    rest.split_whitespace().next().unwrap()
                ));
            }
            if let Some(rest) = line.strip_prefix("clusterlimit serve: rls listening on grpc://") {
                grpc = Some(format!("http://{rest}"));
            }
            if let (Some(h), Some(g)) = (&http, &grpc) {
                return (h.clone(), g.clone());
            }
        }
        panic!("serve printed no addresses")
    })
    .await;
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Served {
        _child: child,
        http,
        grpc,
    }
}

/// One RLS call for `user` in domain `web`: whether it was OK and the limit left.
async fn rls(grpc: &str, user: &str) -> (Code, u32) {
    let mut c = RateLimitServiceClient::connect(grpc.to_string())
        .await
        .expect("connect the RLS");
    let req = RateLimitRequest {
        domain: "web".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "user".into(),
                value: user.into(),
            }],
            ..Default::default()
        }],
        hits_addend: 0,
    };
    let r = within("ShouldRateLimit", LIMIT, c.should_rate_limit(req))
        .await
        .expect("ShouldRateLimit")
        .into_inner();
    let s = &r.statuses[0];
    (Code::try_from(s.code).unwrap(), s.limit_remaining)
}

async fn http_check(base: &str, key: &str) -> Value {
    let r = binary::http_client()
        .post(format!("{base}/v1/ratelimits/api/check"))
        .json(&json!({ "key": key }))
        .send()
        .await
        .expect("POST check");
    r.json().await.expect("a JSON body")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sidecar_and_the_cli_count_the_healthy_cluster() {
    let (_a, mut b, url) = two_clusters();
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rls.yaml");
    std::fs::write(
        &rules,
        "domain: web\ndescriptors:\n  - key: user\n    rate_limit: {unit: day, requests_per_unit: 1000}\n",
    )
    .unwrap();
    let sc = serve(&[
        "--store",
        &url,
        "--rls-config",
        rules.to_str().unwrap(),
        "--rate-store-timeout",
        "300ms",
        "--rls-store-timeout",
        "300ms",
    ])
    .await;
    let c = binary::http_client();
    let put = c
        .put(format!("{}/v1/ratelimits/api", sc.http))
        .json(&json!({"limit": 1000, "period": "1h"}))
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 200);
    let limiter = connect(&url).await;
    let (on_a, on_b) = (
        key_on(&limiter, "api", 0, "a"),
        key_on(&limiter, "api", 1, "b"),
    );
    // RLS users on each cluster: found by where their first check wrote.
    let mut users = (None, None);
    for i in 0..40 {
        let u = format!("user-{i}");
        assert_eq!(rls(&sc.grpc, &u).await.0, Code::Ok);
        let on_second = support::etcd::list_entries(&b.endpoints(), "p/rk/")
            .await
            .iter()
            .any(|(k, _)| k.contains(&u) && k.ends_with(&u));
        match on_second {
            true => users.1 = users.1.or(Some(u)),
            false => users.0 = users.0.or(Some(u)),
        }
        if users.0.is_some() && users.1.is_some() {
            break;
        }
    }
    let (user_a, user_b) = (users.0.expect("a user on 1"), users.1.expect("a user on 2"));
    for k in [&on_a, &on_b] {
        assert_eq!(http_check(&sc.http, k).await["source"], "store");
    }

    b.pause(0);
    // Cluster 2's keys until its breakers open (fail_open, the default), then cluster 1's keys
    // are still counted over HTTP and the RLS.
    let metric = |guard: &str, cluster: &str| {
        format!("clusterlimit_store_breaker_open{{guard=\"{guard}\",cluster=\"{cluster}\"}}")
    };
    let opened = eventually("the breakers of cluster 2 open", LIMIT, || {
        let (http, grpc, k, u) = (
            sc.http.clone(),
            sc.grpc.clone(),
            on_b.clone(),
            user_b.clone(),
        );
        let want = (metric("http:fail_open", "2"), metric("rls:fail_open", "2"));
        async move {
            http_check(&http, &k).await;
            rls(&grpc, &u).await;
            let m = binary::metrics(&binary::http_client(), &http).await;
            (sample(&m, &want.0) == Some(1.0) && sample(&m, &want.1) == Some(1.0)).then_some(m)
        }
    })
    .await;
    assert_eq!(
        sample(&opened, &metric("http:fail_open", "1")),
        Some(0.0),
        "{opened}"
    );
    assert_eq!(
        sample(&opened, &metric("rls:fail_open", "1")),
        Some(0.0),
        "{opened}"
    );
    let mut last = (u64::MAX, u32::MAX);
    for _ in 0..4 {
        let d = http_check(&sc.http, &on_a).await;
        assert_eq!(d["source"], "store", "{d}");
        let left = d["remaining"].as_u64().unwrap();
        assert!(left < last.0, "HTTP not counted: {d}");
        let (code, rls_left) = rls(&sc.grpc, &user_a).await;
        assert_eq!(code, Code::Ok);
        assert!(rls_left < last.1, "RLS not counted: {rls_left}");
        last = (left, rls_left);
    }
    assert_eq!(http_check(&sc.http, &on_b).await["source"], "fail_open");

    // The CLI, a fresh process, with cluster 2 stopped: cluster 1's key is checked; cluster
    // 2's fails naming it.
    let t = Instant::now();
    let out = output(
        cmd(&["rate", "check", "--store", &url, "api", &on_a]),
        LIMIT,
    )
    .await;
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    let out = output(
        cmd(&["rate", "check", "--store", &url, "api", &on_b]),
        LIMIT,
    )
    .await;
    assert_eq!(out.code, Some(69), "{}\n{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("cluster 2 of 2"), "{}", out.stderr);
    // What lives on the first cluster answers: the semaphores' and rate limits' lists, a
    // limit's quota and a key of cluster 1.
    for args in [
        vec!["status", "--store", &url],
        vec!["rate", "status", "--store", &url],
        vec!["rate", "status", "--store", &url, "api"],
        vec!["rate", "status", "--store", &url, "api", &on_a],
    ] {
        let t = Instant::now();
        let out = output(cmd(&args), LIMIT).await;
        assert_eq!(
            out.code,
            Some(0),
            "{args:?}: {}\n{}",
            out.stdout,
            out.stderr
        );
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{args:?}: {:?}",
            t.elapsed()
        );
    }
    limiter.close().await.expect("close");
}
