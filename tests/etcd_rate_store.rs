//! What only the etcd rate-limit store does, driven through the `RateStore` trait on a real
//! etcd: one request per call (a conflict answered in the same request), a batch in one Txn
//! within etcd's operation limit, keys under their exact bytes, idle keys deleted by their
//! writer many per request and by a slow scan when their writer died, refusals, a closed
//! backend. What every store does is `clusterlimit::testing::rate_store_cases`, run on etcd by
//! `tests/contract.rs` (`etcd_rate::store_*`).

use crate::support;

use clusterlimit::backend::etcd::{EtcdBackend, EtcdConfig};
use clusterlimit::backend::{
    Backend, Current, KeyOutcome, KeyWrite, RateStore, Versioned, WriteOutcome,
};
use clusterlimit::{Error, RequestStats};
use etcd_client::{Permission, PermissionType};
use futures::stream::{self, StreamExt};
use std::collections::HashSet;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use support::EtcdCluster;

const PREFIX: &str = "rates";

async fn backend_with(cluster: &EtcdCluster, session_ttl: Duration) -> EtcdBackend {
    EtcdBackend::connect(
        EtcdConfig::new(cluster.endpoints(), PREFIX)
            .session_ttl(session_ttl)
            .request_timeout(Duration::from_secs(2)),
    )
    .await
    .expect("connect to etcd")
}

async fn backend(cluster: &EtcdCluster) -> EtcdBackend {
    backend_with(cluster, Duration::from_secs(10)).await
}

fn store(b: &EtcdBackend) -> &dyn RateStore {
    b.rate_store().expect("etcd keeps rate limits")
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

const SEC: u64 = 1_000_000_000;

fn write(limit: &str, qv: u64, key: &str, expected: Option<u64>, value: &str) -> KeyWrite {
    KeyWrite {
        limit: limit.into(),
        quota_version: qv,
        key: key.into(),
        expected,
        value: value.as_bytes().to_vec(),
        expires_at: unix_now() + 60 * SEC,
    }
}

fn written(outcome: WriteOutcome) -> Vec<u64> {
    match outcome {
        WriteOutcome::Written(v) => v,
        other => panic!("expected Written, got {other:?}"),
    }
}

/// A write that applied: `Written`, or, when the store resent a request whose reply was lost
/// (a loaded machine), the `Conflict` that shows our own value in place, which is how the
/// library recognises its own write.
fn applied(outcome: WriteOutcome, w: &KeyWrite) {
    match outcome {
        WriteOutcome::Written(_) => {}
        WriteOutcome::Conflict(c) if c[0].key.as_ref().is_some_and(|k| k.value == w.value) => {}
        other => panic!("expected our write in place, got {other:?}"),
    }
}

fn conflict(outcome: WriteOutcome) -> Vec<Current> {
    match outcome {
        WriteOutcome::Conflict(c) => c,
        other => panic!("expected Conflict, got {other:?}"),
    }
}

fn v(value: &str, version: u64) -> Versioned {
    Versioned {
        value: value.as_bytes().to_vec(),
        version,
    }
}

/// Requests sent since `before`, without the session's keepalives (not rate-limit requests).
fn cost(b: &EtcdBackend, before: &RequestStats) -> RequestStats {
    let mut c = b.stats().since(before);
    c.lease = 0;
    c
}

/// What each call costs on etcd: creating a limit, a read, a write and a conflict are one
/// request each (a conflict learns the current state from the Txn's else branch); an empty
/// batch sends nothing. (What the calls mean is `clusterlimit::testing::rate_store_cases`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_call_is_one_request_and_a_conflict_too() {
    let cluster = EtcdCluster::single();
    let b = backend(&cluster).await;
    let s = store(&b);
    let before = b.stats();
    let q = s.ensure_limit("api", Some(b"q")).await.unwrap();
    assert_eq!(cost(&b, &before).txn, 1, "create-if-absent is one Txn");

    let before = b.stats();
    assert_eq!(s.read_key("api", "k").await.unwrap().key, None);
    let c = cost(&b, &before);
    assert_eq!((c.range, c.total()), (1, 1), "a read is one request: {c:?}");

    let before = b.stats();
    let v1 = written(
        s.write_keys(&[write("api", q.version, "k", None, "s1")])
            .await
            .unwrap(),
    )[0];
    let c = cost(&b, &before);
    assert_eq!((c.txn, c.total()), (1, 1), "a write is one Txn: {c:?}");

    for expected in [None, Some(v1 - 1)] {
        let before = b.stats();
        let found = conflict(
            s.write_keys(&[write("api", q.version, "k", expected, "lost")])
                .await
                .unwrap(),
        );
        let c = cost(&b, &before);
        assert_eq!(
            (c.txn, c.total()),
            (1, 1),
            "a conflict is one request: {c:?}"
        );
        assert_eq!(found[0].key, Some(v("s1", v1)));
    }

    let before = b.stats();
    assert_eq!(
        s.write_keys(&[]).await.unwrap(),
        WriteOutcome::Written(vec![])
    );
    assert_eq!(cost(&b, &before).total(), 0);
}

/// A batch is one Txn whatever its outcome, all its writes at one revision, within etcd's
/// operation limit (checked before sending).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_is_one_txn_within_etcds_operation_limit() {
    let cluster = EtcdCluster::single();
    let b = backend(&cluster).await;
    let s = store(&b);
    let qa = s.ensure_limit("a", Some(b"qa")).await.unwrap().version;
    let qb = s.ensure_limit("b", Some(b"qb")).await.unwrap().version;
    let va = written(
        s.write_keys(&[write("a", qa, "x", None, "a0")])
            .await
            .unwrap(),
    )[0];
    let batch = |x: u64| {
        [
            write("b", qb, "y", None, "b1"),
            write("a", qa, "x", Some(x), "a1"),
            write("a", qa, "z", None, "z1"),
        ]
    };
    let before = b.stats();
    conflict(s.write_keys(&batch(va - 1)).await.unwrap());
    assert_eq!(cost(&b, &before).total(), 1, "a failed batch");
    let before = b.stats();
    let vs = written(s.write_keys(&batch(va)).await.unwrap());
    assert_eq!(cost(&b, &before).total(), 1, "an applied batch");
    assert!(
        vs.iter().all(|&r| r == vs[0] && r > va),
        "one revision: {vs:?}"
    );

    // etcd's limit is 128 operations per list of a Txn: 127 writes + 1 quota fit ...
    let many = |n: usize| -> Vec<KeyWrite> {
        (0..n)
            .map(|i| write("a", qa, &format!("many-{i}"), None, "m"))
            .collect()
    };
    assert_eq!(written(s.write_keys(&many(127)).await.unwrap()).len(), 127);
    // ... one more is refused before sending, naming the limit.
    let before = b.stats();
    match s.write_keys(&many(128)).await {
        Err(Error::InvalidArgument(msg)) => assert!(msg.contains("128"), "{msg}"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    assert_eq!(cost(&b, &before).total(), 0);
    assert_eq!(s.read_key("a", "many-127").await.unwrap().key, None);
}

/// Each key is one etcd key under the limit's prefix, named by its exact bytes (no escaping),
/// and a delete is one request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_stored_under_their_exact_bytes() {
    let cluster = EtcdCluster::single();
    let b = backend(&cluster).await;
    let s = store(&b);
    let q = s.ensure_limit("api", Some(b"q")).await.unwrap().version;
    let qo = s.ensure_limit("api-2", Some(b"q")).await.unwrap().version;
    let long_utf8 = "é".repeat(256); // 512 bytes
    let keys = [
        "a/b",
        "/",
        "../x",
        "GET /v1/users",
        "ünïcødé ✓ 日本",
        &long_utf8,
    ];
    for key in keys {
        written(
            s.write_keys(&[write("api", q, key, None, "v")])
                .await
                .unwrap(),
        );
    }
    written(
        s.write_keys(&[write("api-2", qo, "a/b", None, "other")])
            .await
            .unwrap(),
    );
    let stored = support::etcd::list_entries(&cluster.endpoints(), &format!("{PREFIX}/rk/api/"))
        .await
        .into_iter()
        .map(|(k, _)| k)
        .collect::<HashSet<_>>();
    let expected = keys
        .iter()
        .map(|k| format!("{PREFIX}/rk/api/{k}"))
        .collect::<HashSet<_>>();
    assert_eq!(stored, expected);

    let before = b.stats();
    s.delete_key("api", "a/b").await.unwrap();
    assert_eq!(cost(&b, &before).delete, 1);
    assert_eq!(
        support::count_keys(&cluster.endpoints(), &format!("{PREFIX}/rk/api/")).await,
        keys.len() as i64 - 1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_keys_are_deleted_by_their_writer_many_per_request() {
    const KEYS: usize = 10_000;
    const CONCURRENCY: usize = 32;
    const HORIZON: u64 = 2 * SEC;
    let cluster = EtcdCluster::single();
    // A long session TTL: no keepalive during the test, so every Lease counted is a grant.
    let b = backend_with(&cluster, Duration::from_secs(600)).await;
    let s = store(&b);
    let q = s.ensure_limit("idle", Some(b"q")).await.unwrap().version;
    let ql = s.ensure_limit("long", Some(b"q")).await.unwrap().version;

    // A few keys that must outlive the whole test.
    let long_until = unix_now() + 120 * SEC;
    for i in 0..5 {
        let mut w = write("long", ql, &format!("long-{i}"), None, "l");
        w.expires_at = long_until;
        applied(s.write_keys(std::slice::from_ref(&w)).await.unwrap(), &w);
    }

    let before = b.stats();
    let started = Instant::now();
    let expiries: Vec<u64> = stream::iter(0..KEYS)
        .map(|i| {
            let mut w = write("idle", q, &format!("user-{i}"), None, "once");
            w.expires_at = unix_now() + HORIZON;
            async move {
                let at = w.expires_at;
                applied(s.write_keys(std::slice::from_ref(&w)).await.unwrap(), &w);
                at
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    let writing = started.elapsed();
    let c = b.stats().since(&before);
    let last_expiry = *expiries.iter().max().unwrap();
    println!(
        "{KEYS} first-touch writes in {writing:?}: {} Txn, {} deletes, {} other requests",
        c.txn,
        c.delete,
        c.total() - c.txn - c.delete,
    );
    assert_eq!(c.txn, KEYS as u64, "one Txn per write");
    assert_eq!(c.lease, 0, "no lease: {c:?}");
    let before_sweep = b.stats();

    // Polled until all but 1% are gone, within the sweep's margin (1 s past the expiry) plus
    // its 1 s tick and a margin for a loaded machine; at every poll, nothing is gone before
    // its expiry (a listing shows etcd at some instant before it returned).
    let prefix = format!("{PREFIX}/rk/idle/");
    let vanish_by = Duration::from_secs(15);
    let limit = KEYS / 100;
    let wait_from = Instant::now();
    let mut polls = 0;
    let mut below_limit = None;
    // Per key present at the first poll: the first poll that found it gone.
    let mut gone_at: Vec<Option<u64>> = vec![None; KEYS];
    let mut watched = vec![false; KEYS];
    loop {
        let present: HashSet<String> = support::etcd::list_entries(&cluster.endpoints(), &prefix)
            .await
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        let listed_by = unix_now();
        polls += 1;
        for i in 0..KEYS {
            let here = present.contains(&format!("{prefix}user-{i}"));
            if polls == 1 {
                watched[i] = here;
            } else if watched[i] && !here && gone_at[i].is_none() {
                gone_at[i] = Some(listed_by);
            }
        }
        let early: Vec<usize> = (0..KEYS)
            .filter(|&i| expiries[i] > listed_by)
            .filter(|i| !present.contains(&format!("{prefix}user-{i}")))
            .collect();
        assert!(early.is_empty(), "deleted before their expiry: {early:?}");
        let since = Duration::from_nanos(listed_by.saturating_sub(last_expiry));
        let left = present.len();
        if listed_by > last_expiry && left <= limit && below_limit.is_none() {
            println!("{left} of {KEYS} idle keys left {since:?} after the last expiry");
            below_limit = Some(since);
        }
        if left == 0 {
            println!("all gone {since:?} after the last expiry ({polls} polls)");
            break;
        }
        if since >= vanish_by {
            assert!(
                below_limit.is_some(),
                "{left} of {KEYS} idle keys left {since:?} after the last expiry"
            );
            println!("{left} keys still left {since:?} after the last expiry");
            break;
        }
        assert!(
            wait_from.elapsed() < Duration::from_secs(40),
            "bounded wait"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The deletes came many keys per request: 127 per Txn, plus a short Txn per round (a
    // round takes what is due, at most one per GATHER = 250 ms).
    let swept = b.stats().since(&before_sweep);
    println!(
        "sweeping {KEYS} keys took {} delete requests, {} requests in all",
        swept.delete + c.delete,
        swept.total()
    );
    let rounds = (writing.as_secs() + 2) * 4;
    let most = (KEYS as u64).div_ceil(127) + rounds;
    assert!(
        swept.delete + c.delete <= most,
        "{} delete requests for {KEYS} keys (at most {most})",
        swept.delete + c.delete
    );

    // Each key seen going vanished within the bound (margin 1 s + the sweep's 1 s tick) plus
    // the poll interval and a margin for a loaded machine.
    let lateness = (0..KEYS)
        .filter_map(|i| gone_at[i].map(|t| t.saturating_sub(expiries[i])))
        .max()
        .unwrap_or(0);
    let seen = gone_at.iter().flatten().count();
    println!(
        "{seen} keys seen vanishing, the latest {:?} after its expiry",
        Duration::from_nanos(lateness)
    );
    assert!(
        lateness < 8 * SEC,
        "a key vanished {lateness} ns after its expiry"
    );

    // The long-lived keys are all still there.
    for i in 0..5 {
        let key = format!("long-{i}");
        assert!(
            s.read_key("long", &key).await.unwrap().key.is_some(),
            "{key} vanished before its expiry"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_of_a_writer_that_died_are_found_by_the_slow_scan() {
    const KEYS: usize = 1_000;
    let cluster = EtcdCluster::single();
    let prefix = format!("{PREFIX}/rk/gone/");
    // A writer that leaves: its keys expire 1 s on, and it is gone before its sweep.
    let dead = backend(&cluster).await;
    let q = store(&dead)
        .ensure_limit("gone", Some(b"q"))
        .await
        .unwrap()
        .version;
    let expires_at = unix_now() + SEC;
    let writes: Vec<KeyWrite> = (0..KEYS)
        .map(|i| KeyWrite {
            expires_at,
            ..write("gone", q, &format!("k{i}"), None, "x")
        })
        .collect();
    for chunk in writes.chunks(100) {
        let done = store(&dead).write_each(chunk).await;
        assert!(done.iter().all(Result::is_ok), "writes applied");
    }
    dead.shutdown();
    assert_eq!(
        support::count_keys(&cluster.endpoints(), &prefix).await,
        KEYS as i64
    );

    // Another process, started once those keys are past the scan's margin minus its first
    // delay, writes one key: its first scan, FIRST_SCAN later, deletes them.
    let margin = Duration::from_secs(10); // scan.rs SCAN_MARGIN
    let first_scan = Duration::from_secs(5); // scan.rs FIRST_SCAN
    let wait = Duration::from_nanos(expires_at.saturating_sub(unix_now())) + margin;
    // (A second more: a scan at the very edge of the margin would leave them for 5 minutes.)
    tokio::time::sleep(wait.saturating_sub(first_scan) + Duration::from_secs(1)).await;
    let live = backend(&cluster).await;
    let s = store(&live);
    let ql = s.ensure_limit("live", Some(b"q")).await.unwrap().version;
    written(
        s.write_keys(&[write("live", ql, "keep", None, "1")])
            .await
            .unwrap(),
    );
    let started = Instant::now();
    let mut left = KEYS as i64;
    while left > 0 && started.elapsed() < first_scan + Duration::from_secs(15) {
        tokio::time::sleep(Duration::from_millis(250)).await;
        left = support::count_keys(&cluster.endpoints(), &prefix).await;
    }
    println!(
        "the scan deleted {} of {KEYS} keys of a dead writer {:?} after the new process's first write",
        KEYS as i64 - left,
        started.elapsed()
    );
    assert_eq!(left, 0, "keys of a dead writer left after its scan");
    assert!(
        s.read_key("live", "keep").await.unwrap().key.is_some(),
        "an unexpired key stays"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_on_a_closed_backend_or_a_dead_server_fail_promptly() {
    let mut cluster = EtcdCluster::single();
    let b = backend(&cluster).await;
    let s = store(&b);
    let q = s.ensure_limit("api", Some(b"q")).await.unwrap().version;
    written(
        s.write_keys(&[write("api", q, "k", None, "s")])
            .await
            .unwrap(),
    );
    b.close().await.unwrap();
    let started = Instant::now();
    let results = [
        s.ensure_limit("api", None).await.err(),
        s.put_limit("api", b"q").await.err(),
        s.limits().await.err(),
        s.read_key("api", "k").await.err(),
        s.write_keys(&[write("api", q, "k2", None, "s")])
            .await
            .err(),
        s.delete_key("api", "k").await.err(),
    ];
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    for r in results {
        assert!(matches!(r, Some(Error::Closed)), "{r:?}");
    }

    // A stopped server: every call fails within its bound (2 × the request timeout), none hangs.
    let b = backend(&cluster).await;
    let s = store(&b);
    cluster.kill(0);
    let bound = Duration::from_secs(5);
    let started = Instant::now();
    let r = tokio::time::timeout(bound, s.read_key("api", "k")).await;
    assert!(matches!(r, Ok(Err(_))), "{r:?}");
    let r = tokio::time::timeout(bound, s.write_keys(&[write("api", q, "k3", None, "s")])).await;
    assert!(matches!(r, Ok(Err(_))), "{r:?}");
    println!(
        "calls on a dead server failed after {:?}",
        started.elapsed()
    );
}

/// Adds root, `reader` (read only on `rates/`) and `stranger` (readwrite on `other/` only),
/// then enables auth.
async fn enable_auth(cluster: &EtcdCluster) {
    let mut c = support::connect(&cluster.endpoints()).await;
    c.user_add("root", "root-Pw-1", None).await.unwrap();
    c.role_add("root").await.unwrap();
    c.user_grant_role("root", "root").await.unwrap();
    for (user, role, prefix, kind) in [
        ("reader", "rates-ro", "rates/", PermissionType::Read),
        ("stranger", "other-rw", "other/", PermissionType::Readwrite),
    ] {
        c.role_add(role).await.unwrap();
        let perm = match kind {
            PermissionType::Read => Permission::read(prefix),
            _ => Permission::read_write(prefix),
        }
        .with_prefix();
        c.role_grant_permission(role, perm).await.unwrap();
        c.user_add(user, "user-Pw-1", None).await.unwrap();
        c.user_grant_role(user, role).await.unwrap();
    }
    c.auth_enable().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_named_and_not_retried() {
    let cluster = EtcdCluster::single();
    let q = {
        let b = backend(&cluster).await;
        let s = store(&b);
        let q = s.ensure_limit("api", Some(b"q")).await.unwrap().version;
        written(
            s.write_keys(&[write("api", q, "k", None, "s")])
                .await
                .unwrap(),
        );
        b.close().await.unwrap();
        q
    };
    enable_auth(&cluster).await;
    let dir = tempfile::tempdir().unwrap();
    let password = dir.path().join("pw");
    std::fs::write(&password, "user-Pw-1\n").unwrap();
    let as_user = |name: &str| {
        EtcdConfig::new(cluster.endpoints(), PREFIX)
            .session_ttl(Duration::from_secs(600))
            .request_timeout(Duration::from_secs(2))
            .user(Some(clusterlimit::EtcdUser::new(
                name,
                Some(password.clone()),
            )))
    };
    let denied = |r: &clusterlimit::Result<()>, what: &str| {
        let text = match r {
            Err(e) => e.to_string(),
            Ok(()) => panic!("{what}: allowed"),
        };
        assert!(
            text.contains("permission denied on prefix \"rates\""),
            "{what}: {text}"
        );
    };

    // Read-only: reads work, every write is refused at once, each with one request.
    let reader = EtcdBackend::connect(as_user("reader")).await.unwrap();
    let s = store(&reader);
    assert!(s.read_key("api", "k").await.unwrap().key.is_some());
    let started = Instant::now();
    let before = reader.stats();
    let r = s.write_keys(&[write("api", q, "k2", None, "s")]).await;
    denied(&r.map(|_| ()), "write_keys");
    let r = s.put_limit("api", b"q2").await;
    denied(&r.map(|_| ()), "put_limit");
    denied(&s.delete_key("api", "k").await, "delete_key");
    let c = cost(&reader, &before);
    assert_eq!((c.txn, c.put, c.delete), (1, 1, 1), "not retried: {c:?}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );

    // No rights on the prefix at all: a read is refused too.
    let stranger = EtcdBackend::connect(as_user("stranger")).await.unwrap();
    let before = stranger.stats();
    denied(
        &store(&stranger).read_key("api", "k").await.map(|_| ()),
        "read_key",
    );
    denied(&store(&stranger).limits().await.map(|_| ()), "limits");
    assert_eq!(cost(&stranger, &before).range, 2, "not retried");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn independent_writes_fill_one_txn_up_to_etcds_operation_limit() {
    let cluster = EtcdCluster::single();
    let b = backend(&cluster).await;
    let s = store(&b);
    let q = s.ensure_limit("wide", Some(b"q")).await.unwrap().version;
    let batch = |n: usize, tag: &str| -> Vec<KeyWrite> {
        (0..n)
            .map(|i| write("wide", q, &format!("{tag}-{i}"), None, "1"))
            .collect()
    };
    // One group (one limit, one quota version): 128 less the outer level, the group's own
    // ops (writes + the quota get) and one for each nested write's compare.
    let before = b.stats();
    let got = s.write_each(&batch(125, "fits")).await;
    assert_eq!(b.stats().since(&before).txn, 1, "one Txn carries them all");
    assert!(
        got.iter().all(|o| matches!(o, Ok(KeyOutcome::Written(_)))),
        "125 writes in one Txn: {:?}",
        got.iter()
            .find(|o| !matches!(o, Ok(KeyOutcome::Written(_))))
    );
    let refused = s.write_each(&batch(126, "over")).await;
    match &refused[0] {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("126"), "{m}"),
        other => panic!("126 writes: expected a refusal naming the count, got {other:?}"),
    }
    assert_eq!(s.read_key("wide", "over-0").await.unwrap().key, None);
}
