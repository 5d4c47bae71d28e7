//! Sidecar settings: a TOML file (`--config`) overridden by flags, with defaults that need no
//! servers (`memory://`).

use super::ServeArgs;
use crate::frontend::{parse_duration, Failure};
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
    /// The `--config` file, if any (named in messages).
    pub file: Option<PathBuf>,
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
            file: args.config,
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

impl Config {
    /// Everything connecting would reject, found without connecting: the store URL, the session
    /// TTL, the owner label, and each declared semaphore (named by its index). Errors exit 64.
    pub fn check(&self) -> Result<(), Failure> {
        let at = |field: &str, e: clusterlimit::Error| {
            let e = match e {
                clusterlimit::Error::InvalidArgument(why) => why,
                e => e.to_string(),
            };
            match &self.file {
                Some(path) => bad(format!(
                    "{field}: {e} (settings from config {} and flags)",
                    path.display()
                )),
                None => bad(format!("{field}: {e}")),
            }
        };
        clusterlimit::StoreUrl::parse(&self.store).map_err(|e| at("store", e))?;
        if self.session_ttl < clusterlimit::MIN_SESSION_TTL {
            return Err(at(
                "session_ttl",
                clusterlimit::Error::InvalidArgument(format!(
                    "must be at least {:?}, got {:?}",
                    clusterlimit::MIN_SESSION_TTL,
                    self.session_ttl
                )),
            ));
        }
        if let Some(owner) = &self.owner {
            clusterlimit::validate::owner(owner).map_err(|e| at("owner", e))?;
        }
        for (i, d) in self.semaphores.iter().enumerate() {
            clusterlimit::validate::name(&d.name)
                .map_err(|e| at(&format!("semaphores[{i}].name"), e))?;
            clusterlimit::validate::capacity(d.capacity)
                .map_err(|e| at(&format!("semaphores[{i}].capacity"), e))?;
            if self.semaphores[..i].iter().any(|o| o.name == d.name) {
                return Err(at(
                    &format!("semaphores[{i}].name"),
                    clusterlimit::Error::InvalidArgument(format!(
                        "semaphore {:?} is declared twice",
                        d.name
                    )),
                ));
            }
        }
        Ok(())
    }

    /// The settings in force, one per line, as `serve --check-config` prints them.
    pub fn describe(&self) -> String {
        let file = self
            .file
            .as_ref()
            .map_or("(no file: flags and defaults)".to_string(), |p| {
                p.display().to_string()
            });
        let unix = self
            .unix
            .as_ref()
            .map_or("-".to_string(), |p| p.display().to_string());
        let semaphores = if self.semaphores.is_empty() {
            "-".to_string()
        } else {
            self.semaphores
                .iter()
                .map(|d| format!("{} (capacity {})", d.name, d.capacity))
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            "config ok: {file}\n\
             listen       {}\n\
             unix         {unix}\n\
             store        {}\n\
             session_ttl  {:?}\n\
             permit_ttl   {:?}\n\
             owner        {}\n\
             semaphores   {semaphores}\n",
            self.listen,
            self.store,
            self.session_ttl,
            self.permit_ttl,
            self.owner.as_deref().unwrap_or("(HOSTNAME/PID)"),
        )
    }
}

fn read_file(path: &Path) -> Result<FileConfig, Failure> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| bad(format!("cannot read config {}: {e}", path.display())))?;
    toml::from_str(&text).map_err(|e| bad(format!("config {}: {e}", path.display())))
}

fn bad(message: String) -> Failure {
    Failure::usage(message)
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
