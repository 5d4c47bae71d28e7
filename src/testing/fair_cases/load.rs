//! Safety under load on a fair semaphore: never more permits held than the capacity, every
//! request granted, nothing left queued, whatever the flows, classes and weights.

use super::setup::{ask, fair, limiter};
use crate::testing::harness::Harness;
use crate::testing::util::{join, ms, wait_entries, wait_status, within, Rng, PROMPT};
use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

/// Capacity 4 with classes `critical=1,batch`, 8 Limiters × 12 cycles, each request of one of 3
/// flows, a random class, weight 1–3 and 1–2 permits: the permits held at once (counted
/// in-process while held) never exceed 4, every cycle finishes, and the queue ends empty.
pub async fn fair_safety_under_load<H: Harness>(h: &H) {
    const CAPACITY: u32 = 4;
    const CLIENTS: u64 = 8;
    const CYCLES: usize = 12;
    let held = Arc::new(AtomicU32::new(0));
    let max_seen = Arc::new(AtomicU32::new(0));
    let mut tasks = Vec::new();
    let mut observer = None;
    for c in 0..CLIENTS {
        let l = limiter(h, &format!("client-{c}")).await;
        let sem = fair(&l, "fair-load", CAPACITY, "critical=1,batch").await;
        observer.get_or_insert_with(|| sem.clone());
        let (held, max_seen) = (held.clone(), max_seen.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng::new(c + 11);
            for cycle in 0..CYCLES {
                let flow = format!("tenant-{}", rng.below(3));
                let class = ["critical", "batch"][rng.below(2) as usize];
                let (permits, weight) = (1 + rng.below(2) as u32, 1 + rng.below(3) as u32);
                let opts = ask(&flow, class, permits, weight);
                let permit = sem.acquire_with(opts).await.unwrap_or_else(|e| {
                    panic!("client {c} cycle {cycle}: acquire ({flow}, {class}, {permits}) failed: {e}")
                });
                let now = held.fetch_add(permits, SeqCst) + permits;
                max_seen.fetch_max(now, SeqCst);
                assert!(now <= CAPACITY, "client {c} cycle {cycle}: {now} permits held at once, capacity {CAPACITY}");
                tokio::time::sleep(ms(rng.below(6))).await;
                assert!(!permit.is_lost(), "client {c} cycle {cycle}: permit lost");
                held.fetch_sub(permits, SeqCst);
                permit.release().await.unwrap_or_else(|e| panic!("client {c} cycle {cycle}: release failed: {e}"));
            }
            drop(l);
        }));
    }
    within("all load cycles finish", Duration::from_secs(60), async {
        for (c, t) in tasks.into_iter().enumerate() {
            join(&format!("client {c}"), Duration::from_secs(60), t).await;
        }
    })
    .await;
    let max = max_seen.load(SeqCst);
    assert!(
        max >= 3,
        "never more than {max} permit(s) held at once: the load did not overlap"
    );
    let sem = observer.expect("at least one client");
    wait_status(&sem, "fair semaphore idle", PROMPT, |st| {
        st.used == 0 && st.waiting == 0
    })
    .await;
    wait_entries(h, "fair-load", 0, PROMPT).await;
}
