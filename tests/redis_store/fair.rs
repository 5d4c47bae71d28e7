//! Fair semaphores on Redis, what is Redis's own (the shared fair contract runs in
//! `redis_store.rs`): the stored bytes (a plain entry's unchanged, a fair one's tag after the
//! owner), a fair record lost or not ours (an error naming the semaphore, never a plain FIFO
//! semaphore and its over-grant), and a flushed script cache (reloaded, grants go on).

use super::{only_entry, run, single, unique_prefix};
use clusterlimit::fair::Classes;
use clusterlimit::testing::within;
use clusterlimit::{AcquireOptions, Limiter};
use std::time::Duration;

const PROMPT: Duration = Duration::from_secs(10);

/// A plain entry keeps its bytes; a fair entry carries its flow, class and weight after them.
#[test]
fn fair_entries_carry_their_tag_and_plain_ones_do_not() {
    let server = single();
    let prefix = unique_prefix();
    let url = server.url(&prefix);
    run(async move {
        let l = Limiter::connect(&url).await.unwrap();
        let plain = l.semaphore("plain", 1).await.unwrap();
        let held = plain.acquire().await.unwrap();
        let (_, value, _) = only_entry(server, &prefix, "plain");
        assert!(!value.contains('\n'), "a plain entry as before: {value:?}");
        let fair_key = format!("{{{prefix}:s:plain}}:fair");
        assert_eq!(server.cli(&["exists", &fair_key]).trim(), "0");
        held.release().await.unwrap();
        let classes: Classes = "critical=1,batch".parse().unwrap();
        let fair = l.fair_semaphore("fair", 2, classes).await.unwrap();
        let opts = AcquireOptions::new()
            .flow("tenant a")
            .class("batch")
            .weight(3);
        let held = fair.acquire_with(opts).await.unwrap();
        let entries = format!("{{{prefix}:s:fair}}:e");
        let all = server.cli(&["hvals", &entries]);
        assert!(all.contains("\n3\nbatch\ntenant a"), "{all:?}");
        let record = server.cli(&["hgetall", &format!("{{{prefix}:s:fair}}:fair")]);
        assert!(record.contains("critical=1,batch=0"), "{record:?}");
        assert!(
            record.contains(&held.fencing_token().to_string()),
            "marked: {record:?}"
        );
        held.release().await.unwrap();
        l.close().await.unwrap();
    });
}

/// A fair record deleted behind clusterlimit's back, or replaced by a value it did not write:
/// every call on the semaphore fails with a message naming it, and nothing is granted.
#[test]
fn a_lost_or_foreign_fair_record_is_an_error() {
    let server = single();
    let prefix = unique_prefix();
    let url = server.url(&prefix);
    run(async move {
        let l = Limiter::connect(&url).await.unwrap();
        let sem = l.fair_semaphore("db", 1, Classes::single()).await.unwrap();
        let held = sem.acquire().await.unwrap();
        let fair_key = format!("{{{prefix}:s:db}}:fair");
        server.cli(&["del", &fair_key]);
        let text = sem.status().await.unwrap_err().to_string();
        assert!(
            text.contains("\"db\" was created fair") && text.contains("gone"),
            "{text}"
        );
        let text = sem.try_acquire().await.unwrap_err().to_string();
        assert!(
            text.contains("fair record"),
            "never granted as plain FIFO: {text}"
        );
        server.cli(&["set", &fair_key, "not ours"]);
        let text = sem.status().await.unwrap_err().to_string();
        assert!(text.contains("another type of value"), "{text}");
        server.cli(&["del", &fair_key]);
        server.cli(&["hset", &fair_key, "ver", "x"]);
        let text = sem.status().await.unwrap_err().to_string();
        assert!(
            text.contains("\"db\"") && text.contains("did not write"),
            "{text}"
        );
        drop(held);
        l.close().await.unwrap();
    });
}

/// A flushed script cache (a restart, `SCRIPT FLUSH`) between a hold and its release: the
/// waiter is still granted (the grant script is loaded again).
#[test]
fn fair_grants_go_on_after_a_flushed_script_cache() {
    let server = single();
    let url = server.url(&unique_prefix());
    run(async move {
        let l = Limiter::connect(&url).await.unwrap();
        let sem = l.fair_semaphore("db", 1, Classes::single()).await.unwrap();
        let held = sem
            .acquire_with(AcquireOptions::new().flow("a"))
            .await
            .unwrap();
        let waiter = {
            let sem = sem.clone();
            tokio::spawn(async move { sem.acquire_with(AcquireOptions::new().flow("b")).await })
        };
        within("queued", PROMPT, async {
            while sem.status().await.unwrap().waiting == 0 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        server.cli(&["script", "flush"]);
        held.release().await.unwrap();
        let granted = within("granted after the flush", PROMPT, waiter)
            .await
            .unwrap()
            .unwrap();
        let st = sem.status().await.unwrap();
        assert_eq!(st.holders[0].flow.as_deref(), Some("b"), "{st:?}");
        granted.release().await.unwrap();
        l.close().await.unwrap();
    });
}

/// What a fair semaphore costs in store requests: an uncontended acquire is its enqueue alone
/// (the one waiter marks itself in the enqueue script), as on a plain semaphore; a release one
/// removal; a handoff costs the waiting Limiter its watch's read, the grant (decided from that
/// read) and the read that sees the grant. A class the semaphore lacks is refused by the
/// enqueue script itself.
#[test]
fn fair_costs_in_store_requests() {
    let server = single();
    let url = server.url(&unique_prefix());
    run(async move {
        let (l, other) = (
            Limiter::connect(&url).await.unwrap(),
            Limiter::connect(&url).await.unwrap(),
        );
        let sem = l.fair_semaphore("db", 1, Classes::single()).await.unwrap();
        let theirs = other.open_semaphore("db").await.unwrap();
        let before = l.stats();
        let held = sem
            .acquire_with(AcquireOptions::new().flow("a"))
            .await
            .unwrap();
        let cost = l.stats().since(&before);
        assert_eq!((cost.txn, cost.total()), (1, 1), "acquire: {cost:?}");
        let before = l.stats();
        let bad = sem.acquire_with(AcquireOptions::new().flow("a").class("nope").no_wait());
        let text = bad.await.unwrap_err().to_string();
        assert!(text.contains("class \"nope\" is not one of"), "{text}");
        let cost = l.stats().since(&before);
        // The enqueue refuses it (no grant is tried); the Limiter's removal after any failed
        // acquire is the one other request.
        assert_eq!((cost.txn, cost.total()), (1, 2), "{cost:?}");
        let waiter =
            tokio::spawn(async move { theirs.acquire_with(AcquireOptions::new().flow("b")).await });
        within("queued", PROMPT, async {
            while sem.status().await.unwrap().waiting == 0 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        // Let the waiter's watch settle on its first read.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (before, theirs_before) = (l.stats(), other.stats());
        held.release().await.unwrap();
        let granted = within("handed over", PROMPT, waiter)
            .await
            .unwrap()
            .unwrap();
        let cost = l.stats().since(&before);
        assert_eq!((cost.delete, cost.total()), (1, 1), "release: {cost:?}");
        let cost = other.stats().since(&theirs_before);
        assert_eq!(cost.txn, 1, "one grant: {cost:?}");
        // Two reads (before the grant, and the one that sees it); one more only when the
        // waiter's first read came after the snapshot on a slow machine.
        assert!((2..=3).contains(&cost.range), "handoff reads: {cost:?}");
        granted.release().await.unwrap();
        l.close().await.unwrap();
        other.close().await.unwrap();
    });
}
