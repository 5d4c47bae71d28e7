//! Settings of the etcd backend, as the Limiter hands them over at connect.

use crate::backend::config_setters::setters;
use crate::store_url::{EtcdUser, TlsFiles};
use std::time::Duration;

/// Settings of the etcd backend. Holds no secret: the password is read from its file (or
/// [`PASSWORD_ENV`](super::security::PASSWORD_ENV)) at connect, so `{:?}` of this shows
/// paths only.
///
/// Built with [`EtcdConfig::new`] and its setters (it may gain settings):
/// `EtcdConfig::new(endpoints, "myapp").session_ttl(Duration::from_secs(4))`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EtcdConfig {
    /// `http://host:port` endpoints.
    pub endpoints: Vec<String>,
    /// Key prefix (no slashes at the ends).
    pub prefix: String,
    /// Lease TTL (rounded up to whole seconds).
    pub session_ttl: Duration,
    /// Bound on each request.
    pub request_timeout: Duration,
    /// TLS settings; `None` for plain text. A file not given falls back to etcdctl's
    /// [`CACERT_ENV`](super::security::CACERT_ENV), [`CERT_ENV`](super::security::CERT_ENV),
    /// [`KEY_ENV`](super::security::KEY_ENV); no CA at all means the system's roots.
    pub tls: Option<TlsFiles>,
    /// User authentication, if any (token refreshed when etcd expires it).
    pub user: Option<EtcdUser>,
}

impl EtcdConfig {
    /// The etcd cluster at `endpoints` (`http://host:port`), keys under `prefix`; the Limiter's
    /// default session TTL and request timeout, plain text, no user.
    pub fn new(endpoints: Vec<String>, prefix: impl Into<String>) -> Self {
        EtcdConfig {
            endpoints,
            prefix: prefix.into(),
            session_ttl: crate::timing::DEFAULT_SESSION_TTL,
            request_timeout: crate::timing::DEFAULT_REQUEST_TIMEOUT,
            tls: None,
            user: None,
        }
    }

    setters!(
        session_ttl: Duration,
        request_timeout: Duration,
        tls: Option<TlsFiles>,
        user: Option<EtcdUser>,
    );
}
