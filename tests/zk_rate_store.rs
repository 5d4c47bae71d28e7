//! What only the ZooKeeper `RateStore` does, driven directly on a real server: one `multi` per
//! batch and one multi-read per conflict (counted), `write_each` (many keys' writes in one
//! `multi`, a conflicting one taken out alone), a node per key and resets that keep it, the
//! sweeper and the scan on 10,000 keys, a closed backend, a partition, ACLs. What every store
//! does is `clusterlimit::testing::rate_store_cases`, run on ZooKeeper by `tests/contract.rs`
//! (`zk_rate::store_*`).

use crate::support;

use clusterlimit::backend::zookeeper::{ZkBackend, ZkConfig};
use clusterlimit::backend::{
    Backend, Current, KeyOutcome, KeyWrite, RateStore, Versioned, WriteOutcome,
};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use support::{count_children, eventually, zk_connect, FaultProxy, ZkCluster};

const SEC: u64 = 1_000_000_000;

async fn backend(zk: &ZkCluster, root: &str) -> ZkBackend {
    ZkBackend::connect(
        ZkConfig::new(vec![zk.connect_string()], root)
            .session_timeout(Duration::from_secs(4))
            .request_timeout(Duration::from_secs(2)),
    )
    .await
    .expect("connect")
}

fn store(b: &ZkBackend) -> &dyn RateStore {
    b.rate_store().expect("zk keeps rate limits")
}

fn unix_now() -> u64 {
    let d = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock");
    u64::try_from(d.as_nanos()).expect("fits")
}

fn write(limit: &str, qv: u64, key: &str, expected: Option<u64>, value: &str) -> KeyWrite {
    KeyWrite {
        limit: limit.into(),
        quota_version: qv,
        key: key.into(),
        expected,
        value: value.as_bytes().to_vec(),
        expires_at: unix_now() + 3600 * SEC,
    }
}

fn v(value: &str, version: u64) -> Option<Versioned> {
    Some(Versioned {
        value: value.as_bytes().to_vec(),
        version,
    })
}

/// What each call costs on ZooKeeper: a write or a batch is one `multi`, a read one
/// multi-read; a conflict is the failed `multi` and one multi-read for what the writes found;
/// an empty batch sends nothing. (What the calls mean is
/// `clusterlimit::testing::rate_store_cases`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_is_one_multi_and_a_conflict_one_read_more() {
    let zk = ZkCluster::single();
    let b = backend(&zk, "/rl-cas").await;
    let s = store(&b);
    s.ensure_limit("a", Some(b"qa")).await.unwrap();
    s.ensure_limit("g", Some(b"qg")).await.unwrap();

    let before = b.stats();
    let r = s
        .write_keys(&[write("a", 0, "k", None, "s0")])
        .await
        .unwrap();
    let cost = b.stats().since(&before);
    assert_eq!(r, WriteOutcome::Written(vec![0]));
    assert_eq!((cost.txn, cost.total()), (1, 1), "first write: {cost:?}");

    let before = b.stats();
    assert_eq!(s.read_key("a", "k").await.unwrap().key, v("s0", 0));
    let cost = b.stats().since(&before);
    assert_eq!((cost.range, cost.total()), (1, 1), "read_key: {cost:?}");

    let before = b.stats();
    let r = s
        .write_keys(&[write("a", 0, "k", Some(7), "lost")])
        .await
        .unwrap();
    let cost = b.stats().since(&before);
    assert!(matches!(r, WriteOutcome::Conflict(_)), "{r:?}");
    assert_eq!(
        (cost.txn, cost.range, cost.total()),
        (1, 1, 2),
        "conflict: {cost:?}"
    );

    // A batch over two limits: one multi applied, or one failed and one multi-read.
    let batch = |k: u64| {
        [
            write("a", 0, "k", Some(k), "a1"),
            write("a", 0, "u2", None, "b0"),
            write("g", 0, "all", None, "g0"),
        ]
    };
    let before = b.stats();
    let r = s.write_keys(&batch(7)).await.unwrap();
    let cost = b.stats().since(&before);
    assert!(matches!(r, WriteOutcome::Conflict(_)), "{r:?}");
    assert_eq!((cost.txn, cost.range, cost.total()), (1, 1, 2), "{cost:?}");
    let before = b.stats();
    let r = s.write_keys(&batch(0)).await.unwrap();
    let cost = b.stats().since(&before);
    assert_eq!(r, WriteOutcome::Written(vec![1, 0, 0]));
    assert_eq!((cost.txn, cost.total()), (1, 1), "{cost:?}");

    let before = b.stats();
    assert_eq!(
        s.write_keys(&[]).await.unwrap(),
        WriteOutcome::Written(vec![])
    );
    assert_eq!(b.stats().since(&before).total(), 0);
    b.close().await.unwrap();
}

/// Many keys' writes ready together go in one `multi`; a write whose condition fails is taken
/// out alone (a multi applies all or nothing), the others applied by the next multi, and what
/// the failed ones found is read in one multi-read: k conflicts cost k + 1 multis + 1 read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_each_carries_many_keys_in_one_multi() {
    const N: usize = 48;
    let zk = ZkCluster::single();
    let b = backend(&zk, "/rl-each").await;
    let s = store(&b);
    let qv = s.ensure_limit("a", Some(b"q")).await.unwrap().version;
    let qv_b = s.ensure_limit("b", Some(b"q")).await.unwrap().version;
    let first: Vec<KeyWrite> = (0..N)
        .map(|i| {
            let (limit, qv) = if i % 2 == 0 { ("a", qv) } else { ("b", qv_b) };
            write(limit, qv, &format!("k{i}"), None, &format!("{limit}/{i}"))
        })
        .collect();
    let before = b.stats();
    let got = s.write_each(&first).await;
    let cost = b.stats().since(&before);
    println!("write_each of {N} absent keys: {cost:?}");
    assert_eq!((cost.txn, cost.total()), (1, 1), "{cost:?}");
    let versions: Vec<u64> = got
        .iter()
        .map(|o| match o {
            Ok(KeyOutcome::Written(v)) => *v,
            other => panic!("an absent key's create: {other:?}"),
        })
        .collect();

    // Again, each against its version, three of them wrong: those three conflict alone.
    let wrong = [5, 17, 40];
    let again: Vec<KeyWrite> = first
        .iter()
        .zip(&versions)
        .enumerate()
        .map(|(i, (w, v))| KeyWrite {
            expected: Some(if wrong.contains(&i) { v + 7 } else { *v }),
            value: format!("again/{i}").into_bytes(),
            ..w.clone()
        })
        .collect();
    let before = b.stats();
    let got = s.write_each(&again).await;
    let cost = b.stats().since(&before);
    println!(
        "write_each of {N} writes, {} conflicting: {cost:?}",
        wrong.len()
    );
    assert_eq!(
        (cost.txn, cost.range),
        (wrong.len() as u64 + 1, 1),
        "{cost:?}"
    );
    for (i, o) in got.iter().enumerate() {
        match (wrong.contains(&i), o) {
            (true, Ok(KeyOutcome::Conflict(c))) => {
                assert_eq!(c.key.as_ref().map(|k| k.version), Some(versions[i]), "{i}");
                assert!(c.quota.is_some(), "{i}");
            }
            (false, Ok(KeyOutcome::Written(v))) => assert_eq!(*v, versions[i] + 1, "{i}"),
            other => panic!("write {i}: {other:?}"),
        }
    }
    // What applied is there; what conflicted is untouched.
    for (i, w) in again.iter().enumerate() {
        let c = s.read_key(&w.limit, &w.key).await.unwrap();
        let want = if wrong.contains(&i) {
            format!("{}/{i}", w.limit)
        } else {
            format!("again/{i}")
        };
        assert_eq!(c.key.map(|k| k.value), Some(want.into_bytes()), "key {i}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_per_key_and_a_reset_keeps_it_until_swept() {
    let zk = ZkCluster::single();
    let b = backend(&zk, "/rl-keys").await;
    let s = store(&b);
    s.ensure_limit("api", Some(b"q")).await.unwrap();
    let keys = ["/", "a/b", "..", "%2F", "ünïcødé 😀 ключ", "zookeeper"];
    for k in keys {
        // Expiring soon, so the sweeper deletes them after the reset below.
        let w = KeyWrite {
            expires_at: unix_now() + SEC,
            ..write("api", 0, k, None, k)
        };
        let r = s.write_keys(&[w]).await;
        assert_eq!(r.unwrap(), WriteOutcome::Written(vec![0]), "key {k:?}");
    }
    // One node per key, all under the limit's node.
    assert_eq!(
        count_children(&zk.connect_string(), "/rl-keys/r/api").await,
        keys.len()
    );
    for k in keys {
        s.delete_key("api", k).await.unwrap();
        // A reset keeps the node with an empty value (absent to the caller) and a growing
        // version, so no client's old version can match a re-created node.
        assert_eq!(s.read_key("api", k).await.unwrap().key, v("", 1), "{k:?}");
        let r = s.write_keys(&[write("api", 0, k, None, k)]).await.unwrap();
        assert!(
            matches!(&r, WriteOutcome::Conflict(c) if c[0].key == v("", 1)),
            "a reset key is not absent to a create: {r:?}"
        );
    }
    // The sweeper deletes the reset nodes once their old state has expired (+ its margin).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let left = count_children(&zk.connect_string(), "/rl-keys/r/api").await;
        if left == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{left} reset nodes left"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    b.close().await.unwrap();
}

/// Writes `n` keys `k<i>` of `limit` (absent before), in batches of 100.
async fn write_many(s: &dyn RateStore, limit: &str, n: usize, expires_at: u64) {
    let keys: Vec<usize> = (0..n).collect();
    for chunk in keys.chunks(100) {
        let writes: Vec<KeyWrite> = chunk
            .iter()
            .map(|i| KeyWrite {
                expires_at,
                ..write(limit, 0, &format!("k{i}"), None, "s")
            })
            .collect();
        let r = s.write_keys(&writes).await.unwrap();
        // Written, or (a request resent after its reply was lost) our own values in place.
        let ours = |c: &[Current]| {
            c.iter()
                .all(|c| c.key.as_ref().is_some_and(|k| k.value == b"s"))
        };
        assert!(
            match &r {
                WriteOutcome::Written(_) => true,
                WriteOutcome::Conflict(c) => ours(c),
            },
            "{r:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_keys_vanish_and_live_ones_stay() {
    const N: usize = 10_000;
    let zk = ZkCluster::single();
    let connect = zk.connect_string();
    let b = backend(&zk, "/rl-sweep").await;
    let s = store(&b);
    s.ensure_limit("api", Some(b"q")).await.unwrap();
    // A key that lives for an hour must not be swept.
    s.write_keys(&[write("api", 0, "live", None, "l")])
        .await
        .unwrap();

    let started = Instant::now();
    let expires_at = unix_now() + 2 * SEC;
    write_many(s, "api", N, expires_at).await;
    let written = started.elapsed();
    let before = b.stats();

    // Due at expiry + 1 s (the margin); give the sweep a generous bound on a loaded machine.
    let limit = Duration::from_secs(60);
    let mut left = usize::MAX;
    while started.elapsed() < limit {
        left = count_children(&connect, "/rl-sweep/r/api").await - 1;
        if left <= N / 100 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let took = started.elapsed();
    println!(
        "{N} keys written in {written:?}, expiring 2 s after the first write; \
         {left} left {took:?} after it; deletes sent: {}",
        b.stats().since(&before).delete
    );
    assert!(
        left <= N / 100,
        "{left} of {N} idle keys left after {took:?}"
    );
    assert_eq!(s.read_key("api", "live").await.unwrap().key, v("l", 0));
    // Every key is gone soon after (the 1% allowance is not needed by this sweeper).
    let client = zk_connect(&connect).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while client.list_children("/rl-sweep/r/api").await.unwrap().len() > 1 {
        assert!(Instant::now() < deadline, "stragglers stay");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("all {N} gone {:?} after the first write", started.elapsed());
    tokio::time::sleep(Duration::from_secs(2)).await;
    println!(
        "requests since the writes, sweep and scan: {:?}",
        b.stats().since(&before)
    );
    b.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_backend_fails_promptly_and_stops_sweeping() {
    let zk = ZkCluster::single();
    let connect = zk.connect_string();
    let b = backend(&zk, "/rl-closed").await;
    let s = store(&b);
    s.ensure_limit("api", Some(b"q")).await.unwrap();
    let soon = unix_now() + SEC / 2;
    let w = KeyWrite {
        expires_at: soon,
        ..write("api", 0, "k", None, "s")
    };
    s.write_keys(&[w]).await.unwrap();

    let t = Instant::now();
    b.close().await.unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "close waited: {:?}",
        t.elapsed()
    );

    let t = Instant::now();
    assert!(s.ensure_limit("api", None).await.is_err());
    assert!(s.put_limit("api", b"x").await.is_err());
    assert!(s.limits().await.is_err());
    assert!(s.read_key("api", "k").await.is_err());
    let r = s.write_keys(&[write("api", 0, "k", Some(0), "t")]).await;
    assert!(r.is_err(), "{r:?}");
    assert!(s.delete_key("api", "k").await.is_err());
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "calls after close took {:?}",
        t.elapsed()
    );

    // The key is past its sweep time (0.5 s + 1 s margin) and stays: the sweeper stopped.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(count_children(&connect, "/rl-closed/r/api").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_fail_in_bounded_time_in_a_partition_and_work_again_on_a_new_session() {
    let zk = ZkCluster::single();
    let proxy = FaultProxy::start(zk.client_addr(0));
    let b = ZkBackend::connect(
        ZkConfig::new(vec![proxy.connect_string()], "/rl-part")
            .session_timeout(Duration::from_secs(2))
            .request_timeout(Duration::from_secs(1)),
    )
    .await
    .unwrap();
    let s = store(&b);
    s.ensure_limit("api", Some(b"q")).await.unwrap();
    // Swept only after the partition (due at expiry + 1 s).
    let w = KeyWrite {
        expires_at: unix_now() + SEC,
        ..write("api", 0, "short", None, "s")
    };
    s.write_keys(&[w]).await.unwrap();

    proxy.blackhole();
    let t = Instant::now();
    let r = s.write_keys(&[write("api", 0, "k", None, "x")]).await;
    let took = t.elapsed();
    assert!(r.is_err(), "{r:?}");
    // A call and its retries: at most twice the request timeout (plus scheduling slack).
    assert!(took < Duration::from_millis(3000), "took {took:?}");
    // Past the session timeout: the session is gone for good.
    tokio::time::sleep(Duration::from_secs(3)).await;
    proxy.pass();

    let t = Instant::now();
    let r = s
        .write_keys(&[write("api", 0, "k", None, "y")])
        .await
        .unwrap();
    assert_eq!(r, WriteOutcome::Written(vec![0]));
    println!("first write after the partition took {:?}", t.elapsed());
    assert_eq!(s.read_key("api", "k").await.unwrap().key, v("y", 0));
    // The sweeper resumed on the new session: the short key goes.
    eventually(
        "the key expired before the partition is swept",
        Duration::from_secs(10),
        || async { s.read_key("api", "short").await.unwrap().key.is_none() },
    )
    .await;
    b.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_identity_reads_but_is_refused_writes_by_name_without_retries() {
    let zk = ZkCluster::single();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("app.digest");
    std::fs::write(&file, "app:s3cret-pass\n").unwrap();
    let owner = ZkBackend::connect(
        ZkConfig::new(vec![zk.connect_string()], "/rl-acl")
            .session_timeout(Duration::from_secs(4))
            .request_timeout(Duration::from_secs(2))
            .digest_file(Some(file)),
    )
    .await
    .unwrap();
    store(&owner).ensure_limit("api", Some(b"q")).await.unwrap();
    store(&owner)
        .write_keys(&[write("api", 0, "k", None, "s0")])
        .await
        .unwrap();

    let other = backend(&zk, "/rl-acl").await;
    let s = store(&other);
    // Creating is refused, but the limit is there: what is stored comes back.
    assert_eq!(
        Some(s.ensure_limit("api", Some(b"q")).await.unwrap()),
        v("q", 0)
    );
    assert_eq!(s.read_key("api", "k").await.unwrap().key, v("s0", 0));
    let before = other.stats();
    let t = Instant::now();
    let e = s
        .write_keys(&[write("api", 0, "k", Some(0), "s1")])
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("NoAuth") && e.contains("without credentials"),
        "{e}"
    );
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    assert_eq!(other.stats().since(&before).txn, 1, "not retried");
    let e = s.put_limit("api", b"x").await.unwrap_err().to_string();
    assert!(e.contains("NoAuth"), "{e}");
    let e = s
        .ensure_limit("new", Some(b"q"))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("NoAuth"), "{e}");
    assert_eq!(
        store(&owner).read_key("api", "k").await.unwrap().key,
        v("s0", 0)
    );
    owner.close().await.unwrap();
    other.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_left_by_a_closed_writer_are_swept_by_the_next_writers_scan() {
    const N: usize = 200;
    let zk = ZkCluster::single();
    let connect = zk.connect_string();
    let a = backend(&zk, "/rl-scan").await;
    store(&a).ensure_limit("api", Some(b"q")).await.unwrap();
    write_many(store(&a), "api", N, unix_now() + SEC).await;
    store(&a)
        .write_keys(&[write("api", 0, "live", None, "l")])
        .await
        .unwrap();
    a.close().await.unwrap(); // its sweeper stops with it: the keys stay

    // Another process (a restart, say) writes to the limit: its scan finds them.
    let b = backend(&zk, "/rl-scan").await;
    let started = Instant::now();
    store(&b)
        .write_keys(&[write("api", 0, "mine", None, "m")])
        .await
        .unwrap();
    let limit = Duration::from_secs(60);
    let mut left = usize::MAX;
    while started.elapsed() < limit {
        left = count_children(&connect, "/rl-scan/r/api").await - 2;
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let took = started.elapsed();
    let cost = b.stats();
    println!(
        "scan: {N} keys of a closed writer gone {took:?} after the next writer's first write \
         ({left} left; its requests: {cost:?})"
    );
    assert_eq!(left, 0, "{left} of {N} left after {took:?}");
    // Unexpired keys stay, ours and the closed writer's.
    assert_eq!(
        store(&b).read_key("api", "live").await.unwrap().key,
        v("l", 0)
    );
    assert_eq!(
        store(&b).read_key("api", "mine").await.unwrap().key,
        v("m", 0)
    );
    b.close().await.unwrap();
}
