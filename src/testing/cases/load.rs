//! Safety under load: never more permits held at once than the capacity.

use super::setup::{create, limiter};
use crate::testing::harness::Harness;
use crate::testing::util::{join, ms, wait_entries, wait_status, within, Rng, PROMPT};
use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

/// Capacity 3, 8 separate Limiters × 10 acquire/hold/release cycles with weights 1–2: the weight
/// held at once (counted in-process between acquire returning and release starting) never
/// exceeds 3, and every cycle finishes.
pub async fn safety_under_load<H: Harness>(h: &H) {
    const CAPACITY: u32 = 3;
    const CLIENTS: u64 = 8;
    const CYCLES: usize = 10;
    let held = Arc::new(AtomicU32::new(0));
    let max_seen = Arc::new(AtomicU32::new(0));
    let mut tasks = Vec::new();
    let mut observer = None;
    for c in 0..CLIENTS {
        let l = limiter(h).await;
        let sem = create(&l, "load", CAPACITY).await;
        observer.get_or_insert_with(|| sem.clone());
        let (held, max_seen) = (held.clone(), max_seen.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng::new(c + 1);
            for cycle in 0..CYCLES {
                let w = 1 + rng.below(2) as u32;
                let permit = sem.acquire_many(w).await.unwrap_or_else(|e| {
                    panic!("client {c} cycle {cycle}: acquire_many({w}) failed: {e}")
                });
                let now = held.fetch_add(w, SeqCst) + w;
                max_seen.fetch_max(now, SeqCst);
                assert!(
                    now <= CAPACITY,
                    "client {c} cycle {cycle}: {now} permits held at once, capacity {CAPACITY}"
                );
                tokio::time::sleep(ms(rng.below(6))).await;
                assert!(!permit.is_lost(), "client {c} cycle {cycle}: permit lost");
                held.fetch_sub(w, SeqCst);
                permit
                    .release()
                    .await
                    .unwrap_or_else(|e| panic!("client {c} cycle {cycle}: release failed: {e}"));
            }
            drop(l);
        }));
    }
    within("all load cycles finish", Duration::from_secs(45), async {
        for (c, t) in tasks.into_iter().enumerate() {
            join(&format!("client {c}"), Duration::from_secs(45), t).await;
        }
    })
    .await;
    assert_eq!(held.load(SeqCst), 0);
    let max = max_seen.load(SeqCst);
    assert!(
        max >= 2,
        "never more than {max} permit(s) held at once: the load did not overlap"
    );
    let sem = observer.expect("at least one client");
    wait_status(&sem, "load semaphore idle", PROMPT, |st| {
        st.used == 0 && st.waiting == 0
    })
    .await;
    wait_entries(h, "load", 0, PROMPT).await;
}
