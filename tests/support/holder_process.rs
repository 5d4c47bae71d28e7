//! A permit holder in a process of its own, to be SIGKILLed: a test binary starts itself again
//! with the variables below set, and that child holds one permit until it is killed.

use clusterlimit::Limiter;
use std::io::{Read, Write};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout};

const URL_ENV: &str = "CLUSTERLIMIT_TEST_HOLDER_URL";
const SEM_ENV: &str = "CLUSTERLIMIT_TEST_HOLDER_SEM";
const WEIGHT_ENV: &str = "CLUSTERLIMIT_TEST_HOLDER_WEIGHT";
const TTL_MS_ENV: &str = "CLUSTERLIMIT_TEST_HOLDER_TTL_MS";
/// The child exits by itself after this long, in case nobody kills it.
const MAX_LIFETIME: Duration = Duration::from_secs(120);

/// A child process holding a permit; SIGKILLed on drop (`kill_on_drop`).
pub struct HolderProcess {
    pub child: Child,
    /// Fencing token of the permit it holds.
    pub token: u64,
    _stdout: Lines<BufReader<ChildStdout>>,
}

/// Starts this test binary again with `args` as a holder of `weight` permits of `sem` at `url`
/// (session TTL `ttl`) and returns once the child prints `HOLDING <token>` (within 30 s).
pub async fn spawn(
    args: &[&str],
    url: &str,
    sem: &str,
    weight: u32,
    ttl: Duration,
) -> HolderProcess {
    let weight = weight.to_string();
    let ttl = ttl.as_millis().to_string();
    let envs = [
        (URL_ENV, url),
        (SEM_ENV, sem),
        (WEIGHT_ENV, weight.as_str()),
        (TTL_MS_ENV, ttl.as_str()),
    ];
    let (child, line, lines) = spawn_self(args, &envs, "HOLDING ").await;
    let word = line.split_whitespace().next().unwrap_or("");
    let token = word
        .parse::<u64>()
        .unwrap_or_else(|e| panic!("holder child printed a bad token in {line:?}: {e}"));
    HolderProcess {
        child,
        token,
        _stdout: lines,
    }
}

/// The name libtest gives the test `name` of the module at `module_path` (its
/// `module_path!()`): the path without the crate's name, then `name`. Tests are modules of their
/// area's binary (`tests/<area>/main.rs`), so a binary that re-executes itself with `--exact`
/// names the test this way.
pub fn test_name(module_path: &str, name: &str) -> String {
    match module_path.split_once("::") {
        Some((_crate, path)) => format!("{path}::{name}"),
        None => name.to_string(),
    }
}

/// Starts this test binary again with `args` and `envs` (a child role the test checks for
/// first), and returns once the child prints `marker`: the child, the rest of that line, and
/// its stdout (keep reading it, or drop it, so the child never blocks on a full pipe). The
/// child is SIGKILLed on drop and exits when its stdin closes; panics if no marker comes within
/// 30 s or 200 lines.
pub async fn spawn_self(
    args: &[&str],
    envs: &[(&str, &str)],
    marker: &str,
) -> (Child, String, Lines<BufReader<ChildStdout>>) {
    let exe = std::env::current_exe().expect("current_exe");
    let mut child = tokio::process::Command::new(&exe)
        .args(args)
        .envs(envs.iter().copied())
        // The child exits when this pipe closes, so it cannot outlive a SIGKILLed parent long.
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot spawn {}: {e}", exe.display()));
    let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
    // libtest prints "test name ... " without a newline first, so the marker can come in the
    // middle of a line.
    let mut seen = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), async {
        for _ in 0..200 {
            match lines.next_line().await {
                Ok(Some(line)) => {
                    if let Some((_, rest)) = line.split_once(marker) {
                        return rest.to_string();
                    }
                    seen.push(line);
                }
                Ok(None) => panic!("child exited before printing {marker:?}; stdout: {seen:#?}"),
                Err(e) => panic!("reading the child's stdout: {e}"),
            }
        }
        panic!("no {marker:?} line in the child's first 200 lines: {seen:#?}")
    })
    .await;
    let Ok(rest) = read else {
        panic!("the child did not print {marker:?} within 30 s; stdout so far: {seen:#?}")
    };
    (child, rest, lines)
}

/// In a process started by [`spawn`]: takes the permit, prints `HOLDING <token>` and holds it
/// until killed, until stdin closes, or for at most 2 minutes, then exits. Returns at once in
/// any other process.
pub fn hold_if_child() {
    let Ok(url) = std::env::var(URL_ENV) else {
        return;
    };
    let sem = std::env::var(SEM_ENV).expect("holder child: semaphore name");
    let number = |var: &str, default: u64| {
        std::env::var(var)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let weight = number(WEIGHT_ENV, 1) as u32;
    let ttl = Duration::from_millis(number(TTL_MS_ENV, 2000));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("holder child: runtime");
    let held = rt.block_on(async {
        let limiter = Limiter::builder(&url)
            .session_ttl(ttl)
            .owner("holder-process")
            .connect()
            .await
            .expect("holder child: connect");
        let s = limiter
            .open_semaphore(&sem)
            .await
            .expect("holder child: open_semaphore");
        let permit = s
            .acquire_many_timeout(weight, Duration::from_secs(20))
            .await
            .expect("holder child: acquire");
        println!("\nHOLDING {}", permit.fencing_token());
        std::io::stdout()
            .flush()
            .expect("holder child: flush stdout");
        (limiter, permit)
    });
    // Hold (the runtime's workers keep the session alive) until the parent kills us, closes
    // our stdin, or the lifetime runs out.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        let _ = tx.send(());
    });
    let _ = rx.recv_timeout(MAX_LIFETIME);
    drop(held);
    std::process::exit(0);
}

/// A holder child process as a [`clusterlimit::testing::Victim`]; `kill_on_drop` is the guard
/// for every path.
#[cfg(feature = "testing")]
struct ChildVictim(Box<HolderProcess>);

#[cfg(feature = "testing")]
impl clusterlimit::testing::Victim for ChildVictim {
    fn kill(self: Box<Self>) -> futures::future::BoxFuture<'static, ()> {
        let mut holder = self.0;
        Box::pin(async move {
            // tokio's Child::kill sends SIGKILL and reaps the child.
            clusterlimit::testing::within(
                "SIGKILL holder child",
                Duration::from_secs(5),
                holder.child.kill(),
            )
            .await
            .expect("SIGKILL the holder child");
        })
    }
}

/// Re-executes this test binary, running the test `child_holder_process` of the module at
/// `module_path` (its `module_path!()`; that test's body calls [`hold_if_child`]), as a holder
/// of one permit of `sem` at `url` with the contract's short TTL; returns once it holds, as the
/// contract suite's doomed holder.
#[cfg(feature = "testing")]
pub async fn doomed(
    module_path: &str,
    url: &str,
    sem: &str,
) -> clusterlimit::testing::DoomedHolder {
    let child_test = test_name(module_path, "child_holder_process");
    let args = [
        "--exact",
        child_test.as_str(),
        "--nocapture",
        "--test-threads=1",
    ];
    let holder = spawn(&args, url, sem, 1, clusterlimit::testing::SHORT_TTL).await;
    clusterlimit::testing::DoomedHolder::new(holder.token, ChildVictim(Box::new(holder)))
}
