//! Settings of the ZooKeeper backend, as the Limiter hands them over at connect.

use crate::backend::config_setters::setters;
use crate::store_url::{TlsFiles, ZkAcl};
use std::time::Duration;

/// Settings of the ZooKeeper backend.
///
/// Built with [`ZkConfig::new`] and its setters (it may gain settings):
/// `ZkConfig::new(hosts, "/myapp").session_timeout(Duration::from_secs(4))`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ZkConfig {
    /// `host:port` servers.
    pub hosts: Vec<String>,
    /// Absolute path of the root node (created if absent).
    pub root: String,
    /// Requested session timeout (the server may negotiate it into its own bounds).
    pub session_timeout: Duration,
    /// Bound on each call's store requests.
    pub request_timeout: Duration,
    /// TLS to the servers' `secureClientPort` (the CA is required); `None` for plain text.
    /// Needs the `zk-tls` feature.
    pub tls: Option<TlsFiles>,
    /// File holding `user:password` for digest authentication; `None`: the
    /// `CLUSTERLIMIT_ZK_DIGEST` environment variable if set, else no authentication.
    pub digest_file: Option<std::path::PathBuf>,
    /// ACL of the nodes this backend creates (`None`: creator-all + anyone-read with
    /// credentials, anyone-all without). Nodes that already exist keep theirs.
    pub acl: Option<ZkAcl>,
}

impl ZkConfig {
    /// The ZooKeeper servers `hosts` (`host:port`), nodes under `root`; the Limiter's default
    /// session TTL as session timeout and its default request timeout, plain text, no digest,
    /// the default ACL.
    pub fn new(hosts: Vec<String>, root: impl Into<String>) -> Self {
        ZkConfig {
            hosts,
            root: root.into(),
            session_timeout: crate::timing::DEFAULT_SESSION_TTL,
            request_timeout: crate::timing::DEFAULT_REQUEST_TIMEOUT,
            tls: None,
            digest_file: None,
            acl: None,
        }
    }

    setters!(
        session_timeout: Duration,
        request_timeout: Duration,
        tls: Option<TlsFiles>,
        digest_file: Option<std::path::PathBuf>,
        acl: Option<ZkAcl>,
    );
}
