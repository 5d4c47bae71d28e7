//! The rate-limit store contract: what [`RateStore`] promises, one `pub async fn` per case over
//! a [`Harness`], driven on the store directly (below the rate-limit layer) and run by
//! [`rate_contract_suite!`](crate::rate_contract_suite) on every store that keeps rate limits:
//! quotas stored and listed, compare-and-swap per key with conflicts that bring what is
//! stored, quota versions, all-or-nothing batches, keys kept as given, resets, and idle keys
//! vanishing after their expiry (never before, and never a key written again since).
//!
//! Store-neutral by design: where stores legitimately differ (whether a version can come back
//! after a key is re-created, whether a reset key reads as absent or empty, which keys one
//! batch may join) the case asks the store through the trait ([`RateStore::version_life`],
//! [`RateStore::read_key`], [`RateStore::part_of`]), never by its name. Request counts and
//! layouts are each store's own tests.

use super::harness::{Harness, LimiterOptions};
use super::rate_history::unix_ns;
use super::util::ms;
use crate::backend::{Current, KeyWrite, RateStore, Versioned, WriteOutcome};
use crate::{Error, Limiter};
use std::time::{Duration, Instant};

const SEC: u64 = 1_000_000_000;
/// Longest an expired key may stay: the stores' margins past `expires_at` (1 s, or a tenth of
/// the state's life) plus a sweep round, with room for a loaded machine.
const VANISH_WITHIN: Duration = Duration::from_secs(20);

/// The store of `l`, as the rate-limit layer writes to it (`RateStore` is the backend's).
pub(crate) fn store_of(l: &Limiter) -> &dyn RateStore {
    l.inner
        .backend
        .rate_store()
        .expect("the backend keeps rate limits")
}

async fn limiter(h: &impl Harness) -> Limiter {
    h.connect(LimiterOptions::new())
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"))
}

/// A write of `value` to `key` of `limit`, expiring in an hour.
pub(crate) fn key_write(
    limit: &str,
    quota_version: u64,
    key: &str,
    expected: Option<u64>,
    value: &str,
) -> KeyWrite {
    KeyWrite {
        limit: limit.to_string(),
        quota_version,
        key: key.to_string(),
        expected,
        value: value.as_bytes().to_vec(),
        expires_at: unix_ns() + 3600 * SEC,
    }
}

fn v(value: &str, version: u64) -> Versioned {
    Versioned {
        value: value.as_bytes().to_vec(),
        version,
    }
}

async fn ensure(s: &dyn RateStore, limit: &str, quota: &str) -> Versioned {
    s.ensure_limit(limit, Some(quota.as_bytes()))
        .await
        .unwrap_or_else(|e| panic!("ensure_limit({limit}): {e}"))
}

async fn write(s: &dyn RateStore, what: &str, writes: &[KeyWrite]) -> WriteOutcome {
    s.write_keys(writes)
        .await
        .unwrap_or_else(|e| panic!("{what}: write_keys failed: {e}"))
}

/// The versions of a batch that must apply: `Written`, or (a request resent after its reply
/// was lost, on a loaded machine) the `Conflict` that shows our own values in place, which
/// is how the rate layer recognises its own write.
async fn written(s: &dyn RateStore, what: &str, writes: &[KeyWrite]) -> Vec<u64> {
    match write(s, what, writes).await {
        WriteOutcome::Written(versions) => {
            assert_eq!(
                versions.len(),
                writes.len(),
                "{what}: one version per write"
            );
            versions
        }
        WriteOutcome::Conflict(found) => found
            .iter()
            .zip(writes)
            .map(|(c, w)| match &c.key {
                Some(k) if k.value == w.value => k.version,
                _ => panic!("{what}: expected the writes to apply, got a conflict: {found:?}"),
            })
            .collect(),
    }
}

async fn conflict(s: &dyn RateStore, what: &str, writes: &[KeyWrite]) -> Vec<Current> {
    match write(s, what, writes).await {
        WriteOutcome::Conflict(found) => {
            assert_eq!(found.len(), writes.len(), "{what}: one current per write");
            found
        }
        other => panic!("{what}: expected a conflict, got {other:?}"),
    }
}

fn not_found<T: std::fmt::Debug>(r: crate::Result<T>, name: &str) {
    match r {
        Err(Error::NotFound(n)) if n == name => {}
        other => panic!("expected NotFound({name:?}), got {other:?}"),
    }
}

fn refused_twice<T: std::fmt::Debug>(r: crate::Result<T>) {
    match r {
        Err(Error::InvalidArgument(m)) if m.contains("twice") => {}
        other => panic!("expected InvalidArgument naming a key written twice, got {other:?}"),
    }
}

async fn read(s: &dyn RateStore, limit: &str, key: &str) -> Current {
    s.read_key(limit, key)
        .await
        .unwrap_or_else(|e| panic!("read_key({limit}, {key:?}): {e}"))
}

/// The key's state as callers see it: an empty value is an absent key (a store whose versions
/// restart on re-creation keeps a reset key with an empty value, see `RateStore::delete_key`).
async fn state(s: &dyn RateStore, limit: &str, key: &str) -> Option<Versioned> {
    read(s, limit, key)
        .await
        .key
        .filter(|k| !k.value.is_empty())
}

/// Limits are created if absent, opened as stored whatever is asked, changed with another
/// version, listed sorted; a semaphore of the same name is another thing.
pub async fn store_limits(h: &impl Harness) {
    let l = limiter(h).await;
    let s = store_of(&l);
    assert_eq!(s.limits().await.expect("limits"), Vec::<String>::new());
    not_found(s.ensure_limit("api", None).await, "api");
    let created = ensure(s, "api", "q1").await;
    assert_eq!(created.value, b"q1");
    // Opening again returns what is stored, whatever is asked (comparing is the caller's job).
    assert_eq!(ensure(s, "api", "q2").await, created);
    assert_eq!(s.ensure_limit("api", None).await.expect("open"), created);

    let v2 = s.put_limit("api", b"q2").await.expect("put_limit");
    // Writes compare quota versions for equality only: a sharded store shows a hash of the
    // quota's bytes (the same on every cluster), so "another", not "greater".
    assert_ne!(v2, created.version, "a changed quota has another version");
    assert_eq!(
        s.ensure_limit("api", None).await.expect("open"),
        v("q2", v2)
    );
    // put_limit creates too.
    let other = s.put_limit("other", b"q3").await.expect("put_limit");
    assert_eq!(
        s.ensure_limit("other", None).await.expect("open"),
        v("q3", other)
    );
    assert_eq!(s.limits().await.expect("limits"), vec!["api", "other"]);
    l.close().await.expect("close");
}

/// A semaphore of the same name as a rate limit is another thing: no collision either way
/// (for stores that keep both).
pub async fn store_limits_beside_semaphores(h: &impl Harness) {
    let l = limiter(h).await;
    let s = store_of(&l);
    let stored = ensure(s, "api", "q1").await;
    l.semaphore("api", 2).await.expect("semaphore api");
    l.semaphore("sem-only", 1)
        .await
        .expect("semaphore sem-only");
    assert_eq!(s.limits().await.expect("limits"), vec!["api"]);
    assert_eq!(s.ensure_limit("api", None).await.expect("open"), stored);
    not_found(s.ensure_limit("sem-only", None).await, "sem-only");
    l.close().await.expect("close");
}

/// Compare-and-swap per key: a first touch is "must be absent", a write names the version it
/// read, and a failed condition is a conflict that brings the key and the quota as stored.
pub async fn store_compare_and_swap(h: &impl Harness) {
    let l = limiter(h).await;
    let s = store_of(&l);
    not_found(s.read_key("api", "k").await, "api");
    let q = ensure(s, "api", "q").await;
    let v1 = first_touch(s, &q).await;
    let (v2, at_v2) = write_at_its_version(s, &q, v1).await;
    absent_limit_has_no_quota(s, q.version).await;
    key_twice_in_a_batch_refused(s, q.version, v2).await;
    assert_eq!(read(s, "api", "k").await, at_v2);
    l.close().await.expect("close");
}

/// The key `k` of `api` (quota `q`) is absent; a first touch ("must be absent") writes it, a
/// second one loses and learns what is stored. The version written.
async fn first_touch(s: &dyn RateStore, q: &Versioned) -> u64 {
    let qv = q.version;
    let absent = Current {
        quota: Some(q.clone()),
        key: None,
    };
    assert_eq!(read(s, "api", "k").await, absent);

    let v1 = written(s, "first touch", &[key_write("api", qv, "k", None, "s1")]).await[0];
    assert_eq!(read(s, "api", "k").await.key, Some(v("s1", v1)));
    // Another first touch loses, and learns what is stored.
    let found = conflict(
        s,
        "a second first touch",
        &[key_write("api", qv, "k", None, "x")],
    )
    .await;
    let at_v1 = Current {
        quota: Some(q.clone()),
        key: Some(v("s1", v1)),
    };
    assert_eq!(found, vec![at_v1]);
    v1
}

/// A write naming the version it read (`v1`) applies; a stale or impossible version, or an
/// absent key expected present, conflicts and changes nothing. The new version, and the key as
/// stored at it.
async fn write_at_its_version(s: &dyn RateStore, q: &Versioned, v1: u64) -> (u64, Current) {
    let qv = q.version;
    let v2 = written(
        s,
        "at its version",
        &[key_write("api", qv, "k", Some(v1), "s2")],
    )
    .await[0];
    assert!(
        v2 > v1,
        "a key's versions grow while it exists: {v1} then {v2}"
    );
    let at_v2 = Current {
        quota: Some(q.clone()),
        key: Some(v("s2", v2)),
    };
    let stale = [key_write("api", qv, "k", Some(v1), "stale")];
    assert_eq!(
        conflict(s, "a stale version", &stale).await,
        vec![at_v2.clone()]
    );
    // A version no key can have conflicts without harm.
    let impossible = [key_write("api", qv, "k", Some(u64::MAX), "x")];
    assert_eq!(
        conflict(s, "version u64::MAX", &impossible).await,
        vec![at_v2.clone()]
    );
    assert_eq!(read(s, "api", "k").await, at_v2);
    // An absent key expected present conflicts and stays absent.
    let absent = Current {
        quota: Some(q.clone()),
        key: None,
    };
    let missing = [key_write("api", qv, "other", Some(v2), "x")];
    assert_eq!(
        conflict(s, "absent expected present", &missing).await,
        vec![absent.clone()]
    );
    assert_eq!(read(s, "api", "other").await, absent);
    (v2, at_v2)
}

/// A write on a limit that does not exist finds no quota.
async fn absent_limit_has_no_quota(s: &dyn RateStore, qv: u64) {
    let nowhere = [key_write("nope", qv, "k", None, "x")];
    let none = Current {
        quota: None,
        key: None,
    };
    assert_eq!(conflict(s, "an absent limit", &nowhere).await, vec![none]);
    not_found(s.read_key("nope", "k").await, "nope");
}

/// An empty batch applies at once; a key written twice in one batch is refused, by name,
/// before anything is written (by either way of writing).
async fn key_twice_in_a_batch_refused(s: &dyn RateStore, qv: u64, v2: u64) {
    assert_eq!(write(s, "empty", &[]).await, WriteOutcome::Written(vec![]));
    assert!(s.write_each(&[]).await.is_empty(), "nothing to write");
    let twice = [
        key_write("api", qv, "k", Some(v2), "1"),
        key_write("api", qv, "k", Some(v2), "2"),
    ];
    refused_twice(s.write_keys(&twice).await);
    let each = s.write_each(&twice).await;
    assert_eq!(each.len(), 2, "one outcome per write");
    each.into_iter().for_each(refused_twice);
}

/// A write computed with an old quota version fails once the quota changed, and finds the new
/// quota; with the new version it applies.
pub async fn store_quota_versions(h: &impl Harness) {
    let l = limiter(h).await;
    let s = store_of(&l);
    let q1 = ensure(s, "api", "q1").await.version;
    let k1 = written(s, "first", &[key_write("api", q1, "k", None, "s1")]).await[0];
    let q2 = s.put_limit("api", b"q2").await.expect("put_limit");

    let old = [key_write("api", q1, "k", Some(k1), "old-quota")];
    let now = Current {
        quota: Some(v("q2", q2)),
        key: Some(v("s1", k1)),
    };
    assert_eq!(conflict(s, "the old quota version", &old).await, vec![now]);
    // A first touch computed with the old quota fails too, and writes nothing.
    let fresh = [key_write("api", q1, "new", None, "old-quota")];
    let found = conflict(s, "a first touch with the old quota", &fresh).await;
    assert_eq!(found[0].quota, Some(v("q2", q2)));
    assert_eq!(found[0].key, None);
    assert_eq!(read(s, "api", "new").await.key, None);
    // With the new quota's version, it applies.
    let k2 = written(
        s,
        "the new quota",
        &[key_write("api", q2, "k", Some(k1), "s2")],
    )
    .await[0];
    assert_eq!(read(s, "api", "k").await.key, Some(v("s2", k2)));
    l.close().await.expect("close");
}

/// Keys `limit`/`key` of `candidates` that the store keeps in the same part as `first` and
/// lets join it in one batch (a sharded store commits together only keys of one cluster, a
/// Redis Cluster only keys of one slot).
fn same_part<'a>(
    s: &dyn RateStore,
    first: (&str, &str),
    limit: &'a str,
    candidates: impl Iterator<Item = String>,
    n: usize,
) -> Vec<(&'a str, String)> {
    let part = s.part_of(first.0, first.1);
    let keys: Vec<(&str, String)> = candidates
        .filter(|k| s.part_of(limit, k) == part && s.joint_keys(&[first, (limit, k)]).is_ok())
        .take(n)
        .map(|k| (limit, k))
        .collect();
    assert_eq!(keys.len(), n, "no {n} keys of {limit:?} in part {part}");
    keys
}

/// One batch over several keys and limits applies all or nothing: one stale write spoils it
/// (each write then learns what it found); all current, all apply.
pub async fn store_batches_all_or_nothing(h: &impl Harness) {
    let l = limiter(h).await;
    let s = store_of(&l);
    let qa = ensure(s, "a", "qa").await;
    let qb = ensure(s, "b", "qb").await;
    let candidates = || (0..1000).map(|i| format!("k{i}"));
    let [(_, y)] = same_part(s, ("a", "x"), "b", candidates(), 1)
        .try_into()
        .expect("one key");
    let z = same_part(s, ("a", "x"), "a", candidates(), 1).remove(0).1;
    s.joint_keys(&[("a", "x"), ("b", &y), ("a", &z)])
        .expect("keys of one part may join a batch");
    let va = written(s, "a/x", &[key_write("a", qa.version, "x", None, "a0")]).await[0];

    let batch = |x_expected: u64| {
        [
            key_write("b", qb.version, &y, None, "b1"),
            key_write("a", qa.version, "x", Some(x_expected), "a1"),
            key_write("a", qa.version, &z, None, "z1"),
        ]
    };
    let found = conflict(s, "one stale write", &batch(va + 1000)).await;
    let current = |q: &Versioned, key: Option<Versioned>| Current {
        quota: Some(q.clone()),
        key,
    };
    let want = vec![
        current(&qb, None),
        current(&qa, Some(v("a0", va))),
        current(&qa, None),
    ];
    assert_eq!(found, want, "nothing applied, every write learns its state");
    assert_eq!(read(s, "b", &y).await.key, None);
    assert_eq!(read(s, "a", &z).await.key, None);
    assert_eq!(read(s, "a", "x").await.key, Some(v("a0", va)));

    let vs = written(s, "all current", &batch(va)).await;
    assert!(vs[1] > va, "a/x at a newer version");
    assert_eq!(read(s, "b", &y).await.key, Some(v("b1", vs[0])));
    assert_eq!(read(s, "a", "x").await.key, Some(v("a1", vs[1])));
    assert_eq!(read(s, "a", &z).await.key, Some(v("z1", vs[2])));
    l.close().await.expect("close");
}

/// Keys that a path, a URL or a store's own syntax would mangle, up to 512 bytes.
fn odd_keys() -> Vec<String> {
    let mut keys: Vec<String> = [
        "/",
        "a/b",
        "/a/",
        "a/",
        "../x",
        ".",
        "..",
        " ",
        " spaced ",
        "GET /v1/users",
        "%2F",
        "*",
        "{tag}",
        "ünïcødé ✓ 日本 😀",
        "\u{0}\u{1}\n\t\u{7f}\u{9f}",
        "\u{e000}\u{f8ff}\u{fff0}\u{ffff}",
        "zookeeper",
        "10.0.0.1",
    ]
    .map(String::from)
    .into();
    keys.push("k".repeat(512));
    keys.push("é".repeat(256)); // 512 bytes
    keys
}

/// Any key is kept exactly as given, apart from every other key and from the same key of a
/// limit whose name extends this one's; `delete_key` forgets a key (absent, or empty as
/// `delete_key` allows) and a version from before the reset never matches again.
pub async fn store_keys_kept_as_given_and_reset(h: &impl Harness) {
    let l = limiter(h).await;
    let s = store_of(&l);
    let q = ensure(s, "api", "q").await.version;
    let q2 = ensure(s, "api-2", "q").await.version;
    let keys = odd_keys();
    let mut versions = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        let w = [key_write("api", q, key, None, &format!("v{i}"))];
        versions.push(written(s, &format!("key {key:?}"), &w).await[0]);
    }
    written(s, "api-2", &[key_write("api-2", q2, "a/b", None, "other")]).await;
    for (i, key) in keys.iter().enumerate() {
        let want = Some(v(&format!("v{i}"), versions[i]));
        assert_eq!(read(s, "api", key).await.key, want, "key {key:?}");
    }

    for (i, key) in keys.iter().enumerate().take(4) {
        s.delete_key("api", key).await.expect("delete_key");
        assert_eq!(state(s, "api", key).await, None, "{key:?} forgotten");
        s.delete_key("api", key)
            .await
            .expect("deleting again is fine");
        assert_eq!(state(s, "api", key).await, None);
        // A create agrees with what a read shows: absent, or the empty value kept in place.
        let left = read(s, "api", key).await.key;
        let w = [key_write(
            "api",
            q,
            key,
            left.as_ref().map(|k| k.version),
            "again",
        )];
        let again = written(s, &format!("{key:?} again"), &w).await[0];
        if s.version_life() == Duration::MAX {
            // Versions never reused: a re-created key is past every version it had.
            assert!(
                again > versions[i],
                "{key:?}: {again} after {}",
                versions[i]
            );
        }
        let stale = [key_write("api", q, key, Some(versions[i]), "stale")];
        let found = conflict(s, "a version from before the reset", &stale).await;
        assert_eq!(found[0].key, Some(v("again", again)), "{key:?}");
    }
    // The rest stayed; the same key of another limit too.
    for (i, key) in keys.iter().enumerate().skip(4) {
        let want = Some(v(&format!("v{i}"), versions[i]));
        assert_eq!(read(s, "api", key).await.key, want, "key {key:?}");
    }
    assert_eq!(
        state(s, "api-2", "a/b").await.map(|k| k.value),
        Some(b"other".to_vec())
    );
    s.delete_key("api", "never-written")
        .await
        .expect("forgetting an absent key");
    l.close().await.expect("close");
}

/// Polls until `key` of `limit` reads absent (or empty); panics after [`VANISH_WITHIN`] past
/// `expires_at`. Returns how long after `expires_at` it went.
async fn vanishes(s: &dyn RateStore, limit: &str, key: &str, expires_at: u64) -> Duration {
    let deadline =
        Instant::now() + VANISH_WITHIN + Duration::from_nanos(expires_at.saturating_sub(unix_ns()));
    loop {
        let here = state(s, limit, key).await;
        // The read saw the store at some instant before it returned.
        let now = unix_ns();
        if here.is_none() {
            assert!(now >= expires_at, "{key:?} gone before its expiry");
            return Duration::from_nanos(now.saturating_sub(expires_at));
        }
        assert!(
            Instant::now() < deadline,
            "{key:?} still there {VANISH_WITHIN:?} after its expiry: {here:?}"
        );
        tokio::time::sleep(ms(100)).await;
    }
}

/// Keys vanish on their own once their state has expired (lease, TTL or sweep), never
/// before; a key that lives longer stays.
pub async fn store_idle_keys_vanish(h: &impl Harness) {
    let l = limiter(h).await;
    let s = store_of(&l);
    let q = ensure(s, "idle", "q").await.version;
    let long = [key_write("idle", q, "long", None, "l")];
    written(s, "a long-lived key", &long).await;
    let expires_at = unix_ns() + 2 * SEC;
    let writes: Vec<KeyWrite> = (0..20)
        .map(|i| KeyWrite {
            expires_at,
            ..key_write("idle", q, &format!("u{i}"), None, "once")
        })
        .collect();
    for w in &writes {
        written(s, &w.key, std::slice::from_ref(w)).await;
    }
    // Present until their expiry (a read is a snapshot taken before it returns).
    while unix_ns() + 200_000_000 < expires_at {
        for w in &writes {
            let gone = state(s, "idle", &w.key).await.is_none();
            assert!(
                !gone || unix_ns() >= expires_at,
                "{} gone before its expiry",
                w.key
            );
        }
        tokio::time::sleep(ms(200)).await;
    }
    let mut latest = Duration::ZERO;
    for w in &writes {
        latest = latest.max(vanishes(s, "idle", &w.key, expires_at).await);
    }
    println!("20 idle keys gone, the last {latest:?} after their expiry");
    assert!(state(s, "idle", "long").await.is_some(), "a live key stays");
    l.close().await.expect("close");
}

/// A key written again by another Limiter, with a state that lives longer, stays past the
/// first writer's expiry: whoever deletes expired keys checks they are unchanged.
pub async fn store_rewritten_keys_stay(h: &impl Harness) {
    let a = limiter(h).await;
    let b = limiter(h).await;
    let (sa, sb) = (store_of(&a), store_of(&b));
    let q = ensure(sa, "api", "q").await.version;
    let soon = unix_ns() + SEC;
    let short = |key: &str| KeyWrite {
        expires_at: soon,
        ..key_write("api", q, key, None, "a")
    };
    // One batch each: the two keys may be kept in different parts.
    written(sa, "a's gone", &[short("gone")]).await;
    let va = written(sa, "a's kept", &[short("kept")]).await[0];
    let vb = written(
        sb,
        "b's write",
        &[key_write("api", q, "kept", Some(va), "b")],
    )
    .await[0];

    vanishes(sb, "api", "gone", soon).await;
    // Past a's due time for "kept" by as long as "gone" took, and a round more.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(state(sb, "api", "kept").await, Some(v("b", vb)));
    assert_eq!(state(sa, "api", "kept").await, Some(v("b", vb)));
    a.close().await.expect("close a");
    b.close().await.expect("close b");
}
