//! Exit codes of the `clusterlimit` binary (sysexits.h where one fits).

/// Bad arguments or options (EX_USAGE).
pub const USAGE: u8 = 64;
/// The store could not be reached or the session was lost before the command ran (EX_UNAVAILABLE).
pub const UNAVAILABLE: u8 = 69;
/// Something that should not happen, e.g. waiting for the child failed (EX_SOFTWARE).
pub const SOFTWARE: u8 = 70;
/// Standard output could not be written (other than a reader that closed early) (EX_IOERR).
pub const IO_ERROR: u8 = 74;
/// `--timeout` ran out before the permits were granted (EX_TEMPFAIL: try again later).
pub const TIMEOUT: u8 = 75;
/// The permit was lost while the command ran; the command was stopped.
pub const LOST: u8 = 76;
/// The command exists but cannot be executed (as in a shell).
pub const CANNOT_EXECUTE: u8 = 126;
/// The command was not found (as in a shell).
pub const NOT_FOUND: u8 = 127;
/// A named semaphore does not exist (`status NAME`).
pub const FAILURE: u8 = 1;

/// The exit codes as shown at the end of `--help`.
pub const HELP: &str = "\
Exit codes:
  0        success (`run`: the command's own exit code is passed through)
  1        `status NAME`: the semaphore does not exist (`rate …`: the rate limit, given no quota)
  64       bad arguments or options (also `run` on an absent semaphore without --capacity)
  69       store unreachable, or its session lost before the command started
  74       the output could not be written (a reader that closes early, as `| head`
           does, is not an error: the output just stops)
  75       `run`: --timeout ran out before the permits were granted; `rate check`: denied;
           `rate wait`: --timeout ran out (nothing consumed)
  76       `run`: the permit was lost while the command ran; its process group got SIGTERM
           (SIGKILL after --grace)
  126/127  `run`: the command cannot be executed / was not found
  128+N    `run`: the command died of signal N";
