//! Settings of the etcd backend, as the Limiter hands them over at connect.

use crate::store_url::{EtcdUser, TlsFiles};
use std::time::Duration;

/// Settings of the etcd backend. Holds no secret: the password is read from its file (or
/// [`PASSWORD_ENV`](super::security::PASSWORD_ENV)) at connect, so `{:?}` of this shows
/// paths only.
#[derive(Debug, Clone)]
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
