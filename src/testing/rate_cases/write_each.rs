//! `RateStore::write_each`, the writes of different keys that one request carries: each write
//! applies or fails on its own conditions alone, in the order given.

use super::setup::{limiter, stored};
use crate::backend::{Current, KeyOutcome, KeyWrite, RateStore, Versioned};
use crate::testing::harness::Harness;
use crate::testing::rate_store_cases::{key_write, store_of};
use crate::Quota;

/// Each outcome of `write_each`, or a panic naming the write that failed.
fn outcomes(what: &str, got: Vec<crate::Result<KeyOutcome>>, n: usize) -> Vec<KeyOutcome> {
    assert_eq!(got.len(), n, "{what}: one outcome per write: {got:?}");
    got.into_iter()
        .enumerate()
        .map(|(i, o)| o.unwrap_or_else(|e| panic!("{what}: write {i} failed: {e}")))
        .collect()
}

/// The version a write made, or a panic if it conflicted.
fn written_version(what: &str, o: &KeyOutcome) -> u64 {
    match o {
        KeyOutcome::Written(v) => *v,
        KeyOutcome::Conflict(c) => panic!("{what}: expected Written, got a conflict: {c:?}"),
    }
}

/// What a conflicting write found, or a panic if it was written.
fn conflict(what: &str, o: &KeyOutcome) -> Current {
    match o {
        KeyOutcome::Conflict(c) => c.clone(),
        KeyOutcome::Written(v) => panic!("{what}: expected a conflict, written at version {v}"),
    }
}

/// `RateStore::write_each` (the writes of different keys one request carries, see
/// `rate_limit/combine.rs`): each write applies or fails on its own conditions alone; absent
/// keys are created together; the outcomes come in the order of the writes; a conflict brings
/// the key's current value and the quota.
pub async fn rate_write_each(h: &impl Harness) {
    let l = limiter(h).await;
    let store = store_of(&l);
    let quota = Quota::per_minute(60).burst(5).encode();
    let q = store
        .ensure_limit("each", Some(&quota))
        .await
        .unwrap_or_else(|e| panic!("ensure_limit: {e}"));
    assert!(store.write_each(&[]).await.is_empty(), "nothing to write");
    let keys: Vec<String> = (0..6).map(|i| format!("k{i}")).collect();
    let versions = absent_keys_created_together(store, q.version, &keys).await;
    wrong_version_conflicts_alone(store, &q, &versions).await;
    presence_conflicts_alone(store, q.version, &versions).await;
    let qv2 = stale_quota_version_conflicts_alone(store, q.version, &versions).await;
    outcomes_in_the_writes_order(store, qv2, &keys).await;
    l.close().await.expect("close");
}

/// Absent keys (`expected: None`) of several keys: all apply in one call, in order. Their
/// versions, in the order of `keys`.
async fn absent_keys_created_together(store: &dyn RateStore, qv: u64, keys: &[String]) -> Vec<u64> {
    let first: Vec<KeyWrite> = keys
        .iter()
        .map(|k| key_write("each", qv, k, None, &format!("{k}=1")))
        .collect();
    let got = outcomes("absent keys", store.write_each(&first).await, keys.len());
    let mut versions = Vec::new();
    for (k, o) in keys.iter().zip(&got) {
        let v = written_version(&format!("create {k}"), o);
        let read = stored(store, "each", k).await;
        assert_eq!(
            read,
            Some(Versioned {
                value: format!("{k}=1").into_bytes(),
                version: v,
            }),
            "{k}: the version write_each reported is the one read_key reads, with its value"
        );
        versions.push(v);
    }
    versions
}

/// Two keys, one with a wrong expected version: the other applies; the wrong one conflicts
/// with the key's current value and the quota `q`, and changes nothing.
async fn wrong_version_conflicts_alone(store: &dyn RateStore, q: &Versioned, versions: &[u64]) {
    let qv = q.version;
    let wrong = versions[1] + 1_000_000;
    let got = outcomes(
        "one wrong version",
        store
            .write_each(&[
                key_write("each", qv, "k0", Some(versions[0]), "k0=2"),
                key_write("each", qv, "k1", Some(wrong), "k1=2"),
            ])
            .await,
        2,
    );
    let v0 = written_version("k0 with its version", &got[0]);
    assert_ne!(v0, versions[0], "a write makes a new version");
    let read0 = stored(store, "each", "k0").await;
    assert_eq!(
        read0,
        Some(Versioned {
            value: b"k0=2".to_vec(),
            version: v0,
        })
    );
    let found = conflict("k1 with a wrong version", &got[1]);
    assert_eq!(
        found.key,
        Some(Versioned {
            value: b"k1=1".to_vec(),
            version: versions[1],
        }),
        "the conflict brings k1 as it is"
    );
    assert_eq!(found.quota, Some(q.clone()), "and the quota as it is");
    assert_eq!(
        stored(store, "each", "k1").await.map(|k| k.version),
        Some(versions[1]),
        "the failed write changed nothing"
    );
}

/// An absent key expected present, and a present key expected absent, conflict alone too.
async fn presence_conflicts_alone(store: &dyn RateStore, qv: u64, versions: &[u64]) {
    let got = outcomes(
        "presence",
        store
            .write_each(&[
                key_write("each", qv, "never", Some(versions[2]), "x"),
                key_write("each", qv, "k2", None, "x"),
                key_write("each", qv, "k3", Some(versions[3]), "k3=2"),
            ])
            .await,
        3,
    );
    assert_eq!(conflict("absent expected present", &got[0]).key, None);
    assert_eq!(
        conflict("present expected absent", &got[1])
            .key
            .map(|k| k.version),
        Some(versions[2])
    );
    written_version("k3 between them", &got[2]);
    assert_eq!(stored(store, "each", "never").await, None);
}

/// A write whose quota version is stale conflicts alone (after a quota change). The new
/// quota's version.
async fn stale_quota_version_conflicts_alone(
    store: &dyn RateStore,
    qv: u64,
    versions: &[u64],
) -> u64 {
    let changed = Quota::per_minute(60).burst(9).encode();
    let qv2 = store
        .put_limit("each", &changed)
        .await
        .unwrap_or_else(|e| panic!("put_limit: {e}"));
    assert_ne!(qv2, qv, "a new quota has a new version");
    let got = outcomes(
        "a stale quota version",
        store
            .write_each(&[
                key_write("each", qv2, "k4", Some(versions[4]), "k4=2"),
                key_write("each", qv, "k5", Some(versions[5]), "k5=2"),
                key_write("each", qv2, "fresh", None, "fresh=1"),
            ])
            .await,
        3,
    );
    let v4 = written_version("k4 with the new quota version", &got[0]);
    let found = conflict("k5 with the old quota version", &got[1]);
    assert_eq!(
        found.quota,
        Some(Versioned {
            value: changed.clone(),
            version: qv2,
        }),
        "the conflict brings the quota as it is now"
    );
    assert_eq!(
        found.key.map(|k| (k.value, k.version)),
        Some((b"k5=1".to_vec(), versions[5]))
    );
    let vf = written_version("a new key with the new quota version", &got[2]);
    assert_eq!(
        stored(store, "each", "k4").await.map(|k| k.version),
        Some(v4)
    );
    assert_eq!(
        stored(store, "each", "fresh").await.map(|k| k.version),
        Some(vf)
    );
    assert_eq!(
        stored(store, "each", "k5").await.map(|k| k.value),
        Some(b"k5=1".to_vec()),
        "k5 unchanged"
    );
    qv2
}

/// The outcomes follow the writes' order, not the keys': alternate successes and conflicts
/// over keys written in reverse.
async fn outcomes_in_the_writes_order(store: &dyn RateStore, qv2: u64, keys: &[String]) {
    let mut writes = Vec::new();
    let mut expect_written = Vec::new();
    for (i, k) in keys.iter().enumerate().rev() {
        let current = stored(store, "each", k).await.map(|v| v.version);
        let ok = i % 2 == 0;
        let expected = if ok {
            current
        } else {
            current.map(|v| v + 1_000_000)
        };
        writes.push(key_write("each", qv2, k, expected, &format!("{k}=order")));
        expect_written.push((k.clone(), ok, current));
    }
    let got = outcomes("order", store.write_each(&writes).await, writes.len());
    for ((k, ok, before), o) in expect_written.iter().zip(&got) {
        match o {
            KeyOutcome::Written(v) if *ok => {
                assert_eq!(stored(store, "each", k).await.map(|s| s.version), Some(*v));
            }
            KeyOutcome::Conflict(c) if !*ok => {
                assert_eq!(
                    c.key.as_ref().map(|s| s.version),
                    *before,
                    "{k}: the conflict in its place brings {k}'s own version"
                );
            }
            other => panic!("{k}: expected written = {ok}, got {other:?}"),
        }
    }
}
