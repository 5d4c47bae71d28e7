//! The error a front end returns to `main`: a message and an exit code.

use super::exit;
use crate::common::out::err_line;
use std::process::ExitCode;

/// A failed command: the message printed to stderr and the process exit code.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
    /// Bad arguments: the subcommand's usage line is printed after the message.
    pub show_usage: bool,
}

impl Failure {
    /// A failure with exit `code` and a one-line message.
    pub fn new(code: u8, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
            show_usage: false,
        }
    }

    /// A usage error: exit 64, with the subcommand's usage line after the message.
    pub fn usage(message: impl Into<String>) -> Self {
        Failure {
            code: exit::USAGE,
            message: message.into(),
            show_usage: true,
        }
    }

    /// Maps a library error to an exit code; argument errors are usage errors.
    pub fn from_lib(e: clusterlimit::Error) -> Self {
        use clusterlimit::Error as E;
        match e {
            E::InvalidArgument(_) | E::CapacityMismatch { .. } => Failure::usage(e.to_string()),
            E::Timeout => Failure::new(exit::TIMEOUT, e.to_string()),
            E::NotFound(_) => Failure::new(exit::FAILURE, e.to_string()),
            _ => Failure::new(exit::UNAVAILABLE, e.to_string()),
        }
    }

    /// Prints the message (and, for a usage error, the line `usage` renders) to stderr and
    /// returns the exit code.
    pub fn report(self, usage: impl FnOnce() -> String) -> ExitCode {
        err_line!("clusterlimit: {}", self.message);
        if self.show_usage {
            err_line!("\n{}", usage());
        }
        ExitCode::from(self.code)
    }
}
