//! Digest authentication and the ACL of the nodes clusterlimit creates.
//!
//! ZooKeeper's digest scheme never rejects a `user:password`: the server turns it into the
//! identity `digest:user:base64(sha1(user:password))`, so a wrong password is simply another
//! identity. It shows when that identity writes a node whose ACL names the right one: the server
//! answers `NoAuth`, which [`Identity::denied`] turns into an error saying so. `AuthFailed` comes
//! only from servers that refuse the scheme itself (e.g. `enforce.auth.schemes=sasl`).

use crate::error::{Error, Result};
use crate::store_url::ZkAcl;
use std::path::Path;
use zookeeper_client::{Acl, Acls, Permission};

/// Environment variable holding `user:password` when no digest file is given.
pub(super) const DIGEST_ENV: &str = "CLUSTERLIMIT_ZK_DIGEST";

/// Every permission for the creating identity, read for anyone: others see status, and cannot
/// delete or add entries (both need a permission on the parent) nor change a capacity.
static CREATOR_ALL_ANYONE_READ: [Acl; 2] = [
    Acl::new_const(Permission::ALL, "auth", ""),
    Acl::new_const(Permission::READ, "world", "anyone"),
];

/// Digest credentials `user:password`. `Debug` shows the user only.
#[derive(Clone)]
pub(super) struct Digest {
    user: String,
    user_password: String,
}

impl std::fmt::Debug for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Digest")
            .field("user", &self.user)
            .field("password", &"***")
            .finish()
    }
}

impl Digest {
    /// Reads the credentials from `file`, or from [`DIGEST_ENV`] when no file is given (unset
    /// or empty: none). Errors name the source, never its content.
    pub(super) fn load(file: Option<&Path>) -> Result<Option<Digest>> {
        Digest::load_with(file, std::env::var(DIGEST_ENV))
    }

    /// [`Digest::load`] with the environment variable's value given.
    fn load_with(
        file: Option<&Path>,
        env: std::result::Result<String, std::env::VarError>,
    ) -> Result<Option<Digest>> {
        match file {
            Some(path) => {
                let raw = std::fs::read_to_string(path).map_err(|e| {
                    Error::invalid(format!(
                        "ZooKeeper digest file {} cannot be read: {e}",
                        path.display()
                    ))
                })?;
                Digest::parse(&raw, &format!("ZooKeeper digest file {}", path.display())).map(Some)
            }
            None => match env {
                Ok(raw) if !raw.is_empty() => Digest::parse(&raw, DIGEST_ENV).map(Some),
                Ok(_) | Err(std::env::VarError::NotPresent) => Ok(None),
                Err(std::env::VarError::NotUnicode(_)) => {
                    Err(Error::invalid(format!("{DIGEST_ENV} is not valid UTF-8")))
                }
            },
        }
    }

    /// `user:password` on one line (a trailing newline is ignored).
    fn parse(raw: &str, source: &str) -> Result<Digest> {
        let line = raw.trim_end_matches(['\n', '\r']);
        let bad =
            |why: &str| Error::invalid(format!("{source}: {why}; it must hold user:password"));
        if line.contains(['\n', '\r']) {
            return Err(bad("more than one line"));
        }
        let Some((user, password)) = line.split_once(':') else {
            return Err(bad("no ':' between user and password"));
        };
        if user.is_empty() || password.is_empty() {
            return Err(bad("empty user or password"));
        }
        if user.chars().any(char::is_control) {
            return Err(bad("control characters in the user name"));
        }
        Ok(Digest {
            user: user.to_string(),
            user_password: line.to_string(),
        })
    }

    pub(super) fn user(&self) -> &str {
        &self.user
    }

    /// The `auth` bytes of the digest scheme.
    pub(super) fn auth(&self) -> &[u8] {
        self.user_password.as_bytes()
    }
}

/// The ACL for created nodes: `acl` if given, else creator-all + anyone-read with credentials
/// and anyone-all without.
pub(super) fn node_acls(acl: Option<ZkAcl>, digest: Option<&Digest>) -> Result<Acls<'static>> {
    match (acl, digest) {
        (Some(ZkAcl::Open), _) | (None, None) => Ok(Acls::anyone_all()),
        (Some(ZkAcl::Creator) | None, Some(_)) => Ok(Acls::new(&CREATOR_ALL_ANYONE_READ)),
        (Some(ZkAcl::Creator), None) => Err(Error::invalid(format!(
            "acl=creator needs digest credentials (digest_file=PATH or {DIGEST_ENV})"
        ))),
    }
}

/// Who this client is to ZooKeeper, for error messages (never the password).
#[derive(Debug, Clone)]
pub(super) struct Identity(Option<String>);

impl Identity {
    pub(super) fn of(digest: Option<&Digest>) -> Identity {
        Identity(digest.map(|d| d.user().to_string()))
    }

    /// The error for a `NoAuth` answer to a change of `what`.
    pub(super) fn denied(&self, what: &str) -> Error {
        let who = match &self.0 {
            Some(user) => format!("digest user {user:?}"),
            None => "a client without credentials".to_string(),
        };
        Error::store(format!(
            "ZooKeeper denied {what} (NoAuth): the node's ACL does not let {who} change it; \
             it was created by another identity (another digest user or password) or with a \
             restrictive ACL"
        ))
    }

    /// The error for `AuthFailed`: the server refused the credentials (or the scheme).
    pub(super) fn rejected(&self) -> Error {
        Error::store(match &self.0 {
            Some(user) => {
                format!("ZooKeeper rejected the digest credentials for user {user:?}")
            }
            None => {
                "ZooKeeper requires authentication (AuthFailed); give digest credentials".into()
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_hides_the_password() {
        let d = Digest::parse("app:s3cr3t:x\n", "test").unwrap();
        assert_eq!(d.user(), "app");
        assert_eq!(d.auth(), b"app:s3cr3t:x");
        let shown = format!("{d:?}");
        assert!(
            shown.contains("app") && !shown.contains("s3cr3t"),
            "{shown}"
        );
        for bad in ["app", ":pw", "app:", "a:b\nc:d", ""] {
            let Err(Error::InvalidArgument(msg)) = Digest::parse(bad, "file /x") else {
                panic!("{bad:?} must be refused");
            };
            assert!(msg.contains("file /x"), "{msg}");
            assert!(bad.len() < 3 || !msg.contains(bad), "{msg}");
        }
    }

    #[test]
    fn the_file_wins_over_the_environment() {
        use std::env::VarError;
        let d = Digest::load_with(None, Ok("env:pw\n".into()))
            .unwrap()
            .unwrap();
        assert_eq!(d.user(), "env");
        assert!(Digest::load_with(None, Err(VarError::NotPresent))
            .unwrap()
            .is_none());
        assert!(Digest::load_with(None, Ok(String::new()))
            .unwrap()
            .is_none());
        let Err(Error::InvalidArgument(msg)) = Digest::load_with(None, Ok("nocolon".into())) else {
            panic!("a bad variable must be refused");
        };
        assert!(
            msg.contains(DIGEST_ENV) && !msg.contains("nocolon"),
            "{msg}"
        );
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("digest");
        std::fs::write(&file, "file:pw\r\n").unwrap();
        let d = Digest::load_with(Some(&file), Ok("env:pw".into()))
            .unwrap()
            .unwrap();
        assert_eq!((d.user(), d.auth()), ("file", &b"file:pw"[..]));
        let missing = dir.path().join("missing");
        let Err(Error::InvalidArgument(msg)) = Digest::load_with(Some(&missing), Ok("e:p".into()))
        else {
            panic!("a missing file must be refused");
        };
        assert!(msg.contains(&missing.display().to_string()), "{msg}");
    }

    #[test]
    fn acls() {
        let d = Digest::parse("app:pw", "test").unwrap();
        assert_eq!(node_acls(None, None).unwrap(), Acls::anyone_all());
        assert_eq!(
            node_acls(Some(ZkAcl::Open), Some(&d)).unwrap(),
            Acls::anyone_all()
        );
        let creator = node_acls(None, Some(&d)).unwrap();
        assert_eq!(creator.len(), 2);
        assert_eq!(node_acls(Some(ZkAcl::Creator), Some(&d)).unwrap(), creator);
        assert!(matches!(
            node_acls(Some(ZkAcl::Creator), None),
            Err(Error::InvalidArgument(_))
        ));
    }
}
