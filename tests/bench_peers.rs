//! The rate benchmark's script peers (benches/peers/: npm rate-limiter-flexible and Python
//! `limits` on etcd), run as the bench runs them, as worker processes against a real etcd: the
//! report line has every field and respects the quota, the versions are the pinned ones, and a
//! bad setup is refused with its field named. (The redis-cell worker is the bench binary
//! itself; the bench's quick mode runs it.) `scripts/test --install-deps` installs both peers.

use crate::support;

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use support::EtcdCluster;

const INSTALL_HINT: &str = "run scripts/test --install-deps (with the same CARGO_TARGET_DIR)";
const FIELDS: [&str; 10] = [
    "algorithm",
    "decisions",
    "admitted",
    "errors",
    "elapsed_s",
    "cpu_s",
    "latencies_us",
    "admitted_at_us",
    "store_requests",
    "local_denials",
];

#[derive(Clone, Copy, Debug)]
enum Peer {
    Rlf,
    Limits,
}
const PEERS: [Peer; 2] = [Peer::Rlf, Peer::Limits];

/// `var`, else `under` in the build dir (this test is `<target>/<profile>/deps/…`), as the
/// bench looks for them; missing → a failure with the install hint.
fn installed(var: &str, under: &str) -> PathBuf {
    let path = std::env::var_os(var)
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let exe = std::env::current_exe().unwrap();
            exe.ancestors().nth(3).unwrap().join(under)
        });
    assert!(
        path.exists(),
        "{} not found: {INSTALL_HINT}, or set {var}",
        path.display()
    );
    path
}

impl Peer {
    fn command(self) -> Command {
        let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/peers");
        match self {
            Peer::Rlf => {
                let dir = installed("CLUSTERLIMIT_BENCH_NODE_DIR", "bench-node");
                let mut cmd = Command::new("node");
                cmd.env("NODE_PATH", dir.join("node_modules"))
                    .arg(scripts.join("rlf_etcd.js"));
                cmd
            }
            Peer::Limits => {
                let python = installed("CLUSTERLIMIT_LIMITS_PYTHON", "limits-venv/bin/python");
                let mut cmd = Command::new(python);
                cmd.env("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "python")
                    .arg(scripts.join("limits_etcd.py"));
                cmd
            }
        }
    }

    fn setup(self, etcd: &EtcdCluster, key: &str) -> Value {
        let endpoint = &etcd.endpoints()[0];
        let (contender, target) = match self {
            Peer::Rlf => ("rlf-etcd", format!("http://{endpoint}")),
            Peer::Limits => ("limits-etcd", format!("etcd://{endpoint}")),
        };
        json!({
            "contender": contender, "mode": "uncontended", "target": target,
            "limit_name": "bench-peers", "key": key, "limit": 5, "period_ms": 60_000,
            "burst": 5, "algorithm": "fixed-window", "callers": 1, "duration_ms": 0,
            "count": 8, "start_at_unix_us": 0,
        })
    }

    fn run(self, args: &[&str]) -> Output {
        self.command().args(args).output().unwrap()
    }

    /// Runs `setup`; the one report line, parsed, after checking the exit and every field.
    fn report(self, setup: &Value) -> Value {
        let out = self.run(&[&setup.to_string()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{self:?} failed: {stderr}");
        let stdout = String::from_utf8(out.stdout).unwrap();
        assert_eq!(stdout.lines().count(), 1, "{self:?} printed {stdout}");
        let report: Value = serde_json::from_str(&stdout).unwrap();
        let mut keys: Vec<&str> = report
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.as_str())
            .collect();
        keys.sort_unstable();
        let mut want = FIELDS.to_vec();
        want.sort_unstable();
        assert_eq!(keys, want, "{self:?}: {report}");
        report
    }
}

fn count(report: &Value, field: &str) -> u64 {
    report[field].as_u64().unwrap()
}

fn len(report: &Value, field: &str) -> usize {
    report[field].as_array().unwrap().len()
}

#[test]
fn uncontended_checks_count_exactly_and_report_every_latency() {
    let etcd = EtcdCluster::single();
    for peer in PEERS {
        // 8 checks of a quota of 5 a minute: 5 admitted, 3 denied, nothing failed.
        let r = peer.report(&peer.setup(&etcd, &format!("uncontended-{peer:?}")));
        let mut lat: Vec<u64> = r["latencies_us"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        lat.sort_unstable();
        println!(
            "{peer:?} uncontended: p50 {} µs, max {} µs",
            lat[lat.len() / 2],
            lat[lat.len() - 1]
        );
        assert_eq!(r["algorithm"], "fixed-window");
        assert_eq!(count(&r, "decisions"), 8, "{peer:?}: {r}");
        assert_eq!(count(&r, "admitted"), 5, "{peer:?}: {r}");
        assert_eq!(count(&r, "errors"), 0, "{peer:?}: {r}");
        assert_eq!(len(&r, "latencies_us"), 8);
        assert_eq!(len(&r, "admitted_at_us"), 5);
        for pair in r["admitted_at_us"].as_array().unwrap() {
            let (sent, answered) = (pair[0].as_u64().unwrap(), pair[1].as_u64().unwrap());
            assert!(sent <= answered && sent > 1_600_000_000_000_000, "{pair}");
        }
        assert!(r["store_requests"].is_null() && r["local_denials"].is_null());
    }
}

#[test]
fn hot_callers_never_admit_more_than_the_quota() {
    let etcd = EtcdCluster::single();
    for peer in PEERS {
        let mut setup = peer.setup(&etcd, &format!("hot-{peer:?}"));
        setup["mode"] = json!("hot");
        setup["callers"] = json!(4);
        setup["duration_ms"] = json!(500);
        setup["start_at_unix_us"] = json!(0);
        let r = peer.report(&setup);
        let (decisions, admitted) = (count(&r, "decisions"), count(&r, "admitted"));
        println!(
            "{peer:?} hot, 4 callers, 0.5 s: {decisions} decisions, {admitted} admitted, {} errors",
            count(&r, "errors")
        );
        // Conflicting callers may fail checks (the peers' own retries run out): counted, not
        // fatal; a run with no decision at all is a failed worker.
        assert!(decisions > 0 && admitted <= 5, "{peer:?}: {r}");
        assert_eq!(len(&r, "latencies_us") as u64, decisions.min(20_000));
        assert_eq!(len(&r, "admitted_at_us") as u64, admitted);
    }
}

#[test]
fn versions_are_the_pinned_ones() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/peers");
    let package: Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("package.json")).unwrap()).unwrap();
    let requirements = std::fs::read_to_string(root.join("requirements.txt")).unwrap();
    let pin = |name: &str| {
        let line = requirements
            .lines()
            .find(|l| l.starts_with(&format!("{name}==")))
            .unwrap();
        line.split("==").nth(1).unwrap().to_string()
    };
    let wants = [
        (
            Peer::Rlf,
            vec![
                format!(
                    "rate-limiter-flexible {}",
                    package["dependencies"]["rate-limiter-flexible"]
                        .as_str()
                        .unwrap()
                ),
                format!(
                    "etcd3 {}",
                    package["dependencies"]["etcd3"].as_str().unwrap()
                ),
            ],
        ),
        (
            Peer::Limits,
            vec![
                format!("limits {}", pin("limits")),
                format!("etcd3 {}", pin("etcd3")),
            ],
        ),
    ];
    for (peer, want) in wants {
        let out = peer.run(&["--versions"]);
        assert!(out.status.success(), "{peer:?}: {out:?}");
        let line = String::from_utf8(out.stdout).unwrap();
        println!("{peer:?}: {}", line.trim());
        for w in want {
            assert!(line.contains(&w), "{peer:?} says {line:?}, want {w:?}");
        }
    }
}

#[test]
fn bad_setups_are_refused_naming_the_field() {
    // No server is needed: every one fails before connecting.
    let base = json!({
        "contender": "x", "mode": "uncontended", "target": "http://127.0.0.1:1",
        "limit_name": "n", "key": "k", "limit": 5, "period_ms": 1000, "burst": 5,
        "algorithm": "fixed-window", "callers": 1, "duration_ms": 0, "count": 1,
        "start_at_unix_us": 0,
    });
    let with = |field: &str, value: Value| {
        let mut setup = base.clone();
        match value {
            Value::Null => {
                setup.as_object_mut().unwrap().remove(field);
            }
            v => setup[field] = v,
        }
        setup.to_string()
    };
    let cases = [
        ("{not json".to_string(), "bad worker setup"),
        (with("limit", json!(0)), "limit"),
        (with("period_ms", json!("1000")), "period_ms"),
        (with("target", Value::Null), "target"),
        (with("key", json!("")), "key"),
        (with("mode", json!("sideways")), "mode"),
        (with("callers", json!(0)), "callers"),
        (with("count", json!(-1)), "count"),
        (with("start_at_unix_us", json!(1.5)), "start_at_unix_us"),
    ];
    for peer in PEERS {
        for (setup, field) in &cases {
            let out = peer.run(&[setup]);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{peer:?} {setup}: {stderr}");
            assert!(stderr.contains(field), "{peer:?} {setup}: {stderr}");
            assert!(out.stdout.is_empty(), "{peer:?} {setup}");
        }
        // No argument, or two: usage, exit 64.
        for args in [&[][..], &["{}", "{}"][..]] {
            let out = peer.run(args);
            assert_eq!(out.status.code(), Some(64), "{peer:?} {args:?}: {out:?}");
            assert!(String::from_utf8_lossy(&out.stderr).contains("usage"));
        }
    }
    // limits counts in whole seconds: a sub-second period is refused, not rounded.
    let out = Peer::Limits.run(&[&with("period_ms", json!(1500))]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("period_ms must be whole seconds"));
}
