//! Lowering a held weight (`Permit::shrink_to`): the freed weight is granted as a partial
//! release would (FIFO, a heavy head never passed), the fencing token stays, the total held
//! never exceeds the capacity, and bad input or a lost permit changes nothing.

use super::setup::{create, limiter, take};
use crate::testing::harness::Harness;
use crate::testing::util::{
    assert_err, assert_still_waiting, join, ms, open, spawn_acquire, wait_status, within, POLL,
    PROMPT,
};
use crate::{Error, Permit, Semaphore};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Longest a status watcher runs (bounded in time as every test loop).
const WATCH_LIMIT: Duration = Duration::from_secs(60);

/// Capacity 10, a holder of 8 and a waiter of 5: shrinking to 5 grants the waiter; a heavy
/// head of 6 is not passed by a waiter of 5; bad weights and a lost permit change nothing.
/// On a store whose harness says it cannot shrink, the refusal is checked instead.
pub async fn shrink<H: Harness>(h: &H) {
    if !H::SHRINKS_PERMITS {
        return shrink_refused(h).await;
    }
    shrink_grants_the_waiter(h).await;
    shrink_keeps_a_heavy_head(h).await;
    dropped_shrink_settles(h).await;
    shrink_after_close(h).await;
    shrink_after_loss(h).await;
}

/// The waiter of 5 behind a holder of 8 is granted once the holder shrinks to 5; the status,
/// read throughout, never shows more than the capacity held.
async fn shrink_grants_the_waiter<H: Harness>(h: &H) {
    let main = limiter(h).await;
    let sem = create(&main, "shrink", 10).await;
    let mut holder = take(&sem, 8).await;
    let token = holder.fencing_token();
    bad_weights_change_nothing(&mut holder).await;
    let before = main.stats();
    within("shrink to the same weight", PROMPT, holder.shrink_to(8))
        .await
        .unwrap_or_else(|e| panic!("shrink to the same weight: {e}"));
    assert_eq!(
        main.stats().since(&before).total(),
        0,
        "a no-op shrink sent a request"
    );
    let waiter = spawn_acquire(&open(&limiter(h).await, "shrink").await, 5);
    wait_status(&sem, "waiter of 5 queued", PROMPT, |st| st.waiting == 1).await;
    assert_still_waiting("waiter of 5 behind 8 of 10", &waiter, ms(100)).await;
    let watcher = watch_capacity(open(&limiter(h).await, "shrink").await).await;
    let before = main.stats();
    within("shrink 8 → 5", PROMPT, holder.shrink_to(5))
        .await
        .unwrap_or_else(|e| panic!("shrink 8 → 5: {e}"));
    let sent = main.stats().since(&before).total();
    println!("shrink: {sent} store request(s)");
    assert!(
        (1..=2).contains(&sent),
        "a shrink took {sent} store requests"
    );
    assert_eq!((holder.permits(), holder.fencing_token()), (5, token));
    let granted = join("waiter of 5 granted after the shrink", PROMPT, waiter)
        .await
        .unwrap_or_else(|e| panic!("waiter of 5: {e}"));
    let st = wait_status(&sem, "5 + 5 held", PROMPT, |st| st.used == 10).await;
    assert_eq!((st.holders.len(), st.waiting), (2, 0));
    watcher.stop().await;
    drop(granted);
}

/// 0 and more than the weight held are `InvalidArgument`, and the weight stays.
async fn bad_weights_change_nothing(holder: &mut Permit) {
    let held = holder.permits();
    assert_err!(
        holder.shrink_to(0).await,
        Error::InvalidArgument(_),
        "shrink to 0"
    );
    assert_err!(
        holder.shrink_to(held + 1).await,
        Error::InvalidArgument(_),
        "shrink above the weight held"
    );
    assert_eq!(
        holder.permits(),
        held,
        "a refused shrink changed the weight"
    );
}

/// Holder 8, then a heavy waiter of 6 and a light one of 5: a shrink to 5 frees 5, which the
/// light one would fit, but it never passes the heavy head; a shrink to 4 grants the head only.
async fn shrink_keeps_a_heavy_head<H: Harness>(h: &H) {
    let main = limiter(h).await;
    let sem = create(&main, "shrink-head", 10).await;
    let mut holder = take(&sem, 8).await;
    let heavy = spawn_acquire(&open(&limiter(h).await, "shrink-head").await, 6);
    wait_status(&sem, "heavy waiter queued", PROMPT, |st| st.waiting == 1).await;
    let light = spawn_acquire(&open(&limiter(h).await, "shrink-head").await, 5);
    wait_status(&sem, "light waiter queued", PROMPT, |st| st.waiting == 2).await;
    let watcher = watch_capacity(open(&limiter(h).await, "shrink-head").await).await;
    within("shrink 8 → 5", PROMPT, holder.shrink_to(5))
        .await
        .unwrap_or_else(|e| panic!("shrink 8 → 5: {e}"));
    wait_status(&sem, "5 held after the shrink", PROMPT, |st| st.used == 5).await;
    assert_still_waiting("heavy head of 6 with 5 free", &heavy, ms(200)).await;
    assert!(
        !light.is_finished(),
        "the waiter of 5 passed the heavy head"
    );
    within("shrink 5 → 4", PROMPT, holder.shrink_to(4))
        .await
        .unwrap_or_else(|e| panic!("shrink 5 → 4: {e}"));
    let head = join("heavy head granted", PROMPT, heavy)
        .await
        .unwrap_or_else(|e| panic!("heavy head: {e}"));
    assert_still_waiting("waiter of 5 with 0 free", &light, ms(100)).await;
    watcher.stop().await;
    drop((head, holder));
    let last = join("light waiter granted after the releases", PROMPT, light).await;
    drop(last.unwrap_or_else(|e| panic!("light waiter: {e}")));
}

/// A shrink whose call is dropped at its first await still reaches the store, and
/// `permits()` then reports what the store holds.
async fn dropped_shrink_settles<H: Harness>(h: &H) {
    let main = limiter(h).await;
    let sem = create(&main, "shrink-dropped", 10).await;
    let mut holder = take(&sem, 8).await;
    let cut = tokio::time::timeout(Duration::ZERO, holder.shrink_to(3)).await;
    drop(cut); // either way: done, or its request goes on without us
    let start = std::time::Instant::now();
    while holder.permits() != 3 && start.elapsed() < PROMPT {
        tokio::time::sleep(POLL).await;
    }
    assert_eq!(holder.permits(), 3, "the dropped shrink did not settle");
    wait_status(&sem, "3 held", PROMPT, |st| st.used == 3).await;
}

/// After `Limiter::close` a shrink fails (the permit went with the close) and sends nothing.
async fn shrink_after_close<H: Harness>(h: &H) {
    let main = limiter(h).await;
    let sem = create(&main, "shrink-closed", 10).await;
    let mut holder = take(&sem, 8).await;
    within("close", PROMPT, main.close())
        .await
        .unwrap_or_else(|e| panic!("close: {e}"));
    assert_err!(
        holder.shrink_to(2).await,
        Error::Closed | Error::SessionLost,
        "shrink after close"
    );
    assert_eq!(holder.permits(), 8);
}

/// A lost permit refuses to shrink with `SessionLost` and keeps its weight.
async fn shrink_after_loss<H: Harness>(h: &H) {
    let main = limiter(h).await;
    let sem = create(&main, "shrink-lost", 10).await;
    let mut holder = take(&sem, 8).await;
    h.revoke_sessions().await;
    within(
        "lost() after the sessions were revoked",
        PROMPT,
        holder.lost(),
    )
    .await;
    assert_err!(
        holder.shrink_to(2).await,
        Error::SessionLost,
        "shrink after loss"
    );
    assert_eq!(holder.permits(), 8);
}

/// A store that cannot lower a held weight refuses with `InvalidArgument`, sends nothing
/// granting, and the holder keeps its whole weight.
async fn shrink_refused<H: Harness>(h: &H) {
    let main = limiter(h).await;
    let sem = create(&main, "shrink-refused", 10).await;
    let mut holder = take(&sem, 8).await;
    let waiter = spawn_acquire(&open(&limiter(h).await, "shrink-refused").await, 5);
    wait_status(&sem, "waiter of 5 queued", PROMPT, |st| st.waiting == 1).await;
    let refused = within("refused shrink", PROMPT, holder.shrink_to(5)).await;
    match refused {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("cannot lower"), "{m}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(holder.permits(), 8);
    let st = within("status", PROMPT, sem.status()).await;
    assert_eq!(st.map(|st| (st.used, st.waiting)).ok(), Some((8, 1)));
    assert_still_waiting("waiter of 5 after a refused shrink", &waiter, ms(100)).await;
    drop(holder);
    drop(join("waiter granted after the release", PROMPT, waiter).await);
}

/// Reads the status every poll until stopped, and fails if it ever shows more than the
/// capacity held.
struct CapacityWatch {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

/// Starts a [`CapacityWatch`] on `sem` (opened on a Limiter of its own, so the watch's reads
/// are not counted in the shrinking Limiter's requests); returns after its first read.
async fn watch_capacity(sem: Semaphore) -> CapacityWatch {
    let (stop, reads) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicUsize::new(0)),
    );
    let (flag, count) = (stop.clone(), reads.clone());
    let task = tokio::spawn(async move {
        let start = std::time::Instant::now();
        while !flag.load(Ordering::Acquire) && start.elapsed() < WATCH_LIMIT {
            if let Ok(st) = sem.status().await {
                assert!(
                    st.used <= st.capacity,
                    "more than the capacity held: {st:?}"
                );
                count.fetch_add(1, Ordering::AcqRel);
            }
            tokio::time::sleep(POLL).await;
        }
    });
    let started = std::time::Instant::now();
    while reads.load(Ordering::Acquire) == 0 && started.elapsed() < PROMPT {
        tokio::time::sleep(POLL).await;
    }
    assert!(
        reads.load(Ordering::Acquire) > 0,
        "the status watcher read nothing"
    );
    CapacityWatch { stop, task }
}

impl CapacityWatch {
    async fn stop(self) {
        self.stop.store(true, Ordering::Release);
        join("status watcher", PROMPT, self.task).await;
    }
}
