//! Hot reload of the RLS rules (`serve --rls-config`), on the real binary over memory://:
//! a change under traffic (no call fails, an unchanged rule counts on exactly, a changed one's
//! new limit within ~2 s with its keys' counts carried over), an invalid file (old rules kept,
//! file:line on /healthz, /readyz and in the metrics), SIGHUP, a file replaced by rename, a
//! ConfigMap's `..data` swap, and a directory gaining a file.

use crate::binary;
use crate::support;

use binary::{cmd, eventually, signal, within};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::EtcdCluster;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;
use tonic::transport::Channel;

type Client = RateLimitServiceClient<Channel>;

/// A running `serve` with the RLS on; SIGKILLed when dropped.
struct Sidecar {
    child: Child,
    http: String,
    grpc: String,
}

impl Sidecar {
    /// `serve --store memory://NAME --listen 127.0.0.1:0 --grpc-listen 127.0.0.1:0
    /// --rls-config CONFIG`, reading both addresses.
    async fn start(name: &str, config: &Path) -> Sidecar {
        Sidecar::on(&format!("memory://{name}"), config).await
    }

    /// The same on the store at `url`.
    async fn on(url: &str, config: &Path) -> Sidecar {
        let mut c = cmd(&[
            "serve",
            "--store",
            url,
            "--listen",
            "127.0.0.1:0",
            "--grpc-listen",
            "127.0.0.1:0",
            "--rls-config",
            config.to_str().unwrap(),
        ]);
        c.stdout(Stdio::piped()).stderr(Stdio::inherit());
        let mut child = c.spawn().expect("spawn clusterlimit serve");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let (http, grpc) = within(
            "serve to print its addresses",
            Duration::from_secs(30),
            async {
                let (mut http, mut grpc) = (None, None);
                for _ in 0..20 {
                    let line = lines
                        .next_line()
                        .await
                        .unwrap()
                        .expect("serve exited before listening");
                    if let Some(rest) = line.split("listening on http://").nth(1) {
                        http = Some(format!(
                            "http://{}",
                            rest.split_whitespace().next().unwrap()
                        ));
                    }
                    if let Some(rest) =
                        line.strip_prefix("clusterlimit serve: rls listening on grpc://")
                    {
                        grpc = Some(format!("http://{rest}"));
                    }
                    if let (Some(h), Some(g)) = (&http, &grpc) {
                        return (h.clone(), g.clone());
                    }
                }
                panic!("serve printed no rls address")
            },
        )
        .await;
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Sidecar { child, http, grpc }
    }

    async fn client(&self) -> Client {
        RateLimitServiceClient::connect(self.grpc.clone())
            .await
            .unwrap()
    }

    async fn get(&self, path: &str) -> (u16, String) {
        let r = within(
            path,
            Duration::from_secs(10),
            reqwest::get(format!("{}{path}", self.http)),
        )
        .await
        .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }

    /// The value of the metric line starting with `series` (name and labels), if any.
    async fn metric(&self, series: &str) -> Option<f64> {
        let (_, text) = self.get("/metrics").await;
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .map(|v| v.trim().parse().unwrap())
    }

    /// Waits until the generation in force is `n` (each reload put in force adds one).
    async fn generation(&self, n: u32) {
        self.generation_within(n, Duration::from_secs(5)).await;
    }

    async fn generation_within(&self, n: u32, limit: Duration) {
        let want = format!("rls_config: generation {n} in force");
        eventually(&want, limit, || async {
            self.get("/healthz").await.1.contains(&want).then_some(())
        })
        .await;
    }
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// `key=value` in `domain`, one hit.
fn one(domain: &str, key: &str, value: &str) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_string(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: key.to_string(),
                value: value.to_string(),
            }],
            ..Default::default()
        }],
        hits_addend: 0,
    }
}

/// The one descriptor status of a call (which must not fail).
async fn call(c: &mut Client, r: RateLimitRequest) -> DescriptorStatus {
    let resp = within(
        "ShouldRateLimit",
        Duration::from_secs(10),
        c.should_rate_limit(r),
    )
    .await
    .expect("ShouldRateLimit failed")
    .into_inner();
    assert_eq!(resp.statuses.len(), 1, "{resp:?}");
    resp.statuses[0].clone()
}

/// (code, remaining, requests_per_unit) of a status with a limit.
fn seen(s: &DescriptorStatus) -> (Code, u32, u32) {
    let l = s.current_limit.as_ref().expect("a current_limit");
    (
        Code::try_from(s.code).unwrap(),
        s.limit_remaining,
        l.requests_per_unit,
    )
}

const STEADY: u32 = 100_000;

fn traffic_rules(moving: u32, fresh: bool) -> String {
    let mut y = format!(
        "domain: web\n\
         descriptors:\n  \
           - key: steady\n    \
             rate_limit: {{unit: day, requests_per_unit: {STEADY}}}\n  \
           - key: moving\n    \
             rate_limit: {{unit: day, requests_per_unit: {moving}}}\n"
    );
    if fresh {
        y.push_str("  - key: fresh\n    rate_limit: {unit: day, requests_per_unit: 1}\n");
    }
    y
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_change_under_traffic_fails_no_call_and_keeps_unchanged_counts() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "web.yaml", &traffic_rules(1000, false));
    let sc = Sidecar::start("reload-traffic", &cfg).await;

    // Clients on the unchanged rule, each on its own key: every answer must be exact.
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for i in 0..3 {
        let mut c = sc.client().await;
        let stop = stop.clone();
        clients.push(tokio::spawn(async move {
            let began = Instant::now();
            let mut n = 0u32;
            let mut last = began;
            // Bounded in count and time; the test stops it well before either.
            while !stop.load(Ordering::Relaxed)
                && n < 2000
                && began.elapsed() < Duration::from_secs(30)
            {
                let s = call(&mut c, one("web", "steady", &format!("k{i}"))).await;
                n += 1;
                assert_eq!(
                    seen(&s),
                    (Code::Ok, STEADY - n, STEADY),
                    "client {i}, call {n}"
                );
                last = Instant::now();
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            (n, last)
        }));
    }

    let mut c = sc.client().await;
    for n in 1..=20 {
        let s = call(&mut c, one("web", "moving", "m")).await;
        assert_eq!(seen(&s), (Code::Ok, 1000 - n, 1000));
    }
    // Rewritten in place, with a rule more.
    std::fs::write(&cfg, traffic_rules(5, true)).unwrap();
    let written = Instant::now();
    let mut hits = 20;
    let mut between = false;
    let took = loop {
        let s = call(&mut c, one("web", "moving", "m")).await;
        hits += 1;
        let (code, remaining, rpu) = seen(&s);
        if rpu == 5 {
            // The key's count carried over: 21 hits are far over 5.
            assert_eq!((code, remaining), (Code::OverLimit, 0), "{s:?}");
            break written.elapsed();
        }
        if code == Code::OverLimit && rpu == 1000 {
            // The one answer that may fall between the quota's change in the store (before
            // the swap) and the swap: the old rule, the new quota.
            hits -= 1;
            assert!(
                !between,
                "two answers between the quota change and the swap: {s:?}"
            );
            between = true;
        } else {
            assert_eq!(
                (code, remaining, rpu),
                (Code::Ok, 1000 - hits, 1000),
                "{s:?}"
            );
        }
        assert!(
            written.elapsed() < Duration::from_secs(5),
            "the new limit never came"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    println!("the new limit answered {took:?} after the write");
    assert!(
        took < Duration::from_millis(2500),
        "the new limit took {took:?}"
    );
    let swapped = Instant::now();
    // It stays.
    for _ in 0..5 {
        let s = call(&mut c, one("web", "moving", "m")).await;
        assert_eq!(seen(&s), (Code::OverLimit, 0, 5));
    }
    // The new rule is counted from its first hit.
    assert_eq!(
        seen(&call(&mut c, one("web", "fresh", "f")).await),
        (Code::Ok, 0, 1)
    );
    assert_eq!(
        seen(&call(&mut c, one("web", "fresh", "f")).await),
        (Code::OverLimit, 0, 1)
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    for (i, t) in clients.into_iter().enumerate() {
        let (n, last) = within("a client to stop", Duration::from_secs(10), t)
            .await
            .unwrap();
        assert!(n >= 10, "client {i} made only {n} calls");
        assert!(last > swapped, "client {i} made no call after the reload");
    }
    assert_eq!(
        sc.metric("clusterlimit_rls_config_reloads_total{result=\"ok\"}")
            .await,
        Some(1.0)
    );
    assert_eq!(
        sc.metric("clusterlimit_rls_config_generation").await,
        Some(2.0)
    );
    assert_eq!(
        sc.metric("clusterlimit_rls_config_reloads_total{result=\"invalid\"}")
            .await,
        None
    );
    let (_, health) = sc.get("/healthz").await;
    assert!(
        health.contains("rls_config: generation 2 in force"),
        "{health}"
    );
    assert!(health.contains("(domains 1, rules 3)"), "{health}");
    assert!(
        health.contains("rls_config: last reload ok at "),
        "{health}"
    );
}

const USER3: &str = "\
domain: web
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 3}
";

#[tokio::test]
async fn an_invalid_file_keeps_the_old_rules_and_says_where() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "web.yaml", USER3);
    let sc = Sidecar::start("reload-invalid", &cfg).await;
    let mut c = sc.client().await;
    assert_eq!(
        seen(&call(&mut c, one("web", "user", "a")).await),
        (Code::Ok, 2, 3)
    );

    // Line 4: a unit that does not exist.
    std::fs::write(
        &cfg,
        "domain: web\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight, requests_per_unit: 9}\n",
    )
    .unwrap();
    let place = format!("{}:4: ", cfg.display());
    let health = eventually(
        "/healthz to report the invalid file",
        Duration::from_secs(5),
        || async {
            let (_, h) = sc.get("/healthz").await;
            h.contains("last reload invalid").then_some(h)
        },
    )
    .await;
    assert!(health.contains(&place), "{health}");
    assert!(health.contains("fortnight"), "{health}");
    assert!(health.contains("generation 1 stays in force"), "{health}");
    let (code, ready) = sc.get("/readyz").await;
    assert_eq!(code, 200, "{ready}");
    assert!(
        ready.starts_with("ready\n") && ready.contains(&place),
        "{ready}"
    );
    let series = format!(
        "clusterlimit_rls_config_error{{file=\"{}\",line=\"4\"}}",
        cfg.display()
    );
    assert_eq!(sc.metric(&series).await, Some(1.0));
    assert_eq!(
        sc.metric("clusterlimit_rls_config_reloads_total{result=\"invalid\"}")
            .await,
        Some(1.0)
    );
    assert_eq!(
        sc.metric("clusterlimit_rls_config_generation").await,
        Some(1.0)
    );
    // The old rule still counts.
    assert_eq!(
        seen(&call(&mut c, one("web", "user", "a")).await),
        (Code::Ok, 1, 3)
    );

    // Fixed: the new limit, the key's two hits carried over, the error gone.
    std::fs::write(
        &cfg,
        USER3.replace("requests_per_unit: 3", "requests_per_unit: 10"),
    )
    .unwrap();
    sc.generation(2).await;
    assert_eq!(
        seen(&call(&mut c, one("web", "user", "a")).await),
        (Code::Ok, 7, 10)
    );
    let (_, health) = sc.get("/healthz").await;
    assert!(health.contains("last reload ok"), "{health}");
    assert_eq!(sc.metric(&series).await, None);
    assert_eq!(
        sc.metric("clusterlimit_rls_config_reloads_total{result=\"ok\"}")
            .await,
        Some(1.0)
    );

    // A store-down policy the sidecar did not start with needs a restart: refused, with the
    // file named, and the rules in force stay.
    std::fs::write(&cfg, format!("store_down: fail_closed\n{USER3}")).unwrap();
    let health = eventually("the new policy refused", Duration::from_secs(5), || async {
        let (_, h) = sc.get("/healthz").await;
        h.contains("last reload invalid").then_some(h)
    })
    .await;
    assert!(
        health.contains(&format!(
            "{}: domain \"web\" sets store_down fail_closed",
            cfg.display()
        )),
        "{health}"
    );
    assert!(health.contains("restart the sidecar"), "{health}");
    assert!(health.contains("generation 2 stays in force"), "{health}");
    let series = format!(
        "clusterlimit_rls_config_error{{file=\"{}\",line=\"\"}}",
        cfg.display()
    );
    assert_eq!(sc.metric(&series).await, Some(1.0));
    assert_eq!(
        seen(&call(&mut c, one("web", "user", "a")).await),
        (Code::Ok, 6, 10)
    );
}

#[tokio::test]
async fn sighup_reloads_and_counts_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "web.yaml", USER3);
    let sc = Sidecar::start("reload-sighup", &cfg).await;
    let mut c = sc.client().await;
    assert_eq!(
        seen(&call(&mut c, one("web", "user", "a")).await),
        (Code::Ok, 2, 3)
    );
    assert_eq!(
        seen(&call(&mut c, one("web", "user", "a")).await),
        (Code::Ok, 1, 3)
    );
    // Nothing changed on disk: only the signal reloads.
    signal(sc.child.id().unwrap(), "HUP");
    sc.generation(2).await;
    assert_eq!(
        sc.metric("clusterlimit_rls_config_reloads_total{result=\"ok\"}")
            .await,
        Some(1.0)
    );
    // Still running, and the unchanged rule counted on.
    assert_eq!(
        seen(&call(&mut c, one("web", "user", "a")).await),
        (Code::Ok, 0, 3)
    );
    assert_eq!(
        seen(&call(&mut c, one("web", "user", "a")).await),
        (Code::OverLimit, 0, 3)
    );
    signal(sc.child.id().unwrap(), "HUP");
    sc.generation(3).await;
    assert_eq!(
        seen(&call(&mut c, one("web", "user", "b")).await),
        (Code::Ok, 2, 3)
    );
}

#[tokio::test]
async fn a_file_replaced_by_rename_is_seen() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "web.yaml", USER3);
    let sc = Sidecar::start("reload-rename", &cfg).await;
    let mut c = sc.client().await;
    assert_eq!(
        seen(&call(&mut c, one("web", "user", "a")).await),
        (Code::Ok, 2, 3)
    );
    // As editors save: a new file renamed over the old one (a new inode).
    let tmp = write(
        dir.path(),
        ".web.yaml.swp",
        &USER3.replace("requests_per_unit: 3", "requests_per_unit: 4"),
    );
    std::fs::rename(&tmp, &cfg).unwrap();
    sc.generation(2).await;
    assert_eq!(
        seen(&call(&mut c, one("web", "user", "a")).await),
        (Code::Ok, 2, 4)
    );
}

#[tokio::test]
async fn a_configmap_swap_of_its_data_link_is_seen() {
    // A ConfigMap volume: web.yaml -> ..data/web.yaml, ..data -> ..v1; an update writes ..v2
    // and renames a new link over ..data.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("..v1")).unwrap();
    write(&d.join("..v1"), "web.yaml", USER3);
    std::os::unix::fs::symlink("..v1", d.join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/web.yaml", d.join("web.yaml")).unwrap();
    let sc = Sidecar::start("reload-configmap", d).await;
    let mut c = sc.client().await;
    assert_eq!(
        seen(&call(&mut c, one("web", "user", "a")).await),
        (Code::Ok, 2, 3)
    );
    std::fs::create_dir(d.join("..v2")).unwrap();
    write(
        &d.join("..v2"),
        "web.yaml",
        &USER3.replace("requests_per_unit: 3", "requests_per_unit: 6"),
    );
    std::os::unix::fs::symlink("..v2", d.join("..data_tmp")).unwrap();
    std::fs::rename(d.join("..data_tmp"), d.join("..data")).unwrap();
    sc.generation(2).await;
    assert_eq!(
        seen(&call(&mut c, one("web", "user", "a")).await),
        (Code::Ok, 4, 6)
    );
}

#[tokio::test]
async fn a_directory_gaining_a_file_is_seen() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "web.yaml", USER3);
    let sc = Sidecar::start("reload-dir", dir.path()).await;
    let mut c = sc.client().await;
    assert_eq!(
        seen(&call(&mut c, one("web", "user", "a")).await),
        (Code::Ok, 2, 3)
    );
    // No rule for the domain yet: OK without a limit.
    let s = call(&mut c, one("api", "route", "x")).await;
    assert_eq!(
        (Code::try_from(s.code).unwrap(), &s.current_limit),
        (Code::Ok, &None)
    );
    write(
        dir.path(),
        "api.yaml",
        "domain: api\ndescriptors:\n  - key: route\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
    );
    sc.generation(2).await;
    assert_eq!(
        seen(&call(&mut c, one("api", "route", "x")).await),
        (Code::Ok, 0, 1)
    );
    assert_eq!(
        seen(&call(&mut c, one("api", "route", "x")).await),
        (Code::OverLimit, 0, 1)
    );
    // The file already there counts on.
    assert_eq!(
        seen(&call(&mut c, one("web", "user", "a")).await),
        (Code::Ok, 1, 3)
    );
    let (_, health) = sc.get("/healthz").await;
    assert!(health.contains("(domains 2, rules 2)"), "{health}");
    // Removed again: the domain has no rule any more.
    std::fs::remove_file(dir.path().join("api.yaml")).unwrap();
    sc.generation(3).await;
    let s = call(&mut c, one("api", "route", "x")).await;
    assert_eq!(
        (Code::try_from(s.code).unwrap(), &s.current_limit),
        (Code::Ok, &None)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_failure_while_opening_keeps_the_old_rules_and_retries() {
    let mut cluster = EtcdCluster::single();
    let url = cluster.url("rls-reload-store");
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "web.yaml", USER3);
    let sc = Sidecar::on(&url, &cfg).await;
    let mut c = sc.client().await;
    assert_eq!(
        seen(&call(&mut c, one("web", "user", "a")).await),
        (Code::Ok, 2, 3)
    );

    // The store hangs while the new set (a quota changed, a rule more) is being opened.
    cluster.pause(0);
    std::fs::write(
        &cfg,
        format!(
            "{}  - key: route\n    rate_limit: {{unit: hour, requests_per_unit: 2}}\n",
            USER3.replace("requests_per_unit: 3", "requests_per_unit: 10")
        ),
    )
    .unwrap();
    let health = eventually("a store_error reload", Duration::from_secs(20), || async {
        let (_, h) = sc.get("/healthz").await;
        h.contains("last reload store_error").then_some(h)
    })
    .await;
    assert!(health.contains("generation 1 stays in force"), "{health}");
    let failed = sc
        .metric("clusterlimit_rls_config_reloads_total{result=\"store_error\"}")
        .await;
    assert!(failed >= Some(1.0), "{failed:?}");
    assert_eq!(
        sc.metric("clusterlimit_rls_config_generation").await,
        Some(1.0)
    );
    cluster.resume(0);

    // Tried again with no change to the file, and put in force once the store answers (the
    // retry waits 1 s, then 2 s …; a reconnect to the resumed etcd may take a few seconds).
    sc.generation_within(2, Duration::from_secs(30)).await;
    eventually("the new rules to count", Duration::from_secs(30), || {
        let mut c = c.clone();
        async move {
            let s = c.should_rate_limit(one("web", "route", "r")).await.ok()?;
            let s = s.into_inner().statuses.first()?.clone();
            (s.current_limit.is_some()).then_some(())
        }
    })
    .await;
    // The changed rule kept its key's hit.
    assert_eq!(
        seen(&call(&mut c, one("web", "user", "a")).await),
        (Code::Ok, 8, 10)
    );
}
