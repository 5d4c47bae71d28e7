//! What the fair cases start with: a fair semaphore, acquires of a flow spawned and seen
//! queued, and who holds by flow.

use crate::fair::Classes;
use crate::testing::harness::Harness;
use crate::testing::harness::LimiterOptions;
use crate::testing::util::{connect, wait_status, within, PROMPT};
use crate::{AcquireOptions, Limiter, Permit, Semaphore, Status};
use std::collections::BTreeMap;
use tokio::task::JoinHandle;

/// A Limiter with the default session TTL, owner `owner`.
pub(super) async fn limiter<H: Harness>(h: &H, owner: &str) -> Limiter {
    connect(h, LimiterOptions::new().owner(owner)).await
}

/// Creates (or opens) the fair semaphore `name` promptly.
pub(super) async fn fair(limiter: &Limiter, name: &str, capacity: u32, classes: &str) -> Semaphore {
    let classes: Classes = classes.parse().expect("class table");
    within(
        "fair_semaphore()",
        PROMPT,
        limiter.fair_semaphore(name, capacity, classes),
    )
    .await
    .unwrap_or_else(|e| panic!("fair_semaphore({name:?}, {capacity}): {e}"))
}

/// An acquire of `flow` in `class` (`""`: none named) of `permits`, weight `weight`.
pub(super) fn ask(flow: &str, class: &str, permits: u32, weight: u32) -> AcquireOptions {
    let opts = AcquireOptions::new()
        .flow(flow)
        .permits(permits)
        .weight(weight);
    if class.is_empty() {
        opts
    } else {
        opts.class(class)
    }
}

/// Acquires with `opts`, which must be granted promptly.
pub(super) async fn take(sem: &Semaphore, opts: AcquireOptions) -> Permit {
    within("acquire_with", PROMPT, sem.acquire_with(opts.clone()))
        .await
        .unwrap_or_else(|e| panic!("acquire {opts:?} on {:?}: {e}", sem.name()))
}

/// Spawns `n` acquires with `opts`, one after another seen queued (so their order is known):
/// `waiting_before` requests wait before the first.
pub(super) async fn queue(
    sem: &Semaphore,
    opts: &AcquireOptions,
    n: usize,
    waiting_before: usize,
) -> Vec<JoinHandle<crate::Result<Permit>>> {
    let mut handles = Vec::with_capacity(n);
    for i in 0..n {
        let (s, o) = (sem.clone(), opts.clone());
        handles.push(tokio::spawn(async move { s.acquire_with(o).await }));
        let queued = waiting_before + i + 1;
        wait_status(sem, &format!("request {queued} queued"), PROMPT, |st| {
            st.waiting >= queued
        })
        .await;
    }
    handles
}

/// Permits held per flow.
pub(super) fn held_by_flow(st: &Status) -> BTreeMap<String, u32> {
    let mut by = BTreeMap::new();
    for h in &st.holders {
        *by.entry(h.flow.clone().unwrap_or_default()).or_insert(0) += h.permits;
    }
    by
}

/// Waits (promptly) until `n` of `handles` have finished, and returns their permits (each
/// must have succeeded), leaving the others.
pub(super) async fn granted(
    handles: &mut Vec<JoinHandle<crate::Result<Permit>>>,
    n: usize,
) -> Vec<Permit> {
    let start = std::time::Instant::now();
    while handles.iter().filter(|h| h.is_finished()).count() < n && start.elapsed() < PROMPT {
        tokio::time::sleep(crate::testing::util::POLL).await;
    }
    let permits = finished(handles);
    assert_eq!(permits.len(), n, "acquires returned within {PROMPT:?}");
    permits
}

/// The permits of every finished acquire (which must have succeeded), leaving the others.
pub(super) fn finished(handles: &mut Vec<JoinHandle<crate::Result<Permit>>>) -> Vec<Permit> {
    let (done, waiting): (Vec<_>, Vec<_>) = handles.drain(..).partition(|h| h.is_finished());
    *handles = waiting;
    done.into_iter()
        .map(|h| {
            futures::FutureExt::now_or_never(h)
                .expect("finished")
                .expect("task")
                .unwrap_or_else(|e| panic!("a queued acquire failed: {e}"))
        })
        .collect()
}
