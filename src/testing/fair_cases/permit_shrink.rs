//! `Permit::shrink_to` on a fair semaphore: where the store shrinks there, the weight freed is
//! granted by the fair rule and the held-per-flow counts follow; where it cannot yet, the
//! refusal is clear and changes nothing.

use super::setup::{ask, fair, held_by_flow, limiter, queue, take};
use crate::testing::harness::Harness;
use crate::testing::util::{wait_status, within, PROMPT};

/// Capacity 10: flow a holds 8, flow b waits for 5. Shrinking a to 5 grants b (held per flow
/// a 5, b 5), the fencing token stays; on a store that refuses, a keeps 8 and b waits.
pub async fn fair_permit_shrink<H: Harness>(h: &H) {
    let l = limiter(h, "shrink").await;
    let sem = fair(&l, "fair-permit-shrink", 10, "critical=1,batch").await;
    let mut a = take(&sem, ask("a", "batch", 8, 1)).await;
    let token = a.fencing_token();
    let mut waiting = queue(&sem, &ask("b", "batch", 5, 1), 1, 0).await;
    let shrunk = within("shrink 8 → 5", PROMPT, a.shrink_to(5)).await;
    if !H::SHRINKS_FAIR_PERMITS {
        match shrunk {
            Err(crate::Error::InvalidArgument(m)) => assert!(m.contains("cannot"), "{m}"),
            other => panic!("expected a refusal, got {other:?}"),
        }
        let st = within("status", PROMPT, sem.status())
            .await
            .expect("status");
        assert_eq!((a.permits(), st.used, st.waiting), (8, 8, 1), "{st:?}");
        drop(a);
        wait_status(&sem, "b granted after a's release", PROMPT, |st| {
            held_by_flow(st).get("b") == Some(&5)
        })
        .await;
        drop(waiting);
        return;
    }
    shrunk.unwrap_or_else(|e| panic!("shrink 8 → 5: {e}"));
    assert_eq!((a.permits(), a.fencing_token()), (5, token));
    let st = wait_status(&sem, "b granted after the shrink", PROMPT, |st| {
        held_by_flow(st).get("b") == Some(&5)
    })
    .await;
    assert_eq!(held_by_flow(&st).get("a"), Some(&5), "{st:?}");
    assert_eq!((st.used, st.waiting), (10, 0), "{st:?}");
    waiting.clear();
}
