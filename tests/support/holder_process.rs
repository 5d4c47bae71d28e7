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
    let exe = std::env::current_exe().expect("current_exe");
    let mut child = tokio::process::Command::new(&exe)
        .args(args)
        .env(URL_ENV, url)
        .env(SEM_ENV, sem)
        .env(WEIGHT_ENV, weight.to_string())
        .env(TTL_MS_ENV, ttl.as_millis().to_string())
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
                    if let Some((_, rest)) = line.split_once("HOLDING ") {
                        let word = rest.split_whitespace().next().unwrap_or("");
                        return word.parse::<u64>().unwrap_or_else(|e| {
                            panic!("holder child printed a bad token in {line:?}: {e}")
                        });
                    }
                    seen.push(line);
                }
                Ok(None) => panic!("holder child exited before holding; stdout: {seen:#?}"),
                Err(e) => panic!("reading the holder child's stdout: {e}"),
            }
        }
        panic!("no HOLDING line in the holder child's first 200 lines: {seen:#?}")
    })
    .await;
    let Ok(token) = read else {
        panic!("holder child did not print HOLDING within 30 s; stdout so far: {seen:#?}")
    };
    HolderProcess {
        child,
        token,
        _stdout: lines,
    }
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
