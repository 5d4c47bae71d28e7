//! Adaptive semaphores through failures, on real 3-member etcd and ZooKeeper clusters: the
//! controller's process is SIGKILLed (another Limiter takes control within the session TTL
//! plus 1 s, and the stored capacity does not move in between), then the store's leader is
//! SIGKILLed (the controller keeps stepping once the store answers again, within bounds).

use crate::support;

use clusterlimit::adaptive::{Adaptive, Aimd, CapacityAlgorithm, Outcome};
use clusterlimit::testing::adaptive_cases::wait_adaptive;
use clusterlimit::{Limiter, Semaphore};
use std::io::{Read, Write};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use support::holder_process::spawn_self;
use support::zookeeper::ZkCluster;
use support::EtcdCluster;

/// Set in the child process: the store URL it controls "dep" on.
const CHILD_URL_ENV: &str = "CLUSTERLIMIT_TEST_ADAPTIVE_CHILD_URL";
const TTL: Duration = Duration::from_secs(2);
const WINDOW: Duration = Duration::from_millis(200);
const NAME: &str = "dep";

fn config() -> Adaptive {
    Adaptive::with(CapacityAlgorithm::Aimd(Aimd::default().backoff(0.95)))
        .min(2)
        .max(100)
        .initial(80)
        .window(WINDOW)
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

async fn connect(url: &str, owner: &str) -> Limiter {
    Limiter::builder(url)
        .owner(owner)
        .session_ttl(TTL)
        .request_timeout(Duration::from_secs(1))
        .connect()
        .await
        .unwrap_or_else(|e| panic!("connect {owner} to {url}: {e}"))
}

/// The child's part: opens the adaptive semaphore (first, so it takes the controller seat),
/// prints `OPEN`, and controls it until it is killed or its stdin closes (at most 2 minutes).
fn control_if_child() {
    let Ok(url) = std::env::var(CHILD_URL_ENV) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("child: runtime");
    let kept = rt.block_on(async {
        let limiter = connect(&url, "child").await;
        let sem = limiter
            .adaptive_semaphore(NAME, config())
            .await
            .expect("child: adaptive_semaphore");
        println!("\nOPEN");
        std::io::stdout().flush().expect("child: flush");
        (limiter, sem)
    });
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        let _ = tx.send(());
    });
    let _ = rx.recv_timeout(Duration::from_secs(120));
    drop(kept);
    std::process::exit(0);
}

/// Starts this test binary again as the controlling child; returns once it has the semaphore
/// open.
async fn spawn_child(test: &str, url: &str) -> tokio::process::Child {
    let test = support::holder_process::test_name(module_path!(), test);
    let args = [test.as_str(), "--exact", "--nocapture"];
    let (child, _, mut lines) = spawn_self(&args, &[(CHILD_URL_ENV, url)], "OPEN").await;
    // Keep reading its stdout so it never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    child
}

/// Reports a drop through `sem` every few milliseconds until `stop`.
fn report_drops(sem: Semaphore, stop: tokio_util::sync::CancellationToken) {
    tokio::spawn(async move {
        for _ in 0..1_000_000 {
            if stop.is_cancelled() {
                break;
            }
            if let Ok(p) = sem.acquire_timeout(Duration::from_millis(500)).await {
                let _ = p.release_with(Outcome::Dropped).await;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
}

async fn the_controller_and_the_store_leader_die(
    test: &str,
    url: &str,
    kill_leader: impl std::future::Future<Output = ()>,
) {
    let mut child = spawn_child(test, url).await;
    let parent = connect(url, "parent").await;
    let sem = parent
        .adaptive_semaphore(NAME, config())
        .await
        .expect("parent: adaptive_semaphore");
    let stop = tokio_util::sync::CancellationToken::new();
    report_drops(sem.clone(), stop.clone());

    // The child controls: its steps bring the capacity down from 80.
    let st = wait_adaptive(
        &sem,
        "the child stepping down",
        Duration::from_secs(15),
        |st| {
            st.last
                .as_ref()
                .is_some_and(|d| d.controller == "child" && d.to < d.from)
        },
    )
    .await;
    println!("child in control: {:?}", st.last);

    // SIGKILL the controller. Until the parent's first step, nothing writes the capacity.
    let at_kill = sem.status().await.expect("status").capacity;
    child.start_kill().expect("SIGKILL the child");
    let killed = Instant::now();
    let killed_ms = unix_ms();
    let mut samples = Vec::new();
    let mut taken_over = None;
    for _ in 0..2_000 {
        if killed.elapsed() > TTL + Duration::from_secs(5) {
            break;
        }
        if let Ok(Some(st)) = sem.adaptive_status().await {
            if let Some(d) = st.last.filter(|d| d.controller == "parent") {
                taken_over = Some((killed.elapsed(), d));
                break;
            }
        }
        if let Ok(s) = sem.status().await {
            samples.push((unix_ms(), s.capacity));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let Some((took, first)) = taken_over else {
        panic!(
            "the parent did not take control within {:?}",
            TTL + Duration::from_secs(5)
        );
    };
    println!(
        "control moved {} ms after the SIGKILL; first step: {first:?}",
        took.as_millis()
    );
    assert!(
        took <= TTL + Duration::from_secs(1) + 2 * WINDOW,
        "control moved {took:?} after the kill (TTL {TTL:?} + 1 s + two windows allowed)"
    );
    assert_eq!(
        first.from, at_kill,
        "the capacity moved without a controller: {samples:?}"
    );
    // The parent's first step writes the capacity a moment before it stamps its decision: a
    // read in between sees that step's value, which is no move without a controller.
    let moved: Vec<_> = samples
        .iter()
        .filter(|(at, c)| {
            *at < first.at_unix_ms && *at >= killed_ms && *c != at_kill && *c != first.to
        })
        .collect();
    assert!(
        moved.is_empty(),
        "capacity changed while nobody controlled: {moved:?}"
    );

    // SIGKILL the store's leader: the controller keeps stepping once the store answers.
    let before = sem
        .adaptive_status()
        .await
        .ok()
        .flatten()
        .and_then(|s| s.last);
    let killed_window = before.as_ref().map_or(0, |d| d.window);
    kill_leader.await;
    let st = wait_adaptive(
        &sem,
        "a step after the leader's death",
        Duration::from_secs(20),
        |st| {
            st.last
                .as_ref()
                .is_some_and(|d| d.window > killed_window + 5 && d.controller == "parent")
        },
    )
    .await;
    let d = st.last.expect("a step");
    assert!((2..=100).contains(&d.to), "out of bounds: {d:?}");
    stop.cancel();
    let _ = parent.close().await;
}

/// A 2-worker runtime for the parent (the child builds its own: a test's runtime cannot be
/// entered from inside another).
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn etcd_controller_and_leader_die() {
    control_if_child();
    runtime().block_on(async {
        let mut cluster = EtcdCluster::start(3);
        let url = cluster.url("adaptive-failover");
        let leader = support::etcd::leader(&cluster).await;
        let kill = async {
            cluster.kill(leader);
            tokio::time::sleep(Duration::from_secs(1)).await;
            cluster.restart(leader);
        };
        the_controller_and_the_store_leader_die("etcd_controller_and_leader_die", &url, kill).await;
    });
}

#[test]
fn zookeeper_controller_and_leader_die() {
    control_if_child();
    runtime().block_on(async {
        let mut cluster = ZkCluster::start(3);
        let url = cluster.url("/adaptive-failover");
        let leader = cluster.wait_leader(Duration::from_secs(30));
        let kill = async {
            cluster.kill(leader);
            tokio::time::sleep(Duration::from_secs(1)).await;
            cluster.restart(leader);
        };
        the_controller_and_the_store_leader_die("zookeeper_controller_and_leader_die", &url, kill)
            .await;
    });
}
