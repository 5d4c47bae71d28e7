//! `clusterlimit status` and `set-capacity` as real processes against real etcd.

use crate::binary;
use crate::support;

use binary::{cmd, eventually, output};
use clusterlimit::{AcquireOptions, Limiter};
use std::time::Duration;
use support::EtcdCluster;

const LIMIT: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_set_capacity() {
    let cluster = EtcdCluster::single();
    status_and_set_capacity_on(&cluster.url("status")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_set_capacity_on_redis() {
    let redis = tokio::task::spawn_blocking(support::redis::RedisServer::start)
        .await
        .unwrap();
    status_and_set_capacity_on(&redis.url("status")).await;
}

/// `status` (JSON, table) and `set-capacity` against the store at `url`.
async fn status_and_set_capacity_on(url: &str) {
    let url = url.to_string();

    let out = output(cmd(&["set-capacity", "--store", &url, "jobs", "3"]), LIMIT).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.contains("created"), "{}", out.stdout);

    let limiter = Limiter::connect(&url).await.unwrap();
    let sem = limiter.open_semaphore("jobs").await.unwrap();
    let permit = sem
        .acquire_with(AcquireOptions::new().permits(2).owner("tester/1"))
        .await
        .unwrap();
    limiter.semaphore("other", 1).await.unwrap();

    // JSON of one semaphore: an object with the holder row.
    let out = output(cmd(&["status", "--store", &url, "jobs", "--json"]), LIMIT).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["name"], "jobs");
    assert_eq!(v["capacity"], 3);
    assert_eq!(v["used"], 2);
    assert_eq!(v["waiting"], 0);
    let holder = &v["holders"][0];
    assert_eq!(holder["owner"], "tester/1");
    assert_eq!(holder["permits"], 2);
    assert_eq!(holder["fencing_token"], permit.fencing_token());
    assert!(holder["since_unix_ms"].as_u64().unwrap() > 1_600_000_000_000);

    // Without NAME: every semaphore, as an array.
    let out = output(cmd(&["status", "--store", &url, "--json"]), LIMIT).await;
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let names: Vec<_> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].clone())
        .collect();
    assert_eq!(names, ["jobs", "other"]);

    // The table: one line per semaphore, one row per holder.
    let mut c = cmd(&["status"]);
    c.env("CLUSTERLIMIT_STORE", &url);
    let out = output(c, LIMIT).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let table = out.stdout;
    assert!(
        table.contains("SEMAPHORE") && table.contains("HELD SINCE"),
        "{table}"
    );
    let jobs = table
        .lines()
        .find(|l| l.starts_with("jobs"))
        .expect("jobs row");
    assert_eq!(
        jobs.split_whitespace().collect::<Vec<_>>(),
        ["jobs", "3", "2", "0"]
    );
    let row = table
        .lines()
        .find(|l| l.contains("tester/1"))
        .expect("holder row");
    let cols: Vec<_> = row.split_whitespace().collect();
    assert_eq!(
        cols[..3],
        ["tester/1", "2", &permit.fencing_token().to_string()]
    );
    assert!(cols[3].ends_with('Z'), "held since is RFC 3339: {row}");

    // A request that waits is listed with its owner, in JSON and in the table.
    let waiter = {
        let sem = sem.clone();
        tokio::spawn(async move {
            sem.acquire_with(AcquireOptions::new().permits(2).owner("tester/2"))
                .await
        })
    };
    eventually("the waiter to queue", LIMIT, || async {
        (sem.status().await.unwrap().waiting == 1).then_some(())
    })
    .await;
    let out = output(cmd(&["status", "--store", &url, "jobs", "--json"]), LIMIT).await;
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["waiting"], 1, "{v}");
    assert_eq!(v["waiters"][0]["owner"], "tester/2", "{v}");
    assert_eq!(v["waiters"][0]["permits"], 2, "{v}");
    let out = output(cmd(&["status", "--store", &url, "jobs"]), LIMIT).await;
    assert!(out.stdout.contains("WAITER"), "{}", out.stdout);
    let row = out
        .stdout
        .lines()
        .find(|l| l.contains("tester/2"))
        .expect("waiter row");
    assert_eq!(row.split_whitespace().nth(1), Some("2"), "{row}");

    // set-capacity changes it for everyone.
    let out = output(cmd(&["set-capacity", "--store", &url, "jobs", "5"]), LIMIT).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(sem.status().await.unwrap().capacity, 5);
    // The capacity made room for the waiter.
    let granted = tokio::time::timeout(LIMIT, waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    granted.release().await.unwrap();

    // An absent semaphore is an error (exit 1), a bad URL a usage error.
    let out = output(cmd(&["status", "--store", &url, "absent"]), LIMIT).await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("absent"), "{}", out.stderr);
    let out = output(cmd(&["status", "--store", "etcd://"]), LIMIT).await;
    assert_eq!(out.code, Some(64), "{}", out.stderr);
    permit.release().await.unwrap();
}

#[tokio::test]
async fn unreachable_store_exits_69() {
    // A port that was free a moment ago: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("etcd://127.0.0.1:{port}/x");
    let out = output(cmd(&["status", "--store", &url]), LIMIT).await;
    assert_eq!(out.code, Some(69), "{}", out.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adaptive_semaphores_controller_seat_is_shown_under_it() {
    let cluster = EtcdCluster::single();
    let url = cluster.url("seats");
    let limiter = Limiter::connect(&url).await.unwrap();
    let config = clusterlimit::adaptive::Adaptive::aimd()
        .min(1)
        .max(10)
        .initial(4);
    let _db = limiter.adaptive_semaphore("db", config).await.unwrap();
    // A seat whose semaphore is absent stays an entry of its own.
    limiter.semaphore("lone.controller", 1).await.unwrap();
    let seat = limiter.open_semaphore("db.controller").await.unwrap();
    let controller = eventually("a controller in the seat", LIMIT, || async {
        seat.status().await.ok()?.holders.first().cloned()
    })
    .await;

    let out = output(cmd(&["status", "--store", &url, "--json"]), LIMIT).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let names: Vec<_> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].clone())
        .collect();
    assert_eq!(names, ["db", "lone.controller"], "{v}");
    assert_eq!(v[0]["capacity"], 4, "{v}");
    assert_eq!(
        v[0]["controller"]["holder"]["owner"], controller.owner,
        "{v}"
    );
    assert_eq!(v[0]["controller"]["waiting"], 0, "{v}");
    assert!(v[1].get("controller").is_none(), "{v}");

    let out = output(cmd(&["status", "--store", &url]), LIMIT).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(
        !lines.iter().any(|l| l.starts_with("db.controller")),
        "{}",
        out.stdout
    );
    let at = lines
        .iter()
        .position(|l| l.starts_with("db "))
        .expect("db row");
    let expected = format!(
        "  controller: held by {} (fencing token {})",
        controller.owner, controller.fencing_token
    );
    assert!(
        lines[at + 1..].contains(&expected.as_str()),
        "{}",
        out.stdout
    );
    assert!(
        lines.iter().any(|l| l.starts_with("lone.controller")),
        "{}",
        out.stdout
    );
}
