//! Logs for humans (issue 40): when a store goes away under a Limiter, the log lines say in
//! words what failed, against which address, and what happens next; no Rust type names or
//! debug dumps (`Error(…)`, `Some(…)`, `Path::To`, `Struct { … }`).
//!
//! A real etcd and a real ZooKeeper are killed under a Limiter holding a permit; the library's
//! log lines (captured with `tracing-subscriber` into a buffer) are read until the permit is
//! reported lost.

mod support;

use clusterlimit::Limiter;
use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use support::zookeeper::ZkCluster;
use support::EtcdCluster;

static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();

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

/// Installs the capturing subscriber once per test binary: the library's lines at info and
/// above (what an operator sees by default), without targets (module paths are not messages).
fn logs() -> Arc<Mutex<Vec<u8>>> {
    LOGS.get_or_init(|| {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let writer = LogBuffer(buffer.clone());
        let _ = tracing_subscriber::fmt()
            .with_env_filter("clusterlimit=info")
            .with_ansi(false)
            .with_target(false)
            .with_writer(move || writer.clone())
            .try_init();
        buffer
    })
    .clone()
}

/// The captured lines that mention `address`.
fn lines_about(address: &str) -> Vec<String> {
    let bytes = logs().lock().map(|l| l.clone()).unwrap_or_default();
    String::from_utf8_lossy(&bytes)
        .lines()
        .filter(|l| l.contains(address))
        .map(str::to_string)
        .collect()
}

/// Every captured line reads as words: no debug dump of a Rust value.
fn assert_no_debug_dumps(lines: &[String]) {
    for line in lines {
        for dump in ["Error(", "Some(", "None", "::", "{ ", " }", "Ok(", "Err("] {
            assert!(
                !line.contains(dump),
                "a log line shows a Rust debug dump ({dump:?}):\n{line}"
            );
        }
    }
}

/// Holds a permit on `url`, runs `kill`, and returns the lines naming `address` once the
/// permit is reported lost.
async fn lines_after_store_dies(url: &str, address: &str, kill: impl FnOnce()) -> Vec<String> {
    logs();
    let limiter = Limiter::builder(url)
        .session_ttl(Duration::from_secs(2))
        .request_timeout(Duration::from_secs(1))
        .connect()
        .await
        .expect("connect");
    let permit = limiter
        .semaphore("jobs", 1)
        .await
        .expect("semaphore")
        .acquire()
        .await
        .expect("acquire");
    kill();
    tokio::time::timeout(Duration::from_secs(30), permit.lost())
        .await
        .expect("the permit is reported lost within 30 s of the store's death");
    // The lines about the loss are written as it is noticed; give the other tasks a moment.
    tokio::time::sleep(Duration::from_millis(500)).await;
    drop(permit);
    drop(limiter);
    let lines = lines_about(address);
    assert!(
        !lines.is_empty(),
        "no log line names the store's address {address}; all lines:\n{}",
        String::from_utf8_lossy(&logs().lock().map(|l| l.clone()).unwrap_or_default())
    );
    lines
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_going_away_is_told_in_words_with_its_address() {
    let mut etcd = EtcdCluster::single();
    let address = etcd.endpoints()[0].clone();
    let url = etcd.url("log-messages");
    let lines = lines_after_store_dies(&url, &address, || etcd.kill(0)).await;
    let text = lines.join("\n");
    eprintln!("--- lines about {address}:\n{text}");
    // The keepalive's first failure: what failed, where, why, and what happens next.
    assert!(
        lines.iter().any(|l| l.contains("WARN")
            && l.contains(&format!(
                "etcd lease keepalive to http://{address} failed: "
            ))
            && l.contains("retrying")),
        "no warning names the failed keepalive, its address and what happens next:\n{text}"
    );
    assert!(
        lines.iter().any(|l| l.contains("WARN")
            && l.contains(&format!("etcd at http://{address} "))
            && l.contains("permits of this session are lost")),
        "no warning says the session at {address} is lost and what it costs:\n{text}"
    );
    assert_no_debug_dumps(&lines);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_going_away_is_told_in_words_with_its_address() {
    let mut zk = ZkCluster::single();
    let address = zk.connect_string();
    let url = zk.url("/log-messages");
    let lines = lines_after_store_dies(&url, &address, || zk.kill(0)).await;
    let text = lines.join("\n");
    eprintln!("--- lines about {address}:\n{text}");
    assert!(
        lines.iter().any(|l| l.contains("WARN")
            && l.contains(&format!("ZooKeeper session at {address}"))
            && l.contains("its permits are lost")),
        "no warning says the ZooKeeper session at {address} ended and what it costs:\n{text}"
    );
    assert_no_debug_dumps(&lines);
}
