//! Standard output and standard error of the binary, written so that an output error never
//! panics (`println!` does: "failed printing to stdout: Broken pipe", exit 101).
//!
//! A reader that closes early (`clusterlimit status | head -1`) ends the output quietly: the
//! rest is dropped, nothing is said, and the command exits with the code it would have had
//! anyway (0 for `status`). Any other error writing stdout (a full disk, `> /dev/full`) is said
//! once on stderr and, if the command otherwise succeeded, turns its exit code into 74
//! (EX_IOERR). Errors writing stderr itself are ignored: there is nowhere left to tell.
//!
//! SIGPIPE stays ignored, as the Rust runtime sets it, rather than reset to its default
//! (which would kill the process silently with 141): `serve` writes to sockets whose peers may
//! go away, and `run` gives its command pipes and watches it. A default SIGPIPE would kill the
//! sidecar or the supervisor on any such write; ignored, every write returns EPIPE to the code
//! that made it (the children of `run` get SIGPIPE back at its default from `std::process`).

use super::exit;
use std::fmt::Display;
use std::io::{self, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU8, Ordering};

/// `println!` that never panics: formats a line for [`line`].
macro_rules! out_line {
    ($($arg:tt)*) => {
        $crate::common::out::line(format_args!($($arg)*))
    };
}
pub(crate) use out_line;

/// `eprintln!` that never panics: formats a line for [`stderr_line`].
macro_rules! err_line {
    ($($arg:tt)*) => {
        $crate::common::out::stderr_line(format_args!($($arg)*))
    };
}
pub(crate) use err_line;

/// Stdout is writable (as far as we know).
const OPEN: u8 = 0;
/// The reader went away: nothing more is written, and nothing is said.
const CLOSED: u8 = 1;
/// Writing failed otherwise: said on stderr; the exit code becomes EX_IOERR.
const FAILED: u8 = 2;

static STDOUT: AtomicU8 = AtomicU8::new(OPEN);

/// Writes `text` and a newline to stdout, and flushes.
pub fn line(text: impl Display) {
    write(format_args!("{text}\n"));
}

/// Writes `text` as it is (no newline added) to stdout, and flushes.
pub fn text(text: impl Display) {
    write(format_args!("{text}"));
}

/// Writes one line to stderr; an error writing it is ignored.
pub fn stderr_line(text: impl Display) {
    let _ = writeln!(io::stderr().lock(), "{text}");
}

fn write(args: std::fmt::Arguments<'_>) {
    if STDOUT.load(Ordering::Relaxed) != OPEN {
        return;
    }
    let mut out = io::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|()| out.flush()) {
        failed(&e);
    }
}

/// Records an error writing stdout: quietly for a closed reader, said once otherwise.
fn failed(e: &io::Error) {
    if e.kind() == io::ErrorKind::BrokenPipe {
        STDOUT.store(CLOSED, Ordering::Relaxed);
        return;
    }
    if STDOUT.swap(FAILED, Ordering::Relaxed) != FAILED {
        stderr_line(format_args!(
            "clusterlimit: cannot write to standard output ({e}); the rest of the output is lost"
        ));
    }
}

/// The exit code of a command that returned `code`: 74 (EX_IOERR) instead of success when
/// its output could not be written for another reason than a closed reader.
pub fn exit_code(code: ExitCode) -> ExitCode {
    if code == ExitCode::SUCCESS && STDOUT.load(Ordering::Relaxed) == FAILED {
        return ExitCode::from(exit::IO_ERROR);
    }
    code
}
