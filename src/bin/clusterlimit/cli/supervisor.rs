//! `clusterlimit __supervise PARENT -- CMD [ARGS...]` (Linux, hidden): the direct child of
//! `run`, which starts CMD and ends CMD's whole process group when `run` dies, however it dies.
//!
//! `PR_SET_PDEATHSIG` makes the kernel signal one process, the direct child, when its parent
//! dies; the processes CMD starts would survive a SIGKILLed `run`. So the direct child is this
//! small process: it leads the process group (`run` starts it with `process_group(0)`), starts
//! CMD in that group, takes every signal with `sigwait`, and on its parent's death SIGKILLs the
//! group, itself included. It has no threads, no runtime and no logging, and reports CMD's end
//! as its exit code: CMD's code, or 128+N for a death by signal N (which `run` passes on
//! unchanged, as it would CMD's own status).

use crate::common::out::err_line;
use nix::sys::signal::{killpg, SigSet, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{getpgrp, getppid, Pid};
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::ExitCode;
use std::time::Duration;

/// The hidden subcommand's name.
pub const SUBCOMMAND: &str = "__supervise";

/// The signal the kernel sends us when `run` dies (any signal would do: on each one we look
/// at who our parent is now).
const PARENT_DIED: Signal = Signal::SIGUSR2;

/// The arguments that make `clusterlimit` a supervisor of `command` for `run` (this process).
pub fn args(command: &[OsString]) -> Vec<OsString> {
    let mut all = vec![
        OsString::from(SUBCOMMAND),
        OsString::from(std::process::id().to_string()),
        OsString::from("--"),
    ];
    all.extend(command.iter().cloned());
    all
}

/// Runs the supervisor if the command line asks for it (before anything else: no runtime, no
/// threads, no logging).
pub fn main_if_asked() -> Option<ExitCode> {
    let mut argv = std::env::args_os().skip(1);
    if argv.next()? != SUBCOMMAND {
        return None;
    }
    let parent = argv
        .next()
        .and_then(|p| p.to_str().and_then(|p| p.parse::<i32>().ok()));
    let dashes = argv.next();
    let command: Vec<OsString> = argv.collect();
    let (Some(parent), Some(true), false) = (parent, dashes.map(|d| d == "--"), command.is_empty())
    else {
        err_line!(
            "clusterlimit: {SUBCOMMAND} is started by `clusterlimit run`, as \
             `{SUBCOMMAND} PARENT_PID -- CMD [ARGS...]`; use `clusterlimit run`"
        );
        return Some(ExitCode::from(crate::common::exit::USAGE));
    };
    Some(ExitCode::from(supervise(Pid::from_raw(parent), &command)))
}

fn supervise(parent: Pid, command: &[OsString]) -> u8 {
    use crate::common::exit;
    // Every signal waits for `sigwait` from here on, so none is missed (CMD gets an empty mask
    // back between fork and exec: std's spawn keeps the mask).
    let all = SigSet::all();
    if let Err(e) = all.thread_block() {
        err_line!("clusterlimit: supervising the command: cannot block signals: {e}");
        return exit::SOFTWARE;
    }
    if let Err(e) = nix::sys::prctl::set_pdeathsig(PARENT_DIED) {
        err_line!(
            "clusterlimit: supervising the command: cannot ask for the parent-death signal: {e}"
        );
        return exit::SOFTWARE;
    }
    // `run` died before the prctl: the signal will never come, and nobody holds the permit.
    if getppid() != parent {
        return exit::SOFTWARE;
    }
    let Some((program, rest)) = command.split_first() else {
        return exit::USAGE;
    };
    // In our process group; stdio and environment (the permit's variables) are inherited.
    let mut cmd = std::process::Command::new(program);
    cmd.args(rest);
    // SAFETY: runs in the child between fork and exec: one async-signal-safe call
    // (pthread_sigmask), no allocation.
    unsafe {
        cmd.pre_exec(|| {
            SigSet::empty()
                .thread_set_mask()
                .map_err(std::io::Error::from)
        });
    }
    let child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => {
            err_line!("clusterlimit: cannot run {program:?}: {e}");
            return match e.kind() {
                std::io::ErrorKind::NotFound => exit::NOT_FOUND,
                _ => exit::CANNOT_EXECUTE,
            };
        }
    };
    let Ok(pid) = i32::try_from(child.id()).map(Pid::from_raw) else {
        let _ = killpg(getpgrp(), Signal::SIGKILL);
        return exit::SOFTWARE;
    };
    loop {
        let got = all.wait();
        if getppid() != parent {
            // `run` is gone, and the permit will be granted again: end the whole group (us
            // too, last: killpg signals every member before it returns).
            let _ = killpg(getpgrp(), Signal::SIGKILL);
            return 128 + Signal::SIGKILL as u8;
        }
        match got {
            Ok(Signal::SIGCHLD) => match waitpid(pid, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(_, code)) => {
                    return u8::try_from(code & 0xff).unwrap_or(exit::SOFTWARE)
                }
                Ok(WaitStatus::Signaled(_, sig, _)) => {
                    return u8::try_from(128 + sig as i32).unwrap_or(exit::SOFTWARE)
                }
                // Stopped, continued, or not CMD: keep waiting.
                Ok(_) => {}
                Err(e) => {
                    err_line!("clusterlimit: waiting for the command: {e}");
                    return exit::SOFTWARE;
                }
            },
            // Signals `run` forwards to the group reach CMD themselves; signals sent to us
            // alone are not CMD's business, nor ours.
            Ok(_) => {}
            // A signal nix has no name for (a real-time one), or a failed wait: do not spin.
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}
