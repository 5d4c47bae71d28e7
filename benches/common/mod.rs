//! What the limiter and rls benches share: `main`'s exit codes, the command line and the
//! machine description of a report. Each bench includes it with `#[path = "common/mod.rs"]`.

pub mod args;
pub mod machine;
pub mod markdown;

use anyhow::Context as _;
use args::Parsed;
use std::process::ExitCode;

/// A bench's `main`: reads the command line with `parse`, then runs the plan. Exit 2 for a bad
/// command line, 1 (with the error's chain) for a failed run.
pub fn main<P>(
    parse: impl FnOnce(std::env::Args) -> Result<Parsed<P>, String>,
    run: impl FnOnce(&P) -> anyhow::Result<()>,
) -> ExitCode {
    let mut args = std::env::args();
    args.next(); // the program's path
    let plan = match parse(args) {
        Ok(Parsed::Run(plan)) => plan,
        Ok(Parsed::Exit(message)) => {
            if !message.is_empty() {
                println!("{message}");
            }
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match run(&plan) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("benchmark failed: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The runtime a bench measures on: 2 workers, as many as the machine's cores.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("build the tokio runtime")
}
