//! Test certificates made at run time (rcgen): a CA, a server certificate for 127.0.0.1 and
//! localhost, a client certificate, an expired client certificate, and a second, unrelated CA.
//! Written as PEM files into a temp dir that disappears with the [`TestPki`].

use rcgen::{
    date_time_ymd, BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use std::path::{Path, PathBuf};

/// A certificate and its private key, as PEM files.
#[derive(Debug, Clone)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Every file a TLS test needs, in one temp dir.
pub struct TestPki {
    dir: tempfile::TempDir,
    /// The CA that signed `server`, `client` and `expired_client`.
    pub ca: PathBuf,
    /// A CA that signed nothing here: "the wrong CA".
    pub other_ca: PathBuf,
    /// Server certificate for 127.0.0.1 and localhost.
    pub server: CertFiles,
    /// A valid client certificate (CN `clusterlimit-test`).
    pub client: CertFiles,
    /// A client certificate that expired in 2021.
    pub expired_client: CertFiles,
    /// A server certificate that expired in 2021 (same CA).
    pub expired_server: CertFiles,
}

impl TestPki {
    /// Makes every certificate; panics if rcgen or the file system fails (test set-up).
    pub fn new() -> TestPki {
        let dir = tempfile::Builder::new()
            .prefix("clusterlimit-pki-")
            .tempdir()
            .expect("temp dir for certificates");
        let (ca_issuer, ca_pem) = ca("clusterlimit test CA");
        let (_, other_pem) = ca("some other CA");
        let ca = write(dir.path(), "ca.pem", &ca_pem);
        let other_ca = write(dir.path(), "other-ca.pem", &other_pem);
        let server_names = vec!["127.0.0.1".to_string(), "localhost".to_string()];
        let server = leaf(
            dir.path(),
            "server",
            server_names.clone(),
            ExtendedKeyUsagePurpose::ServerAuth,
            false,
            &ca_issuer,
        );
        let client = leaf(
            dir.path(),
            "client",
            vec![],
            ExtendedKeyUsagePurpose::ClientAuth,
            false,
            &ca_issuer,
        );
        let expired_client = leaf(
            dir.path(),
            "expired-client",
            vec![],
            ExtendedKeyUsagePurpose::ClientAuth,
            true,
            &ca_issuer,
        );
        let expired_server = leaf(
            dir.path(),
            "expired-server",
            server_names,
            ExtendedKeyUsagePurpose::ServerAuth,
            true,
            &ca_issuer,
        );
        TestPki {
            dir,
            ca,
            other_ca,
            server,
            client,
            expired_client,
            expired_server,
        }
    }

    /// The temp dir holding the files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

fn write(dir: &Path, name: &str, pem: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, pem).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    path
}

/// A self-signed CA: its issuer (to sign leaves) and its certificate as PEM.
fn ca(name: &str) -> (Issuer<'static, KeyPair>, String) {
    let key = KeyPair::generate().expect("CA key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let cert = params.self_signed(&key).expect("self-signed CA");
    (Issuer::new(params, key), cert.pem())
}

/// A certificate signed by `issuer` for `names`, written as NAME.pem and NAME-key.pem.
fn leaf(
    dir: &Path,
    name: &str,
    names: Vec<String>,
    usage: ExtendedKeyUsagePurpose,
    expired: bool,
    issuer: &Issuer<'static, KeyPair>,
) -> CertFiles {
    let key = KeyPair::generate().expect("leaf key");
    let mut params = CertificateParams::new(names).expect("leaf params");
    params
        .distinguished_name
        .push(DnType::CommonName, "clusterlimit-test");
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![usage];
    if expired {
        params.not_before = date_time_ymd(2020, 1, 1);
        params.not_after = date_time_ymd(2021, 1, 1);
    }
    let cert = params.signed_by(&key, issuer).expect("signed leaf");
    CertFiles {
        cert: write(dir, &format!("{name}.pem"), &cert.pem()),
        key: write(dir, &format!("{name}-key.pem"), &key.serialize_pem()),
    }
}
