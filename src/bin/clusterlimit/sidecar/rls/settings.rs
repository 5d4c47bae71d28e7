//! The RLS settings: flags over the TOML keys over defaults, and the YAML rules they name.

use super::flags::RlsFlags;
use super::reload::Fingerprint;
use super::rules::{Loading, Rules};
use crate::common::{parse_duration, Failure};
use crate::sidecar::header_mode::HeaderMode;
use clusterlimit::StoreDownPolicy;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Default `rls_store_timeout`: the longest a `ShouldRateLimit` waits for the store before its
/// store-down policy answers it. Each call also keeps within the deadline its caller sends
/// (`grpc-timeout`, less a fifth for the way back): Envoy sends its filter `timeout`, 20 ms by
/// default, so there the bound is 16 ms and Envoy hears this service's answer (its policy, not
/// Envoy's `failure_mode_deny`) before it gives up. Measured with default settings on a
/// 3-member etcd, 64 callers (BENCHMARKS.md, "Rate limit service at the edge"): p99 5-9 ms,
/// max under 20 ms, so neither bound is reached while the store is healthy. 50 ms serves
/// callers that allow longer (the 100 ms Envoy `timeout` the docs advise): a slow but working
/// store still decides exactly. A call past its bound is answered alone; the breaker opens
/// only on store errors or slow answers that persist.
pub const DEFAULT_STORE_TIMEOUT: Duration = Duration::from_millis(50);

/// Where the gRPC server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GrpcListen {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl std::fmt::Display for GrpcListen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GrpcListen::Tcp(a) => write!(f, "grpc://{a}"),
            GrpcListen::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// The RLS keys of the TOML file.
#[derive(Debug, Default)]
pub struct FileKeys {
    pub grpc_listen: Option<String>,
    pub rls_config: Option<Vec<PathBuf>>,
    pub rls_store_down: Option<String>,
    pub rls_store_timeout: Option<String>,
    pub rls_shadow_mode: Option<bool>,
    pub rls_response_headers: Option<String>,
    pub rls_merge_domain_config: Option<bool>,
}

/// The RLS settings in force.
#[derive(Debug)]
pub struct Settings {
    pub listen: GrpcListen,
    pub files: Vec<PathBuf>,
    pub rules: Arc<Rules>,
    /// What the files held just before `rules` were read from them: the reloader's start.
    pub files_seen: Fingerprint,
    pub store_down: StoreDownPolicy,
    pub store_timeout: Duration,
    pub shadow: bool,
    pub headers: HeaderMode,
    /// How the rule files load (`rls_merge_domain_config`); a reload loads them the same way.
    pub loading: Loading,
}

impl Settings {
    /// `None` when the RLS is off (no `grpc_listen`, no `rls_config`); errors exit 64 and name
    /// the key (YAML errors name `file:line`).
    pub fn resolve(flags: RlsFlags, file: FileKeys) -> Result<Option<Settings>, Failure> {
        let listen = flags.grpc_listen.or(file.grpc_listen);
        let files = if flags.rls_config.is_empty() {
            file.rls_config.unwrap_or_default()
        } else {
            flags.rls_config
        };
        let listen =
            match (listen, files.is_empty()) {
                (None, true) => return Ok(None),
                (Some(_), true) => {
                    return Err(bad(
                        "grpc_listen (--grpc-listen) needs rls_config (--rls-config PATH): \
                     the rate limit service has no rules without it",
                    ))
                }
                (None, false) => return Err(bad(
                    "rls_config (--rls-config) needs grpc_listen (--grpc-listen ADDR|unix:PATH)",
                )),
                (Some(text), false) => parse_listen(&text).map_err(bad)?,
            };
        let store_down = match flags.rls_store_down.or(file.rls_store_down) {
            Some(t) => t
                .parse::<StoreDownPolicy>()
                .map_err(|e| bad(format!("rls_store_down: {e}")))?,
            None => StoreDownPolicy::FailOpen,
        };
        let store_timeout = match (flags.rls_store_timeout, file.rls_store_timeout) {
            (Some(d), _) => d,
            (None, Some(t)) => {
                parse_duration(&t).map_err(|e| bad(format!("rls_store_timeout = {t:?}: {e}")))?
            }
            (None, None) => DEFAULT_STORE_TIMEOUT,
        };
        if store_timeout < Duration::from_millis(1) || store_timeout > Duration::from_secs(60) {
            return Err(bad(format!(
                "rls_store_timeout must be 1ms..=60s, got {store_timeout:?}"
            )));
        }
        let headers = match flags.rls_response_headers.or(file.rls_response_headers) {
            Some(t) => {
                HeaderMode::parse_rls(&t).map_err(|e| bad(format!("rls_response_headers: {e}")))?
            }
            None => HeaderMode::RLS_DEFAULT,
        };
        let loading = Loading {
            // A flag can only turn it on; off by default, as envoyproxy's MERGE_DOMAIN_CONFIG.
            merge_domains: flags.rls_merge_domain_config
                || file.rls_merge_domain_config.unwrap_or(false),
        };
        // Taken first: a change made while the rules are read (or before the reloader starts)
        // differs from it, so it is loaded then.
        let files_seen = Fingerprint::take(&files);
        let rules = Rules::load(&files, loading).map_err(bad)?;
        Ok(Some(Settings {
            listen,
            files,
            rules: Arc::new(rules),
            files_seen,
            store_down,
            store_timeout,
            // A flag can only turn it on.
            shadow: flags.rls_shadow_mode || file.rls_shadow_mode.unwrap_or(false),
            headers,
            loading,
        }))
    }

    /// Non-loopback TCP without a token is refused unless allowed, as for HTTP.
    pub fn check_access(&self, token: bool, insecure_allow_remote: bool) -> Result<(), Failure> {
        if let GrpcListen::Tcp(addr) = &self.listen {
            if !token && !addr.ip().is_loopback() && !insecure_allow_remote {
                return Err(Failure::usage(format!(
                    "refusing to serve the rate limit service on {addr} without a token: anyone \
                     who can reach it could spend every limit. Give a token (--token-file PATH; \
                     Envoy sends it with grpc_service.initial_metadata), or accept that with \
                     --insecure-allow-remote (insecure_allow_remote = true)"
                )));
            }
        }
        Ok(())
    }

    /// The settings and rules, as `serve --check-config` prints them.
    pub fn describe(&self) -> String {
        let files: Vec<String> = self.files.iter().map(|p| p.display().to_string()).collect();
        format!(
            "grpc_listen  {}\n\
             rls_config   {}\n\
             rls          store_down {}, store_timeout {}, shadow_mode {}, response_headers {}, \
             merge_domain_config {}\n\
             {}",
            self.listen,
            files.join(", "),
            self.store_down,
            crate::common::format_duration(self.store_timeout),
            self.shadow,
            self.headers,
            self.loading.merge_domains,
            self.rules.describe()
        )
    }
}

fn bad(message: impl Into<String>) -> Failure {
    Failure::usage(message)
}

fn parse_listen(text: &str) -> Result<GrpcListen, String> {
    if let Some(path) = text.strip_prefix("unix:") {
        if path.is_empty() {
            return Err("grpc_listen unix: needs a path (unix:/run/clusterlimit-rls.sock)".into());
        }
        return Ok(GrpcListen::Unix(PathBuf::from(path)));
    }
    text.parse()
        .map(GrpcListen::Tcp)
        .map_err(|e| format!("grpc_listen {text:?}: {e} (expected IP:PORT or unix:PATH)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses() {
        assert_eq!(
            parse_listen("127.0.0.1:0"),
            Ok(GrpcListen::Tcp("127.0.0.1:0".parse().unwrap()))
        );
        assert_eq!(
            parse_listen("unix:/tmp/x.sock"),
            Ok(GrpcListen::Unix("/tmp/x.sock".into()))
        );
        assert!(parse_listen("unix:").is_err());
        assert!(parse_listen("localhost").is_err());
    }

    #[test]
    fn one_without_the_other_is_a_usage_error() {
        let flags = RlsFlags {
            grpc_listen: Some("127.0.0.1:0".into()),
            ..Default::default()
        };
        let e = Settings::resolve(flags, FileKeys::default()).unwrap_err();
        assert!(e.message.contains("needs rls_config"), "{e:?}");
        let file = FileKeys {
            rls_config: Some(vec!["x.yaml".into()]),
            ..Default::default()
        };
        let e = Settings::resolve(RlsFlags::default(), file).unwrap_err();
        assert!(e.message.contains("needs grpc_listen"), "{e:?}");
        assert!(Settings::resolve(RlsFlags::default(), FileKeys::default())
            .unwrap()
            .is_none());
    }
}
