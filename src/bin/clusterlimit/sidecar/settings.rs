//! Sidecar settings: a TOML file (`--config`) overridden by flags, with defaults that need no
//! servers (`memory://`).

use super::adaptive_settings::{self, AdaptiveTables};
use super::flags::ServeArgs;
use super::otel_settings::{TracingFile, TracingSettings};
use super::per_member_settings::{self, PerMemberTables};
use super::rate_settings::{self, DeclaredRate, RateFileKeys, RateSettings};
use super::token::Token;
use crate::common::{format_duration, parse_duration, Failure, StoreSecurity, StoreTimeouts};
use clusterlimit::fair::Classes;
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
/// Default permissions of the Unix socket: owner and group may connect.
pub const DEFAULT_SOCKET_MODE: u32 = 0o660;

/// The config file. Durations are strings like `"10s"`.
///
/// ```toml
/// listen = "127.0.0.1:7878"
/// unix = "/run/clusterlimit.sock"
/// store = "etcd://10.0.0.1:2379/myapp"
/// session_ttl = "10s"
/// connect_timeout = "5s"                          # to reach the store at start
/// request_timeout = "5s"                          # each store request; also bounds reads
/// permit_ttl = "15s"
/// owner = "host-a/sidecar"
/// socket_mode = "0660"
/// token_file = "/run/secrets/clusterlimit-token"
/// metrics_without_token = false
/// insecure_allow_remote = false
/// etcd_cacert = "/etc/clusterlimit/etcd/ca.crt"   # also etcd_cert, etcd_key,
/// etcd_user = "clusterlimit"                      # etcd_password_file, zk_digest_file
/// grpc_listen = "127.0.0.1:8081"                  # Envoy's RLS, with rls_config = [..],
/// rls_config = ["/etc/clusterlimit/rls"]          # rls_store_down, rls_store_timeout,
///                                                 # rls_shadow_mode, rls_response_headers,
///                                                 # rls_merge_domain_config
///
/// rate_limit_headers = "ietf"        # legacy, both, off
/// rate_store_down = "fail_open"      # fail_closed, local:N
/// rate_store_timeout = "1s"
/// max_reservations = 100000         # reservations open at once (POST …/reservations)
/// hot_key_leases = false             # true: hot keys served from leased units (at start only)
/// approximate_hot_keys = false       # true: hot keys decided locally, may over-admit ~5%
///
/// [[semaphores]]
/// name = "nightly-export"
/// capacity = 4
///
/// [[semaphores]]                     # a fair semaphore: flows share it, classes have shares
/// name = "db"
/// capacity = 8
/// classes = "critical=25%,batch"
///
/// [[rate_limits]]
/// name = "api"
/// limit = 100
/// period = "1s"                      # also burst, algorithm, ban
///
/// [adaptive.payments-api]            # capacity set from the outcomes clients report
/// algorithm = "gradient"             # or "aimd"
/// min = 2
/// max = 200
/// initial = 20
/// window = "1s"
/// max_step = 0.5
///
/// [per_member.db-connections]        # capacity = ceil(per_member × live sidecars)
/// per_member = 10
/// min = 10
/// max = 200
///
/// [tracing]                          # OTLP/gRPC traces (also OTEL_EXPORTER_OTLP_ENDPOINT)
/// otlp_endpoint = "http://127.0.0.1:4317"
/// ```
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<String>,
    unix: Option<PathBuf>,
    store: Option<String>,
    session_ttl: Option<String>,
    connect_timeout: Option<String>,
    request_timeout: Option<String>,
    permit_ttl: Option<String>,
    owner: Option<String>,
    socket_mode: Option<String>,
    token_file: Option<PathBuf>,
    metrics_without_token: Option<bool>,
    insecure_allow_remote: Option<bool>,
    etcd_cacert: Option<PathBuf>,
    etcd_cert: Option<PathBuf>,
    etcd_key: Option<PathBuf>,
    etcd_user: Option<String>,
    etcd_password_file: Option<PathBuf>,
    zk_digest_file: Option<PathBuf>,
    #[serde(default)]
    semaphores: Vec<Declared>,
    // Rate limits (see rate_settings.rs).
    rate_limit_headers: Option<String>,
    rate_store_down: Option<String>,
    rate_store_timeout: Option<String>,
    max_reservations: Option<i64>,
    hot_key_leases: Option<bool>,
    approximate_hot_keys: Option<bool>,
    #[serde(default)]
    rate_limits: Vec<DeclaredRate>,
    /// Adaptive semaphores (see adaptive_settings.rs).
    #[serde(default)]
    adaptive: AdaptiveTables,
    /// Per-member semaphores (see per_member_settings.rs).
    #[serde(default)]
    per_member: PerMemberTables,
    // --- Envoy's rate limit service (src/bin/clusterlimit/sidecar/rls/) ---
    grpc_listen: Option<String>,
    rls_config: Option<Vec<PathBuf>>,
    rls_store_down: Option<String>,
    rls_store_timeout: Option<String>,
    rls_shadow_mode: Option<bool>,
    rls_response_headers: Option<String>,
    rls_merge_domain_config: Option<bool>,
    /// Where traces go (see otel_settings.rs).
    tracing: Option<TracingFile>,
}

impl FileConfig {
    fn security(&self) -> StoreSecurity {
        StoreSecurity {
            etcd_cacert: self.etcd_cacert.clone(),
            etcd_cert: self.etcd_cert.clone(),
            etcd_key: self.etcd_key.clone(),
            etcd_user: self.etcd_user.clone(),
            etcd_password_file: self.etcd_password_file.clone(),
            zk_digest_file: self.zk_digest_file.clone(),
        }
    }
}

/// A semaphore created at start-up if absent (an existing one keeps its stored capacity).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Declared {
    pub name: String,
    pub capacity: u32,
    /// A fair semaphore's class table (`"critical=25%,batch"`); absent: a plain one.
    pub classes: Option<String>,
}

impl Declared {
    /// The class table, if the semaphore is fair, or what is wrong with it.
    pub fn classes(&self) -> Result<Option<Classes>, clusterlimit::Error> {
        self.classes.as_deref().map(str::parse).transpose()
    }
}

/// Settings after merging flags over the file over defaults. `Debug` shows no secret: the
/// token redacts itself and the rest are paths.
#[derive(Debug)]
pub struct ServeSettings {
    /// The `--config` file, if any (named in messages).
    pub file: Option<PathBuf>,
    pub listen: SocketAddr,
    pub unix: Option<PathBuf>,
    /// Permissions the Unix socket is given after it is created.
    pub socket_mode: u32,
    pub token_file: Option<PathBuf>,
    /// Read from `token_file` at start.
    pub token: Option<Token>,
    pub metrics_without_token: bool,
    pub insecure_allow_remote: bool,
    /// The store URL as given; print it only through `clusterlimit::redact`.
    pub store: String,
    pub security: StoreSecurity,
    pub session_ttl: Duration,
    /// Bounds on connecting and on each store request (also on every read route).
    pub timeouts: StoreTimeouts,
    pub permit_ttl: Duration,
    pub owner: Option<String>,
    pub semaphores: Vec<Declared>,
    /// Rate-limit headers and store-down policy.
    pub rate: RateSettings,
    /// `[[rate_limits]]` created at start.
    pub rate_limits: Vec<DeclaredRate>,
    /// `[adaptive.<name>]` semaphores opened at start.
    pub adaptive: AdaptiveTables,
    /// `[per_member.<name>]` semaphores opened at start.
    pub per_member: PerMemberTables,
    /// Envoy's rate limit service, when `grpc_listen` and `rls_config` are given.
    pub rls: Option<super::rls::Settings>,
    /// Where traces go, if anywhere (`[tracing]`, OTEL_* variables).
    pub tracing: TracingSettings,
}

/// The trace export `args` configure: their config's `[tracing]` and the environment. Read
/// before the rest of the settings, as the logging it joins starts first.
pub fn tracing_of(args: &ServeArgs) -> Result<TracingSettings, Failure> {
    let file = match &args.config {
        Some(path) => read_file(path)?,
        None => FileConfig::default(),
    };
    TracingSettings::resolve(file.tracing.as_ref(), |name| std::env::var(name).ok())
}

impl ServeSettings {
    /// Reads `--config` (if any) and applies the flags; errors exit 64.
    pub fn resolve(args: ServeArgs) -> Result<ServeSettings, Failure> {
        let mut file = match &args.config {
            Some(path) => read_file(path)?,
            None => FileConfig::default(),
        };
        let file_security = file.security();
        let rate = RateSettings::resolve(args.rate, file.rate_keys())?;
        let rls = super::rls::Settings::resolve(args.rls, file.rls_keys())?;
        let tracing =
            TracingSettings::resolve(file.tracing.as_ref(), |name| std::env::var(name).ok())?;
        let listen_text = args
            .listen
            .or(file.listen)
            .unwrap_or_else(|| DEFAULT_LISTEN.to_string());
        let listen = listen_text.parse().map_err(|e| {
            bad(format!(
                "listen address {listen_text:?}: {e} (expected IP:PORT)"
            ))
        })?;
        let session_ttl = duration_of(
            args.session_ttl,
            file.session_ttl,
            "session_ttl",
            clusterlimit::Limiter::DEFAULT_SESSION_TTL,
        )?;
        let timeouts = StoreTimeouts::resolve(
            (args.connect_timeout, file.connect_timeout),
            (args.request_timeout, file.request_timeout),
        )?;
        let permit_ttl = permit_ttl_of(args.permit_ttl, file.permit_ttl)?;
        let socket_mode = args
            .socket_mode
            .or(file.socket_mode)
            .map_or(Ok(DEFAULT_SOCKET_MODE), |text| {
                parse_mode(&text).map_err(|e| bad(format!("socket_mode {text:?}: {e}")))
            })?;
        let token_file = args.token_file.or(file.token_file);
        let token = token_file
            .as_deref()
            .map(Token::read)
            .transpose()
            .map_err(bad)?;
        let security = StoreSecurity::from(args.security).or(file_security);
        Ok(ServeSettings {
            file: args.config,
            listen,
            unix: args.unix.or(file.unix),
            socket_mode,
            token_file,
            token,
            // A flag can only turn these on: a file's `true` stays unless the file changes.
            metrics_without_token: args.metrics_without_token
                || file.metrics_without_token.unwrap_or(false),
            insecure_allow_remote: args.insecure_allow_remote
                || file.insecure_allow_remote.unwrap_or(false),
            security,
            store: args
                .store
                .or(file.store)
                .unwrap_or_else(|| DEFAULT_STORE.to_string()),
            session_ttl,
            timeouts,
            permit_ttl,
            owner: args.owner.or(file.owner),
            semaphores: file.semaphores,
            rate,
            rate_limits: file.rate_limits,
            adaptive: file.adaptive,
            per_member: file.per_member,
            rls,
            tracing,
        })
    }
}

impl FileConfig {
    /// The rate-limit keys, taken out for [`RateSettings::resolve`].
    fn rate_keys(&mut self) -> RateFileKeys {
        RateFileKeys {
            rate_limit_headers: self.rate_limit_headers.take(),
            rate_store_down: self.rate_store_down.take(),
            rate_store_timeout: self.rate_store_timeout.take(),
            max_reservations: self.max_reservations.take(),
            hot_key_leases: self.hot_key_leases.take(),
            approximate_hot_keys: self.approximate_hot_keys.take(),
        }
    }

    /// The RLS keys, taken out for `rls::Settings::resolve`.
    fn rls_keys(&mut self) -> super::rls::FileKeys {
        super::rls::FileKeys {
            grpc_listen: self.grpc_listen.take(),
            rls_config: self.rls_config.take(),
            rls_store_down: self.rls_store_down.take(),
            rls_store_timeout: self.rls_store_timeout.take(),
            rls_shadow_mode: self.rls_shadow_mode.take(),
            rls_response_headers: self.rls_response_headers.take(),
            rls_merge_domain_config: self.rls_merge_domain_config.take(),
        }
    }
}

/// A duration from its flag, else its config key's text, else `default`.
fn duration_of(
    flag: Option<Duration>,
    text: Option<String>,
    key: &str,
    default: Duration,
) -> Result<Duration, Failure> {
    match (flag, text) {
        (Some(d), _) => Ok(d),
        (None, Some(t)) => {
            parse_duration(&t).map_err(|e| bad(format!("config {key} = {t:?}: {e}")))
        }
        (None, None) => Ok(default),
    }
}

impl StoreTimeouts {
    /// From the (flag, config text) of the connect and request timeouts: both above zero and at
    /// most the longest request timeout a Limiter takes.
    fn resolve(
        connect: (Option<Duration>, Option<String>),
        request: (Option<Duration>, Option<String>),
    ) -> Result<StoreTimeouts, Failure> {
        let defaults = StoreTimeouts::default();
        let timeouts = StoreTimeouts {
            connect: duration_of(connect.0, connect.1, "connect_timeout", defaults.connect)?,
            request: duration_of(request.0, request.1, "request_timeout", defaults.request)?,
        };
        for (key, d) in [
            ("connect_timeout", timeouts.connect),
            ("request_timeout", timeouts.request),
        ] {
            if d.is_zero() || d > clusterlimit::Limiter::MAX_REQUEST_TIMEOUT {
                return Err(bad(format!(
                    "{key} must be above zero and at most {:?}, got {d:?}",
                    clusterlimit::Limiter::MAX_REQUEST_TIMEOUT
                )));
            }
        }
        Ok(timeouts)
    }
}

/// The TTL of a permit held over HTTP, at least the routes' minimum.
fn permit_ttl_of(flag: Option<Duration>, text: Option<String>) -> Result<Duration, Failure> {
    let ttl = duration_of(flag, text, "permit_ttl", DEFAULT_PERMIT_TTL)?;
    if ttl < super::routes::MIN_TTL {
        return Err(bad(format!(
            "permit TTL must be at least {}",
            format_duration(super::routes::MIN_TTL)
        )));
    }
    Ok(ttl)
}

impl ServeSettings {
    /// Everything connecting would reject, found without connecting: the store URL, the session
    /// TTL, the owner label, and each declared semaphore (named by its index). Errors exit 64.
    pub fn check(&self) -> Result<(), Failure> {
        let at = |field: &str, e: clusterlimit::Error| {
            let e = match e {
                clusterlimit::Error::InvalidArgument(why) => why,
                e => e.to_string(),
            };
            self.refuse(field, e)
        };
        crate::common::refuse_userinfo(&self.store)?;
        clusterlimit::StoreUrl::parse(&self.store).map_err(|e| at("store", e))?;
        self.security.check(&self.store)?;
        if self.token.is_none() && !self.listen.ip().is_loopback() && !self.insecure_allow_remote {
            return Err(bad(format!(
                "refusing to listen on {} without a token: anyone who can reach that address \
                 could take, release and resize permits. Give a token (--token-file PATH, or \
                 token_file in the config), or accept an open API with --insecure-allow-remote \
                 (insecure_allow_remote = true)",
                self.listen
            )));
        }
        if let Some(rls) = &self.rls {
            rls.check_access(self.token.is_some(), self.insecure_allow_remote)?;
        }
        if self.session_ttl < clusterlimit::Limiter::MIN_SESSION_TTL {
            return Err(at(
                "session_ttl",
                clusterlimit::Error::InvalidArgument(format!(
                    "must be at least {:?}, got {:?}",
                    clusterlimit::Limiter::MIN_SESSION_TTL,
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
            if let Some(classes) = d
                .classes()
                .map_err(|e| at(&format!("semaphores[{i}].classes"), e))?
            {
                classes
                    .check(d.capacity)
                    .map_err(|e| at(&format!("semaphores[{i}].classes"), e))?;
            }
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
        rate_settings::check_declared(&self.rate_limits)
            .map_err(|(field, why)| at(&field, clusterlimit::Error::InvalidArgument(why)))?;
        if let Some(name) = self
            .adaptive
            .keys()
            .find(|n| self.semaphores.iter().any(|d| &d.name == *n))
        {
            return Err(self.refuse(
                &format!("adaptive.{name}"),
                format!("{name:?} is also declared in [[semaphores]]; declare it once"),
            ));
        }
        if let Some(name) = self.per_member.keys().find(|n| {
            self.semaphores.iter().any(|d| &d.name == *n) || self.adaptive.contains_key(*n)
        }) {
            return Err(self.refuse(
                &format!("per_member.{name}"),
                format!(
                    "{name:?} is also declared in [[semaphores]] or [adaptive.{name}]; declare it once"
                ),
            ));
        }
        Ok(())
    }

    /// The `[per_member.<name>]` tables' settings, checked without the store. Errors exit 64.
    pub fn check_per_member(&self) -> Result<(), Failure> {
        per_member_settings::check(&self.per_member, |field, why| self.refuse(field, why))
    }

    /// The `[adaptive.<name>]` tables' settings, checked without the store. Errors exit 64.
    pub fn check_adaptive(&self) -> Result<(), Failure> {
        adaptive_settings::check(&self.adaptive, |field, why| self.refuse(field, why))
    }

    /// A usage failure naming `field` and, if there is one, the config file.
    fn refuse(&self, field: &str, why: String) -> Failure {
        match &self.file {
            Some(path) => bad(format!(
                "{field}: {why} (settings from config {} and flags)",
                path.display()
            )),
            None => bad(format!("{field}: {why}")),
        }
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
                .map(|d| match d.classes().ok().flatten() {
                    Some(c) => format!("{} (capacity {}, fair: {c})", d.name, d.capacity),
                    None => format!("{} (capacity {})", d.name, d.capacity),
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        // The token file's path only, never the token.
        let access = match &self.token_file {
            Some(p) => format!(
                "bearer token from {}{}",
                p.display(),
                if self.metrics_without_token {
                    " (/metrics open)"
                } else {
                    ""
                }
            ),
            None if self.insecure_allow_remote => "none (insecure_allow_remote)".to_string(),
            None => "none (loopback only)".to_string(),
        };
        let adaptive = if self.adaptive.is_empty() {
            "-".to_string()
        } else {
            self.adaptive
                .iter()
                .map(|(name, t)| t.describe(name))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let per_member = per_member_settings::describe_all(&self.per_member);
        let rls = self.rls.as_ref().map_or(String::new(), |r| r.describe());
        format!(
            "config ok: {file}\n\
             listen       {}\n\
             unix         {unix} (mode {:04o})\n\
             access       {access}\n\
             store        {}\n\
             store_auth   {}\n\
             session_ttl  {}\n\
             timeouts     connect {}, request {}\n\
             permit_ttl   {}\n\
             owner        {}\n\
             semaphores   {semaphores}\n\
             adaptive     {adaptive}\n\
             per_member   {per_member}\n\
             tracing      {}\n{}{rls}",
            self.listen,
            self.socket_mode,
            clusterlimit::redact(&self.store),
            self.security.describe(),
            format_duration(self.session_ttl),
            format_duration(self.timeouts.connect),
            format_duration(self.timeouts.request),
            format_duration(self.permit_ttl),
            self.owner.as_deref().unwrap_or("(HOSTNAME/PID)"),
            self.tracing.describe(),
            rate_settings::describe(&self.rate, &self.rate_limits),
        )
    }
}

fn read_file(path: &Path) -> Result<FileConfig, Failure> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| bad(format!("cannot read config {}: {e}", path.display())))?;
    toml::from_str(&text).map_err(|e| bad(format!("config {}: {e}", path.display())))
}

/// An octal permission mode: `0660`, `660` or `0o660`; at most `0777`.
fn parse_mode(text: &str) -> Result<u32, String> {
    let digits = text.trim().trim_start_matches("0o");
    let mode = u32::from_str_radix(digits, 8)
        .map_err(|_| "expected an octal mode like 0660 or 0600".to_string())?;
    if mode > 0o777 {
        return Err("permission bits only (at most 0777)".to_string());
    }
    Ok(mode)
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
        assert!(ok.semaphores[0].classes().unwrap().is_none());
        let fair: FileConfig = toml::from_str(
            "[[semaphores]]\nname = \"db\"\ncapacity = 8\nclasses = \"critical=25%,batch\"\n",
        )
        .unwrap();
        let classes = fair.semaphores[0].classes().unwrap().unwrap();
        assert_eq!(classes.to_string(), "critical=25%,batch=0");
        assert!(toml::from_str::<FileConfig>("stor = \"x\"").is_err());
    }

    #[test]
    fn socket_modes() {
        assert_eq!(parse_mode("0660"), Ok(0o660));
        assert_eq!(parse_mode("600"), Ok(0o600));
        assert_eq!(parse_mode("0o640"), Ok(0o640));
        assert!(parse_mode("0888").is_err());
        assert!(parse_mode("01777").is_err());
        assert!(parse_mode("rw").is_err());
    }
}
