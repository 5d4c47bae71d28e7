//! The flags of `clusterlimit serve` (the `cli` grammar includes them as its `serve` subcommand),
//! and the store credential flags every subcommand shares.

use crate::common::{parse_duration, StoreSecurity};
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;

/// The flags of `serve`; each one overrides the config file's key of the same name.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// TOML config file (listen, unix, store, session_ttl, permit_ttl, owner, token_file, …,
    /// [[semaphores]], rate_*, [[rate_limits]]).
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// TCP address to listen on [default: 127.0.0.1:7878].
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// Also listen on this Unix socket.
    #[arg(long, value_name = "PATH")]
    pub unix: Option<PathBuf>,
    /// Permissions of the Unix socket, in octal [default: 0660].
    #[arg(long, value_name = "MODE")]
    pub socket_mode: Option<String>,
    /// File holding the bearer token every route but /healthz and /readyz then requires
    /// (`Authorization: Bearer TOKEN`); read once at start, trailing newline ignored.
    #[arg(long, value_name = "PATH")]
    pub token_file: Option<PathBuf>,
    /// Serve /metrics without the token (the token still guards every other route).
    #[arg(long)]
    pub metrics_without_token: bool,
    /// Listen on a non-loopback address without a token (anyone who reaches it can take,
    /// release and resize permits).
    #[arg(long)]
    pub insecure_allow_remote: bool,
    /// Store URL [default: memory://].
    #[arg(long, env = "CLUSTERLIMIT_STORE", value_name = "URL")]
    pub store: Option<String>,
    #[command(flatten)]
    pub security: StoreSecurityFlags,
    /// Store session TTL (min 2s) [default: 10s].
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub session_ttl: Option<Duration>,
    /// Give up connecting to the store at start after this long [default: 5s].
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub connect_timeout: Option<Duration>,
    /// Bound on each store request, and on every read route [default: 5s].
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub request_timeout: Option<Duration>,
    /// Client TTL of an HTTP permit when the request gives no ttl_ms [default: 15s].
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub permit_ttl: Option<Duration>,
    /// Owner label of the sidecar's permits when a request gives none (default HOSTNAME/PID).
    #[arg(long, value_name = "LABEL")]
    pub owner: Option<String>,
    // --- Envoy's rate limit service (src/bin/clusterlimit/sidecar/rls/) ---
    #[command(flatten)]
    pub rls: super::rls::RlsFlags,
    /// Check the settings (file and flags: keys, durations, addresses, token file, store URL,
    /// declared semaphores) without connecting or listening; print them and exit 0, or name
    /// the field at fault and exit 64.
    #[arg(long)]
    pub check_config: bool,
    #[command(flatten)]
    pub rate: super::rate_settings::RateFlags,
}

/// Store TLS and authentication: paths of files and a user name, never a secret itself.
#[derive(Debug, Clone, Args, Default)]
pub struct StoreSecurityFlags {
    /// etcd TLS: CA bundle of the servers' certificates (PEM).
    #[arg(long, value_name = "PATH")]
    pub etcd_cacert: Option<PathBuf>,
    /// etcd TLS: client certificate (PEM), with --etcd-key.
    #[arg(long, value_name = "PATH")]
    pub etcd_cert: Option<PathBuf>,
    /// etcd TLS: private key of the client certificate (PEM).
    #[arg(long, value_name = "PATH")]
    pub etcd_key: Option<PathBuf>,
    /// etcd user name (password from --etcd-password-file or CLUSTERLIMIT_ETCD_PASSWORD).
    #[arg(long, value_name = "NAME")]
    pub etcd_user: Option<String>,
    /// File holding the etcd user's password.
    #[arg(long, value_name = "PATH")]
    pub etcd_password_file: Option<PathBuf>,
    /// ZooKeeper digest authentication: file holding `user:password`.
    #[arg(long, value_name = "PATH")]
    pub zk_digest_file: Option<PathBuf>,
}

impl From<StoreSecurityFlags> for StoreSecurity {
    fn from(f: StoreSecurityFlags) -> Self {
        StoreSecurity {
            etcd_cacert: f.etcd_cacert,
            etcd_cert: f.etcd_cert,
            etcd_key: f.etcd_key,
            etcd_user: f.etcd_user,
            etcd_password_file: f.etcd_password_file,
            zk_digest_file: f.zk_digest_file,
        }
    }
}
