//! TLS and user authentication of the etcd connections: the files read at connect (before any
//! network traffic), and what etcd's refusals mean, as errors that name the cause.
//!
//! Where each setting comes from, first found wins: the builder ([`LimiterBuilder::tls`],
//! [`LimiterBuilder::etcd_user`], which replace the URL's settings as a whole), the URL
//! (`etcds://…?cacert=&cert=&key=&user=&password_file=`), then the environment: `ETCDCTL_CACERT`,
//! `ETCDCTL_CERT`, `ETCDCTL_KEY` for a TLS connection's files not given otherwise (etcdctl's own
//! variables, so a shell set up for etcdctl works as is), and `CLUSTERLIMIT_ETCD_PASSWORD` for a
//! user without a password file. A plain-text `etcd://` connection never reads `ETCDCTL_*`.
//!
//! [`LimiterBuilder::tls`]: crate::limiter::LimiterBuilder::tls
//! [`LimiterBuilder::etcd_user`]: crate::limiter::LimiterBuilder::etcd_user

use super::tls_probe::TlsMaterial;
use crate::error::{chain, Error, Result};
use crate::store_url::{EtcdUser, TlsFiles};
use etcd_client::{Certificate, ConnectOptions, Identity, TlsOptions};
use rustls_pki_types::pem::{self, PemObject};
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::path::{Path, PathBuf};

/// Environment variable holding the etcd user's password when no password file is given.
pub const PASSWORD_ENV: &str = "CLUSTERLIMIT_ETCD_PASSWORD";
/// etcdctl's variables, the fallback for a TLS connection's files.
pub const CACERT_ENV: &str = "ETCDCTL_CACERT";
/// See [`CACERT_ENV`].
pub const CERT_ENV: &str = "ETCDCTL_CERT";
/// See [`CACERT_ENV`].
pub const KEY_ENV: &str = "ETCDCTL_KEY";

/// What the connection was set up with, for messages about etcd's refusals (no secrets).
#[derive(Debug, Clone, Default)]
pub(super) struct Security {
    /// TLS in use.
    pub(super) tls: bool,
    /// The CA bundle, if one was given (else the system's roots).
    pub(super) ca_cert: Option<PathBuf>,
    /// A client certificate was given.
    pub(super) client_cert: bool,
    /// The etcd user, if any.
    pub(super) user: Option<String>,
    /// The key prefix, for permission errors.
    pub(super) prefix: String,
    /// The TLS files' contents, for [`tls_probe`](super::tls_probe) (redacting `Debug`).
    pub(super) material: Option<TlsMaterial>,
}

/// Secret-free connection options plus what to tell about them.
pub(super) struct Secured {
    pub(super) options: ConnectOptions,
    pub(super) security: Security,
}

/// Reads every file (and the password) and adds TLS and the user to `options`; any missing,
/// unreadable or garbled file is an `InvalidArgument` naming the file and the problem.
pub(super) fn secure(
    options: ConnectOptions,
    tls: Option<&TlsFiles>,
    user: Option<&EtcdUser>,
    prefix: &str,
) -> Result<Secured> {
    let mut security = Security {
        prefix: prefix.to_string(),
        ..Security::default()
    };
    let mut options = options;
    if let Some(files) = tls {
        let files = with_env_fallback(files, |k| std::env::var_os(k).filter(|v| !v.is_empty()));
        let mut tls_options = TlsOptions::new();
        let mut material = TlsMaterial {
            ca: None,
            cert: None,
            key: None,
        };
        if let Some(ca) = &files.ca_cert {
            let ca_pem = read_certs(ca, "CA certificate (cacert)")?;
            material.ca = Some(ca_pem.clone());
            tls_options = tls_options.ca_certificate(Certificate::from_pem(ca_pem));
            security.ca_cert = Some(ca.clone());
        } else {
            tls_options = tls_options.with_native_roots();
        }
        match (&files.cert, &files.key) {
            (Some(cert), Some(key)) => {
                let cert_pem = read_certs(cert, "client certificate (cert)")?;
                let key_pem = read_key(key)?;
                material.cert = Some(cert_pem.clone());
                material.key = Some(key_pem.clone());
                tls_options = tls_options.identity(Identity::from_pem(cert_pem, key_pem));
                security.client_cert = true;
            }
            (None, None) => {}
            (Some(_), None) | (None, Some(_)) => {
                return Err(Error::invalid(format!(
                    "a client certificate needs both cert and key (also {CERT_ENV} / {KEY_ENV})"
                )))
            }
        }
        options = options.with_tls(tls_options);
        security.tls = true;
        security.material = Some(material);
    }
    if let Some(user) = user {
        if user.name.is_empty() {
            return Err(Error::invalid("the etcd user name is empty"));
        }
        let password = password(user, std::env::var(PASSWORD_ENV).ok())?;
        // etcd's simple tokens expire (`--auth-token-ttl`, 5 min idle by default) and are
        // only valid on the member that issued them: re-authenticate when one is refused.
        options = options
            .with_user(user.name.clone(), password)
            .with_auto_token_refresh(true);
        security.user = Some(user.name.clone());
    }
    Ok(Secured { options, security })
}

/// `files` with each file not given taken from etcdctl's variable (`env` reads one).
fn with_env_fallback(
    files: &TlsFiles,
    env: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> TlsFiles {
    let or_env =
        |given: &Option<PathBuf>, var: &str| given.clone().or_else(|| env(var).map(PathBuf::from));
    TlsFiles {
        ca_cert: or_env(&files.ca_cert, CACERT_ENV),
        cert: or_env(&files.cert, CERT_ENV),
        key: or_env(&files.key, KEY_ENV),
    }
}

fn read_file(path: &Path, what: &str) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| {
        Error::invalid(format!(
            "cannot read the etcd {what} file {}: {e}",
            path.display()
        ))
    })
}

/// The PEM file's bytes, once it is known to hold at least one certificate.
fn read_certs(path: &Path, what: &str) -> Result<Vec<u8>> {
    let bytes = read_file(path, what)?;
    let garbled = |why: String| {
        Error::invalid(format!(
            "the etcd {what} file {} is not usable: {why}",
            path.display()
        ))
    };
    let mut count = 0;
    for cert in CertificateDer::pem_slice_iter(&bytes) {
        cert.map_err(|e| garbled(pem_problem(&e)))?;
        count += 1;
    }
    if count == 0 {
        return Err(garbled(
            "no PEM certificate (BEGIN CERTIFICATE) in it".into(),
        ));
    }
    Ok(bytes)
}

/// The PEM file's bytes, once it is known to hold a private key.
fn read_key(path: &Path) -> Result<Vec<u8>> {
    let what = "client key (key)";
    let bytes = read_file(path, what)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| {
        let why = match e {
            pem::Error::NoItemsFound => "no PEM private key (BEGIN … PRIVATE KEY) in it".into(),
            e => pem_problem(&e),
        };
        Error::invalid(format!(
            "the etcd {what} file {} is not usable: {why}",
            path.display()
        ))
    })?;
    Ok(bytes)
}

fn pem_problem(e: &pem::Error) -> String {
    // The errors never quote the file's content (a key must not reach a log).
    match e {
        pem::Error::MissingSectionEnd { .. } => "a PEM section has no END line".into(),
        pem::Error::IllegalSectionStart { .. } => "a PEM BEGIN line is malformed".into(),
        pem::Error::Base64Decode(_) => "a PEM section is not valid base64".into(),
        pem::Error::Io(e) => format!("read error: {e}"),
        pem::Error::NoItemsFound => "nothing PEM-encoded in it".into(),
        _ => "not a valid PEM file".into(),
    }
}

/// The user's password: its file's content without the trailing newline, else `env`
/// (the value of [`PASSWORD_ENV`]).
fn password(user: &EtcdUser, env: Option<String>) -> Result<String> {
    let password = match &user.password_file {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                Error::invalid(format!(
                    "cannot read the password file {} of etcd user {:?}: {e}",
                    path.display(),
                    user.name
                ))
            })?;
            let text = text.strip_suffix('\n').unwrap_or(&text);
            let text = text.strip_suffix('\r').unwrap_or(text);
            if text.is_empty() {
                return Err(Error::invalid(format!(
                    "the password file {} of etcd user {:?} is empty",
                    path.display(),
                    user.name
                )));
            }
            text.to_string()
        }
        None => env.filter(|p| !p.is_empty()).ok_or_else(|| {
            Error::invalid(format!(
                "etcd user {:?} has no password: give password_file=PATH or set {PASSWORD_ENV}",
                user.name
            ))
        })?,
    };
    Ok(password)
}

impl Security {
    /// The clear error for a refusal that no retry can change (TLS, authentication,
    /// permissions), or `None` for any other failure.
    pub(super) fn refusal(&self, e: &etcd_client::Error) -> Option<Error> {
        let user = self.user.as_deref().unwrap_or("");
        let who = match &self.user {
            Some(name) => format!("etcd user {name:?}"),
            None => "an anonymous client (no user= given)".to_string(),
        };
        if let etcd_client::Error::GRpcStatus(s) = e {
            use tonic::Code;
            let msg = s.message();
            let refused = match s.code() {
                Code::PermissionDenied => Some(Error::store(format!(
                    "permission denied on prefix {:?} for {who} (grant a role with readwrite on the prefix range)",
                    self.prefix
                ))),
                Code::InvalidArgument if msg.contains("authentication failed") => {
                    Some(Error::store(format!(
                        "authentication failed for etcd user {user:?}: wrong user name or password"
                    )))
                }
                Code::InvalidArgument if msg.contains("user name is empty") => Some(Error::store(
                    "etcd requires authentication: give user= and password_file= (or CLUSTERLIMIT_ETCD_PASSWORD)",
                )),
                Code::FailedPrecondition if msg.contains("authentication is not enabled") => {
                    Some(Error::store(format!(
                        "etcd user {user:?} was given but authentication is not enabled on the etcd server"
                    )))
                }
                // The refreshed token was refused too (the user was deleted, the password
                // changed), or auth was enabled and no user is given.
                Code::Unauthenticated => Some(Error::store(format!(
                    "etcd refused the authentication of {who}: {msg}"
                ))),
                _ => None,
            };
            if refused.is_some() {
                return refused;
            }
        }
        self.tls_refusal(&chain(e))
    }

    /// A TLS handshake failure, found in the error's text (rustls' errors are wrapped in
    /// `io::Error`s and hyper's, so their type is out of reach of a downcast).
    pub(super) fn tls_refusal(&self, text: &str) -> Option<Error> {
        let ca = match &self.ca_cert {
            Some(path) => format!("the CA in {}", path.display()),
            None => "the system's root CAs".to_string(),
        };
        let server = |why: &str| Some(Error::store(format!("etcd's server certificate {why}")));
        if text.contains("invalid peer certificate") {
            return if text.contains("Expired") {
                server("has expired")
            } else if text.contains("NotValidYet") {
                server("is not valid yet")
            } else if text.contains("NotValidForName") {
                server("is not valid for the host name in the URL")
            } else if text.contains("UnknownIssuer") || text.contains("BadSignature") {
                server(&format!("is not signed by {ca} (wrong CA?)"))
            } else {
                server("was rejected by the client's TLS checks")
            };
        }
        if let Some(alert) = alert(text) {
            return Some(Error::store(if !self.client_cert {
                format!("etcd rejected the TLS connection: it requires a client certificate (give cert= and key=); TLS alert {alert}")
            } else if alert == "CertificateExpired" {
                "etcd rejected the client certificate: it has expired".to_string()
            } else {
                format!(
                    "etcd rejected the client certificate (expired, or not signed by a CA etcd trusts?); TLS alert {alert}"
                )
            }));
        }
        if text.contains("InvalidContentType") || text.contains("CorruptMessage") {
            return Some(Error::store(
                "etcd did not answer with TLS: is it serving plain text (use etcd://)?",
            ));
        }
        None
    }

    /// Whether a TLS connection was closed under a request: worth one [`tls_probe`]
    /// (super::tls_probe) to learn whether etcd refused our certificate.
    pub(super) fn closed_under_us(&self, e: &etcd_client::Error) -> Option<&TlsMaterial> {
        let material = self.material.as_ref()?;
        chain(e).contains("connection closed").then_some(material)
    }

    /// A likely cause of a transient failure that its text does not say.
    pub(super) fn hint(&self, e: &etcd_client::Error) -> Option<&'static str> {
        (self.tls && chain(e).contains("tls handshake eof")).then_some(
            "etcd closed the connection during the TLS handshake (is it serving plain text? then use etcd://)",
        )
    }
}

/// The name of the TLS alert the server sent, if that is what failed (rustls: "received fatal
/// alert: BadCertificate").
fn alert(text: &str) -> Option<&str> {
    let at = text.find("fatal alert: ")? + "fatal alert: ".len();
    let name = &text[at..];
    let end = name
        .find(|c: char| !c.is_ascii_alphanumeric())
        .unwrap_or(name.len());
    Some(&name[..end]).filter(|n| !n.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn user(file: Option<PathBuf>) -> EtcdUser {
        EtcdUser {
            name: "app".into(),
            password_file: file,
        }
    }

    #[test]
    fn password_from_file_without_trailing_newline_else_env() {
        let mut f = tempfile::NamedTempFile::new().expect("temp file");
        f.write_all(b"s3cret pass\r\n").expect("write");
        let from_file = password(&user(Some(f.path().into())), Some("env".into()));
        assert_eq!(from_file.expect("read"), "s3cret pass");
        assert_eq!(
            password(&user(None), Some("env".into())).expect("env"),
            "env"
        );
        let none = password(&user(None), None).expect_err("no password");
        assert!(none.to_string().contains(PASSWORD_ENV), "{none}");
        let missing = password(&user(Some("/nonexistent/pw".into())), None).expect_err("missing");
        assert!(missing.to_string().contains("/nonexistent/pw"), "{missing}");
    }

    #[test]
    fn env_fills_only_the_files_not_given() {
        let given = TlsFiles {
            ca_cert: Some("/given/ca.pem".into()),
            cert: None,
            key: None,
        };
        let env = |k: &str| Some(format!("/env/{k}").into());
        let files = with_env_fallback(&given, env);
        assert_eq!(files.ca_cert, Some("/given/ca.pem".into()));
        assert_eq!(files.cert, Some(format!("/env/{CERT_ENV}").into()));
        assert_eq!(files.key, Some(format!("/env/{KEY_ENV}").into()));
    }

    #[test]
    fn garbled_files_are_invalid_arguments_naming_the_file() {
        let mut f = tempfile::NamedTempFile::new().expect("temp file");
        f.write_all(b"-----BEGIN CERTIFICATE-----\n%%%not base64%%%\n-----END CERTIFICATE-----\n")
            .expect("write");
        let tls = TlsFiles {
            ca_cert: Some(f.path().into()),
            ..TlsFiles::default()
        };
        let Err(e) = secure(ConnectOptions::new(), Some(&tls), None, "p") else {
            panic!("a garbled CA file was accepted");
        };
        assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
        assert!(
            e.to_string().contains(&f.path().display().to_string()),
            "{e}"
        );
        let empty = tempfile::NamedTempFile::new().expect("temp file");
        let tls = TlsFiles {
            ca_cert: Some(empty.path().into()),
            ..TlsFiles::default()
        };
        let Err(e) = secure(ConnectOptions::new(), Some(&tls), None, "p") else {
            panic!("an empty CA file was accepted");
        };
        assert!(e.to_string().contains("no PEM certificate"), "{e}");
    }

    #[test]
    fn refusals_name_the_cause() {
        let sec = Security {
            tls: true,
            ca_cert: Some("/etc/ca.pem".into()),
            client_cert: false,
            user: Some("app".into()),
            prefix: "limits".into(),
            material: None,
        };
        let status = |code, msg: &str| {
            etcd_client::Error::GRpcStatus(tonic::Status::new(code, msg.to_string()))
        };
        let denied = sec
            .refusal(&status(
                tonic::Code::PermissionDenied,
                "etcdserver: permission denied",
            ))
            .expect("a refusal");
        assert!(
            denied
                .to_string()
                .contains("permission denied on prefix \"limits\""),
            "{denied}"
        );
        let auth = sec
            .refusal(&status(
                tonic::Code::InvalidArgument,
                "etcdserver: authentication failed, invalid user ID or password",
            ))
            .expect("a refusal");
        assert!(
            auth.to_string()
                .contains("authentication failed for etcd user \"app\""),
            "{auth}"
        );
        assert!(sec
            .refusal(&status(
                tonic::Code::Unavailable,
                "etcdserver: leader changed"
            ))
            .is_none());
        let ca = sec
            .tls_refusal("transport error: invalid peer certificate: UnknownIssuer")
            .expect("a refusal");
        assert!(ca.to_string().contains("/etc/ca.pem"), "{ca}");
        let no_cert = sec
            .tls_refusal(
                "transport error: Custom { error: \"received fatal alert: CertificateRequired\" }",
            )
            .expect("a refusal");
        assert!(
            no_cert
                .to_string()
                .contains("requires a client certificate"),
            "{no_cert}"
        );
        assert!(
            no_cert
                .to_string()
                .ends_with("TLS alert CertificateRequired"),
            "{no_cert}"
        );
    }
}
