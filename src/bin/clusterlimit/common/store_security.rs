//! Store credentials given as flags or config keys (paths of files, never the secrets), mapped
//! onto the library's builder. They override the store URL's own `?cacert=…` settings.

use super::failure::Failure;
use clusterlimit::{EtcdUser, LimiterBuilder, StoreUrl, TlsFiles};
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

    /// The TLS files and etcd user to give the builder: each flag overrides the URL's setting
    /// of the same name, one by one (`--etcd-cert` keeps the URL's `cacert`). The builder's
    /// own setters replace the URL's settings as a whole, hence the merge here.
    fn merged(&self, store: &str) -> (Option<TlsFiles>, Option<EtcdUser>) {
        let (url_tls, url_user) = match StoreUrl::parse(store) {
            Ok(StoreUrl::Etcd { tls, user, .. }) => (tls, user),
            _ => (None, None),
        };
        let flags_tls =
            self.etcd_cacert.is_some() || self.etcd_cert.is_some() || self.etcd_key.is_some();
        let tls = if flags_tls {
            let base = url_tls.unwrap_or_default();
            Some(TlsFiles::new(
                self.etcd_cacert.clone().or(base.ca_cert),
                self.etcd_cert.clone().or(base.cert),
                self.etcd_key.clone().or(base.key),
            ))
        } else {
            None
        };
        let user = if self.etcd_user.is_some() || self.etcd_password_file.is_some() {
            let name = self
                .etcd_user
                .clone()
                .or_else(|| url_user.as_ref().map(|u| u.name.clone()));
            name.map(|name| {
                EtcdUser::new(
                    name,
                    self.etcd_password_file
                        .clone()
                        .or_else(|| url_user.and_then(|u| u.password_file)),
                )
            })
        } else {
            None
        };
        (tls, user)
    }

    /// Combinations that can never work, found without connecting (usage errors). What the
    /// store then accepts is the library's and the store's business.
    pub fn check(&self, store: &str) -> Result<(), Failure> {
        if self.etcd_user.as_deref().is_some_and(str::is_empty) {
            return Err(Failure::usage("etcd_user is empty"));
        }
        if self.etcd_password_file.is_some() && self.merged(store).1.is_none() {
            return Err(Failure::usage(
                "etcd_password_file is given without a user (--etcd-user NAME, etcd_user in the \
                 config, or user=NAME in the store URL)",
            ));
        }
        Ok(())
    }

    /// The builder with these settings applied (nothing is read here: the library reads the
    /// files when it connects).
    pub fn apply(&self, store: &str, mut builder: LimiterBuilder) -> LimiterBuilder {
        let (tls, user) = self.merged(store);
        if let Some(tls) = tls {
            builder = builder.tls(tls);
        }
        if let Some(user) = user {
            builder = builder.etcd_user(user);
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
    fn a_password_file_needs_a_user_from_somewhere() {
        let no_user = StoreSecurity {
            etcd_password_file: Some("/p".into()),
            ..StoreSecurity::default()
        };
        let e = no_user.check("etcd://h:1/p").unwrap_err();
        assert!(e.message.contains("--etcd-user"), "{}", e.message);
        assert!(no_user.check("etcd://h:1/p?user=svc").is_ok());
        assert!(StoreSecurity::default().check("etcd://h:1/p").is_ok());
    }

    #[test]
    fn flags_override_the_urls_settings_one_by_one() {
        let flags = StoreSecurity {
            etcd_cert: Some("/flag/c.pem".into()),
            etcd_key: Some("/flag/k.pem".into()),
            etcd_password_file: Some("/flag/pw".into()),
            ..StoreSecurity::default()
        };
        let url = "etcds://h:1/p?cacert=/url/ca.pem&cert=/url/c.pem&key=/url/k.pem&user=svc&password_file=/url/pw";
        let (tls, user) = flags.merged(url);
        assert_eq!(
            tls,
            Some(TlsFiles::new(
                Some("/url/ca.pem".into()),
                Some("/flag/c.pem".into()),
                Some("/flag/k.pem".into())
            ))
        );
        assert_eq!(user, Some(EtcdUser::new("svc", Some("/flag/pw".into()))));
        // No flags: the URL's settings go to the library untouched.
        assert_eq!(StoreSecurity::default().merged(url), (None, None));
    }
}
