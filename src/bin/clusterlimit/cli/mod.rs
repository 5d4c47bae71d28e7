//! Command-line entry: parse arguments, set up logging and a runtime, run one subcommand
//! (`serve` is the sidecar's).

mod adaptive_lines;
mod args;
mod child;
mod deadline;
mod logging;
mod memory_store;
mod names;
mod numbers;
mod per_member_lines;
mod rate;
mod run;
mod run_adaptive;
mod run_fair;
mod run_per_member;
mod set_capacity;
mod signals;
mod status;
mod status_rows;
mod store_arg;
#[cfg(target_os = "linux")]
pub mod supervisor;
mod top;
mod wait_notice;

use crate::common::out::err_line;
use crate::common::{exit, Failure};
use args::{Cli, Command};
use clap::{CommandFactory, Parser};
use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

/// Parses the command line and runs the subcommand; never panics on user input.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return parse_error(e),
    };
    let sub = cli.command.name();
    let serve = matches!(cli.command, Command::Serve(_));
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            return Failure::new(exit::SOFTWARE, format!("cannot start runtime: {e}"))
                .report(|| usage_of(sub))
        }
    };
    // `serve`'s trace export, if configured: its layer joins the log subscriber.
    let traces = match &cli.command {
        Command::Serve(a) => {
            match runtime.block_on(async { crate::sidecar::otel_export::start(a) }) {
                Ok(traces) => traces,
                Err(failure) => return failure.report(|| usage_of(sub)),
            }
        }
        _ => None,
    };
    logging::init(cli.log, serve, traces.as_ref().map(|t| t.layer()));
    if let Some(warning) = cli.command.one_shot_store().and_then(memory_store::warning) {
        err_line!("{warning}");
    }
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Run(a) => run::run(a).await,
            Command::Status(a) => status::status(a).await,
            Command::SetCapacity(a) => set_capacity::set_capacity(a).await,
            Command::Rate(a) => rate::rate(a).await,
            Command::Top(a) => top::top(a).await,
            Command::Serve(a) => crate::sidecar::serve(a).await,
        }
    });
    // The last spans are sent while the runtime (and the export's channel on it) still runs.
    if let Some(traces) = traces {
        traces.shutdown();
    }
    // Background work (keepalives, releases of a closed session) must not hold up the exit.
    runtime.shutdown_timeout(Duration::from_millis(500));
    let code = match result {
        Ok(code) => code,
        Err(failure) => failure.report(|| usage_of(sub)),
    };
    crate::common::out::exit_code(code)
}

/// clap errors exit 64 (EX_USAGE) with clap's message and usage; `--help`/`--version` exit 0.
fn parse_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        // Help and version go to stdout: clap's own printing (in colour) on a terminal, else
        // plain text through `out` (a closed reader ends it quietly).
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            if std::io::stdout().is_terminal() {
                let _ = e.print();
            } else {
                crate::common::out::text(e.render());
            }
            crate::common::out::exit_code(ExitCode::SUCCESS)
        }
        _ => {
            let _ = e.print();
            // Value errors (e.g. `--permits 0`) carry no usage line: add the subcommand's.
            if !e.render().to_string().contains("Usage:") {
                // The subcommand and, under `rate`, its own (a word usage_of cannot resolve is
                // ignored there).
                let sub = std::env::args()
                    .skip(1)
                    .take(2)
                    .collect::<Vec<_>>()
                    .join(" ");
                err_line!("\n{}", usage_of(&sub));
            }
            ExitCode::from(exit::USAGE)
        }
    }
}

/// Usage line of one subcommand (`rate check`: a nested one), shown after argument errors
/// found past clap.
fn usage_of(sub: &str) -> String {
    let mut cmd = Cli::command();
    cmd.build();
    // A word that does not name a subcommand leaves the usage of the deepest one that did.
    for word in sub.split(' ') {
        match cmd.find_subcommand(word) {
            Some(s) => cmd = s.clone(),
            None => break,
        }
    }
    cmd.render_usage().to_string()
}
