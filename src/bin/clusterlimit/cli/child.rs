//! How `run` starts CMD and ends it, so that CMD never outlives the permit.
//!
//! - CMD runs in a process group of its own (pgid = its pid), so that `run` can signal it
//!   together with everything it started (a shell's background jobs, a build's compilers), and
//!   can tell when the last of them is gone. Exception: when `run` is the foreground job of the
//!   terminal on its stdin, CMD stays in `run`'s group, as before, so that it can still read
//!   the terminal and gets Ctrl-C and Ctrl-Z from it (a background group reading the terminal
//!   is stopped by SIGTTIN); there only CMD itself is signalled.
//! - On Linux CMD dies when `run` dies, however it dies: a SIGKILLed `run` cannot end CMD
//!   itself, and its permit comes back after the session TTL, while CMD would still run. In
//!   its own group CMD runs under a supervisor (`supervisor.rs`) that SIGKILLs the whole group
//!   when `run` dies; in `run`'s group (or if the supervisor cannot start) CMD itself gets
//!   SIGKILL from the kernel (`PR_SET_PDEATHSIG`, set between fork and exec), and what CMD
//!   started survives.

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use std::time::Duration;
use tokio::process::Command;
use tokio::time::Instant;

/// Where CMD runs, decided once before it starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// A process group of its own, which `run` ends on every exit it controls.
    OwnGroup,
    /// `run`'s group: `run` is the terminal's foreground job (interactive use).
    Foreground,
}

impl Placement {
    /// `Foreground` when stdin is a terminal whose foreground group is ours, else `OwnGroup`.
    pub fn detect() -> Placement {
        match nix::unistd::tcgetpgrp(std::io::stdin()) {
            Ok(fg) if fg == nix::unistd::getpgrp() => Placement::Foreground,
            _ => Placement::OwnGroup,
        }
    }
}

/// How CMD is started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// Through `clusterlimit __supervise` (Linux, own group): the supervisor leads the group
    /// and SIGKILLs all of it when `run` dies.
    Supervised,
    /// CMD itself (on Linux with the parent-death signal: CMD alone dies with `run`).
    Direct,
}

/// Sets up `cmd` to run as `placement` says and, on Linux, to die with us: CMD alone
/// (`Direct`), or its whole group (`Supervised`: the supervisor does it).
///
/// The parent-death signal fires when the *thread* that forked exits: `spawn` must be called
/// from a thread that lives as long as `run` (the runtime's `block_on` thread or a worker,
/// never a `spawn_blocking` thread, which ends when idle).
pub fn configure(cmd: &mut Command, placement: Placement, start: Start) {
    if placement == Placement::OwnGroup {
        cmd.process_group(0);
    }
    #[cfg(target_os = "linux")]
    if start == Start::Direct {
        let parent = nix::unistd::getpid();
        // SAFETY: the closure runs in the child between fork and exec, where only
        // async-signal-safe calls are allowed: it makes two system calls (prctl, getppid) and
        // allocates nothing (errors are raw OS errors).
        unsafe {
            cmd.pre_exec(move || die_with_parent(parent));
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = start;
}

/// In the child, before exec: SIGKILL when `parent` dies.
#[cfg(target_os = "linux")]
fn die_with_parent(parent: Pid) -> std::io::Result<()> {
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)?;
    // If the parent died between the fork and the prctl, the signal will never come: we were
    // already handed to another parent. Do not start CMD at all.
    if nix::unistd::getppid() != parent {
        return Err(std::io::Error::from_raw_os_error(nix::libc::ESRCH));
    }
    Ok(())
}

/// How long to wait, after SIGKILL, for the group to be gone before giving up on it (its
/// orphans are reaped by init, or are in uninterruptible sleep on a hung disk or mount).
const REAP_WAIT: Duration = Duration::from_secs(2);

/// CMD's process group (or CMD alone, when `Foreground`), and how far ending it has got.
/// SIGKILLs what is left when dropped before it was seen to be empty.
pub struct Group {
    pid: Pid,
    placement: Placement,
    grace: Duration,
    /// When SIGKILL follows the SIGTERM (or forwarded SIGINT/SIGTERM) already sent.
    kill_at: Option<Instant>,
    /// When SIGKILL was sent.
    killed_at: Option<Instant>,
    gone: bool,
}

impl Group {
    /// The group of the child with `pid` (its leader, when `OwnGroup`).
    pub fn new(pid: u32, placement: Placement, grace: Duration) -> Option<Group> {
        let pid = Pid::from_raw(i32::try_from(pid).ok()?);
        Some(Group {
            pid,
            placement,
            grace,
            kill_at: None,
            killed_at: None,
            gone: false,
        })
    }

    pub fn placement(&self) -> Placement {
        self.placement
    }

    /// Sends `sig` to the whole group (best effort: it may just have ended).
    pub fn send(&self, sig: Signal) {
        let sent = match self.placement {
            Placement::OwnGroup => killpg(self.pid, sig),
            Placement::Foreground => kill(self.pid, sig),
        };
        if let Err(e) = sent {
            tracing::debug!(error = %e, ?sig, pid = %self.pid, "signal not delivered");
        }
    }

    /// Sends `sig` and, unless already under way, starts the grace after which SIGKILL follows.
    pub fn stop_with(&mut self, sig: Signal) {
        self.send(sig);
        if self.kill_at.is_none() && self.killed_at.is_none() {
            self.kill_at = Some(Instant::now() + self.grace);
        }
    }

    /// When the grace started by `stop_with` runs out (then call `kill`); `None` if none runs.
    pub fn kill_at(&self) -> Option<Instant> {
        self.kill_at
    }

    /// SIGKILLs the group (call at `kill_at`).
    pub fn kill(&mut self) {
        if self.kill_at.is_some() {
            tracing::warn!(
                grace = %crate::common::format_duration(self.grace),
                "the command's process group still runs after the grace: sending SIGKILL"
            );
        }
        self.send(Signal::SIGKILL);
        self.kill_at = None;
        self.killed_at = Some(Instant::now());
    }

    /// Whether no process is left in the group. CMD itself must have been reaped; with
    /// `Foreground` there is nothing else we can see, so this is then always true.
    fn is_empty(&self) -> bool {
        match self.placement {
            Placement::Foreground => true,
            // ESRCH: nobody left. EPERM: only processes we may not signal (they changed
            // user); there is nothing more we could do about them.
            Placement::OwnGroup => killpg(self.pid, None).is_err() || !runs_in(self.pid),
        }
    }

    /// After CMD exited: ends what it left in its group (SIGTERM, then SIGKILL after the
    /// grace, or at once if the grace already ran out), and returns when the group is empty,
    /// or `REAP_WAIT` after SIGKILL. Signals sent to `run` meanwhile are forwarded.
    pub async fn end(&mut self, signals: &mut super::signals::Signals) {
        const POLL: Duration = Duration::from_millis(50);
        if self.is_empty() {
            self.gone = true;
            return;
        }
        tracing::warn!(
            pgid = %self.pid,
            "the command exited but left processes in its group: ending them"
        );
        if self.killed_at.is_some() {
            // SIGKILL was sent already (CMD outlived the grace): what is left started since.
            self.kill();
        } else {
            self.stop_with(Signal::SIGTERM);
        }
        // Bounded: the grace, then REAP_WAIT after the SIGKILL, at POLL steps.
        let steps = (self.grace + REAP_WAIT).as_millis() / POLL.as_millis() + 10;
        for _ in 0..steps {
            tokio::select! {
                () = tokio::time::sleep(POLL) => {}
                sig = signals.recv() => self.stop_with(sig),
                () = sleep_until(self.kill_at) => self.kill(),
            }
            if self.is_empty() {
                self.gone = true;
                return;
            }
            if self.killed_at.is_some_and(|at| at.elapsed() >= REAP_WAIT) {
                break;
            }
        }
        if self.killed_at.is_none() {
            // The steps ran out early (a flood of signals): do not leave without a SIGKILL.
            self.kill();
        }
        tracing::warn!(
            pgid = %self.pid,
            "processes of the command's group are still there after SIGKILL (stuck in the \
             kernel, e.g. on a hung disk or mount); exiting anyway"
        );
        self.gone = true;
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if !self.gone && self.placement == Placement::OwnGroup {
            // An exit path that did not end the group (an error, a panic): CMD's processes
            // must not outlive the permit.
            let _ = killpg(self.pid, Signal::SIGKILL);
        }
    }
}

/// Whether a process of group `pgid` still runs: not a zombie, which `killpg` counts until its
/// new parent reaps it (an init that reaps late, or never, in some containers). Linux: read
/// from /proc, and `true` when /proc cannot be read.
#[cfg(target_os = "linux")]
fn runs_in(pgid: Pid) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return true;
    };
    let pgid = pgid.as_raw().to_string();
    entries.flatten().any(|entry| {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            return false; // not a process, or it just ended
        };
        // "PID (COMM) STATE PPID PGRP ...": COMM may hold anything, so count from the last ')'.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            return false;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next();
        let pgrp = fields.nth(1);
        pgrp == Some(pgid.as_str()) && !matches!(state, Some("Z" | "X" | "x"))
    })
}

/// Elsewhere `killpg`'s answer stands: zombies count as running.
#[cfg(not(target_os = "linux"))]
fn runs_in(_pgid: Pid) -> bool {
    true
}

/// Sleeps until `at`; forever if `None`.
pub async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
