//! How a connection to a store is secured, as a store URL gives it: TLS certificate files,
//! etcd and Redis users (their passwords come from files or the environment, never the URL),
//! and the ACL of ZooKeeper's nodes. Plain values; a leaf of `store_url/`.

use std::path::PathBuf;

/// Certificate files for a TLS connection to etcd or ZooKeeper (PEM). Built with
/// [`TlsFiles::new`] or `TlsFiles::default()` and its fields (it may gain settings).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct TlsFiles {
    /// CA bundle that signed the servers' certificates (`None`: the system's roots).
    pub ca_cert: Option<PathBuf>,
    /// Client certificate, for servers that require one (with `key`).
    pub cert: Option<PathBuf>,
    /// Private key of the client certificate.
    pub key: Option<PathBuf>,
}

/// etcd user authentication: the user name and where its password is read from. Built with
/// [`EtcdUser::new`] (it may gain settings).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EtcdUser {
    /// etcd user name.
    pub name: String,
    /// File holding the password (trailing newline ignored); `None`: the
    /// `CLUSTERLIMIT_ETCD_PASSWORD` environment variable.
    pub password_file: Option<PathBuf>,
}

/// Redis authentication: an ACL user (or the `default` user) and where its password is read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct RedisUser {
    /// ACL user name (`None`: Redis's `default` user, as with `requirepass`).
    pub name: Option<String>,
    /// File holding the password (trailing newline ignored); `None`: the
    /// `CLUSTERLIMIT_REDIS_PASSWORD` environment variable, if set.
    pub password_file: Option<PathBuf>,
}

impl RedisUser {
    /// The ACL user `name` (`None`: the `default` user) and the file holding its password
    /// (`None`: `CLUSTERLIMIT_REDIS_PASSWORD`, if set).
    pub fn new(name: Option<String>, password_file: Option<PathBuf>) -> Self {
        RedisUser {
            name,
            password_file,
        }
    }
}

impl TlsFiles {
    /// The CA bundle (`None`: the system's roots) and the client certificate and its key (both
    /// or neither).
    pub fn new(ca_cert: Option<PathBuf>, cert: Option<PathBuf>, key: Option<PathBuf>) -> Self {
        TlsFiles { ca_cert, cert, key }
    }
}

impl EtcdUser {
    /// The user `name`, its password read from `password_file` (`None`: the
    /// `CLUSTERLIMIT_ETCD_PASSWORD` environment variable).
    pub fn new(name: impl Into<String>, password_file: Option<PathBuf>) -> Self {
        EtcdUser {
            name: name.into(),
            password_file,
        }
    }
}

/// Who may change the ZooKeeper nodes clusterlimit creates (`zk://…?acl=creator|open`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ZkAcl {
    /// Only the digest identity that created a node may change or delete it (and what is
    /// under it); anyone may read. The default when digest credentials are given; needs them.
    Creator,
    /// Anyone may do anything (ZooKeeper's `world:anyone` with every permission). The default
    /// without credentials.
    Open,
}
