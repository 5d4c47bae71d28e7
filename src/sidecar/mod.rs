//! `clusterlimit serve`: the HTTP sidecar (work in progress on this branch).

use crate::cli::exit::{self, Failure};
use crate::cli::ServeArgs;
use std::process::ExitCode;

/// Runs the sidecar until SIGTERM/SIGINT.
pub async fn serve(_args: ServeArgs) -> Result<ExitCode, Failure> {
    Err(Failure::new(exit::SOFTWARE, "serve is not implemented yet"))
}
