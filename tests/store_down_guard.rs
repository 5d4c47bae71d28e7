//! `StoreDownGuard` against real stores that die: each policy's answer, answered at once while
//! the store is known down, errors that are not the store's never hidden, and recovery.

use crate::support;

use clusterlimit::{
    DecisionSource, Error, GuardedDecision, KeyCheck, Limiter, Quota, RateLimit, StoreDownGuard,
    StoreDownPolicy,
};
use std::time::Duration;
use support::{EtcdCluster, ZkCluster};
use tokio::time::Instant;

/// A Limiter that notices a dead store quickly.
async fn quick_limiter(url: &str) -> Limiter {
    Limiter::builder(url)
        .request_timeout(Duration::from_secs(1))
        .session_ttl(Duration::from_secs(2))
        .connect()
        .await
        .unwrap()
}

fn guard(policy: StoreDownPolicy) -> StoreDownGuard {
    StoreDownGuard::new(policy)
        .retry_interval(Duration::from_secs(1))
        .store_timeout(Duration::from_millis(300))
}

/// The first check after the store died: the policy's answer within the store timeout (plus
/// slack for a loaded machine). A dead store gives no error, only silence, so the breaker
/// opens once the silence persists (`SLOW_OPEN_AFTER`): the checks until then each wait their
/// store timeout and get the policy's answer too (on another key).
async fn first_after_death(g: &StoreDownGuard, rl: &RateLimit, key: &str) -> GuardedDecision {
    let t = Instant::now();
    let answer = g.check_n(rl, key, 1).await.unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "the first check learned of the dead store only after {:?}",
        t.elapsed()
    );
    assert_ne!(answer.source, DecisionSource::Store, "{answer:?}");
    let opened_by = t + clusterlimit::ClusterBreaker::SLOW_OPEN_AFTER + Duration::from_secs(5);
    for _ in 0..100 {
        if g.store_down() {
            break;
        }
        assert!(
            Instant::now() < opened_by,
            "the breaker did not open within 5 s of SLOW_OPEN_AFTER of silence"
        );
        // Another key: the local share of `key` stays as the first answer left it.
        let more = g.check_n(rl, "until-open", 1).await.unwrap();
        assert_eq!(more.source, answer.source, "{more:?}");
    }
    assert!(g.store_down(), "the guard knows the store is down");
    let b = g.breaker();
    assert!(b.open && b.opened == 1 && b.slow >= 3, "{b:?}");
    answer
}

/// `n` checks while the store is known down: every one answered without waiting on the store.
/// Returns the answers; prints p50/p99 of their latency.
async fn while_down(
    g: &StoreDownGuard,
    rl: &RateLimit,
    key: &str,
    n: usize,
) -> Vec<GuardedDecision> {
    let mut answers = Vec::with_capacity(n);
    let mut took = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        answers.push(g.check_n(rl, key, 1).await.unwrap());
        took.push(t.elapsed());
    }
    took.sort();
    let p50 = took[n / 2];
    let p99 = took[(n * 99 / 100).min(n - 1)];
    println!(
        "store known down ({}): p50 {p50:?}, p99 {p99:?} over {n} checks",
        g.policy()
    );
    // ≤ 1 ms is typical; a loaded 2-core machine gets a wide margin.
    assert!(
        p99 < Duration::from_millis(50),
        "p99 {p99:?} while the store is known down"
    );
    answers
}

/// Checks until the store decides again (bounded: 30 s).
async fn until_store_answers(g: &StoreDownGuard, rl: &RateLimit, key: &str) -> GuardedDecision {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answer = g.check_n(rl, key, 1).await.unwrap();
        if answer.source == DecisionSource::Store {
            assert!(!g.store_down());
            return answer;
        }
        assert!(
            Instant::now() < deadline,
            "the store did not decide within 30 s of its restart"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_open_admits_uncounted_while_etcd_is_down_and_recovers() {
    let mut cluster = EtcdCluster::single();
    let limiter = quick_limiter(&cluster.url("guard-open")).await;
    let rl = limiter
        .rate_limit("api", Quota::per_minute(100))
        .await
        .unwrap();
    let g = guard(StoreDownPolicy::FailOpen);
    let first = g.check_n(&rl, "k", 1).await.unwrap();
    assert_eq!(first.source, DecisionSource::Store);
    assert!(first.decision.allowed && first.decision.remaining == 99);
    assert!(!g.store_down());

    cluster.kill(0);
    let a = first_after_death(&g, &rl, "k").await;
    assert_eq!(a.source, DecisionSource::FailOpen);
    assert!(a.decision.allowed);
    assert_eq!((a.decision.limit, a.decision.remaining), (100, 100));
    assert_eq!(a.decision.retry_after, None);
    // Far more than the limit: all admitted, none counted.
    for a in while_down(&g, &rl, "k", 200).await {
        assert_eq!(a.source, DecisionSource::FailOpen);
        assert!(a.decision.allowed);
    }

    cluster.restart(0);
    let back = until_store_answers(&g, &rl, "k").await;
    // Only what the store counted: the first check, this one, and the probes (one per second
    // while down, at most ~20 here: a probe that timed out may still have been written). Had
    // the 200 fail-open admissions been counted, the key would be spent.
    assert!(back.decision.allowed);
    assert!(
        back.decision.remaining >= 78,
        "fail-open admissions were counted: {:?}",
        back.decision
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_closed_denies_with_the_retry_interval_while_etcd_is_down() {
    let mut cluster = EtcdCluster::single();
    let limiter = quick_limiter(&cluster.url("guard-closed")).await;
    let rl = limiter
        .rate_limit("api", Quota::per_second(100))
        .await
        .unwrap();
    let g = guard(StoreDownPolicy::FailClosed);
    assert_eq!(
        g.check_n(&rl, "k", 1).await.unwrap().source,
        DecisionSource::Store
    );

    cluster.kill(0);
    let a = first_after_death(&g, &rl, "k").await;
    assert_eq!(a.source, DecisionSource::FailClosed);
    assert!(!a.decision.allowed);
    assert_eq!(a.decision.retry_after, Some(Duration::from_secs(1)));
    assert_eq!(a.decision.remaining, 0);
    for a in while_down(&g, &rl, "k", 100).await {
        assert_eq!(a.source, DecisionSource::FailClosed);
        assert!(!a.decision.allowed);
    }

    // Errors that are not the store's are never hidden by the policy.
    let bad_key = g.check_n(&rl, "", 1).await.unwrap_err();
    assert!(
        matches!(bad_key, Error::InvalidArgument(ref m) if m.contains("key")),
        "{bad_key}"
    );
    let too_big = g.check_n(&rl, "k", 101).await.unwrap_err();
    assert!(
        matches!(too_big, Error::InvalidArgument(ref m) if m.contains("cost 101")),
        "{too_big}"
    );
    let none = g.check_all(&limiter, &[]).await.unwrap_err();
    assert!(matches!(none, Error::InvalidArgument(_)), "{none}");

    cluster.restart(0);
    let back = until_store_answers(&g, &rl, "k").await;
    assert!(back.decision.allowed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_share_counts_in_process_while_etcd_is_down() {
    let mut cluster = EtcdCluster::single();
    let limiter = quick_limiter(&cluster.url("guard-local")).await;
    let api = limiter
        .rate_limit("api", Quota::per_minute(10))
        .await
        .unwrap();
    let global = limiter
        .rate_limit("all", Quota::per_minute(30).burst(30))
        .await
        .unwrap();
    // Two replicas share the limit: 5 per minute each while the store is down.
    let g = guard(StoreDownPolicy::Local { replicas: 2 });
    assert_eq!(
        g.check_n(&api, "warm", 1).await.unwrap().source,
        DecisionSource::Store
    );

    cluster.kill(0);
    let a = first_after_death(&g, &api, "k").await;
    assert_eq!(a.source, DecisionSource::Local);
    assert!(a.decision.allowed);
    assert_eq!((a.decision.limit, a.decision.remaining), (5, 4));
    let rest = while_down(&g, &api, "k", 7).await;
    let admitted = rest.iter().filter(|a| a.decision.allowed).count();
    assert_eq!(admitted, 4, "5 of 8 admitted locally: {rest:?}");
    assert!(rest.iter().all(|a| a.source == DecisionSource::Local));
    let denied = rest.last().unwrap().decision;
    assert!(!denied.allowed && denied.retry_after.is_some());

    // check_all stays all or nothing on the local shares: "k" is spent, so "all" is not charged.
    let both = [
        KeyCheck::new(&api, "k", 1),
        KeyCheck::new(&global, "everyone", 1),
    ];
    let answers = g.check_all(&limiter, &both).await.unwrap();
    assert_eq!(answers.len(), 2);
    assert!(answers.iter().all(|a| a.source == DecisionSource::Local));
    assert!(!answers[0].decision.allowed);
    let fresh = [
        KeyCheck::new(&api, "other", 1),
        KeyCheck::new(&global, "everyone", 1),
    ];
    let answers = g.check_all(&limiter, &fresh).await.unwrap();
    assert!(answers.iter().all(|a| a.decision.allowed), "{answers:?}");
    assert_eq!(
        answers[1].decision.remaining, 14,
        "the global share (15) was charged once"
    );

    // A cost the whole limit admits but a share cannot: denied, not an error.
    let big = g.check_n(&api, "fresh", 8).await.unwrap();
    assert!(!big.decision.allowed);
    assert_eq!(big.source, DecisionSource::Local);

    cluster.restart(0);
    let back = until_store_answers(&g, &api, "k").await;
    assert!(
        back.decision.allowed,
        "the store never saw the local admissions"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_share_while_zookeeper_is_down() {
    let mut cluster = ZkCluster::single();
    let limiter = quick_limiter(&cluster.url("/guard-local")).await;
    let rl = limiter
        .rate_limit("api", Quota::per_minute(9))
        .await
        .unwrap();
    let g = guard(StoreDownPolicy::Local { replicas: 3 });
    assert_eq!(
        g.check_n(&rl, "k", 1).await.unwrap().source,
        DecisionSource::Store
    );

    cluster.kill(0);
    let a = first_after_death(&g, &rl, "k").await;
    assert_eq!(a.source, DecisionSource::Local);
    let rest = while_down(&g, &rl, "k", 5).await;
    let admitted = 1 + rest.iter().filter(|a| a.decision.allowed).count();
    assert_eq!(admitted, 3, "a third of 9 admitted locally");

    cluster.restart(0);
    until_store_answers(&g, &rl, "k").await;
}

#[tokio::test]
async fn a_closed_limiter_is_an_error_not_a_fallback() {
    let limiter = Limiter::connect("memory://guard-closed-limiter")
        .await
        .unwrap();
    let rl = limiter
        .rate_limit("api", Quota::per_second(5))
        .await
        .unwrap();
    let g = StoreDownGuard::new(StoreDownPolicy::FailOpen);
    limiter.close().await.unwrap();
    let e = g.check_n(&rl, "k", 1).await.unwrap_err();
    assert!(matches!(e, Error::Closed), "{e}");
    assert!(!g.store_down());
}

/// The one wait through the guard: a store-down answer ends it at once (waiting would not bring
/// the store back), a local share's denial is waited on like the store's, and `stop` ends a wait
/// between checks without consuming.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guarded_wait_ends_at_a_fallback_and_waits_on_a_local_share() {
    use clusterlimit::Waited;
    let mut cluster = EtcdCluster::single();
    let limiter = quick_limiter(&cluster.url("guard-wait")).await;
    let rl = limiter
        .rate_limit("api", Quota::per_second(4).burst(1))
        .await
        .unwrap();
    let closed = guard(StoreDownPolicy::FailClosed);
    let local = guard(StoreDownPolicy::Local { replicas: 1 });

    // Store up: the second of two waits sleeps about one emission interval (250 ms).
    let soon = || Some(Instant::now() + Duration::from_secs(2));
    let first = closed.wait_until(&rl, "k", 1, soon()).await.unwrap();
    assert!(matches!(first, Waited::Admitted(g) if g.source == DecisionSource::Store));
    let t = Instant::now();
    let second = closed.wait_until(&rl, "k", 1, soon()).await.unwrap();
    assert!(matches!(second, Waited::Admitted(_)), "{second:?}");
    assert!(
        t.elapsed() >= Duration::from_millis(100),
        "{:?}",
        t.elapsed()
    );

    // Stopped while it sleeps (no deadline, the next chance a minute away).
    let slow = limiter
        .rate_limit("slow", Quota::per_minute(1))
        .await
        .unwrap();
    assert!(
        closed
            .check_n(&slow, "k", 1)
            .await
            .unwrap()
            .decision
            .allowed
    );
    let stopped = closed
        .wait_until_or(&slow, "k", 1, None, async {})
        .await
        .unwrap();
    assert!(matches!(stopped, Waited::Stopped), "{stopped:?}");
    // A cost of 0 is a peek, not a wait.
    let zero = closed.wait_until(&rl, "k", 0, soon()).await;
    assert!(matches!(zero, Err(Error::InvalidArgument(_))), "{zero:?}");

    cluster.kill(0);
    first_after_death(&closed, &rl, "down").await;
    let t = Instant::now();
    let w = closed.wait_until(&rl, "k", 1, soon()).await.unwrap();
    assert!(
        matches!(w, Waited::Denied(g) if g.source == DecisionSource::FailClosed),
        "{w:?}"
    );
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );

    // The local share (1 per 250 ms here) denies the second check, and the wait sleeps it out.
    first_after_death(&local, &rl, "down").await;
    let admitted = local.wait_until(&rl, "w", 1, soon()).await.unwrap();
    assert!(matches!(admitted, Waited::Admitted(g) if g.source == DecisionSource::Local));
    let t = Instant::now();
    let again = local.wait_until(&rl, "w", 1, soon()).await.unwrap();
    assert!(
        matches!(again, Waited::Admitted(g) if g.source == DecisionSource::Local),
        "{again:?}"
    );
    assert!(
        t.elapsed() >= Duration::from_millis(100),
        "{:?}",
        t.elapsed()
    );
}

/// A wait that may not wait (`deadline` now, as the sidecar's `timeout_ms: 0`) is one check,
/// and a store that takes a few ms to answer it is busy, not down: the store decides (one
/// admitted, the rest denied and counted), fail open admits nothing it did not count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_that_may_not_wait_is_answered_by_the_store() {
    let cluster = EtcdCluster::single();
    let limiter = quick_limiter(&cluster.url("guard-zero-wait")).await;
    let rl = limiter
        .rate_limit("api", Quota::per_minute(1))
        .await
        .unwrap();
    let open = guard(StoreDownPolicy::FailOpen);
    let mut sources = Vec::new();
    let mut admitted = 0;
    for _ in 0..100 {
        let t = Instant::now();
        let w = open
            .wait_until(&rl, "k", 1, Some(Instant::now()))
            .await
            .unwrap();
        assert!(
            t.elapsed() < Duration::from_millis(400),
            "{:?}",
            t.elapsed()
        );
        let g = w.into_answer().unwrap();
        admitted += usize::from(g.decision.allowed);
        sources.push(g.source);
    }
    assert!(
        sources.iter().all(|s| *s == DecisionSource::Store),
        "{sources:?}"
    );
    assert_eq!(admitted, 1, "{sources:?}");
    assert!(!open.store_down());
}

/// The guarded wait as a priority class (`wait_with`): on etcd it waits out the class's
/// reserve (the unclassed check then takes it), a budget of zero is one check, bad classes and
/// costs are errors before anything is asked; while etcd is down fail open admits as the class
/// (its reserve held back in `remaining`), and a local share keeps the class's share of its
/// reserve, its denial waited on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guarded_wait_as_a_class_keeps_its_reserve() {
    use clusterlimit::{CheckOptions, Waited};
    let mut cluster = EtcdCluster::single();
    let limiter = quick_limiter(&cluster.url("guard-wait-class")).await;
    // 4 a second, burst 3, batch leaves 2: batch takes 1 of a full bucket, then one per 250 ms.
    let quota = Quota::per_second(4).burst(3).reserve("batch", 2);
    let rl = limiter.rate_limit("api", quota).await.unwrap();
    let open = guard(StoreDownPolicy::FailOpen);
    let local = guard(StoreDownPolicy::Local { replicas: 1 });
    let batch = || CheckOptions::new().class("batch");
    let up_to = |d: u64| batch().within(Duration::from_millis(d));

    let first = open.wait_with(&rl, "k", up_to(2000)).await.unwrap();
    assert!(
        matches!(first, Waited::Admitted(g) if g.source == DecisionSource::Store && g.decision.remaining == 0),
        "{first:?}"
    );
    // No time to wait: one check, denied, nothing consumed.
    let now = open.wait_with(&rl, "k", up_to(0)).await.unwrap();
    assert!(
        matches!(now, Waited::Denied(g) if g.source == DecisionSource::Store),
        "{now:?}"
    );
    let t = Instant::now();
    let second = open.wait_with(&rl, "k", up_to(2000)).await.unwrap();
    assert!(matches!(second, Waited::Admitted(_)), "{second:?}");
    assert!(
        t.elapsed() >= Duration::from_millis(100),
        "batch waited only {:?} for its reserve to refill",
        t.elapsed()
    );
    // Without a class the reserve is there to take.
    let plain = open.check_n(&rl, "k", 2).await.unwrap();
    assert!(plain.decision.allowed, "{plain:?}");
    // Stopped while it sleeps: nothing consumed.
    let stopped = open
        .wait_with_or(&rl, "k", batch(), async {})
        .await
        .unwrap();
    assert!(matches!(stopped, Waited::Stopped), "{stopped:?}");

    // Bad input is an error, asked of nobody.
    for (options, what) in [
        (CheckOptions::new().class("bulk"), "bulk"),
        (batch().cost(2), "batch"),
        (batch().cost(0), "cost 0"),
        (CheckOptions::new().class("a b"), "a b"),
    ] {
        let e = open.wait_with(&rl, "k", options).await.unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
        assert!(e.to_string().contains(what), "{what} in {e}");
    }

    cluster.kill(0);
    first_after_death(&open, &rl, "down").await;
    let w = open.wait_with(&rl, "k", up_to(2000)).await.unwrap();
    assert!(
        matches!(w, Waited::Admitted(g) if g.source == DecisionSource::FailOpen && g.decision.remaining == 1),
        "fail open admits the class with its reserve held back: {w:?}"
    );
    let e = open.wait_with(&rl, "k", batch().cost(2)).await.unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");

    // The local share (the whole quota, one replica): batch takes 1, then waits ~250 ms.
    first_after_death(&local, &rl, "down").await;
    let w = local.wait_with(&rl, "w", up_to(2000)).await.unwrap();
    assert!(
        matches!(w, Waited::Admitted(g) if g.source == DecisionSource::Local),
        "{w:?}"
    );
    let denied = local.wait_with(&rl, "w", up_to(0)).await.unwrap();
    assert!(
        matches!(denied, Waited::Denied(g) if g.source == DecisionSource::Local),
        "{denied:?}"
    );
    let t = Instant::now();
    let again = local.wait_with(&rl, "w", up_to(2000)).await.unwrap();
    assert!(
        matches!(again, Waited::Admitted(g) if g.source == DecisionSource::Local),
        "{again:?}"
    );
    assert!(
        t.elapsed() >= Duration::from_millis(100),
        "{:?}",
        t.elapsed()
    );
    // The share keeps the reserve for the unclassed.
    let plain = local.check_n(&rl, "w", 2).await.unwrap();
    assert!(plain.decision.allowed, "{plain:?}");
}

/// Fair flows through the guard: bad flow names are errors before anything is asked (store up
/// or down); while etcd is down fail open admits whatever the flow, and a local share keeps
/// fair flows among the flows this process sees — in `check_with` and in `check_all`, whose
/// checks keep their flows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_share_keeps_fair_flows_while_etcd_is_down() {
    use clusterlimit::{Algorithm, CheckOptions};
    let mut cluster = EtcdCluster::single();
    let limiter = quick_limiter(&cluster.url("guard-flows")).await;
    // 20 a year, two replicas: a share of 10, still shared by flow.
    let quota = Quota::new(20, Duration::from_secs(365 * 86_400))
        .algorithm(Algorithm::FixedWindow)
        .fair_flows();
    let rl = limiter.rate_limit("api", quota).await.unwrap();
    let open = guard(StoreDownPolicy::FailOpen);
    let local = guard(StoreDownPolicy::Local { replicas: 2 });
    let flow = |f: &str, cost: u64| CheckOptions::new().flow(f).cost(cost);
    let warm = local.check_with(&rl, "warm", flow("a", 1)).await.unwrap();
    assert_eq!(warm.source, DecisionSource::Store, "{warm:?}");
    bad_flows(&local, &limiter, &rl).await;

    cluster.kill(0);
    first_after_death(&open, &rl, "down").await;
    let a = open.check_with(&rl, "k", flow("a", 20)).await.unwrap();
    assert!(
        a.decision.allowed && a.source == DecisionSource::FailOpen,
        "{a:?}"
    );
    bad_flows(&open, &limiter, &rl).await;

    first_after_death(&local, &rl, "down").await;
    let a = local.check_with(&rl, "k", flow("a", 8)).await.unwrap();
    assert!(
        a.decision.allowed && a.source == DecisionSource::Local,
        "{a:?}"
    );
    // b asks 5 with 2 left: denied, and counted; a must leave b those 2.
    let b = local.check_with(&rl, "k", flow("b", 5)).await.unwrap();
    assert!(!b.decision.allowed, "{b:?}");
    let a = local.check_with(&rl, "k", flow("a", 1)).await.unwrap();
    assert!(!a.decision.allowed, "a keeps b's share: {a:?}");
    // check_all (all or nothing) with each check's flow.
    let of = |f: &str, cost: u64| {
        [
            KeyCheck::new(&rl, "k", cost).flow(f),
            KeyCheck::new(&rl, "other", 1).flow(f),
        ]
    };
    let answers = local.check_all(&limiter, &of("a", 1)).await.unwrap();
    assert!(answers.iter().all(|g| g.source == DecisionSource::Local));
    assert!(!answers[0].decision.allowed, "{answers:?}");
    let answers = local.check_all(&limiter, &of("b", 2)).await.unwrap();
    assert!(
        answers.iter().all(|g| g.decision.allowed),
        "b takes its due: {answers:?}"
    );
    bad_flows(&local, &limiter, &rl).await;
}

/// Bad flow names are `InvalidArgument` through `g`, alone and in a `check_all` of two.
async fn bad_flows(g: &StoreDownGuard, limiter: &Limiter, rl: &RateLimit) {
    use clusterlimit::CheckOptions;
    let e = g
        .check_with(rl, "k", CheckOptions::new().flow(""))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    assert!(e.to_string().contains("flow name"), "{e}");
    let checks = [
        KeyCheck::new(rl, "k", 1).flow("a\tb"),
        KeyCheck::new(rl, "other", 1),
    ];
    let e = g.check_all(limiter, &checks).await.unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    assert!(e.to_string().contains("control character"), "{e}");
}
