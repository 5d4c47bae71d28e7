//! Store credentials given as flags or config keys (paths of files, never the secrets), mapped
//! onto the library's builder. They override the store URL's own `?cacert=…` settings.

use super::failure::Failure;
use clusterlimit::{EtcdUser, LimiterBuilder, TlsFiles};
use std::path::PathBuf;

/// TLS and authentication settings for the store; every field holds a path or a user name,
/// so deriving `Debug` prints no secret.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreSecurity {
    /// etcd: CA bundle of the servers' certificates (PEM).
    pub etcd_cacert: Option<PathBuf>,
    /// etcd: client certificate (PEM), with `etcd_key`.
    pub etcd_cert: Option<PathBuf>,
    /// etcd: private key of the client certificate (PEM).
    pub etcd_key: Option<PathBuf>,
    /// etcd: user name.
    pub etcd_user: Option<String>,
    /// etcd: file holding the user's password.
    pub etcd_password_file: Option<PathBuf>,
    /// ZooKeeper: file holding `user:password` for digest authentication.
    pub zk_digest_file: Option<PathBuf>,
}

impl StoreSecurity {
    /// `self`, with each setting it lacks taken from `other` (flags over the config file).
    pub fn or(self, other: StoreSecurity) -> StoreSecurity {
        StoreSecurity {
            etcd_cacert: self.etcd_cacert.or(other.etcd_cacert),
            etcd_cert: self.etcd_cert.or(other.etcd_cert),
            etcd_key: self.etcd_key.or(other.etcd_key),
            etcd_user: self.etcd_user.or(other.etcd_user),
            etcd_password_file: self.etcd_password_file.or(other.etcd_password_file),
            zk_digest_file: self.zk_digest_file.or(other.zk_digest_file),
        }
    }

    /// Combinations that can never work, found without connecting (usage errors). What the
    /// store then accepts is the library's and the store's business.
    pub fn check(&self) -> Result<(), Failure> {
        if self.etcd_password_file.is_some() && self.etcd_user.is_none() {
            return Err(Failure::usage(
                "etcd_password_file is given without etcd_user (--etcd-user NAME)",
            ));
        }
        if self.etcd_cert.is_some() != self.etcd_key.is_some() {
            return Err(Failure::usage(
                "a client certificate needs both etcd_cert and etcd_key (--etcd-cert, --etcd-key)",
            ));
        }
        if self.etcd_user.as_deref().is_some_and(str::is_empty) {
            return Err(Failure::usage("etcd_user is empty"));
        }
        Ok(())
    }

    /// The builder with these settings applied (nothing is read here: the library reads the
    /// files when it connects).
    pub fn apply(&self, mut builder: LimiterBuilder) -> LimiterBuilder {
        if self.etcd_cacert.is_some() || self.etcd_cert.is_some() || self.etcd_key.is_some() {
            builder = builder.tls(TlsFiles {
                ca_cert: self.etcd_cacert.clone(),
                cert: self.etcd_cert.clone(),
                key: self.etcd_key.clone(),
            });
        }
        if let Some(name) = &self.etcd_user {
            builder = builder.etcd_user(EtcdUser {
                name: name.clone(),
                password_file: self.etcd_password_file.clone(),
            });
        }
        if let Some(path) = &self.zk_digest_file {
            builder = builder.zk_digest_file(path.clone());
        }
        builder
    }

    /// One line for `--check-config`: which settings are given (paths only).
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        let mut path = |key: &str, p: &Option<PathBuf>| {
            if let Some(p) = p {
                parts.push(format!("{key}={}", p.display()));
            }
        };
        path("etcd_cacert", &self.etcd_cacert);
        path("etcd_cert", &self.etcd_cert);
        path("etcd_key", &self.etcd_key);
        path("etcd_password_file", &self.etcd_password_file);
        path("zk_digest_file", &self.zk_digest_file);
        if let Some(user) = &self.etcd_user {
            parts.push(format!("etcd_user={user}"));
        }
        if parts.is_empty() {
            "-".to_string()
        } else {
            parts.join(" ")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_override_the_file_one_by_one() {
        let flags = StoreSecurity {
            etcd_cacert: Some("/flag/ca.pem".into()),
            ..StoreSecurity::default()
        };
        let file = StoreSecurity {
            etcd_cacert: Some("/file/ca.pem".into()),
            zk_digest_file: Some("/file/digest".into()),
            ..StoreSecurity::default()
        };
        let merged = flags.or(file);
        assert_eq!(merged.etcd_cacert, Some("/flag/ca.pem".into()));
        assert_eq!(merged.zk_digest_file, Some("/file/digest".into()));
    }

    #[test]
    fn impossible_combinations_are_usage_errors() {
        let no_user = StoreSecurity {
            etcd_password_file: Some("/p".into()),
            ..StoreSecurity::default()
        };
        assert!(no_user.check().unwrap_err().message.contains("etcd_user"));
        let half_cert = StoreSecurity {
            etcd_cert: Some("/c".into()),
            ..StoreSecurity::default()
        };
        assert!(half_cert.check().unwrap_err().message.contains("etcd_key"));
        assert!(StoreSecurity::default().check().is_ok());
    }
}
