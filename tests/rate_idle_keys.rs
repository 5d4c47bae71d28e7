//! Idle keys vanish (issue 15), through the API on memory, etcd and ZooKeeper: 10,000 distinct
//! keys each checked once with a quota whose state is worth nothing 1 ms later
//! (`per_second(1000)`), then at most 1% of them may be left in the store after a bounded wait
//! (memory: swept by a later call, at most once a second; etcd and ZooKeeper: the writer's
//! sweeper). The Limiter's own cache of key states stays bounded too
//! (`src/rate_limit/registry.rs` sweeps idle cells as the map grows).

use crate::rate_hammer;
use crate::support;

use clusterlimit::{Limiter, Quota, RateLimit};
use futures::StreamExt;
use rate_hammer::{serial, Server, ROOT};
use std::time::Duration;
use tokio::time::Instant;

const KEYS: usize = 10_000;
const LEFT_AT_MOST: usize = KEYS / 100;
/// Checks in flight at once.
const CONCURRENCY: usize = 64;
/// The registry sweeps idle cells when a new key would grow its map past this many
/// (`SWEEP_ABOVE` in `src/rate_limit/registry.rs`); cells in use are kept.
const CACHE_SWEEP_ABOVE: usize = 4096;
const LIMIT: &str = "idle";

/// Key states the store holds for the limit now, read straight from the store.
async fn stored(server: &Server) -> usize {
    match server {
        Server::Memory { name, .. } => clusterlimit::backend::memory::rate_key_count(name),
        Server::Etcd(c) => {
            let n = support::count_keys(&c.endpoints(), &format!("{ROOT}/rk/{LIMIT}/")).await;
            usize::try_from(n).expect("a key count is not negative")
        }
        Server::Zk(c) => {
            support::count_children(&c.connect_string(), &format!("/{ROOT}/r/{LIMIT}")).await
        }
    }
}

/// Checks `KEYS` distinct keys (prefixed `round`) once each; all must be admitted.
async fn touch(rl: &RateLimit, round: &str) {
    let admitted = futures::stream::iter(0..KEYS)
        .map(|i| {
            let rl = rl.clone();
            let key = format!("{round}-{i}");
            async move {
                rl.check(&key)
                    .await
                    .unwrap_or_else(|e| panic!("check({key}): {e}"))
                    .allowed
            }
        })
        .buffer_unordered(CONCURRENCY)
        .filter(|&allowed| futures::future::ready(allowed))
        .count()
        .await;
    assert_eq!(admitted, KEYS, "a first check of a fresh key is admitted");
}

async fn idle_keys(server: Server, wait_at_most: Duration) {
    let store = server.label();
    let limiter: Limiter = server.limiter(None).await;
    let rl = limiter
        .rate_limit(LIMIT, Quota::per_second(1000))
        .await
        .unwrap_or_else(|e| panic!("rate_limit on {store}: {e}"));
    let began = Instant::now();
    touch(&rl, "a").await;
    let written = began.elapsed();
    let held = stored(&server).await;
    println!(
        "[{store}] {KEYS} keys checked once in {:.2} s; the store held {held} right after; the \
         Limiter caches {} key states",
        written.as_secs_f64(),
        rl.cached_keys()
    );
    assert!(
        rl.cached_keys() <= CACHE_SWEEP_ABOVE + CONCURRENCY,
        "{store}: the Limiter caches {} key states",
        rl.cached_keys()
    );
    // Bounded wait for the store to drop them. memory:// sweeps on a later call only (it has
    // no clock of its own), so each round makes one: a check of a key of its own.
    let deadline = Instant::now() + wait_at_most;
    let mut polls = 0u32;
    let left = loop {
        if matches!(server, Server::Memory { .. }) {
            rl.check(&format!("trigger-{polls}"))
                .await
                .unwrap_or_else(|e| panic!("trigger check: {e}"));
        }
        polls += 1;
        let left = stored(&server).await;
        if left <= LEFT_AT_MOST || Instant::now() >= deadline {
            break left;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    println!(
        "[{store}] {left} of {KEYS} keys left {:.2} s after the last write ({:.2} s after the \
         first), {polls} polls",
        (began.elapsed() - written).as_secs_f64(),
        began.elapsed().as_secs_f64()
    );
    assert!(
        left <= LEFT_AT_MOST,
        "{store}: {left} of {KEYS} idle keys still stored {wait_at_most:?} after the last write"
    );
    // The cache stays bounded as more distinct keys come: a second round of fresh keys.
    touch(&rl, "b").await;
    println!(
        "[{store}] after {} distinct keys the Limiter caches {} key states",
        2 * KEYS,
        rl.cached_keys()
    );
    assert!(
        rl.cached_keys() <= CACHE_SWEEP_ABOVE + CONCURRENCY,
        "{store}: the Limiter caches {} key states",
        rl.cached_keys()
    );
    let _ = limiter.close().await;
}

#[test]
fn memory_idle_keys() {
    serial(async { idle_keys(Server::memory().await, Duration::from_secs(5)).await });
}

#[test]
fn etcd_idle_keys() {
    serial(async { idle_keys(Server::etcd(), Duration::from_secs(20)).await });
}

#[test]
fn zk_idle_keys() {
    serial(async { idle_keys(Server::zk(), Duration::from_secs(30)).await });
}
