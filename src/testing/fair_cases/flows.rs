//! Flows: a busy flow holds up another by at most one grant, saturating flows share by weight,
//! a dead holder's permits go to the next in the fair order, a heavy request is not starved.

use super::setup::{ask, fair, finished, granted, held_by_flow, limiter, queue, take};
use crate::testing::harness::Harness;
use crate::testing::util::{wait_status, within, PROMPT};

/// Flow A holds all 2 permits and queues 20 more; flow B (another Limiter) queues one. The next
/// release grants B's request, not A's next waiter, and A's waiters are still all queued.
pub async fn fair_busy_flow_delays_another_by_one_grant<H: Harness>(h: &H) {
    let (la, lb) = (limiter(h, "host-a").await, limiter(h, "host-b").await);
    let sem_a = fair(&la, "fair-busy", 2, "default").await;
    let sem_b = fair(&lb, "fair-busy", 2, "default").await;
    let a = ask("tenant-a", "", 1, 1);
    let first = take(&sem_a, a.clone()).await;
    let _second = take(&sem_a, a.clone()).await;
    let mut a_waiting = queue(&sem_a, &a, 20, 0).await;
    let mut b_waiting = queue(&sem_b, &ask("tenant-b", "", 1, 1), 1, 20).await;
    within("release", PROMPT, first.release())
        .await
        .expect("release");
    let st = wait_status(&sem_a, "tenant-b granted", PROMPT, |st| {
        held_by_flow(st).get("tenant-b") == Some(&1)
    })
    .await;
    assert_eq!(st.waiting, 20, "a grant went to tenant-a as well: {st:?}");
    let _b_waiting_held = granted(&mut b_waiting, 1).await;
    assert!(
        finished(&mut a_waiting).is_empty(),
        "tenant-a's waiters still wait"
    );
    for w in a_waiting {
        w.abort();
    }
}

/// Flows of weight 1, 2 and 5 (each its own Limiter) all wait on a semaphore of capacity 8
/// held whole by a gate; when the gate releases, they are granted 1, 2 and 5 permits.
pub async fn fair_weights_share<H: Harness>(h: &H) {
    let gate_limiter = limiter(h, "gate").await;
    let gate_sem = fair(&gate_limiter, "fair-weights", 8, "default").await;
    let gate = take(&gate_sem, ask("gate", "", 8, 1)).await;
    let mut all = Vec::new();
    let mut limiters = Vec::new();
    for (i, weight) in [1u32, 2, 5].into_iter().enumerate() {
        let l = limiter(h, &format!("w{weight}")).await;
        let sem = fair(&l, "fair-weights", 8, "default").await;
        let opts = ask(&format!("w{weight}"), "", 1, weight);
        all.extend(queue(&sem, &opts, 8, i * 8).await);
        limiters.push((l, sem));
    }
    within("release", PROMPT, gate.release())
        .await
        .expect("release");
    let st = wait_status(&gate_sem, "8 permits granted", PROMPT, |st| st.used == 8).await;
    let by = held_by_flow(&st);
    let shares: Vec<u32> = ["w1", "w2", "w5"]
        .iter()
        .map(|f| by.get(*f).copied().unwrap_or(0))
        .collect();
    assert_eq!(shares, vec![1, 2, 5], "weights 1:2:5 at capacity 8: {by:?}");
    for w in all {
        w.abort();
    }
}

/// A holder's Limiter dies (closed without releasing): its permit goes to the next waiter in the
/// fair order (a flow holding nothing), not to the busy flow's next. Then a heavy request (3 of
/// 3) queued before lighter ones of another flow is granted whole, first.
pub async fn fair_dead_holder_and_heavy_entry<H: Harness>(h: &H) {
    let (la, lb, doomed) = (
        limiter(h, "a").await,
        limiter(h, "b").await,
        limiter(h, "doomed").await,
    );
    let sem_a = fair(&la, "fair-dead", 3, "default").await;
    let sem_b = fair(&lb, "fair-dead", 3, "default").await;
    let sem_d = fair(&doomed, "fair-dead", 3, "default").await;
    let _dying = take(&sem_d, ask("a", "", 1, 1)).await;
    let held_a = take(&sem_a, ask("a", "", 2, 1)).await;
    let mut a_next = queue(&sem_a, &ask("a", "", 1, 1), 1, 0).await;
    let mut b_next = queue(&sem_b, &ask("b", "", 1, 1), 1, 1).await;
    within("close", PROMPT, doomed.close())
        .await
        .expect("close");
    wait_status(&sem_a, "b granted after the holder died", PROMPT, |st| {
        held_by_flow(st).get("b") == Some(&1)
    })
    .await;
    let held_b = granted(&mut b_next, 1).await;
    assert!(
        finished(&mut a_next).is_empty(),
        "a's next waits: a holds 2, b held nothing"
    );
    for w in a_next {
        w.abort();
    }
    within("release", PROMPT, held_a.release())
        .await
        .expect("release");
    for p in held_b {
        within("release", PROMPT, p.release())
            .await
            .expect("release");
    }
    heavy_entry_is_granted_whole_first(&sem_a, &sem_b).await;
}

// Fresh flows: none has a recorded virtual time, so the earliest waiter breaks the tie.
async fn heavy_entry_is_granted_whole_first(sem_a: &crate::Semaphore, sem_b: &crate::Semaphore) {
    wait_status(sem_a, "nothing held", PROMPT, |st| {
        st.used == 0 && st.waiting == 0
    })
    .await;
    let gate = take(sem_a, ask("gate", "", 3, 1)).await;
    let mut heavy = queue(sem_b, &ask("heavy", "", 3, 1), 1, 0).await;
    let mut light = queue(sem_a, &ask("light", "", 1, 1), 3, 1).await;
    within("release", PROMPT, gate.release())
        .await
        .expect("release");
    let st = wait_status(sem_a, "the heavy request granted", PROMPT, |st| {
        held_by_flow(st).get("heavy") == Some(&3)
    })
    .await;
    assert_eq!(st.waiting, 3, "the light requests wait behind it: {st:?}");
    let _heavy_held = granted(&mut heavy, 1).await;
    assert!(finished(&mut light).is_empty());
    for w in light {
        w.abort();
    }
}

/// Capacity 1, every permit released at once: nothing is held when the next grant is decided,
/// yet flows take turns. Flow A holds the permit and queues 5 more, flow B (another Limiter)
/// queues 1 after them: A's release grants B's request, not A's next.
pub async fn fair_turns_at_capacity_one<H: Harness>(h: &H) {
    let (la, lb) = (limiter(h, "host-a").await, limiter(h, "host-b").await);
    let sem_a = fair(&la, "fair-one", 1, "default").await;
    let sem_b = fair(&lb, "fair-one", 1, "default").await;
    let a = ask("tenant-a", "", 1, 1);
    let held = take(&sem_a, a.clone()).await;
    let mut a_waiting = queue(&sem_a, &a, 5, 0).await;
    let mut b_waiting = queue(&sem_b, &ask("tenant-b", "", 1, 1), 1, 5).await;
    within("release", PROMPT, held.release())
        .await
        .expect("release");
    let st = wait_status(&sem_a, "tenant-b granted", PROMPT, |st| {
        held_by_flow(st).get("tenant-b") == Some(&1)
    })
    .await;
    assert_eq!(st.waiting, 5, "tenant-a's next waited: {st:?}");
    let _b_held = granted(&mut b_waiting, 1).await;
    assert!(
        finished(&mut a_waiting).is_empty(),
        "tenant-a's waiters still wait"
    );
    for w in a_waiting {
        w.abort();
    }
}
