//! `clusterlimit run`: hold permits while a child command runs.

use super::args::RunArgs;
use super::child::{self, Group, Placement, Start};
use super::deadline::{self, Deadline};
use super::signals::Signals;
#[cfg(target_os = "linux")]
use super::supervisor;
use super::wait_notice;
use crate::common::{connect, exit, format_duration, Failure};
use clusterlimit::adaptive::Outcome;
use clusterlimit::{AcquireOptions, Error, Limiter, Permit, Semaphore};
use nix::sys::signal::Signal;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitCode, ExitStatus};
use tokio::process::{Child, Command};

/// Acquires, runs the command, releases; returns the command's exit code.
pub async fn run(args: RunArgs) -> Result<ExitCode, Failure> {
    // Installed first: a SIGTERM while we connect or wait must end us cleanly (queue entry
    // removed, session revoked), not by the default action.
    let mut signals = Signals::install()?;
    args.fair.check(args.capacity)?;
    let security = args.store.security();
    // --timeout covers everything before the command starts: connect, open, wait.
    let deadline = Deadline::after(args.timeout);
    let connecting = connect(
        &args.store.store,
        args.session_ttl,
        args.owner.as_deref(),
        &security,
        args.store.timeouts(),
    );
    let doing = format!("connecting to {}", clusterlimit::redact(&args.store.store));
    let limiter = tokio::select! {
        r = deadline.bound(&doing, connecting) => r?,
        sig = signals.recv() => return Ok(killed_by(sig)),
    };
    let outcome = acquire_and_run(&args, &limiter, &mut signals, deadline).await;
    // Revokes the session: whatever is still held or queued is gone at once.
    let store_failed =
        matches!(&outcome, Err(f) if f.code == exit::UNAVAILABLE || f.code == exit::LOST);
    deadline::close(&limiter, store_failed, args.store.request_timeout).await;
    outcome
}

async fn acquire_and_run(
    args: &RunArgs,
    limiter: &Limiter,
    signals: &mut Signals,
    deadline: Deadline,
) -> Result<ExitCode, Failure> {
    let opening = format!("opening semaphore {:?}", args.semaphore);
    let sem = tokio::select! {
        r = deadline.bound(&opening, open(args, limiter)) => r?,
        sig = signals.recv() => return Ok(killed_by(sig)),
    };
    let mut opts = args.fair.apply(AcquireOptions::new().permits(args.permits));
    if let Some(left) = deadline.remaining() {
        // A store silent until the deadline is not a full semaphore: exit 69, not 75.
        opts = opts.timeout(left).silent_store_is_error();
    }
    if let Some(owner) = &args.owner {
        opts = opts.owner(owner.clone());
    }
    // Said once if the permit is not granted at once (see `wait_notice`); never with --quiet.
    let notice = async {
        if args.quiet {
            std::future::pending().await
        } else {
            wait_notice::announce(&sem).await
        }
    };
    let permit = tokio::select! {
        r = sem.acquire_with(opts) => r.map_err(|e| acquire_failure(e, args))?,
        sig = signals.recv() => return Ok(killed_by(sig)),
        never = notice => match never {},
    };
    tracing::debug!(semaphore = %args.semaphore, token = permit.fencing_token(), "acquired");
    let started = std::time::Instant::now();
    let (mut child, mut group) = spawn(args, &permit)?;
    let ended = supervise(&mut child, &mut group, &permit, signals).await;
    let took = started.elapsed();
    let (status, lost) = (ended.status, ended.lost);
    if lost {
        return Err(Failure::new(
            exit::LOST,
            format!(
                "permit of semaphore {:?} was lost while the command ran; the command was stopped",
                args.semaphore
            ),
        ));
    }
    let outcome = match (&status, args.adaptive.settings()) {
        (Ok(st), Some(_)) => args.adaptive.outcome(*st, took, ended.asked_to_stop),
        _ => Outcome::Ignore,
    };
    tracing::debug!(?outcome, "releasing");
    if let Err(e) = permit.release_with(outcome).await {
        tracing::warn!(error = %e, "releasing the permit; the session close or TTL frees it");
    }
    if args.adaptive.settings().is_some() {
        // The outcome is announced with this process's window and gone with its session.
        tokio::select! {
            () = tokio::time::sleep(args.adaptive.linger()) => {}
            sig = signals.recv() => tracing::debug!(signal = ?sig, "not waiting for the window's end"),
        }
    }
    let status = status
        .map_err(|e| Failure::new(exit::SOFTWARE, format!("waiting for the command: {e}")))?;
    Ok(exit_code(status))
}

/// Opens the semaphore, or creates it when `--capacity` (or `--adaptive`, `--per-member`) is
/// given.
async fn open(args: &RunArgs, limiter: &Limiter) -> Result<Semaphore, Failure> {
    let per_member = args.per_member.settings(&args.adaptive);
    let classes = &args.fair.classes;
    let opened = match (args.adaptive.settings(), per_member, args.capacity, classes) {
        (Some(settings), _, _, _) => limiter.adaptive_semaphore(&args.semaphore, settings).await,
        (None, Some(config), _, _) => limiter.per_member_semaphore(&args.semaphore, config).await,
        (None, None, Some(cap), Some(classes)) => {
            limiter
                .fair_semaphore(&args.semaphore, cap, classes.clone())
                .await
        }
        (None, None, Some(cap), None) => limiter.semaphore(&args.semaphore, cap).await,
        (None, None, None, _) => limiter.open_semaphore(&args.semaphore).await,
    };
    opened.map_err(|e| match e {
        Error::NotFound(_) => Failure::usage(format!(
            "semaphore {:?} does not exist; pass --capacity N to create it",
            args.semaphore
        )),
        Error::CapacityMismatch { stored, requested } => Failure::usage(format!(
            "semaphore {:?} exists with capacity {stored}, not --capacity {requested} \
                 (drop --capacity, or change it with `clusterlimit set-capacity`)",
            args.semaphore
        )),
        e => Failure::from_lib(e),
    })
}

fn acquire_failure(e: Error, args: &RunArgs) -> Failure {
    match e {
        Error::Timeout => Failure::new(
            exit::TIMEOUT,
            format!(
                "timed out after {} waiting for {} permit(s) of semaphore {:?}",
                format_duration(args.timeout.unwrap_or_default()),
                args.permits,
                args.semaphore
            ),
        ),
        e => args
            .fair
            .refused(e, &args.semaphore)
            .unwrap_or_else(Failure::from_lib),
    }
}

/// Starts CMD with the permit's details in its environment; stdio is inherited. CMD gets a
/// process group of its own and, on Linux, dies with us (see `child`).
fn spawn(args: &RunArgs, permit: &Permit) -> Result<(Child, Group), Failure> {
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| Failure::usage("no command given after --"))?;
    let placement = Placement::detect();
    // On Linux, in a group of its own, CMD runs under a supervisor that ends the whole group
    // if we die. If it cannot start (no /proc), CMD starts directly and only CMD dies with us.
    #[cfg(target_os = "linux")]
    if placement == Placement::OwnGroup {
        let mut cmd = command(args, permit, Command::new("/proc/self/exe"));
        cmd.arg0("clusterlimit")
            .args(supervisor::args(&args.command));
        child::configure(&mut cmd, placement, Start::Supervised);
        match cmd.spawn() {
            Ok(child) => return with_group(child, placement, args),
            Err(e) => tracing::warn!(
                error = %e,
                "cannot start the command's supervisor (/proc/self/exe): starting the command \
                 directly; if this process is SIGKILLed, processes the command started survive it"
            ),
        }
    }
    let mut cmd = command(args, permit, Command::new(program));
    cmd.args(rest);
    child::configure(&mut cmd, placement, Start::Direct);
    // Called on the runtime's block_on thread, which lives as long as we do: the parent-death
    // signal follows the thread that forked.
    let child = cmd.spawn().map_err(|e| {
        let code = match e.kind() {
            std::io::ErrorKind::NotFound => exit::NOT_FOUND,
            _ => exit::CANNOT_EXECUTE,
        };
        Failure::new(code, format!("cannot run {program:?}: {e}"))
    })?;
    with_group(child, placement, args)
}

/// `cmd` with the permit's details in its environment, killed if dropped.
fn command(args: &RunArgs, permit: &Permit, mut cmd: Command) -> Command {
    cmd.env("CLUSTERLIMIT_SEMAPHORE", &args.semaphore)
        .env(
            "CLUSTERLIMIT_FENCING_TOKEN",
            permit.fencing_token().to_string(),
        )
        .env("CLUSTERLIMIT_PERMITS", permit.permits().to_string())
        // An exit path that forgets the child must not leave it running without its permit.
        .kill_on_drop(true);
    cmd
}

/// The started child with its group.
fn with_group(
    child: Child,
    placement: Placement,
    args: &RunArgs,
) -> Result<(Child, Group), Failure> {
    let group = child
        .id()
        .and_then(|pid| Group::new(pid, placement, args.grace))
        .ok_or_else(|| {
            Failure::new(
                exit::SOFTWARE,
                "the command started but has no process id to supervise it by",
            )
        })?;
    tracing::debug!(pid = ?child.id(), ?placement, "command started");
    Ok((child, group))
}

/// How the command ended.
struct Ended {
    status: std::io::Result<ExitStatus>,
    /// The permit was lost while it ran.
    lost: bool,
    /// `run` was sent SIGTERM or SIGINT while it ran (and passed it on).
    asked_to_stop: bool,
}

/// Waits for the child, forwarding signals to its group, then ends whatever the child left in
/// its group. SIGTERM or SIGINT to `run`, and a lost permit (SIGTERM), are followed by SIGKILL
/// if the child still runs `grace` later; SIGHUP is only forwarded (and SIGINT too when the
/// command is in the terminal's foreground with us). Returns the child's exit
/// status, whether the permit was lost and whether `run` was asked to stop; on return no
/// process of the group is left (or they did not go within a bounded wait after SIGKILL,
/// which is logged).
async fn supervise(
    child: &mut Child,
    group: &mut Group,
    permit: &Permit,
    signals: &mut Signals,
) -> Ended {
    // The child is not reaped before `wait` returns, so until then its pid, which is also its
    // process group's id, cannot be reused: signalling it here cannot hit another process.
    let mut lost = false;
    let mut asked_to_stop = false;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            sig = signals.recv() => {
                asked_to_stop |= sig != Signal::SIGHUP;
                tracing::debug!(signal = ?sig, placement = ?group.placement(), "forwarding to the command");
                // SIGHUP asks for no end. A SIGINT in the foreground came from the terminal,
                // which sent it to the command as well: the command decides (a REPL lives on).
                if sig == Signal::SIGHUP
                    || (sig == Signal::SIGINT && group.placement() == Placement::Foreground)
                {
                    group.send(sig);
                } else {
                    group.stop_with(sig);
                }
            }
            () = permit.lost(), if !lost => {
                lost = true;
                tracing::warn!(semaphore = permit.semaphore(), "permit lost: sending SIGTERM to the command");
                group.stop_with(Signal::SIGTERM);
            }
            () = child::sleep_until(group.kill_at()) => group.kill(),
        }
    };
    // Reaped: while any process is left in the group, the group id stays reserved with it.
    group.end(signals).await;
    Ended {
        status,
        lost,
        asked_to_stop,
    }
}

/// The child's code, or 128+N when it died of signal N (as shells report it).
fn exit_code(status: ExitStatus) -> ExitCode {
    match (status.code(), status.signal()) {
        (Some(code), _) => ExitCode::from(u8::try_from(code & 0xff).unwrap_or(exit::SOFTWARE)),
        (None, Some(sig)) => ExitCode::from(u8::try_from(128 + sig).unwrap_or(exit::SOFTWARE)),
        (None, None) => ExitCode::from(exit::SOFTWARE),
    }
}

/// Exit code for a signal received before the command started.
fn killed_by(sig: Signal) -> ExitCode {
    ExitCode::from(u8::try_from(128 + sig as i32).unwrap_or(exit::SOFTWARE))
}
