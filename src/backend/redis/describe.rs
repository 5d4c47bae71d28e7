//! What a Redis error means for the caller, in words: whether trying again can help, and a
//! message that says what failed and what to do (never the client's debug rendering).

use crate::store_url::RedisMode;
use redis::{ErrorKind, RedisError, ServerErrorKind};

/// Whether a failed request is worth sending again, on a fresh connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Retry {
    /// No: the same request would fail the same way (bad credentials, a refused command).
    No,
    /// Yes: the connection broke, or the server says the condition passes (loading, failover).
    Again,
}

/// The failure in words, and whether to retry.
pub(super) fn describe(e: &RedisError, mode: &RedisMode) -> (String, Retry) {
    let detail = e.detail().unwrap_or("").trim().to_string();
    let with = |what: &str| match detail.is_empty() {
        true => what.to_string(),
        false => format!("{what} ({detail})"),
    };
    match e.kind() {
        ErrorKind::Io if tls_refused(e) => (
            format!(
                "the TLS handshake failed: {}; check cacert= (the CA that signed the server's certificate), the host name, and cert=/key=",
                io_text(e)
            ),
            Retry::No,
        ),
        ErrorKind::Io => (
            format!("cannot reach it: {}", io_text(e)),
            Retry::Again,
        ),
        ErrorKind::Server(ServerErrorKind::BusyLoading) => {
            (with("it is loading its data set"), Retry::Again)
        }
        ErrorKind::Server(ServerErrorKind::TryAgain) => {
            (with("the keys' slot is being moved (TRYAGAIN)"), Retry::Again)
        }
        ErrorKind::Server(ServerErrorKind::ClusterDown) => (
            with("the cluster is down (CLUSTERDOWN: a slot has no reachable primary)"),
            Retry::Again,
        ),
        ErrorKind::Server(ServerErrorKind::MasterDown) => {
            (with("its primary is down (MASTERDOWN)"), Retry::Again)
        }
        ErrorKind::Server(ServerErrorKind::ReadOnly) => match mode {
            RedisMode::Single { .. } => (
                "it is a read-only replica; point the URL at the primary, or use redis+sentinel:// to follow the primary".into(),
                Retry::No,
            ),
            _ => (
                "the server answered as a replica (a failover under way)".into(),
                Retry::Again,
            ),
        },
        ErrorKind::Server(ServerErrorKind::NoPerm) => (
            with("the user may not run what clusterlimit needs; grant it EVALSHA, EVAL and SCRIPT (+@scripting) and read/write on the prefix's keys"),
            Retry::No,
        ),
        ErrorKind::AuthenticationFailed => (
            with("authentication failed; check user= and password_file= (or CLUSTERLIMIT_REDIS_PASSWORD)"),
            Retry::No,
        ),
        ErrorKind::ClusterConnectionNotFound => {
            (with("no connection to the slot's node"), Retry::Again)
        }
        _ => (server_text(e), Retry::No),
    }
}

/// Whether a connection failed on TLS itself (a certificate refused either way): no retry
/// changes that. redis-rs hands rustls's refusal over as an I/O error's text, so the text is
/// what there is to read.
fn tls_refused(e: &RedisError) -> bool {
    let text = io_text(e).to_ascii_lowercase();
    ["certificate", "handshake", "fatal alert", "unknownissuer"]
        .iter()
        .any(|m| text.contains(m))
}

/// An I/O failure's own words (`Connection refused (os error 111)`).
fn io_text(e: &RedisError) -> String {
    let io = std::error::Error::source(e).and_then(|s| s.downcast_ref::<std::io::Error>());
    match io {
        Some(io) => io.to_string(),
        None => e.detail().map_or_else(|| e.to_string(), str::to_string),
    }
}

/// A server's refusal as it said it, with its code: `WRONGPASS …`, `NOSCRIPT …`, or a
/// foreign value our scripts found.
fn server_text(e: &RedisError) -> String {
    let detail = e.detail().unwrap_or("").trim();
    match e.code() {
        Some("FOREIGN") => format!("key {detail}; use another prefix, or remove that key"),
        Some("WRONGTYPE") => format!(
            "a key under the prefix holds another type of value ({detail}); use another prefix"
        ),
        Some("NOAUTH") | Some("WRONGPASS") => format!(
            "authentication failed ({detail}); check user= and password_file= (or CLUSTERLIMIT_REDIS_PASSWORD)"
        ),
        Some(code) if !detail.is_empty() => format!("the server refused the request: {code} {detail}"),
        Some(code) => format!("the server refused the request: {code}"),
        None if !detail.is_empty() => format!("the request failed: {detail}"),
        None => format!("the request failed: {}", e.category()),
    }
}
