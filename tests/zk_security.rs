//! ZooKeeper digest authentication and ACLs on a real server:
//!
//! - with digest credentials every node clusterlimit creates is creator-all + anyone-read:
//!   another identity (another user, or the same user with another password) cannot delete an
//!   entry, add one, or set the capacity (`NoAuth`), checked with a raw client;
//! - a client without credentials reads (status through a Limiter, raw reads) and writes
//!   nothing; the Limiter's errors say why;
//! - the authenticated Limiter does acquire / wait / release / set_capacity as usual;
//! - the password never appears in the captured logs (every target, TRACE), in errors, nor in
//!   `Debug` output.

mod support;

use clusterlimit::{Error, Limiter, Semaphore};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, Once};
use std::time::Duration;
use support::{FaultProxy, ZkCluster};
use tokio::time::timeout;
use tracing_subscriber::layer::SubscriberExt;
use zookeeper_client as zk;

const PASSWORD: &str = "s3cr3t-Pa55-for-zk-tests";
const CHROOT: &str = "/sec";
const BOUND: Duration = Duration::from_secs(10);

/// Everything logged by this test binary, at every level of every target.
static LOGS: Mutex<Vec<u8>> = Mutex::new(Vec::new());

struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        LOGS.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn capture_logs() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let layer = tracing_subscriber::fmt::layer()
            .with_writer(|| LogWriter)
            .with_ansi(false);
        let filter = tracing_subscriber::filter::LevelFilter::TRACE;
        let subscriber = tracing_subscriber::registry().with(layer).with(filter);
        tracing::subscriber::set_global_default(subscriber).expect("one subscriber per binary");
    });
}

/// Asserts the password is nowhere in the captured logs, and (`sessions`: a Limiter connected)
/// that capture works: every session start is logged.
fn assert_password_never_logged(sessions: bool) {
    let logs = String::from_utf8_lossy(&LOGS.lock().unwrap()).into_owned();
    assert!(
        !sessions || logs.contains("ZooKeeper session started"),
        "no logs captured: {logs}"
    );
    assert!(!logs.contains(PASSWORD), "the password was logged");
}

/// A digest file holding `user:password` (with the trailing newline editors add).
fn digest_file(dir: &Path, user: &str, password: &str) -> PathBuf {
    let path = dir.join(format!("{user}-{}.digest", password.len()));
    std::fs::write(&path, format!("{user}:{password}\n")).unwrap();
    path
}

fn url(zk: &ZkCluster, digest: Option<&Path>) -> String {
    match digest {
        Some(f) => format!("{}?digest_file={}", zk.url(CHROOT), f.display()),
        None => zk.url(CHROOT),
    }
}

/// A raw client with digest credentials `auth` (`None`: anonymous).
async fn raw(zk: &ZkCluster, auth: Option<&str>) -> zk::Client {
    let mut c = zk::Client::connector()
        .with_session_timeout(Duration::from_secs(4))
        .with_fail_eagerly();
    if let Some(a) = auth {
        c = c.with_auth("digest", a.as_bytes());
    }
    timeout(BOUND, c.connect(&zk.connect_string()))
        .await
        .expect("raw connect in time")
        .expect("raw connect")
}

/// The single entry node of semaphore `name` (full path).
async fn only_entry(client: &zk::Client, name: &str) -> String {
    let sem = format!("{CHROOT}/s/{name}");
    let children = client.list_children(&sem).await.unwrap();
    assert_eq!(children.len(), 1, "entries of {sem}: {children:?}");
    format!("{sem}/{}", children[0])
}

fn text_of(e: &Error) -> String {
    format!("{e} / {e:?}")
}

/// Asserts a Limiter call was refused for lack of rights, with the clear message.
fn assert_denied(r: Result<impl std::fmt::Debug, Error>, who: &str) {
    let e = r.expect_err("the store must refuse the write");
    let text = text_of(&e);
    assert!(
        text.contains("NoAuth") && text.contains(who) && text.contains("ACL"),
        "unclear error: {text}"
    );
    assert!(!text.contains(PASSWORD), "{text}");
}

/// Raw writes of someone else: each must be refused with `NoAuth`.
async fn assert_cannot_write(client: &zk::Client, entry: &str, name: &str) {
    let sem = format!("{CHROOT}/s/{name}");
    assert_eq!(client.delete(entry, None).await, Err(zk::Error::NoAuth));
    assert_eq!(
        client
            .set_data(&sem, br#"{"capacity":100,"floor":0}"#, None)
            .await,
        Err(zk::Error::NoAuth)
    );
    let fake = CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
    assert_eq!(
        client
            .create(&format!("{sem}/1-feed-0000009999"), b"", &fake)
            .await
            .map(|_| ()),
        Err(zk::Error::NoAuth)
    );
    assert_eq!(client.delete(&sem, None).await, Err(zk::Error::NoAuth));
    assert_eq!(
        client
            .set_acl(&sem, &zk::Acls::anyone_all(), None)
            .await
            .map(|_| ()),
        Err(zk::Error::NoAuth)
    );
}

use zk::CreateMode;

async fn holders(sem: &Semaphore) -> Vec<(String, u32)> {
    let st = sem.status().await.unwrap();
    st.holders
        .iter()
        .map(|h| (h.owner.clone(), h.permits))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_identities_can_read_but_not_change_entries_or_capacity() {
    capture_logs();
    let zk = ZkCluster::single();
    let dir = tempfile::tempdir().unwrap();
    let app = digest_file(dir.path(), "app", PASSWORD);
    let limiter = Limiter::builder(&url(&zk, Some(&app)))
        .owner("worker-1")
        .connect()
        .await
        .unwrap();
    let sem = limiter.semaphore("jobs", 2).await.unwrap();
    let permit = sem.acquire().await.unwrap();

    // The ACLs ZooKeeper stored: the creator's digest identity with every right, read for all.
    let anon = raw(&zk, None).await;
    let entry = only_entry(&anon, "jobs").await;
    for path in [
        CHROOT.to_string(),
        format!("{CHROOT}/s"),
        format!("{CHROOT}/s/jobs"),
        entry.clone(),
    ] {
        let (acls, _) = anon.get_acl(&path).await.unwrap();
        let mut seen: Vec<(String, String, String)> = acls
            .iter()
            .map(|a| {
                let id = a.id().split(':').next().unwrap_or("").to_string();
                (a.scheme().to_string(), id, a.permission().to_string())
            })
            .collect();
        seen.sort();
        assert_eq!(seen.len(), 2, "{path}: {acls:?}");
        assert_eq!(
            (seen[0].0.as_str(), seen[0].1.as_str()),
            ("digest", "app"),
            "{path}: {acls:?}"
        );
        assert_eq!(
            seen[0].2,
            zk::Permission::ALL.to_string(),
            "{path}: {acls:?}"
        );
        assert_eq!(
            (seen[1].0.as_str(), seen[1].1.as_str(), seen[1].2.clone()),
            ("world", "anyone", zk::Permission::READ.to_string()),
            "{path}: {acls:?}"
        );
        assert!(!format!("{acls:?}").contains(PASSWORD));
    }

    // Reads work for anyone: the raw queue and capacity.
    let (data, _) = anon.get_data(&format!("{CHROOT}/s/jobs")).await.unwrap();
    assert!(String::from_utf8_lossy(&data).contains("\"capacity\":2"));
    let (owner, _) = anon.get_data(&entry).await.unwrap();
    assert!(String::from_utf8_lossy(&owner).contains("worker-1"));

    // Nobody else writes: no credentials, another user, the same user with another password.
    assert_cannot_write(&anon, &entry, "jobs").await;
    let mallory = raw(&zk, Some("mallory:whatever")).await;
    assert_cannot_write(&mallory, &entry, "jobs").await;
    let guesser = raw(&zk, Some("app:wrong-password")).await;
    assert_cannot_write(&guesser, &entry, "jobs").await;

    // Nothing changed: the permit holds, the capacity is 2, nothing was added.
    assert!(!permit.is_lost());
    assert_eq!(only_entry(&anon, "jobs").await, entry);
    assert_eq!(sem.status().await.unwrap().capacity, 2);
    assert_eq!(holders(&sem).await, vec![("worker-1".to_string(), 1)]);

    // The same credentials are the same identity: a raw client with them may write.
    let same = raw(&zk, Some(&format!("app:{PASSWORD}"))).await;
    same.set_data(
        &format!("{CHROOT}/s/jobs"),
        br#"{"capacity":2,"floor":0}"#,
        None,
    )
    .await
    .unwrap();

    permit.release().await.unwrap();
    limiter.close().await.unwrap();
    assert_password_never_logged(true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_without_the_credentials_read_status_and_get_clear_errors_on_writes() {
    capture_logs();
    let zk = ZkCluster::single();
    let dir = tempfile::tempdir().unwrap();
    let app = digest_file(dir.path(), "app", PASSWORD);
    let owner = Limiter::builder(&url(&zk, Some(&app)))
        .owner("worker-1")
        .connect()
        .await
        .unwrap();
    let sem = owner.semaphore("jobs", 2).await.unwrap();
    let permit = sem.acquire().await.unwrap();

    // Without credentials: connects (the root exists), reads status, writes nothing.
    let reader = Limiter::connect(&url(&zk, None)).await.unwrap();
    let seen = reader.open_semaphore("jobs").await.unwrap();
    let st = seen.status().await.unwrap();
    assert_eq!(st.capacity, 2);
    assert_eq!(holders(&seen).await, vec![("worker-1".to_string(), 1)]);
    // Opening with the stored capacity works too (the semaphore is there).
    let seen = reader.semaphore("jobs", 2).await.unwrap();
    assert_denied(seen.try_acquire().await, "without credentials");
    assert_denied(reader.set_capacity("jobs", 10).await, "without credentials");
    assert_denied(reader.semaphore("new", 1).await, "without credentials");

    // The same user with a wrong password is another identity: same refusals, naming the user.
    let wrong = digest_file(dir.path(), "app", "not-the-password");
    let guesser = Limiter::connect(&url(&zk, Some(&wrong))).await.unwrap();
    let g = guesser.semaphore("jobs", 2).await.unwrap();
    assert_denied(g.try_acquire().await, "digest user \"app\"");
    assert_denied(g.set_capacity(5).await, "digest user \"app\"");

    // Nothing was half-written: still one holder, capacity 2, one entry node.
    assert_eq!(sem.status().await.unwrap().capacity, 2);
    assert_eq!(holders(&sem).await, vec![("worker-1".to_string(), 1)]);
    let anon = raw(&zk, None).await;
    only_entry(&anon, "jobs").await;
    assert!(!permit.is_lost());

    permit.release().await.unwrap();
    for l in [&owner, &reader, &guesser] {
        l.close().await.unwrap();
    }
    assert_password_never_logged(true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authenticated_limiters_acquire_wait_release_and_resize() {
    capture_logs();
    let zk = ZkCluster::single();
    let dir = tempfile::tempdir().unwrap();
    let app = digest_file(dir.path(), "app", PASSWORD);
    let a = Limiter::builder(&zk.url(CHROOT))
        .zk_digest_file(&app)
        .owner("a")
        .connect()
        .await
        .unwrap();
    let b = Limiter::builder(&url(&zk, Some(&app)))
        .owner("b")
        .connect()
        .await
        .unwrap();
    let sa = a.semaphore("jobs", 1).await.unwrap();
    let sb = b.semaphore("jobs", 1).await.unwrap();

    let held = sa.acquire().await.unwrap();
    assert!(matches!(sb.try_acquire().await, Err(Error::NoPermits)));
    // A waiter on another Limiter (same credentials) is granted once the holder releases.
    let waiter = tokio::spawn(async move { sb.acquire_timeout(BOUND).await.map(|p| (p, sb)) });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !waiter.is_finished(),
        "granted while the only permit is held"
    );
    held.release().await.unwrap();
    let (pb, sb) = timeout(BOUND, waiter).await.unwrap().unwrap().unwrap();
    assert_eq!(holders(&sa).await, vec![("b".to_string(), 1)]);

    // Raising the capacity lets a second holder in.
    a.set_capacity("jobs", 2).await.unwrap();
    let pa = timeout(BOUND, sa.acquire()).await.unwrap().unwrap();
    assert_eq!(sb.status().await.unwrap().capacity, 2);
    assert_eq!(holders(&sb).await.len(), 2);
    pa.release().await.unwrap();
    pb.release().await.unwrap();
    assert!(holders(&sa).await.is_empty());

    // Secrets: not in Debug output of the Limiter (backend config included) nor in the logs.
    for shown in [format!("{a:?}"), format!("{b:?}"), format!("{sa:?}")] {
        assert!(!shown.contains(PASSWORD), "{shown}");
        // The credentials are part of the output, redacted.
        assert!(
            shown.contains(r#"Digest { user: "app", password: "***" }"#),
            "{shown}"
        );
    }
    a.close().await.unwrap();
    b.close().await.unwrap();
    assert_password_never_logged(true);
}

/// The digest and user of the single entry node of `name` (its ACL's digest id).
async fn entry_acl_user(client: &zk::Client, name: &str) -> Vec<String> {
    let entry = only_entry(client, name).await;
    let (acls, _) = client.get_acl(&entry).await.unwrap();
    acls.iter()
        .map(|a| format!("{}:{}", a.scheme(), a.id().split(':').next().unwrap_or("")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_are_sent_again_after_a_reconnect_and_on_a_new_session() {
    capture_logs();
    let zk = ZkCluster::single();
    let proxy = FaultProxy::start(zk.client_addr(0));
    let dir = tempfile::tempdir().unwrap();
    let app = digest_file(dir.path(), "app", PASSWORD);
    // Short, so the partition below outlasts it quickly; 3 s leaves margin on a loaded machine.
    let ttl = Duration::from_secs(3);
    let url = format!(
        "zk://{}{CHROOT}?digest_file={}",
        proxy.connect_string(),
        app.display()
    );
    let limiter = Limiter::builder(&url)
        .session_ttl(ttl)
        .connect()
        .await
        .unwrap();
    let sem = limiter.semaphore("jobs", 2).await.unwrap();
    let held = sem.acquire().await.unwrap();

    // Every connection is cut: the client reconnects on the same session. Adding an entry needs
    // the creator's identity, so it works only if the credentials went with the new connection.
    proxy.reset();
    tokio::time::sleep(Duration::from_millis(200)).await;
    proxy.pass();
    let second = timeout(BOUND, sem.acquire()).await.unwrap().unwrap();
    assert!(proxy.reset_connections() >= 1, "the connection was not cut");
    assert!(!held.is_lost(), "a reset lost the session");
    second.release().await.unwrap();

    // Cut for longer than the session: it is lost, and the next call starts a new session,
    // which must authenticate again to add an entry.
    proxy.blackhole();
    timeout(ttl * 3, held.lost())
        .await
        .expect("the session is given up within its timeout");
    proxy.pass();
    drop(held);
    let third = timeout(BOUND, sem.acquire()).await.unwrap().unwrap();
    assert!(!third.is_lost());
    let anon = raw(&zk, None).await;
    // The old session's node may linger until the server expires it; wait for it to go, then
    // the one entry left is the new session's, created as "app".
    let mut acl = Vec::new();
    for _ in 0..100 {
        let n = anon
            .list_children(&format!("{CHROOT}/s/jobs"))
            .await
            .unwrap()
            .len();
        if n == 1 {
            acl = entry_acl_user(&anon, "jobs").await;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    acl.sort();
    assert_eq!(acl, ["digest:app", "world:anyone"]);
    third.release().await.unwrap();
    limiter.close().await.unwrap();
    assert_password_never_logged(true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_enforces_authentication_refuses_with_a_clear_error() {
    capture_logs();
    let dir = tempfile::tempdir().unwrap();
    let app = digest_file(dir.path(), "app", PASSWORD);

    // The server requires digest authentication: the authenticated Limiter works, one without
    // credentials is refused by the server, with an error saying so.
    let zk = ZkCluster::builder()
        .config_line("enforce.auth.enabled=true")
        .config_line("enforce.auth.schemes=digest")
        .start();
    let limiter = Limiter::connect(&url(&zk, Some(&app))).await.unwrap();
    let sem = limiter.semaphore("jobs", 1).await.unwrap();
    sem.acquire().await.unwrap().release().await.unwrap();
    let e = timeout(BOUND, Limiter::connect(&url(&zk, None)))
        .await
        .unwrap()
        .expect_err("an anonymous client must be refused");
    assert!(
        text_of(&e).contains("requires authentication"),
        "unclear error: {}",
        text_of(&e)
    );
    limiter.close().await.unwrap();
    drop(zk);

    // The server takes only SASL: it rejects the digest credentials.
    let zk = ZkCluster::builder()
        .config_line("enforce.auth.enabled=true")
        .config_line("enforce.auth.schemes=sasl")
        .config_line("authProvider.1=org.apache.zookeeper.server.auth.SASLAuthenticationProvider")
        .start();
    let e = timeout(BOUND, Limiter::connect(&url(&zk, Some(&app))))
        .await
        .unwrap()
        .expect_err("digest credentials must be rejected");
    let text = text_of(&e);
    assert!(
        text.contains(r#"ZooKeeper rejected the digest credentials for user "app""#),
        "unclear error: {text}"
    );
    assert!(!text.contains(PASSWORD), "{text}");
    assert_password_never_logged(true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn existing_open_nodes_keep_their_acl_and_are_reported() {
    capture_logs();
    let zk = ZkCluster::single();
    let dir = tempfile::tempdir().unwrap();
    let app = digest_file(dir.path(), "app", PASSWORD);
    // Made open by an earlier run without credentials.
    let open = Limiter::connect(&zk.url("/legacy")).await.unwrap();
    open.semaphore("jobs", 1).await.unwrap();
    open.close().await.unwrap();

    let limiter = Limiter::connect(&format!(
        "{}?digest_file={}",
        zk.url("/legacy"),
        app.display()
    ))
    .await
    .unwrap();
    let sem = limiter.semaphore("jobs", 1).await.unwrap();
    let p = sem.acquire().await.unwrap();
    // Not changed behind the user's back: the semaphore node is still open to everyone...
    let anon = raw(&zk, None).await;
    let (acls, _) = anon.get_acl("/legacy/s/jobs").await.unwrap();
    assert_eq!(&acls[..], &zk::Acls::anyone_all()[..]);
    // ...and reported, like the open semaphores' node: ZooKeeper checks the parent's ACL for
    // deleting a child, so the new entry's own ACL (creator-only) does not keep it from being
    // deleted under an open semaphore.
    let entry = format!(
        "/legacy/s/jobs/{}",
        anon.list_children("/legacy/s/jobs").await.unwrap()[0]
    );
    let (acls, _) = anon.get_acl(&entry).await.unwrap();
    assert_eq!(acls.len(), 2, "{acls:?}");
    let logs = String::from_utf8_lossy(&LOGS.lock().unwrap()).into_owned();
    // The field as the fmt layer prints a string: `node="/legacy/s"`.
    for node in [r#""/legacy/s""#, r#""/legacy/s/jobs""#] {
        assert!(
            logs.lines()
                .any(|l| l.contains("WARN") && l.contains(node) && l.contains("lets anyone write")),
            "no warning about the open {node}"
        );
    }
    p.release().await.unwrap();
    limiter.close().await.unwrap();
    assert_password_never_logged(true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_digest_settings_are_refused_before_connecting() {
    capture_logs();
    let dir = tempfile::tempdir().unwrap();
    // No server behind this port: each setting is refused before any connection.
    let base = "zk://127.0.0.1:1/sec";
    let missing = dir.path().join("missing.digest");
    let no_colon = dir.path().join("no-colon.digest");
    std::fs::write(&no_colon, format!("{PASSWORD}\n")).unwrap();
    let cases = [
        (
            format!("{base}?digest_file={}", missing.display()),
            Some(missing.display().to_string()),
        ),
        (
            format!("{base}?digest_file={}", no_colon.display()),
            Some(no_colon.display().to_string()),
        ),
        (format!("{base}?acl=creator"), None),
        (format!("{base}?acl=everyone"), None),
    ];
    for (url, names) in cases {
        let e = Limiter::connect(&url).await.expect_err(&url);
        let text = text_of(&e);
        assert!(matches!(e, Error::InvalidArgument(_)), "{url}: {text}");
        if let Some(file) = names {
            assert!(text.contains(&file), "{url}: {text}");
        }
        assert!(!text.contains(PASSWORD), "{text}");
    }
    assert_password_never_logged(false);
}
