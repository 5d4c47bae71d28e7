//! Command-line grammar (clap derive). Parsing errors exit 64 (see `cli::main`).

use super::names::semaphore_name;
use super::store_arg::StoreArg;
use crate::common::{exit, parse_duration};
use crate::sidecar::ServeArgs;
use clap::{Args, Parser, Subcommand};
use std::ffi::OsString;
use std::time::Duration;

/// Cluster-wide concurrency permits and rate limits from the command line.
#[derive(Debug, Parser)]
#[command(name = "clusterlimit", version, after_help = top_help())]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Log level of clusterlimit's own lines on stderr (transport crates stay at warn);
    /// default: warn for one-shot commands, info for serve. RUST_LOG, if set, overrides it.
    #[arg(long, global = true, env = "CLUSTERLIMIT_LOG", value_name = "LEVEL")]
    pub log: Option<super::logging::LogLevel>,
}

/// First examples, the store and its URL forms, then the exit codes: the end of the top-level
/// `--help`.
fn top_help() -> String {
    format!(
        "\
Examples:
  export CLUSTERLIMIT_STORE=etcd://127.0.0.1:2379
  clusterlimit run --semaphore backups --capacity 2 -- ./backup.sh   # at most 2 at once
  clusterlimit rate wait deploys ci --limit 10 --per 1m              # at most 10 a minute
  clusterlimit status                                                # who holds what

Store (--store URL, or CLUSTERLIMIT_STORE):
  etcd://HOST:PORT[,HOST:PORT…][/PREFIX]     etcds://… for TLS
  zk://HOST:PORT[,HOST:PORT…][/CHROOT]       zks://… for TLS
  memory://NAME                              this process only (tests)
  URL;URL[;URL…]                             rate-limit keys spread over clusters of one kind
  (credentials and TLS settings: docs/operations.md, \"Store URLs\")

{}",
        exit::HELP
    )
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command while holding permits of a semaphore.
    ///
    /// Acquires the permits, runs CMD with CLUSTERLIMIT_SEMAPHORE, CLUSTERLIMIT_FENCING_TOKEN and
    /// CLUSTERLIMIT_PERMITS set, forwards SIGINT/SIGTERM/SIGHUP to it, releases when it exits
    /// and exits with its code (128+N if it died of signal N).
    #[command(after_help = exit::HELP)]
    Run(RunArgs),
    /// Show capacity, usage, waiters and holders of one semaphore or of all.
    #[command(after_help = exit::HELP)]
    Status(StatusArgs),
    /// Change a semaphore's capacity for every client (creates it if absent).
    #[command(after_help = exit::HELP)]
    SetCapacity(SetCapacityArgs),
    /// Cluster-wide rate limits from the shell: check, wait, status, set-quota, reset.
    #[command(after_help = exit::HELP)]
    Rate(super::rate::RateArgs),
    /// Watch semaphores and rate limits live in the terminal (the sidecar's web view, for a
    /// host without a browser). Keys: Up/Down or j/k select, Tab switches pane, q quits.
    #[command(after_help = exit::HELP)]
    Top(TopArgs),
    /// Run the sidecar: an HTTP/JSON API to permits, on one store session.
    Serve(ServeArgs),
}

impl Command {
    /// The subcommand's name as typed, `rate` with its own (its usage line follows a usage
    /// failure).
    pub fn name(&self) -> &'static str {
        match self {
            Command::Run(_) => "run",
            Command::Status(_) => "status",
            Command::SetCapacity(_) => "set-capacity",
            Command::Rate(a) => a.command.name(),
            Command::Top(_) => "top",
            Command::Serve(_) => "serve",
        }
    }

    /// The store URL of a one-shot command that should hear about a `memory://` store (not
    /// `serve`, whose memory store its clients share, nor a `run --quiet`).
    pub fn one_shot_store(&self) -> Option<&str> {
        match self {
            Command::Run(a) if a.quiet => None,
            Command::Run(a) => Some(&a.store.store),
            Command::Status(a) => Some(&a.store.store),
            Command::SetCapacity(a) => Some(&a.store.store),
            Command::Rate(a) => Some(a.command.store()),
            Command::Top(a) => Some(&a.store.store),
            Command::Serve(_) => None,
        }
    }
}

#[derive(Debug, Args)]
// `--min`/`--max` require one of the flags that size the semaphore (`sized`).
#[command(group(clap::ArgGroup::new("sized").args(["adaptive", "per_member"])))]
pub struct RunArgs {
    #[command(flatten)]
    pub store: StoreArg,
    /// Semaphore to take permits from.
    #[arg(long, value_name = "NAME", value_parser = semaphore_name)]
    pub semaphore: String,
    /// Create the semaphore with this capacity if absent (without it, an absent semaphore is an error).
    #[arg(long, value_name = "N", value_parser = super::numbers::whole::<u32>(1, u64::from(clusterlimit::Semaphore::MAX_CAPACITY)), allow_negative_numbers = true)]
    pub capacity: Option<u32>,
    /// Permits to hold while CMD runs.
    #[arg(long, value_name = "K", default_value_t = 1, value_parser = super::numbers::whole::<u32>(1, u64::from(clusterlimit::Semaphore::MAX_CAPACITY)), allow_negative_numbers = true)]
    pub permits: u32,
    /// Give up waiting after this long (e.g. 30s, 5m) and exit 75; default: wait forever.
    #[arg(long, value_name = "DUR", value_parser = parse_wait_timeout)]
    pub timeout: Option<Duration>,
    /// SIGKILL CMD's process group this long after a SIGTERM that did not end it (a lost permit,
    /// SIGTERM or SIGINT to `run`, processes CMD left behind when it exited).
    #[arg(long, value_name = "DUR", value_parser = parse_duration, default_value = "10s")]
    pub grace: Duration,
    /// Owner label shown in `status` (default HOSTNAME/PID).
    #[arg(long, value_name = "LABEL")]
    pub owner: Option<String>,
    /// Say nothing on stderr of our own but failures: no "waiting for a permit" line, no
    /// memory:// warning.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// Store session TTL (min 2s): if this process dies, its permits come back within it.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, default_value = "10s")]
    pub session_ttl: Duration,
    #[command(flatten)]
    pub adaptive: super::run_adaptive::AdaptiveArgs,
    #[command(flatten)]
    pub per_member: super::run_per_member::PerMemberArgs,
    #[command(flatten)]
    pub fair: super::run_fair::FairArgs,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub store: StoreArg,
    /// Semaphore to show; all semaphores without it.
    #[arg(value_name = "NAME", value_parser = semaphore_name)]
    pub name: Option<String>,
    /// Print JSON (one object with NAME, else an array) instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct SetCapacityArgs {
    #[command(flatten)]
    pub store: StoreArg,
    /// Semaphore to change.
    #[arg(value_name = "NAME", value_parser = semaphore_name)]
    pub name: String,
    /// New capacity.
    #[arg(value_name = "N", value_parser = super::numbers::whole::<u32>(1, u64::from(clusterlimit::Semaphore::MAX_CAPACITY)), allow_negative_numbers = true)]
    pub capacity: u32,
}

#[derive(Debug, Args)]
pub struct TopArgs {
    #[command(flatten)]
    pub store: StoreArg,
    /// How often to read the store (100ms to 60s).
    #[arg(long, value_name = "DUR", value_parser = parse_interval, default_value = "1s")]
    pub interval: Duration,
}

/// `run --timeout`: a duration longer than 0 (0 would give up before the store could answer,
/// and blame it).
fn parse_wait_timeout(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(
            "a timeout of 0 is not allowed: give how long to wait for the permits, \
                    e.g. 30s (without --timeout, run waits as long as it takes)"
                .to_string(),
        );
    }
    Ok(d)
}

/// `--interval`: a duration from 100ms to 60s (faster would load the store for nothing a
/// human can read; slower is no longer live).
fn parse_interval(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < Duration::from_millis(100) || d > Duration::from_secs(60) {
        return Err(format!("{s} is out of range: give 100ms to 60s"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn grammar_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn command_names_are_the_typed_ones() {
        let store = ["--store", "memory://"];
        for argv in [
            &["run", store[0], store[1], "--semaphore", "s", "--", "true"][..],
            &["status", store[0], store[1]],
            &["set-capacity", store[0], store[1], "s", "1"],
            &["rate", "check", store[0], store[1], "r", "k"],
            &["top", store[0], store[1]],
            &["serve"],
        ] {
            let cli =
                Cli::try_parse_from(std::iter::once("clusterlimit").chain(argv.iter().copied()))
                    .unwrap();
            let typed = if argv[0] == "rate" {
                format!("rate {}", argv[1])
            } else {
                argv[0].to_string()
            };
            assert_eq!(cli.command.name(), typed);
        }
        let names: Vec<String> = Cli::command()
            .get_subcommands()
            .map(|s| s.get_name().to_string())
            .collect();
        assert_eq!(
            names,
            ["run", "status", "set-capacity", "rate", "top", "serve"]
        );
    }

    #[test]
    fn top_interval_is_bounded() {
        assert_eq!(parse_interval("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_interval("100ms"), Ok(Duration::from_millis(100)));
        assert!(parse_interval("99ms").is_err());
        assert!(parse_interval("61s").is_err());
        assert!(parse_interval("soon").is_err());
    }
}
