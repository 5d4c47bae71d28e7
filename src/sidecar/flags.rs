//! The flags of `clusterlimit serve` (the `cli` grammar includes them as its `serve` subcommand).

use crate::frontend::parse_duration;
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;

/// The flags of `serve`; each one overrides the config file's key of the same name.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// TOML config file (listen, unix, store, session_ttl, permit_ttl, owner, [[semaphores]]).
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// TCP address to listen on [default: 127.0.0.1:7878].
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// Also listen on this Unix socket.
    #[arg(long, value_name = "PATH")]
    pub unix: Option<PathBuf>,
    /// Store URL [default: memory://].
    #[arg(long, env = "CLUSTERLIMIT_STORE", value_name = "URL")]
    pub store: Option<String>,
    /// Store session TTL (min 2s) [default: 10s].
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub session_ttl: Option<Duration>,
    /// Client TTL of an HTTP permit when the request gives no ttl_ms [default: 15s].
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub permit_ttl: Option<Duration>,
    /// Owner label of the sidecar's permits when a request gives none (default HOSTNAME/PID).
    #[arg(long, value_name = "LABEL")]
    pub owner: Option<String>,
    /// Check the settings (file and flags: keys, durations, addresses, store URL, declared
    /// semaphores) without connecting or listening; print them and exit 0, or name the field at
    /// fault and exit 64.
    #[arg(long)]
    pub check_config: bool,
}
