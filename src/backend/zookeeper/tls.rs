//! TLS to ZooKeeper's secure client port (`secureClientPort`, ZooKeeper 3.5+), with
//! [`TlsFiles`] given to the Limiter: the CA that signed the servers' certificates
//! (required: zookeeper-client has no system roots) and optionally a client certificate and key
//! for servers with `ssl.clientAuth=need`. Server host names (or IPs) are verified. Needs the
//! `zk-tls` feature (on by default); without it a TLS setting is refused, never ignored.

use crate::error::{Error, Result};
use crate::store_url::TlsFiles;
use zookeeper_client as zk;

/// TLS settings read from the files, ready for every connection. `Debug` shows no key.
pub(super) struct Tls {
    #[cfg(feature = "zk-tls")]
    options: zk::TlsOptions,
    #[cfg(not(feature = "zk-tls"))]
    never: std::convert::Infallible,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tls { .. }")
    }
}

impl Tls {
    /// Reads and checks the files (errors name the file, never its content).
    #[cfg(feature = "zk-tls")]
    pub(super) fn load(files: &TlsFiles) -> Result<Tls> {
        let Some(ca) = &files.ca_cert else {
            return Err(Error::invalid(
                "TLS to ZooKeeper needs the CA certificate (TlsFiles::ca_cert) that signed the servers' certificates",
            ));
        };
        if files.cert.is_some() != files.key.is_some() {
            return Err(Error::invalid(
                "a client certificate for ZooKeeper needs both the certificate and its key",
            ));
        }
        let read = |path: &std::path::Path| {
            std::fs::read_to_string(path).map_err(|e| {
                Error::invalid(format!("TLS file {} cannot be read: {e}", path.display()))
            })
        };
        let options = zk::TlsOptions::new().with_pem_ca(&read(ca)?).map_err(|e| {
            Error::invalid(format!(
                "TLS file {}: no usable CA certificate ({e})",
                ca.display()
            ))
        })?;
        let options = match (&files.cert, &files.key) {
            (Some(cert), Some(key)) => options
                .with_pem_identity(&read(cert)?, &read(key)?)
                .map_err(|e| {
                    Error::invalid(format!(
                        "TLS files {} and {}: no usable client certificate and key ({e})",
                        cert.display(),
                        key.display()
                    ))
                })?,
            _ => options,
        };
        ensure_crypto_provider();
        Ok(Tls { options })
    }

    #[cfg(not(feature = "zk-tls"))]
    pub(super) fn load(_: &TlsFiles) -> Result<Tls> {
        Err(Error::invalid(
            "TLS to ZooKeeper needs clusterlimit built with the zk-tls feature",
        ))
    }
}

/// zookeeper-client builds its TLS configuration with rustls' process-wide crypto provider.
/// With a single rustls backend compiled in, rustls picks it; with two (an application that
/// also uses etcd-client's `tls`, which brings ring) it cannot, and panics. So one is installed
/// if the application has not installed its own: the aws-lc-rs that zookeeper-client builds.
#[cfg(feature = "zk-tls")]
fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race with another installer is fine: a provider is installed either way.
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    }
}

/// Connects over TLS if `tls` is given, else in plain text.
pub(super) async fn connect(
    connector: zk::Connector,
    tls: Option<&Tls>,
    hosts: &str,
) -> std::result::Result<zk::Client, zk::Error> {
    match tls {
        #[cfg(feature = "zk-tls")]
        Some(t) => {
            connector
                .with_tls(t.options.clone())
                .secure_connect(hosts)
                .await
        }
        #[cfg(not(feature = "zk-tls"))]
        Some(t) => match t.never {},
        None => connector.connect(hosts).await,
    }
}
