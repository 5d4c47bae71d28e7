//! A holder in a process of its own, to be SIGKILLed (scenario 6): this test binary started
//! again with the variables below, holding one permit until it is killed.

use crate::cluster::TTL;
use clusterlimit::Limiter;
use std::io::{Read, Write};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;

const URL_ENV: &str = "CLUSTERLIMIT_FAILOVER_CHILD_URL";
const SEM_ENV: &str = "CLUSTERLIMIT_FAILOVER_CHILD_SEM";
const WEIGHT_ENV: &str = "CLUSTERLIMIT_FAILOVER_CHILD_WEIGHT";
/// The child exits by itself after this long, in case nobody kills it.
const MAX_LIFETIME: Duration = Duration::from_secs(120);

/// A child process holding a permit.
pub struct ChildHolder {
    child: Child,
    pub token: u64,
    pub weight: u32,
    /// When the child reported holding.
    pub granted_at: Instant,
}

impl ChildHolder {
    /// Starts a child that takes `weight` permits of `sem` at `url` (waiting up to 20 s) and
    /// returns once it holds them.
    pub async fn spawn(url: &str, sem: &str, weight: u32) -> ChildHolder {
        let exe = std::env::current_exe().expect("current_exe");
        let mut child = tokio::process::Command::new(&exe)
            .env(URL_ENV, url)
            .env(SEM_ENV, sem)
            .env(WEIGHT_ENV, weight.to_string())
            // The child exits when this pipe closes: it cannot outlive a SIGKILLed parent long.
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn {}: {e}", exe.display()));
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let read = tokio::time::timeout(Duration::from_secs(30), async {
            for _ in 0..100 {
                match lines.next_line().await {
                    Ok(Some(line)) => {
                        if let Some(rest) = line.strip_prefix("HOLDING ") {
                            return rest.trim().parse::<u64>().ok();
                        }
                    }
                    _ => return None,
                }
            }
            None
        })
        .await;
        let granted_at = Instant::now();
        match read {
            Ok(Some(token)) => ChildHolder {
                child,
                token,
                weight,
                granted_at,
            },
            _ => panic!("the child holder did not report holding within 30 s"),
        }
    }

    /// SIGKILLs the child and reaps it; returns the instant it was killed.
    pub async fn kill(mut self) -> Instant {
        let at = Instant::now();
        // tokio's Child::kill sends SIGKILL and waits for the process.
        tokio::time::timeout(Duration::from_secs(5), self.child.kill())
            .await
            .expect("SIGKILL of the child holder is bounded")
            .expect("SIGKILL the child holder");
        at
    }
}

/// If this process was started as a child holder, holds and never returns; otherwise returns.
pub fn run_if_child() {
    let Ok(url) = std::env::var(URL_ENV) else {
        return;
    };
    let sem = std::env::var(SEM_ENV).unwrap_or_default();
    let weight: u32 = std::env::var(WEIGHT_ENV)
        .ok()
        .and_then(|w| w.parse().ok())
        .unwrap_or(1);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("child runtime");
    let held = rt.block_on(async {
        let limiter = Limiter::builder(&url)
            .session_ttl(TTL)
            .owner("child")
            .connect()
            .await
            .expect("child: connect");
        let s = limiter
            .open_semaphore(&sem)
            .await
            .expect("child: open_semaphore");
        let permit = s
            .acquire_many_timeout(weight, Duration::from_secs(20))
            .await
            .expect("child: acquire");
        println!("HOLDING {}", permit.fencing_token());
        std::io::stdout().flush().expect("child: flush stdout");
        (limiter, permit)
    });
    // Hold (the runtime keeps the session alive) until killed, stdin closes, or time is up.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        let _ = tx.send(());
    });
    let _ = rx.recv_timeout(MAX_LIFETIME);
    drop(held);
    std::process::exit(0);
}
