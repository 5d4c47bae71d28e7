//! Sidecar settings: a TOML file (`--config`) overridden by flags, with defaults that need no
//! servers (`memory://`).

use crate::cli::exit::Failure;
use crate::cli::{parse_duration, ServeArgs};
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Default TCP address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7878";
/// Default store: in-process, so the sidecar runs with no servers.
pub const DEFAULT_STORE: &str = "memory://";
/// Default client TTL of an HTTP permit.
pub const DEFAULT_PERMIT_TTL: Duration = Duration::from_secs(15);

/// The config file. Durations are strings like `"10s"`.
///
/// ```toml
/// listen = "127.0.0.1:7878"
/// unix = "/run/clusterlimit.sock"
/// store = "etcd://10.0.0.1:2379/myapp"
/// session_ttl = "10s"
/// permit_ttl = "15s"
/// owner = "host-a/sidecar"
///
/// [[semaphores]]
/// name = "nightly-export"
/// capacity = 4
/// ```
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<String>,
    unix: Option<PathBuf>,
    store: Option<String>,
    session_ttl: Option<String>,
    permit_ttl: Option<String>,
    owner: Option<String>,
    #[serde(default)]
    semaphores: Vec<Declared>,
}

/// A semaphore created at start-up if absent (an existing one keeps its stored capacity).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Declared {
    pub name: String,
    pub capacity: u32,
}

/// Settings after merging flags over the file over defaults.
#[derive(Debug)]
pub struct Config {
    pub listen: SocketAddr,
    pub unix: Option<PathBuf>,
    pub store: String,
    pub session_ttl: Duration,
    pub permit_ttl: Duration,
    pub owner: Option<String>,
    pub semaphores: Vec<Declared>,
}

impl Config {
    /// Reads `--config` (if any) and applies the flags; errors exit 64.
    pub fn resolve(args: ServeArgs) -> Result<Config, Failure> {
        let file = match &args.config {
            Some(path) => read_file(path)?,
            None => FileConfig::default(),
        };
        let listen_text = args
            .listen
            .or(file.listen)
            .unwrap_or_else(|| DEFAULT_LISTEN.to_string());
        let listen = listen_text.parse().map_err(|e| {
            bad(format!(
                "listen address {listen_text:?}: {e} (expected IP:PORT)"
            ))
        })?;
        let duration =
            |flag: Option<Duration>, text: Option<String>, key: &str, default| match (flag, text) {
                (Some(d), _) => Ok(d),
                (None, Some(t)) => {
                    parse_duration(&t).map_err(|e| bad(format!("config {key} = {t:?}: {e}")))
                }
                (None, None) => Ok(default),
            };
        let session_ttl = duration(
            args.session_ttl,
            file.session_ttl,
            "session_ttl",
            clusterlimit::DEFAULT_SESSION_TTL,
        )?;
        let permit_ttl = duration(
            args.permit_ttl,
            file.permit_ttl,
            "permit_ttl",
            DEFAULT_PERMIT_TTL,
        )?;
        if permit_ttl < super::api::MIN_TTL {
            return Err(bad(format!(
                "permit TTL must be at least {:?}",
                super::api::MIN_TTL
            )));
        }
        Ok(Config {
            listen,
            unix: args.unix.or(file.unix),
            store: args
                .store
                .or(file.store)
                .unwrap_or_else(|| DEFAULT_STORE.to_string()),
            session_ttl,
            permit_ttl,
            owner: args.owner.or(file.owner),
            semaphores: file.semaphores,
        })
    }
}

fn read_file(path: &Path) -> Result<FileConfig, Failure> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| bad(format!("cannot read config {}: {e}", path.display())))?;
    toml::from_str(&text).map_err(|e| bad(format!("config {}: {e}", path.display())))
}

fn bad(message: String) -> Failure {
    Failure::usage(message, crate::cli::usage_of("serve"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_parses_and_rejects_unknown_keys() {
        let ok: FileConfig = toml::from_str(
            "store = \"memory://x\"\nsession_ttl = \"3s\"\n[[semaphores]]\nname = \"a\"\ncapacity = 2\n",
        )
        .unwrap();
        assert_eq!(ok.semaphores.len(), 1);
        assert!(toml::from_str::<FileConfig>("stor = \"x\"").is_err());
    }
}
