//! The RLS flags of `serve` (each overrides the config file's key of the same name).

use crate::common::parse_duration;
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;

/// Envoy's global rate limit service (RLS v3 gRPC).
#[derive(Debug, Clone, Default, Args)]
pub struct RlsFlags {
    /// Serve Envoy's rate limit service (gRPC) on IP:PORT or unix:PATH; needs --rls-config.
    #[arg(long, value_name = "ADDR")]
    pub grpc_listen: Option<String>,
    /// envoyproxy/ratelimit YAML rules: a file, or a directory whose *.yaml and *.yml files
    /// are loaded in name order. Repeatable.
    #[arg(long, value_name = "PATH")]
    pub rls_config: Vec<PathBuf>,
    /// RLS answer while the store is down: fail_open, fail_closed or local:N [default: fail_open].
    #[arg(long, value_name = "POLICY")]
    pub rls_store_down: Option<String>,
    /// A store call slower than this counts as the store being down [default: 50ms].
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub rls_store_timeout: Option<Duration>,
    /// Count every RLS rule but answer OK overall (envoyproxy's global shadow mode).
    #[arg(long)]
    pub rls_shadow_mode: bool,
    /// Header fields in the RLS answers' response_headers_to_add: off, ietf (RateLimit-Policy,
    /// RateLimit) or legacy (envoyproxy's RateLimit-Limit, -Remaining, -Reset) [default: off].
    #[arg(long, value_name = "MODE")]
    pub rls_response_headers: Option<String>,
    /// Merge rule files that name one domain (envoyproxy's MERGE_DOMAIN_CONFIG); without it
    /// such files are an error naming both.
    #[arg(long)]
    pub rls_merge_domain_config: bool,
}
