//! `--store` and the options of connecting to it, as every one-shot command takes them.

use crate::common::{connect, parse_duration, Failure, StoreSecurity, StoreTimeouts};
use crate::sidecar::StoreSecurityFlags;
use clap::Args;
use std::time::Duration;

/// The store every one-shot command needs.
#[derive(Debug, Args)]
pub struct StoreArg {
    /// Store URL: memory://NAME, etcd://HOST:PORT[,HOST:PORT…][/PREFIX], zk://HOST:PORT[,…][/CHROOT].
    #[arg(long, env = "CLUSTERLIMIT_STORE", value_name = "URL")]
    pub store: String,
    #[command(flatten)]
    pub security: StoreSecurityFlags,
    /// Give up connecting to the store after this long (a refused port or an unknown host
    /// fails at once).
    #[arg(long, env = "CLUSTERLIMIT_CONNECT_TIMEOUT", value_name = "DUR", value_parser = parse_store_timeout, default_value = "5s")]
    pub connect_timeout: Duration,
    /// Bound on each store request once connected.
    #[arg(long, env = "CLUSTERLIMIT_REQUEST_TIMEOUT", value_name = "DUR", value_parser = parse_store_timeout, default_value = "5s")]
    pub request_timeout: Duration,
}

/// `--connect-timeout`, `--request-timeout`: longer than 0 (0 would blame the store for a
/// timeout it was never given).
fn parse_store_timeout(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(
            "a timeout of 0 is not allowed: give how long to wait for the store, e.g. 5s"
                .to_string(),
        );
    }
    Ok(d)
}

impl StoreArg {
    /// The store credential flags, for `common::connect`.
    pub fn security(&self) -> StoreSecurity {
        self.security.clone().into()
    }

    /// `--connect-timeout` and `--request-timeout`.
    pub fn timeouts(&self) -> StoreTimeouts {
        StoreTimeouts {
            connect: self.connect_timeout,
            request: self.request_timeout,
        }
    }

    /// Connects for a one-shot command (`status`, `set-capacity`): default TTL and owner.
    pub async fn connect_once(&self) -> Result<clusterlimit::Limiter, Failure> {
        connect(
            &self.store,
            clusterlimit::Limiter::DEFAULT_SESSION_TTL,
            None,
            &self.security(),
            self.timeouts(),
        )
        .await
    }
}
