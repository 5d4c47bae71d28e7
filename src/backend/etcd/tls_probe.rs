//! One direct TLS handshake with a member, to learn why it closed a connection.
//!
//! With TLS 1.3 the server checks the client's certificate only after the client has finished
//! its side of the handshake, so etcd's verdict (certificate required, bad certificate) comes
//! as an alert on a connection the client already uses. Whether the request in flight sees
//! that alert or only "connection closed" is a race in hyper. A handshake of our own followed
//! by one read sees the alert every time. Used at most once per call, only for a TLS
//! connection that etcd closed.

use crate::error::chain;
use std::future::poll_fn;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, ReadBuf};
use tokio_rustls::rustls::{self, pki_types};

/// The PEM contents of the TLS files (read once at connect).
#[derive(Clone)]
pub(super) struct TlsMaterial {
    pub(super) ca: Option<Vec<u8>>,
    pub(super) cert: Option<Vec<u8>>,
    pub(super) key: Option<Vec<u8>>,
}

impl std::fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Holds a private key: never printed.
        f.write_str("TlsMaterial { .. }")
    }
}

/// The text of the error a fresh TLS connection to `url` (`https://host:port`) ends with,
/// within `bound`; `None` if it works (the server speaks first once the handshake is done:
/// HTTP/2 settings, session tickets) or nothing can be told in time.
pub(super) async fn failure(url: &str, tls: &TlsMaterial, bound: Duration) -> Option<String> {
    tokio::time::timeout(bound, probe(url, tls))
        .await
        .ok()
        .flatten()
}

async fn probe(url: &str, tls: &TlsMaterial) -> Option<String> {
    let authority = url.strip_prefix("https://")?;
    let (host, _) = authority.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let name = pki_types::ServerName::try_from(host.to_string()).ok()?;
    let config = client_config(tls)?;
    let tcp = tokio::net::TcpStream::connect(authority).await.ok()?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let mut stream = match connector.connect(name, tcp).await {
        Ok(s) => s,
        Err(e) => return Some(chain(&e)),
    };
    let mut buf = [0u8; 64];
    let read = poll_fn(|cx| {
        let mut rb = ReadBuf::new(&mut buf);
        Pin::new(&mut stream)
            .poll_read(cx, &mut rb)
            .map_ok(|()| rb.filled().len())
    })
    .await;
    match read {
        Ok(_) => None,
        Err(e) => Some(chain(&e)),
    }
}

/// The same trust and identity as the etcd connection (ring, the CA or the system's roots,
/// the client certificate if any, HTTP/2).
fn client_config(tls: &TlsMaterial) -> Option<rustls::ClientConfig> {
    use pki_types::pem::PemObject;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    match &tls.ca {
        Some(pem) => {
            for cert in pki_types::CertificateDer::pem_slice_iter(pem).flatten() {
                let _ = roots.add(cert);
            }
        }
        None => {
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        }
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .ok()?
        .with_root_certificates(roots);
    let mut config = match (&tls.cert, &tls.key) {
        (Some(cert), Some(key)) => {
            let certs: Vec<_> = pki_types::CertificateDer::pem_slice_iter(cert)
                .flatten()
                .collect();
            let key = pki_types::PrivateKeyDer::from_pem_slice(key).ok()?;
            builder.with_client_auth_cert(certs, key).ok()?
        }
        _ => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Some(config)
}
