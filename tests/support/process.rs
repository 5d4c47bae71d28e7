//! One store server as a child process of the test: what the etcd and ZooKeeper launchers share.
//!
//! A [`ServerProcess`] owns a temp dir (the server's data, config and log), the running server
//! and a shell watchdog, so that no server and no temp dir outlives the test, even if the test
//! process dies without running `Drop`. [`free_ports`] hands out loopback ports for them. The
//! launchers keep only what is specific to their store: command line, config files, readiness.

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;

use tempfile::TempDir;

/// Run by `/bin/sh -c` next to each server with `$1` = the server's pid and `$2` = its temp
/// dir. `read` returns only when the test process dies (its end of the pipe closes) without
/// running `Drop`; then the server is killed and its dir (~120 MB for etcd's preallocated WAL)
/// removed. The wait is bounded: an orphaned server may stay a zombie, which `kill -0` still sees.
const WATCHDOG_SCRIPT: &str = r#"read -r _line
kill -9 "$1" 2>/dev/null
i=0
while kill -0 "$1" 2>/dev/null && [ "$i" -lt 20 ]; do sleep 0.05; i=$((i + 1)); done
rm -rf -- "$2""#;

/// Ports handed out by this process, never reused. One set for every launcher: two clusters
/// of one test binary (etcd or ZooKeeper) starting in parallel must not pick the same port
/// between our probe bind and the server's bind.
static USED_PORTS: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// `count` distinct free loopback ports, found by binding 127.0.0.1:0 (all held at once, so
/// they differ) and never handed out twice by this process.
pub(crate) fn free_ports(count: usize) -> Vec<u16> {
    let mut used = USED_PORTS.lock().unwrap_or_else(|e| e.into_inner());
    let mut held = Vec::with_capacity(count);
    let mut ports = Vec::with_capacity(count);
    for _ in 0..count * 50 {
        if ports.len() == count {
            break;
        }
        let listener = TcpListener::bind(("127.0.0.1", 0)).expect("cannot bind 127.0.0.1:0");
        let port = listener.local_addr().expect("local_addr").port();
        if used.insert(port) {
            ports.push(port);
        }
        held.push(listener);
    }
    assert_eq!(
        ports.len(),
        count,
        "could not find {count} free loopback ports"
    );
    ports
}

/// One server process (at most one at a time) with its temp dir, log file and watchdog.
///
/// The server can be stopped and spawned again with the same dir, which is how the launchers
/// restart a member. Dropping it SIGKILLs and reaps the server, then removes the dir.
pub(crate) struct ServerProcess {
    /// Store name for messages and the watchdog's `$0`, e.g. `"etcd"`.
    kind: &'static str,
    /// Name of the log file in `dir`; the server's stdout and stderr are appended to it.
    log_file: &'static str,
    /// The server's files and log; removed on drop (after the server is dead).
    dir: TempDir,
    child: Option<Child>,
    /// Length of the log when the current server was spawned: its own lines start here.
    log_start: u64,
    /// `sh` that SIGKILLs the server and removes `dir` when our end of its stdin pipe closes,
    /// i.e. when the test process dies without running `Drop` (SIGKILL, `timeout`, CI abort).
    watchdog: Option<Child>,
}

impl ServerProcess {
    /// Creates the temp dir (named `{dir_prefix}XXXXXX`); spawns nothing yet.
    pub(crate) fn new(kind: &'static str, dir_prefix: &str, log_file: &'static str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix(dir_prefix)
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create temp dir for {kind} server: {e}"));
        ServerProcess {
            kind,
            log_file,
            dir,
            child: None,
            log_start: 0,
            watchdog: None,
        }
    }

    /// The server's temp dir.
    pub(crate) fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The log file (the server's stdout and stderr, every run appended).
    pub(crate) fn log_path(&self) -> PathBuf {
        self.dir.path().join(self.log_file)
    }

    /// Spawns `cmd` as the server (stopping a running one first), stdin closed and output
    /// appended to the log after a `banner` line, plus its watchdog.
    pub(crate) fn spawn(&mut self, cmd: &mut Command, banner: &str) -> std::io::Result<()> {
        self.stop();
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())?;
        writeln!(log, "==== test harness: {banner} ====")?;
        log.flush()?;
        self.log_start = log.metadata()?.len();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .spawn()?;
        let pid = child.id();
        self.child = Some(child);
        // Best effort: without /bin/sh the server still works, it just is not orphan-proof.
        self.watchdog = Command::new("/bin/sh")
            .arg("-c")
            .arg(WATCHDOG_SCRIPT)
            .arg(format!("{}-watchdog", self.kind))
            .arg(pid.to_string())
            .arg(self.dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok();
        Ok(())
    }

    /// True between [`ServerProcess::spawn`] and a stop or a noticed exit.
    pub(crate) fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// OS pid of the server, `None` when it is not running.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The server's exit status if it has exited (then it is reaped and counts as stopped).
    pub(crate) fn try_exit(&mut self) -> Option<ExitStatus> {
        let status = self.child.as_mut()?.try_wait().ok()??;
        self.child = None;
        self.stop();
        Some(status)
    }

    /// SIGKILLs and reaps the watchdog first (so it cannot hit a recycled pid), then the
    /// server (SIGKILL also ends a SIGSTOPped one). Does nothing when nothing runs.
    pub(crate) fn stop(&mut self) {
        if let Some(mut w) = self.watchdog.take() {
            let _ = w.kill();
            let _ = w.wait();
        }
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// What the current server has logged so far (empty if the log cannot be read).
    pub(crate) fn log_since_spawn(&self) -> String {
        let mut text = String::new();
        if let Ok(mut f) = File::open(self.log_path()) {
            if f.seek(SeekFrom::Start(self.log_start)).is_ok() {
                let _ = f.read_to_string(&mut text);
            }
        }
        text
    }

    /// Last `lines` lines of the log (all runs), or a note saying why it could not be read.
    pub(crate) fn log_tail(&self, lines: usize) -> String {
        let path = self.log_path();
        let mut text = String::new();
        match File::open(&path).and_then(|mut f| f.read_to_string(&mut text)) {
            Ok(_) => {
                let all: Vec<&str> = text.lines().collect();
                let mut tail = all[all.len().saturating_sub(lines)..].join("\n");
                tail.push('\n');
                tail
            }
            Err(e) => format!("(cannot read {}: {e})\n", path.display()),
        }
    }
}

impl Drop for ServerProcess {
    /// Kills the server before `dir` is removed, so no server outlives its test, even when
    /// the test panics.
    fn drop(&mut self) {
        self.stop();
    }
}

/// Index and exit status of the first server in `servers` that has exited (it is reaped):
/// how the launchers notice a member dying during start-up (e.g. its port was taken).
pub(crate) fn first_exit<'a>(
    servers: impl IntoIterator<Item = &'a mut ServerProcess>,
) -> Option<(usize, ExitStatus)> {
    servers
        .into_iter()
        .enumerate()
        .find_map(|(i, s)| s.try_exit().map(|status| (i, status)))
}

/// Whole-cluster start attempts: a server exiting early is retried with fresh ports.
const START_ATTEMPTS: usize = 3;

/// How one cluster start attempt ended; see [`start_with_retries`].
pub(crate) enum Attempt<C> {
    Started(C),
    /// A server exited early, most likely because its probed free port was taken before it
    /// bound it, so a retry with fresh ports can succeed. `summary` is one line (which server,
    /// its ports, exit status, last log line); `message` the full report if no retry is left.
    EarlyExit {
        summary: String,
        message: String,
    },
    /// Anything else (e.g. a timeout): not retried, the start panics with `message`.
    Failed {
        message: String,
    },
}

/// Starts a cluster with `attempt`, up to 3 times while a server exits early; panics with the
/// last failure's message plus a line per earlier attempt.
///
/// `attempt` gets the heading for its failure message, `"{cluster} failed to start (attempt
/// i of 3)"`, and must drop (kill) its servers before returning a failure.
pub(crate) fn start_with_retries<C>(
    cluster: &str,
    mut attempt: impl FnMut(&str) -> Attempt<C>,
) -> C {
    let mut earlier = String::new();
    for i in 1..=START_ATTEMPTS {
        let what = format!("{cluster} failed to start (attempt {i} of {START_ATTEMPTS})");
        let message = match attempt(&what) {
            Attempt::Started(c) => return c,
            Attempt::EarlyExit { summary, .. } if i < START_ATTEMPTS => {
                earlier.push_str(&format!("  attempt {i}: {summary}\n"));
                continue;
            }
            Attempt::EarlyExit { message, .. } | Attempt::Failed { message } => message,
        };
        if earlier.is_empty() {
            panic!("{message}");
        }
        panic!("{message}\nearlier attempts:\n{earlier}");
    }
    unreachable!("the last start attempt either returns or panics")
}
