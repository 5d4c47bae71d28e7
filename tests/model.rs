//! Property test of the waiting logic: random interleavings of acquire / release / cancel /
//! weights / capacity changes, run through the public API against memory://, a real etcd and a
//! real ZooKeeper,
//! checked after every step against a deliberately simple reference model (a FIFO queue that
//! grants from the front while the weight fits).

use crate::support;

use clusterlimit::{AcquireOptions, Error, Limiter, Permit, Semaphore};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinHandle;

const LIMITERS: usize = 3;
/// How long every step may take to show its effect before the check fails.
const SETTLE: Duration = Duration::from_secs(3);

#[derive(Debug, Clone)]
enum Op {
    /// A new request of `weight` from limiter `from`.
    Acquire { from: usize, weight: u32 },
    /// Release the `n`-th current holder (mod count).
    Release(usize),
    /// Cancel the `n`-th current waiter (mod count).
    Cancel(usize),
    /// Change the capacity.
    SetCapacity(u32),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..LIMITERS, 1u32..=3).prop_map(|(from, weight)| Op::Acquire { from, weight }),
        3 => any::<usize>().prop_map(Op::Release),
        1 => any::<usize>().prop_map(Op::Cancel),
        1 => (1u32..=5).prop_map(Op::SetCapacity),
    ]
}

/// The reference: holders, and a FIFO queue granted from the front while it fits.
#[derive(Debug, Default)]
struct Model {
    capacity: u32,
    holders: BTreeMap<usize, u32>,
    queue: VecDeque<(usize, u32)>,
    failed: BTreeSet<usize>,
}

impl Model {
    fn settle(&mut self) {
        // A waiter heavier than the capacity can never be granted: it fails.
        let cap = self.capacity;
        let failed: Vec<usize> = self
            .queue
            .iter()
            .filter(|(_, w)| *w > cap)
            .map(|(id, _)| *id)
            .collect();
        self.failed.extend(failed);
        self.queue.retain(|(_, w)| *w <= cap);
        loop {
            let used: u32 = self.holders.values().sum();
            match self.queue.front() {
                Some(&(id, w)) if used + w <= self.capacity => {
                    self.queue.pop_front();
                    self.holders.insert(id, w);
                }
                _ => break,
            }
        }
    }
}

/// Outcome of each real request, filled in by its task.
type Results = Arc<Mutex<BTreeMap<usize, Result<Permit, String>>>>;

struct Real {
    sems: Vec<Semaphore>,
    results: Results,
    tasks: BTreeMap<usize, JoinHandle<()>>,
}

impl Real {
    /// Requests whose outcome is known and matches `ok` (granted when true, failed when false).
    fn finished(&self, ok: bool) -> BTreeSet<usize> {
        let r = self.results.lock().unwrap();
        r.iter()
            .filter(|(_, v)| v.is_ok() == ok)
            .map(|(k, _)| *k)
            .collect()
    }
    fn granted(&self) -> BTreeSet<usize> {
        self.finished(true)
    }
    fn failed(&self) -> BTreeSet<usize> {
        self.finished(false)
    }
}

async fn run_case(
    url_for: impl Fn(usize) -> String,
    capacity: u32,
    ops: Vec<Op>,
) -> Result<(), TestCaseError> {
    let mut limiters = Vec::new();
    let mut sems = Vec::new();
    for i in 0..LIMITERS {
        let l = Limiter::builder(&url_for(i))
            .owner(format!("l{i}"))
            .connect()
            .await
            .unwrap();
        sems.push(l.semaphore("model", capacity).await.unwrap());
        limiters.push(l);
    }
    let mut model = Model {
        capacity,
        ..Model::default()
    };
    let mut real = Real {
        sems,
        results: Arc::default(),
        tasks: BTreeMap::new(),
    };
    for (id, op) in ops.into_iter().enumerate() {
        match op {
            Op::Acquire { from, weight } => {
                if weight > model.capacity {
                    let r = real.sems[from].acquire_many(weight).await;
                    prop_assert!(
                        matches!(r, Err(Error::InvalidArgument(_))),
                        "weight above capacity: {r:?}"
                    );
                    continue;
                }
                model.queue.push_back((id, weight));
                let sem = real.sems[from].clone();
                let results = real.results.clone();
                real.tasks.insert(
                    id,
                    tokio::spawn(async move {
                        let r = sem
                            .acquire_with(AcquireOptions::new().permits(weight))
                            .await;
                        results
                            .lock()
                            .unwrap()
                            .insert(id, r.map_err(|e| e.to_string()));
                    }),
                );
                // The next request must queue behind this one: wait until the store has it.
                wait_until(|| async {
                    let st = real.sems[0].status().await.unwrap();
                    st.holders.len() + st.waiting >= model.holders.len() + model.queue.len()
                })
                .await;
            }
            Op::Release(n) => {
                if model.holders.is_empty() {
                    continue;
                }
                let id = *model.holders.keys().nth(n % model.holders.len()).unwrap();
                model.holders.remove(&id);
                let permit = real.results.lock().unwrap().remove(&id);
                let permit = permit
                    .expect("model holder is granted for real")
                    .expect("granted");
                permit.release().await.unwrap();
            }
            Op::Cancel(n) => {
                if model.queue.is_empty() {
                    continue;
                }
                let (id, _) = model.queue.remove(n % model.queue.len()).unwrap();
                real.tasks[&id].abort();
                // Abort may race with a grant: the model says it was waiting, so it must not be granted.
                let _ = (&mut real.tasks.get_mut(&id).unwrap()).await;
                let r = real.results.lock().unwrap().remove(&id);
                prop_assert!(
                    r.is_none(),
                    "request {id} finished although the model has it waiting: {r:?}"
                );
            }
            Op::SetCapacity(c) => {
                model.capacity = c;
                real.sems[id % LIMITERS].set_capacity(c).await.unwrap();
            }
        }
        model.settle();
        let want: BTreeSet<usize> = model.holders.keys().copied().collect();
        let want_used: u32 = model.holders.values().sum();
        let deadline = tokio::time::Instant::now() + SETTLE;
        loop {
            let got = real.granted();
            prop_assert!(
                got.is_subset(&want),
                "after step {id}: granted {got:?} but the model holds {want:?}; model {model:?}"
            );
            // A cancelled wait's entry goes in the background: the store view may lag a little.
            let st = real.sems[0].status().await.unwrap();
            let store_agrees = st.used == want_used && st.waiting == model.queue.len();
            if (got == want && store_agrees) || tokio::time::Instant::now() >= deadline {
                prop_assert_eq!(&got, &want, "after step {}: model {:?}", id, model);
                prop_assert_eq!(st.used, want_used, "used after step {}", id);
                prop_assert_eq!(st.waiting, model.queue.len(), "waiting after step {}", id);
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let failed = real.failed();
        for f in &model.failed {
            if !failed.contains(f) {
                // Failing happens on the same event as granting; allow it the same settle time.
                let deadline = tokio::time::Instant::now() + SETTLE;
                while !real.failed().contains(f) && tokio::time::Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                prop_assert!(
                    real.failed().contains(f),
                    "request {f} should have failed (weight above capacity)"
                );
            }
        }
    }
    // Nothing more may be granted after the last step.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let want: BTreeSet<usize> = model.holders.keys().copied().collect();
    prop_assert_eq!(real.granted(), want);
    for t in real.tasks.values() {
        t.abort();
    }
    for l in &limiters {
        l.close().await.unwrap();
    }
    Ok(())
}

async fn wait_until<F, Fut>(mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + SETTLE;
    while !cond().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "condition not reached in {SETTLE:?}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn memory_matches_model(capacity in 1u32..=4, ops in prop::collection::vec(op(), 1..40)) {
        static CASE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let case = CASE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        runtime().block_on(run_case(|_| format!("memory://model-{case}"), capacity, ops))?;
    }
}

fn etcd() -> &'static support::EtcdCluster {
    // One server for all cases of this test; each case has its own key prefix.
    static ETCD: std::sync::OnceLock<support::EtcdCluster> = std::sync::OnceLock::new();
    ETCD.get_or_init(support::EtcdCluster::single)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]
    #[test]
    fn etcd_matches_model(capacity in 1u32..=4, ops in prop::collection::vec(op(), 1..30)) {
        static CASE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let case = CASE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let url = etcd().url(&format!("model{case}"));
        runtime().block_on(run_case(|_| url.clone(), capacity, ops))?;
    }
}

fn zookeeper() -> &'static support::ZkCluster {
    // One server for all cases of this test (killed by its watchdog when the process exits);
    // each case has its own chroot.
    static ZK: std::sync::OnceLock<support::ZkCluster> = std::sync::OnceLock::new();
    ZK.get_or_init(support::ZkCluster::single)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]
    #[test]
    fn zookeeper_matches_model(capacity in 1u32..=4, ops in prop::collection::vec(op(), 1..30)) {
        static CASE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let case = CASE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let url = zookeeper().url(&format!("/model{case}"));
        runtime().block_on(run_case(|_| url.clone(), capacity, ops))?;
    }
}
