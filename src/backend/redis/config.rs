//! What a Redis backend is opened with: the parsed URL's parts and the Limiter's options.

use crate::error::{Error, Result};
use crate::store_url::{RedisMode, RedisUser, TlsFiles};
use std::time::Duration;

/// Settings of a [`RedisBackend`](super::RedisBackend).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RedisConfig {
    /// Which servers, and how they are found.
    pub mode: RedisMode,
    /// Prefix of every key (no braces: it goes inside Redis Cluster hash tags).
    pub prefix: String,
    /// TLS settings (`rediss…://`), `None` for plain text.
    pub tls: Option<TlsFiles>,
    /// Authentication, if any.
    pub user: Option<RedisUser>,
    /// Bound on each request, retries included.
    pub request_timeout: Duration,
    /// Reported as the session TTL, and how long an announcement outlives its last refresh.
    pub session_ttl: Duration,
    /// Replicas that must acknowledge each rate-limit write (`WAIT`) before it counts; 0: off.
    pub wait_replicas: u32,
}

impl RedisConfig {
    /// Settings for `mode` under `prefix`, with the default timeouts and no TLS or user.
    pub fn new(mode: RedisMode, prefix: impl Into<String>) -> RedisConfig {
        RedisConfig {
            mode,
            prefix: prefix.into(),
            tls: None,
            user: None,
            request_timeout: crate::timing::DEFAULT_REQUEST_TIMEOUT,
            session_ttl: crate::timing::DEFAULT_SESSION_TTL,
            wait_replicas: 0,
        }
    }

    /// How messages name the deployment: `Redis at HOST:PORT`, `Redis Sentinel service NAME
    /// (via HOST:PORT,…)` or `Redis Cluster at HOST:PORT,…`.
    pub(super) fn shown(&self) -> String {
        match &self.mode {
            RedisMode::Single { host } => format!("Redis at {host}"),
            RedisMode::Sentinel { sentinels, service } => {
                format!(
                    "Redis Sentinel service {service} (via {})",
                    sentinels.join(",")
                )
            }
            RedisMode::Cluster { seeds } => format!("Redis Cluster at {}", seeds.join(",")),
        }
    }

    /// The password: from the user's file, else `CLUSTERLIMIT_REDIS_PASSWORD` if set.
    pub(super) fn password(&self) -> Result<Option<String>> {
        let file = self.user.as_ref().and_then(|u| u.password_file.as_ref());
        match file {
            Some(path) => std::fs::read_to_string(path)
                .map(|p| Some(p.trim_end_matches(['\n', '\r']).to_string()))
                .map_err(|e| {
                    Error::invalid(format!(
                        "Redis password file {} cannot be read: {e}",
                        path.display()
                    ))
                }),
            None => Ok(std::env::var("CLUSTERLIMIT_REDIS_PASSWORD")
                .ok()
                .filter(|p| !p.is_empty())),
        }
    }
}
