//! TLS to a real ZooKeeper's `secureClientPort` (PEM keystore and truststore, client
//! certificates required), with certificates generated here: the Limiter works over TLS (with
//! digest auth on top), and refuses to talk to a server signed by another CA, or without a
//! client certificate when the server needs one.
#![cfg(feature = "zk-tls")]

use crate::support;

use clusterlimit::{Error, Limiter, TlsFiles};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use std::path::{Path, PathBuf};
use std::time::Duration;
use support::ZkCluster;
use tokio::time::timeout;

const BOUND: Duration = Duration::from_secs(10);

/// Netty jars ZooKeeper's TLS server needs beyond what Debian's `zookeeper.jar` pulls in.
const NETTY_JARS: &[&str] = &[
    "/usr/share/java/netty-codec.jar",
    "/usr/share/java/netty-resolver.jar",
    "/usr/share/java/netty-transport-native-unix-common.jar",
];

/// A CA and certificates it signs, written as PEM files into a directory.
struct Pki {
    ca: CertifiedIssuer<'static, KeyPair>,
    dir: PathBuf,
}

impl Pki {
    fn new(dir: &Path, name: &str) -> Pki {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, format!("clusterlimit test CA {name}"));
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        let dir = dir.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
        Pki { ca, dir }
    }

    fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// A certificate for `names` (IPs or DNS names): `(cert file, key file)`.
    fn issue(&self, who: &str, names: &[&str]) -> (PathBuf, PathBuf) {
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        params.distinguished_name.push(DnType::CommonName, who);
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca).unwrap();
        let (c, k) = (
            self.dir.join(format!("{who}.pem")),
            self.dir.join(format!("{who}.key")),
        );
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c, k)
    }
}

/// A standalone ZooKeeper serving TLS on its secure port (besides its plain port), with a
/// certificate for 127.0.0.1 from `pki`, requiring client certificates from the same CA.
fn tls_zookeeper(pki: &Pki) -> ZkCluster {
    let (cert, key) = pki.issue("server", &["127.0.0.1", "localhost"]);
    // ZooKeeper's PEM keystore: the certificate and its key in one file.
    let keystore = pki.dir.join("server-keystore.pem");
    let pem = std::fs::read_to_string(&cert).unwrap() + &std::fs::read_to_string(&key).unwrap();
    std::fs::write(&keystore, pem).unwrap();
    let mut builder = ZkCluster::builder();
    // Debian's zookeeper.jar manifest lists netty-handler but not what it needs.
    for jar in NETTY_JARS {
        assert!(
            Path::new(jar).is_file(),
            "{jar} is missing: install libnetty-java (the TLS server needs it)"
        );
        builder = builder.classpath_jar(*jar);
    }
    builder
        .secure_client_port()
        .config_line("serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory")
        .config_line(format!("ssl.keyStore.location={}", keystore.display()))
        .config_line("ssl.keyStore.type=PEM")
        .config_line(format!(
            "ssl.trustStore.location={}",
            pki.ca_file().display()
        ))
        .config_line("ssl.trustStore.type=PEM")
        .config_line("ssl.clientAuth=need")
        .start()
}

/// A TLS connection refused: the error says what to check.
fn assert_tls_refused(e: &Error, case: &str) {
    let text = e.to_string();
    assert!(
        matches!(e, Error::Store(_))
            && text.contains("completed a TLS connection")
            && text.contains("CA"),
        "{case}: unclear error: {text}"
    );
}

async fn connect(url: &str, tls: TlsFiles) -> Result<Limiter, Error> {
    timeout(BOUND, Limiter::builder(url).tls(tls).connect())
        .await
        .expect("connect answers in time")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limiter_works_over_tls_and_refuses_a_wrong_ca_or_no_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "good");
    let zk = tls_zookeeper(&pki);
    let (cert, key) = pki.issue("client", &["client.example"]);
    let digest = dir.path().join("digest");
    std::fs::write(&digest, "app:tls-test-password\n").unwrap();
    let url = format!(
        "zk://{}/tls?digest_file={}",
        zk.secure_connect_string(),
        digest.display()
    );
    let good = TlsFiles::new(Some(pki.ca_file()), Some(cert.clone()), Some(key.clone()));

    // The server has just started: its secure port may open a moment after the plain one.
    let mut last = None;
    let mut limiter = None;
    for _ in 0..20 {
        match connect(&url, good.clone()).await {
            Ok(l) => {
                limiter = Some(l);
                break;
            }
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let limiter = limiter.unwrap_or_else(|| panic!("no TLS connection: {last:?}"));
    let sem = limiter.semaphore("jobs", 1).await.unwrap();
    let p = sem.acquire().await.unwrap();
    assert!(matches!(sem.try_acquire().await, Err(Error::NoPermits)));
    assert_eq!(sem.status().await.unwrap().holders.len(), 1);
    p.release().await.unwrap();
    // The nodes are really there, seen through the plain port.
    assert_eq!(
        support::list_children(&zk.connect_string(), "/tls/s").await,
        ["jobs"]
    );

    // A server whose certificate another CA signed is not trusted.
    let other = Pki::new(dir.path(), "other");
    let wrong_ca = TlsFiles::new(Some(other.ca_file()), good.cert.clone(), good.key.clone());
    let e = connect(&url, wrong_ca)
        .await
        .expect_err("a server signed by another CA must be refused");
    assert_tls_refused(&e, "wrong CA");
    // The server needs a client certificate.
    let no_client_cert = TlsFiles::new(Some(pki.ca_file()), None, None);
    let e = connect(&url, no_client_cert)
        .await
        .expect_err("no client certificate must be refused");
    assert_tls_refused(&e, "no client certificate");
    // A client certificate from another CA is refused by the server.
    let (other_cert, other_key) = other.issue("intruder", &["intruder.example"]);
    let intruder = TlsFiles::new(Some(pki.ca_file()), Some(other_cert), Some(other_key));
    let e = connect(&url, intruder)
        .await
        .expect_err("a client certificate from another CA must be refused");
    assert_tls_refused(&e, "client certificate from another CA");
    // Plain text to the TLS port gets nowhere either.
    let e = timeout(BOUND, Limiter::connect(&url))
        .await
        .expect("answers in time")
        .expect_err("plain text to the TLS port must fail");
    eprintln!("plain text to the TLS port: {e}");
    assert!(matches!(e, Error::Store(_)), "{e}");

    // The same TLS settings in the URL alone (zks://), as the binary's --store takes them.
    let tls_url = format!(
        "zks://{}/tls?digest_file={}&cacert={}&cert={}&key={}",
        zk.secure_connect_string(),
        digest.display(),
        pki.ca_file().display(),
        cert.display(),
        key.display()
    );
    // Connecting fails fast (one try per server), and once in a CI rehearsal under load the one
    // server's TLS port failed the handshake right after the plain-text client above. What this
    // checks is that the URL alone configures TLS: a wrong setting fails every try.
    let mut by_url = None;
    for attempt in 1..=3 {
        match timeout(BOUND, Limiter::connect(&tls_url))
            .await
            .expect("answers in time")
        {
            Ok(l) => {
                by_url = Some(l);
                break;
            }
            Err(e) => {
                eprintln!("zks:// connect attempt {attempt}: {e}");
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
    }
    let by_url = by_url.expect("zks:// with cacert/cert/key connects (3 tries)");
    let sem = by_url.open_semaphore("jobs").await.unwrap();
    sem.acquire().await.unwrap().release().await.unwrap();
    by_url.close().await.unwrap();

    limiter.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tls_files_are_refused_before_connecting() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "files");
    let (cert, _) = pki.issue("client", &["client.example"]);
    let missing = dir.path().join("missing.pem");
    let not_pem = dir.path().join("not.pem");
    std::fs::write(&not_pem, "not a certificate").unwrap();
    let url = "zk://127.0.0.1:1/tls";
    let cases = [
        (TlsFiles::default(), "CA certificate".to_string()),
        (
            TlsFiles::new(Some(missing.clone()), None, None),
            missing.display().to_string(),
        ),
        (
            TlsFiles::new(Some(not_pem.clone()), None, None),
            not_pem.display().to_string(),
        ),
        (
            TlsFiles::new(Some(pki.ca_file()), Some(cert.clone()), None),
            "both".to_string(),
        ),
        (
            TlsFiles::new(
                Some(pki.ca_file()),
                Some(cert.clone()),
                Some(not_pem.clone()),
            ),
            not_pem.display().to_string(),
        ),
    ];
    for (files, says) in cases {
        let e = connect(url, files.clone())
            .await
            .expect_err("bad TLS files must be refused");
        assert!(
            matches!(&e, Error::InvalidArgument(m) if m.contains(&says)),
            "{files:?}: {e}"
        );
    }
}
