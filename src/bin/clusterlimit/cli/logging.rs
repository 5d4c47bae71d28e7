//! What the binary logs, to stderr. `--log LEVEL` (or `CLUSTERLIMIT_LOG`) sets clusterlimit's
//! own targets only: at `debug`, the transport crates (h2, hyper, tonic, tower, rustls, the etcd
//! and ZooKeeper clients) would log every frame and drown the lines that matter, so they stay
//! at `warn`. `RUST_LOG`, when set, wins: it is the expert's full filter.

use crate::sidecar::otel_export::ExportLayer;
use clap::ValueEnum;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

/// A preset of `--log`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogLevel {
    /// Only failures.
    Error,
    /// Failures and what may need attention.
    Warn,
    /// Also what the sidecar does (listening, declared semaphores, reloads).
    Info,
    /// Also each step (connects, grants, releases, store requests retried).
    Debug,
    /// Everything clusterlimit logs.
    Trace,
}

impl LogLevel {
    fn name(self) -> &'static str {
        match self {
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
            LogLevel::Trace => "trace",
        }
    }
}

/// The filter directives: `RUST_LOG` if set; else `level` for clusterlimit's targets with the
/// rest at `warn`; else the default of the command (`serve`: info, so its start and its
/// reloads show; one-shot commands: warnings, but none from the store backend, whose
/// keepalive retries and session end at close would garble the command's one line).
pub fn directives(level: Option<LogLevel>, serve: bool, rust_log: Option<String>) -> String {
    if let Some(expert) = rust_log.filter(|s| !s.trim().is_empty()) {
        return expert;
    }
    match (level, serve) {
        (Some(level), _) => format!("warn,clusterlimit={}", level.name()),
        (None, true) => "warn,clusterlimit=info".to_string(),
        (None, false) => "warn,clusterlimit::backend=error".to_string(),
    }
}

/// Installs the stderr subscriber, and under it `traces` (the sidecar's span export, with a
/// filter of its own) when given. Bad `RUST_LOG` directives are skipped by `EnvFilter`.
pub fn init(level: Option<LogLevel>, serve: bool, traces: Option<ExportLayer>) {
    let filter = EnvFilter::new(directives(level, serve, std::env::var("RUST_LOG").ok()));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let Some(traces) = traces else {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .with_ansi(ansi)
            .try_init();
        return;
    };
    // Each layer filtered on its own: the log level does not limit what is exported.
    let lines = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .with_filter(filter);
    let _ = tracing_subscriber::registry()
        .with(traces)
        .with(lines)
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_leave_the_transports_at_warn() {
        assert_eq!(
            directives(Some(LogLevel::Debug), false, None),
            "warn,clusterlimit=debug"
        );
        assert_eq!(
            directives(Some(LogLevel::Error), true, None),
            "warn,clusterlimit=error"
        );
        assert_eq!(directives(None, true, None), "warn,clusterlimit=info");
        assert_eq!(
            directives(None, false, None),
            "warn,clusterlimit::backend=error"
        );
        assert_eq!(
            directives(Some(LogLevel::Info), false, Some("h2=trace".into())),
            "h2=trace"
        );
        assert_eq!(
            directives(None, false, Some(" ".into())),
            "warn,clusterlimit::backend=error"
        );
    }
}
