//! etcd TLS and user authentication against real servers: a TLS etcd requiring client
//! certificates (made in the test with rcgen) and an auth-enabled etcd with a short token TTL.
//! Right settings work; wrong CA, missing or expired certificate, wrong password and missing
//! permissions fail fast with errors naming the cause, leave nothing behind, and no password
//! reaches a log, an error or a `{:?}`.

mod support;

use clusterlimit::{Error, EtcdUser, Limiter, TlsFiles};
use etcd_client::{Client, ConnectOptions, GetOptions, Permission, PermissionType};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use support::certs::TestPki;
use support::etcd::{EtcdOptions, ServerTls};
use support::EtcdCluster;
use tokio::time::{timeout, Instant};

const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
const TTL: Duration = Duration::from_secs(5);
/// Bound on every library call here: a refusal must come back within the request timeout.
const CALL_BOUND: Duration = Duration::from_secs(15);

const ROOT_PASSWORD: &str = "root-Pw-0f5c2a";
const APP_PASSWORD: &str = "app-Pw-7d41e9-secret";
const READER_PASSWORD: &str = "reader-Pw-93ab12";

/// Everything logged by this test binary, at every level (a password must never be in it).
static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();

/// Tests that read or write the process environment (ETCDCTL_*, CLUSTERLIMIT_ETCD_PASSWORD)
/// hold this, so a test leaving a file out never sees another test's variables.
static ENV: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Takes [`ENV`] and clears etcdctl's variables (a developer's shell may set them), so the
/// files a test leaves out stay out.
async fn env_lock() -> tokio::sync::MutexGuard<'static, ()> {
    let guard = ENV.lock().await;
    for var in ["ETCDCTL_CACERT", "ETCDCTL_CERT", "ETCDCTL_KEY"] {
        std::env::remove_var(var);
    }
    guard
}

#[derive(Clone)]
struct LogBuffer(Arc<Mutex<Vec<u8>>>);

impl Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut logs) = self.0.lock() {
            logs.extend_from_slice(buf);
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Installs the capturing subscriber once per test binary: TRACE for every target
/// (clusterlimit, etcd-client, tonic, h2), so a secret anywhere in a log line is caught.
fn capture_logs() -> Arc<Mutex<Vec<u8>>> {
    LOGS.get_or_init(|| {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let writer = LogBuffer(buffer.clone());
        let _ = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .try_init();
        buffer
    })
    .clone()
}

fn logs_text() -> String {
    let logs = capture_logs();
    let bytes = logs.lock().map(|l| l.clone()).unwrap_or_default();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn url_with(base: &str, settings: &[(&str, &Path)]) -> String {
    let query: Vec<String> = settings
        .iter()
        .map(|(k, p)| format!("{k}={}", p.display()))
        .collect();
    format!("{base}?{}", query.join("&"))
}

async fn connect(url: &str) -> clusterlimit::Result<Limiter> {
    Limiter::builder(url)
        .session_ttl(TTL)
        .request_timeout(REQUEST_TIMEOUT)
        .connect()
        .await
}

/// Connects (bounded), expecting a failure; returns it and how long it took.
async fn connect_fails(url: &str) -> (Error, Duration) {
    let start = Instant::now();
    let result = timeout(CALL_BOUND, connect(url))
        .await
        .expect("a refused connect must come back in time");
    match result {
        Ok(_) => panic!("connect to {url} succeeded; expected a refusal"),
        Err(e) => (e, start.elapsed()),
    }
}

/// acquire, status (one holder), release, status (none): the ordinary work.
async fn acquire_status_release(limiter: &Limiter, name: &str) {
    let sem = timeout(CALL_BOUND, limiter.semaphore(name, 2))
        .await
        .expect("semaphore bounded")
        .expect("semaphore");
    let permit = timeout(CALL_BOUND, sem.acquire())
        .await
        .expect("acquire bounded")
        .expect("acquire");
    let status = sem.status().await.expect("status");
    assert_eq!(status.used, 1, "{status:?}");
    assert_eq!(status.holders.len(), 1, "{status:?}");
    timeout(CALL_BOUND, permit.release())
        .await
        .expect("release bounded")
        .expect("release");
    let status = sem.status().await.expect("status after release");
    assert_eq!(status.used, 0, "{status:?}");
}

fn tls_cluster(pki: &TestPki, require_client_cert: bool) -> EtcdCluster {
    EtcdCluster::start_with(
        1,
        EtcdOptions {
            tls: Some(ServerTls {
                cert: pki.server.cert.clone(),
                key: pki.server.key.clone(),
                client_ca: require_client_cert.then(|| pki.ca.clone()),
            }),
            auth_token_ttl: None,
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_the_right_ca_and_client_cert_works() {
    capture_logs();
    let _env = env_lock().await;
    let pki = TestPki::new();
    let cluster = tls_cluster(&pki, true);
    let url = url_with(
        &cluster.url("tls"),
        &[
            ("cacert", &pki.ca),
            ("cert", &pki.client.cert),
            ("key", &pki.client.key),
        ],
    );
    let start = Instant::now();
    let limiter = connect(&url).await.expect("TLS connect");
    let connect_time = start.elapsed();
    acquire_status_release(&limiter, "s").await;
    limiter.close().await.expect("close");
    println!("TLS connect (client cert, lease granted): {connect_time:?}");

    // The same through the builder, on an etcd:// URL: the builder's TLS makes it TLS.
    let plain_url = cluster.url("tls").replacen("etcds://", "etcd://", 1);
    let limiter = Limiter::builder(&plain_url)
        .session_ttl(TTL)
        .request_timeout(REQUEST_TIMEOUT)
        .tls(TlsFiles::new(
            Some(pki.ca.clone()),
            Some(pki.client.cert.clone()),
            Some(pki.client.key.clone()),
        ))
        .connect()
        .await
        .expect("TLS connect through the builder");
    acquire_status_release(&limiter, "b").await;
    limiter.close().await.expect("close");

    // etcdctl's variables fill in the files the URL leaves out.
    std::env::set_var("ETCDCTL_CACERT", &pki.ca);
    std::env::set_var("ETCDCTL_CERT", &pki.client.cert);
    std::env::set_var("ETCDCTL_KEY", &pki.client.key);
    let from_env = connect(&cluster.url("tls")).await;
    // The URL's file wins over the variable: a wrong CA in the URL fails even though the
    // variable names the right one.
    let url_wins = connect(&url_with(&cluster.url("tls"), &[("cacert", &pki.other_ca)])).await;
    std::env::remove_var("ETCDCTL_CACERT");
    std::env::remove_var("ETCDCTL_CERT");
    std::env::remove_var("ETCDCTL_KEY");
    let limiter = from_env.expect("TLS connect with ETCDCTL_* variables");
    acquire_status_release(&limiter, "e").await;
    limiter.close().await.expect("close");
    let e = url_wins.expect_err("the URL's wrong CA must win over ETCDCTL_CACERT");
    assert!(e.to_string().contains("not signed by"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_refusals_name_the_cause_quickly() {
    capture_logs();
    let _env = env_lock().await;
    let pki = TestPki::new();
    let cluster = tls_cluster(&pki, true);
    let base = cluster.url("tls");

    // A CA that did not sign the server's certificate.
    let (e, took) = connect_fails(&url_with(
        &base,
        &[
            ("cacert", &pki.other_ca),
            ("cert", &pki.client.cert),
            ("key", &pki.client.key),
        ],
    ))
    .await;
    let text = e.to_string();
    assert!(
        text.contains("etcd's server certificate is not signed by")
            && text.contains(&pki.other_ca.display().to_string()),
        "{text}"
    );
    assert!(took < REQUEST_TIMEOUT, "wrong CA took {took:?}: {text}");
    println!("wrong CA refused in {took:?}: {text}");

    // No client certificate, but the server requires one.
    let (e, took) = connect_fails(&url_with(&base, &[("cacert", &pki.ca)])).await;
    let text = e.to_string();
    assert!(text.contains("requires a client certificate"), "{text}");
    assert!(took < REQUEST_TIMEOUT, "missing cert took {took:?}: {text}");
    println!("missing client certificate refused in {took:?}: {text}");

    // An expired client certificate.
    let (e, took) = connect_fails(&url_with(
        &base,
        &[
            ("cacert", &pki.ca),
            ("cert", &pki.expired_client.cert),
            ("key", &pki.expired_client.key),
        ],
    ))
    .await;
    let text = e.to_string();
    assert!(
        text.contains("etcd rejected the client certificate"),
        "{text}"
    );
    assert!(took < REQUEST_TIMEOUT, "expired cert took {took:?}: {text}");
    println!("expired client certificate refused in {took:?}: {text}");

    // Files that are missing or not PEM: InvalidArgument naming the file, before any traffic.
    let missing = pki.dir().join("nope.pem");
    let (e, took) = connect_fails(&url_with(&base, &[("cacert", &missing)])).await;
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    assert!(
        e.to_string().contains(&missing.display().to_string()),
        "{e}"
    );
    assert!(took < Duration::from_millis(500), "{took:?}");
    let garbled = pki.dir().join("garbled.pem");
    std::fs::write(&garbled, "-----BEGIN CERTIFICATE-----\n!!!\n").expect("write");
    let (e, _) = connect_fails(&url_with(
        &base,
        &[
            ("cacert", &pki.ca),
            ("cert", &garbled),
            ("key", &pki.client.key),
        ],
    ))
    .await;
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    assert!(
        e.to_string().contains(&garbled.display().to_string()),
        "{e}"
    );
    let (e, _) = connect_fails(&url_with(
        &base,
        &[
            ("cacert", &pki.ca),
            ("cert", &pki.client.cert),
            ("key", &pki.ca),
        ],
    ))
    .await;
    assert!(
        matches!(&e, Error::InvalidArgument(m) if m.contains("no PEM private key")),
        "{e:?}"
    );

    // A server that speaks plain text to an etcds:// URL: it closes the handshake, which a
    // restarting member could do too, so this is retried for the call's time (2 request
    // timeouts) and then says what is likely wrong.
    let plain = EtcdCluster::single();
    let start = Instant::now();
    let plain_limiter = connect(&plain.url("p")).await.expect("plain connect");
    println!(
        "plain-text connect (lease granted), for comparison: {:?}",
        start.elapsed()
    );
    plain_limiter.close().await.expect("close");
    let plain_url = plain.url("p").replacen("etcd://", "etcds://", 1);
    let start = Instant::now();
    let connected = Limiter::builder(&url_with(&plain_url, &[("cacert", &pki.ca)]))
        .session_ttl(TTL)
        .request_timeout(Duration::from_secs(1))
        .connect()
        .await;
    let took = start.elapsed();
    let e = connected.expect_err("TLS to a plain-text etcd");
    assert!(e.to_string().contains("serving plain text"), "{e}");
    assert!(took < Duration::from_secs(4), "{took:?}: {e}");
    println!("plain-text server behind etcds:// refused in {took:?}: {e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_server_certificate_is_refused() {
    capture_logs();
    let _env = env_lock().await;
    let pki = TestPki::new();
    let cluster = EtcdCluster::start_with(
        1,
        EtcdOptions {
            tls: Some(ServerTls {
                cert: pki.expired_server.cert.clone(),
                key: pki.expired_server.key.clone(),
                client_ca: None,
            }),
            auth_token_ttl: None,
        },
    );
    let (e, took) = connect_fails(&url_with(&cluster.url("x"), &[("cacert", &pki.ca)])).await;
    let text = e.to_string();
    assert!(
        text.contains("etcd's server certificate has expired"),
        "{text}"
    );
    assert!(took < REQUEST_TIMEOUT, "{took:?}: {text}");
}

/// A root client of an auth-enabled cluster (plain text).
async fn root_client(cluster: &EtcdCluster) -> Client {
    let options = ConnectOptions::new()
        .with_user("root", ROOT_PASSWORD)
        .with_timeout(Duration::from_secs(2))
        .with_auto_token_refresh(true);
    Client::connect(cluster.endpoints(), Some(options))
        .await
        .expect("root client")
}

/// An etcd with auth enabled: root, `app` (readwrite on `app/`), `reader` (read only on
/// `app/`) and `stranger` (readwrite on `other/` only). Simple tokens expire after 2 s idle.
async fn auth_cluster() -> EtcdCluster {
    let cluster = EtcdCluster::start_with(
        1,
        EtcdOptions {
            tls: None,
            auth_token_ttl: Some(2),
        },
    );
    let mut c = support::connect(&cluster.endpoints()).await;
    enable_auth(&mut c).await;
    cluster
}

/// Adds root, the roles and users of [`auth_cluster`], then enables auth.
async fn enable_auth(c: &mut Client) {
    c.user_add("root", ROOT_PASSWORD, None)
        .await
        .expect("add root");
    c.role_add("root").await.expect("root role");
    c.user_grant_role("root", "root").await.expect("grant root");
    let roles = [
        ("app-rw", "app/", PermissionType::Readwrite),
        ("app-ro", "app/", PermissionType::Read),
        ("other-rw", "other/", PermissionType::Readwrite),
    ];
    for (role, prefix, kind) in roles {
        c.role_add(role).await.expect("add role");
        let perm = match kind {
            PermissionType::Read => Permission::read(prefix),
            _ => Permission::read_write(prefix),
        }
        .with_prefix();
        c.role_grant_permission(role, perm)
            .await
            .expect("grant permission");
    }
    for (user, password, role) in [
        ("app", APP_PASSWORD, "app-rw"),
        ("reader", READER_PASSWORD, "app-ro"),
        ("stranger", READER_PASSWORD, "other-rw"),
    ] {
        c.user_add(user, password, None).await.expect("add user");
        c.user_grant_role(user, role).await.expect("grant role");
    }
    c.auth_enable().await.expect("auth enable");
}

fn password_file(dir: &Path, name: &str, password: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("{password}\n")).expect("write password file");
    path
}

fn user_url(cluster: &EtcdCluster, prefix: &str, user: &str, file: &Path) -> String {
    format!(
        "{}?user={user}&password_file={}",
        cluster.url(prefix),
        file.display()
    )
}

async fn keys_under(root: &mut Client, prefix: &str) -> Vec<String> {
    let resp = root
        .get(
            prefix,
            Some(GetOptions::new().with_prefix().with_keys_only()),
        )
        .await
        .expect("root range read");
    resp.kvs()
        .iter()
        .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_user_works_within_its_prefix_and_survives_token_expiry() {
    capture_logs();
    let cluster = auth_cluster().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let file = password_file(dir.path(), "app.pw", APP_PASSWORD);
    let start = Instant::now();
    let limiter = connect(&user_url(&cluster, "app", "app", &file))
        .await
        .expect("connect as app");
    println!("auth connect (authenticate + lease): {:?}", start.elapsed());
    acquire_status_release(&limiter, "s").await;

    // The token lives 2 s once idle (etcd drops it within 1 s after that): pauses of 3.5 s
    // let it expire between rounds, and every round must still work (the token is refreshed
    // when etcd refuses it). A client that does not refresh shows the expiry is real.
    let mut raw = Client::connect(
        cluster.endpoints(),
        Some(
            ConnectOptions::new()
                .with_user("app", APP_PASSWORD)
                .with_timeout(Duration::from_secs(2)),
        ),
    )
    .await
    .expect("raw client as app");
    raw.get("app/probe", None).await.expect("fresh token works");
    let sem = limiter.semaphore("s", 2).await.expect("semaphore");
    let began = Instant::now();
    for round in 0..3 {
        tokio::time::sleep(Duration::from_millis(3500)).await;
        if round == 0 {
            let stale = raw
                .get("app/probe", None)
                .await
                .expect_err("an idle token expires");
            assert!(stale.to_string().contains("invalid auth token"), "{stale}");
        }
        let round_start = Instant::now();
        let permit = timeout(CALL_BOUND, sem.acquire())
            .await
            .expect("acquire bounded")
            .unwrap_or_else(|e| panic!("acquire after an idle {round}: {e}"));
        permit.release().await.expect("release");
        println!(
            "round {round} after token expiry: {:?}",
            round_start.elapsed()
        );
    }
    assert!(
        began.elapsed() > Duration::from_secs(6),
        "longer than the TTL"
    );
    let status = sem.status().await.expect("status");
    assert_eq!(status.used, 0);
    limiter.close().await.expect("close");

    // The password comes from the environment when no file is given.
    {
        let _env = env_lock().await;
        std::env::set_var("CLUSTERLIMIT_ETCD_PASSWORD", APP_PASSWORD);
        let from_env = Limiter::builder(&cluster.url("app"))
            .session_ttl(TTL)
            .request_timeout(REQUEST_TIMEOUT)
            .etcd_user(EtcdUser::new("app", None))
            .connect()
            .await;
        std::env::remove_var("CLUSTERLIMIT_ETCD_PASSWORD");
        let limiter = from_env.expect("connect with CLUSTERLIMIT_ETCD_PASSWORD");
        acquire_status_release(&limiter, "env").await;
        limiter.close().await.expect("close");
    }
    assert_no_password_in_logs();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_refusals_are_clear_not_retried_and_leave_nothing() {
    capture_logs();
    let cluster = auth_cluster().await;
    let mut root = root_client(&cluster).await;
    let dir = tempfile::tempdir().expect("temp dir");

    // Wrong password.
    let wrong = password_file(dir.path(), "wrong.pw", "not-the-password");
    let (e, took) = connect_fails(&user_url(&cluster, "app", "app", &wrong)).await;
    let text = e.to_string();
    assert!(
        text.contains("authentication failed for etcd user \"app\""),
        "{text}"
    );
    assert!(took < REQUEST_TIMEOUT, "{took:?}: {text}");
    assert!(!format!("{e:?}").contains("not-the-password"), "{e:?}");

    // No user at all on an auth-enabled etcd: etcd 3.4 grants an anonymous lease, the first
    // key access is refused.
    let anonymous = connect(&cluster.url("app"))
        .await
        .expect("anonymous connect");
    let e = timeout(CALL_BOUND, anonymous.semaphore("s", 1))
        .await
        .expect("bounded")
        .expect_err("anonymous key access");
    assert!(
        e.to_string().contains("etcd requires authentication"),
        "{e}"
    );
    anonymous.close().await.expect("close");

    // A user with rights on another prefix only: permission denied, fast, nothing written.
    let stranger = password_file(dir.path(), "stranger.pw", READER_PASSWORD);
    let limiter = connect(&user_url(&cluster, "app", "stranger", &stranger))
        .await
        .expect("connect as stranger (the lease needs no key permission)");
    let before = limiter.stats();
    let start = Instant::now();
    let e = timeout(CALL_BOUND, limiter.semaphore("s", 1))
        .await
        .expect("bounded")
        .expect_err("a semaphore outside the user's prefix");
    let took = start.elapsed();
    let text = e.to_string();
    assert!(
        text.contains("permission denied on prefix \"app\" for etcd user \"stranger\""),
        "{text}"
    );
    assert!(took < REQUEST_TIMEOUT, "{took:?}: {text}");
    let sent = limiter.stats().total() - before.total();
    assert_eq!(
        sent, 1,
        "a permission error is not retried ({sent} requests)"
    );
    assert!(keys_under(&mut root, "app/").await.is_empty());
    limiter.close().await.expect("close");

    // Read-only on the prefix: the semaphore (made by app) opens, an acquire is refused, and
    // no queue entry is left.
    let app_file = password_file(dir.path(), "app.pw", APP_PASSWORD);
    let app = connect(&user_url(&cluster, "app", "app", &app_file))
        .await
        .expect("connect as app");
    app.semaphore("ro", 1)
        .await
        .expect("app creates the semaphore");
    let reader_file = password_file(dir.path(), "reader.pw", READER_PASSWORD);
    let reader = connect(&user_url(&cluster, "app", "reader", &reader_file))
        .await
        .expect("connect as reader");
    let sem = reader.open_semaphore("ro").await.expect("reader opens it");
    let status = sem.status().await.expect("reader reads the status");
    assert_eq!(status.capacity, 1);
    let start = Instant::now();
    let e = timeout(CALL_BOUND, sem.acquire())
        .await
        .expect("bounded")
        .expect_err("acquire with read-only rights");
    let took = start.elapsed();
    assert!(
        e.to_string()
            .contains("permission denied on prefix \"app\""),
        "{e}"
    );
    assert!(took < REQUEST_TIMEOUT, "{took:?}: {e}");
    let queue = keys_under(&mut root, "app/s/ro/q/").await;
    assert!(queue.is_empty(), "entries left behind: {queue:?}");

    // The password changes while a Limiter runs: once its token expires, the refresh is
    // refused, and calls say so (not a retry storm, not a bare "invalid auth token"). A
    // Limiter of its own, so that the refused acquire's background removal above (retried
    // while its session lives) is not counted with the call.
    let watcher = connect(&user_url(&cluster, "app", "reader", &reader_file))
        .await
        .expect("connect as reader");
    let sem = watcher.open_semaphore("ro").await.expect("reader opens it");
    root.user_change_password("reader", "rotated-Pw-5e0c")
        .await
        .expect("change password");
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let before = watcher.stats();
    let start = Instant::now();
    let e = timeout(CALL_BOUND, sem.status())
        .await
        .expect("bounded")
        .expect_err("status with a stale password");
    let took = start.elapsed();
    assert!(
        e.to_string()
            .contains("authentication failed for etcd user \"reader\""),
        "{e}"
    );
    // Within a call's bound (twice the request timeout): the refusal itself ends the call,
    // but on a loaded machine a first attempt may go unanswered in its short bound first.
    assert!(took < REQUEST_TIMEOUT * 2, "{took:?}: {e}");
    // One read, unless a first attempt got no answer in time on a loaded machine (an
    // unanswered read is sent again, bounded by the request timeout); and nothing after the
    // refusal: it is not retried.
    let sent = watcher.stats().since(&before);
    assert!(
        (1..=4).contains(&sent.range),
        "an authentication failure is not retried: {sent:?}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let later = watcher.stats().since(&before);
    assert_eq!(later.range, sent.range, "sent after the refusal: {later:?}");
    // Closing still ends locally; etcd expires the lease by its TTL.
    for limiter in [watcher, reader] {
        let _ = timeout(CALL_BOUND, limiter.close())
            .await
            .expect("close bounded");
    }
    app.close().await.expect("close");
    assert_no_password_in_logs();
}

#[test]
fn no_secret_in_debug_output() {
    let user = EtcdUser::new("app", Some("/run/secrets/etcd-password".into()));
    let builder = Limiter::builder("etcds://h:1/p?user=app&password_file=/run/secrets/pw")
        .etcd_user(user.clone());
    // The configuration holds paths only: the password is read at connect.
    let text = format!("{user:?} {builder:?}");
    assert!(text.contains("/run/secrets/etcd-password"), "{text}");
    for secret in [APP_PASSWORD, ROOT_PASSWORD, READER_PASSWORD] {
        assert!(!text.contains(secret));
    }
}

fn assert_no_password_in_logs() {
    let logs = logs_text();
    assert!(!logs.is_empty(), "the capturing subscriber saw nothing");
    for secret in [
        APP_PASSWORD,
        ROOT_PASSWORD,
        READER_PASSWORD,
        "not-the-password",
    ] {
        assert!(
            !logs.contains(secret),
            "a password reached the logs ({} bytes captured)",
            logs.len()
        );
    }
}

/// Three TLS members with auth: every member connection gets the certificate and the user.
/// A member down at connect is skipped and authenticated in the background once it is back;
/// the Limiter then keeps working while each of the others is down in turn (a restarted
/// member has forgotten its tokens, so this also re-authenticates).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_member_gets_tls_and_auth() {
    let logs = capture_logs();
    let _env = env_lock().await;
    let pki = TestPki::new();
    let mut cluster = EtcdCluster::start_with(
        3,
        EtcdOptions {
            tls: Some(ServerTls {
                cert: pki.server.cert.clone(),
                key: pki.server.key.clone(),
                client_ca: Some(pki.ca.clone()),
            }),
            auth_token_ttl: None,
        },
    );
    let tls = etcd_client::TlsOptions::new()
        .ca_certificate(etcd_client::Certificate::from_pem(
            std::fs::read(&pki.ca).expect("ca"),
        ))
        .identity(etcd_client::Identity::from_pem(
            std::fs::read(&pki.client.cert).expect("cert"),
            std::fs::read(&pki.client.key).expect("key"),
        ));
    let mut admin = Client::connect(
        cluster.endpoints(),
        Some(
            ConnectOptions::new()
                .with_tls(tls)
                .with_timeout(Duration::from_secs(2)),
        ),
    )
    .await
    .expect("admin client");
    enable_auth(&mut admin).await;

    let dir = tempfile::tempdir().expect("temp dir");
    let pw = password_file(dir.path(), "app.pw", APP_PASSWORD);
    let url = format!(
        "{}?cacert={}&cert={}&key={}&user=app&password_file={}",
        cluster.url("app"),
        pki.ca.display(),
        pki.client.cert.display(),
        pki.client.key.display(),
        pw.display()
    );
    // With a user, connecting authenticates at once: the TLS refusals are named there too.
    let no_cert = format!(
        "{}?cacert={}&user=app&password_file={}",
        cluster.url("app"),
        pki.ca.display(),
        pw.display()
    );
    let (e, took) = connect_fails(&no_cert).await;
    assert!(
        e.to_string().contains("requires a client certificate"),
        "{e}"
    );
    assert!(took < REQUEST_TIMEOUT, "{took:?}: {e}");
    let wrong_pw = password_file(dir.path(), "wrong.pw", "not-the-password");
    let (e, _) =
        connect_fails(&url.replace(&pw.display().to_string(), &wrong_pw.display().to_string()))
            .await;
    assert!(e.to_string().contains("authentication failed"), "{e}");

    cluster.kill(0);
    let start = Instant::now();
    let limiter = timeout(CALL_BOUND, connect(&url))
        .await
        .expect("connect bounded")
        .expect("connect with one member down");
    println!(
        "TLS + auth connect, 3 members (one down): {:?}",
        start.elapsed()
    );
    acquire_status_release(&limiter, "s").await;

    cluster.restart(0);
    let authenticated = |l: &Arc<Mutex<Vec<u8>>>| {
        let bytes = l.lock().map(|b| b.clone()).unwrap_or_default();
        String::from_utf8_lossy(&bytes).contains("etcd member authenticated")
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    while !authenticated(&logs) {
        assert!(
            Instant::now() < deadline,
            "member 0 was not authenticated within 15 s of its restart"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for down in [1, 2] {
        cluster.kill(down);
        acquire_status_release(&limiter, &format!("down{down}")).await;
        cluster.restart(down);
    }
    limiter.close().await.expect("close");
    assert_no_password_in_logs();
}
