//! TLS files for `rediss…://`: the CA that signed the servers' certificates (the system's
//! roots without one) and an optional client certificate and key, read when connecting.

use crate::store_url::TlsFiles;
use redis::{ClientTlsConfig, RedisResult, TlsCertificates};

/// The certificates of `files` (errors name the file, never its content).
pub(super) fn certificates(files: Option<&TlsFiles>) -> RedisResult<TlsCertificates> {
    install_crypto_provider();
    let Some(files) = files else {
        return Ok(TlsCertificates {
            client_tls: None,
            root_cert: None,
        });
    };
    let read = |path: &std::path::Path| {
        std::fs::read(path).map_err(|e| {
            redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "TLS file cannot be read",
                format!("{}: {e}", path.display()),
            ))
        })
    };
    let root_cert = files.ca_cert.as_deref().map(read).transpose()?;
    let client_tls = match (&files.cert, &files.key) {
        (Some(cert), Some(key)) => Some(ClientTlsConfig {
            client_cert: read(cert)?,
            client_key: read(key)?,
        }),
        _ => None,
    };
    Ok(TlsCertificates {
        client_tls,
        root_cert,
    })
}

/// redis-rs builds its rustls configuration with the process's default crypto provider; with
/// both ring (etcd's client) and aws-lc-rs (ZooKeeper's TLS) in one build there is none until
/// one is installed. Installing ring is harmless when another is already installed.
fn install_crypto_provider() {
    let _ = rustls_ring_provider().install_default();
}

fn rustls_ring_provider() -> tokio_rustls::rustls::crypto::CryptoProvider {
    tokio_rustls::rustls::crypto::ring::default_provider()
}
