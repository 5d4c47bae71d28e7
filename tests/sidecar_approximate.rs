//! Hot keys decided locally, approximately, through the real `clusterlimit serve` (issue 43,
//! item 3): the `approximate_hot_keys` switch from the flag and the config file
//! (`--check-config` shows it and says it may over-admit; a value that is not a boolean, or
//! both hot-key switches on, exits 64 naming what to change); two sidecars on one real etcd
//! sharing a hot key hammered over HTTP: the admitted total within [0.9, 1.05] × what the
//! quota allows over the run, most checks decided locally, and a small fraction of the store
//! writes per admitted check that the same sidecars write with the switch off; and the same
//! bound through the Envoy RLS (gRPC).

use crate::binary;
use crate::sidecar_hot_keys::{admitted_of, exact_flags, hammer_http, hot_quota, put_hot_quota};
use crate::sidecar_hot_keys::{two_rls_sidecars, CLIENTS};
use crate::support;

use binary::{cmd, http_client, metrics, output, sample, Sidecar};
use clusterlimit::testing::rate_history::{gcra_bound, gcra_excess, Admitted};
use reqwest::Client;
use std::time::Duration;
use support::EtcdCluster;

/// How long the clients check in each run.
const RUN: Duration = Duration::from_secs(2);

/// A sidecar's approximate-mode counters and rate-limit writes (etcd transactions).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Counters {
    admitted_locally: f64,
    reports: f64,
    txns: f64,
}

impl Counters {
    /// The counters of the sidecar at `base` now.
    async fn of(c: &Client, base: &str) -> Counters {
        let text = metrics(c, base).await;
        let get = |name: &str| {
            sample(&text, &format!("{name} "))
                .unwrap_or_else(|| panic!("{name} missing from {base}/metrics:\n{text}"))
        };
        Counters {
            admitted_locally: get("clusterlimit_rate_approximate_admitted_total"),
            reports: get("clusterlimit_rate_approximate_reports_total"),
            txns: get("clusterlimit_store_requests_total{kind=\"txn\"}"),
        }
    }

    /// What grew from `before` to `self`.
    fn since(&self, before: &Counters) -> Counters {
        Counters {
            admitted_locally: self.admitted_locally - before.admitted_locally,
            reports: self.reports - before.reports,
            txns: self.txns - before.txns,
        }
    }
}

/// What a run of two sidecars on the hot key came to.
struct Figures {
    admitted: u64,
    denied: u64,
    /// What the quota allows over the run (burst + rate × the admitted checks' span).
    allowed: f64,
    /// Per sidecar: its counters' growth over the run.
    growth: Vec<Counters>,
    /// Rate-limit writes of both sidecars per admitted check.
    writes_per_admitted: f64,
}

/// Two sidecars on `url` (the approximate switch on or off) share the limit `name`, hammered
/// over HTTP for [`RUN`]; the figures printed.
async fn two_sidecars(url: &str, name: &'static str, approximate: bool) -> Figures {
    let mut flags = exact_flags(url, false);
    if approximate {
        flags.push("--approximate-hot-keys");
    }
    let (a, b) = tokio::join!(Sidecar::start(&flags), Sidecar::start(&flags));
    let c = http_client();
    put_hot_quota(&c, &a.url, name).await;
    let before = [
        Counters::of(&c, &a.url).await,
        Counters::of(&c, &b.url).await,
    ];
    let seen = hammer_http(&[a.url.clone(), b.url.clone()], name, RUN).await;
    let after = [
        Counters::of(&c, &a.url).await,
        Counters::of(&c, &b.url).await,
    ];
    for s in seen.iter().flatten() {
        assert_eq!(s.failed, None, "approximate {approximate}: a check failed");
    }
    let events = admitted_of(&seen);
    let span = span(&events);
    let growth: Vec<Counters> = after.iter().zip(&before).map(|(a, b)| a.since(b)).collect();
    let writes: f64 = growth.iter().map(|g| g.txns).sum();
    let figures = Figures {
        admitted: events.len() as u64,
        denied: seen.iter().flatten().map(|s| s.denied).sum(),
        allowed: gcra_bound(&hot_quota(), span),
        writes_per_admitted: writes / events.len().max(1) as f64,
        growth,
    };
    let worst = gcra_excess(&events, &hot_quota());
    println!(
        "[approximate {approximate}] 2 sidecars for {RUN:?}: {} admitted ({:.3} × the {:.0} the \
         quota allows over {:.2} s), {} denied; {writes} store writes, {:.4} per admitted check; \
         worst interval over the quota by {:.0} ({} admitted in {:.3} s)",
        figures.admitted,
        figures.admitted as f64 / figures.allowed,
        figures.allowed,
        span as f64 / 1e9,
        figures.denied,
        figures.writes_per_admitted,
        worst.over,
        worst.admitted,
        (worst.to - worst.from) as f64 / 1e9,
    );
    for (side, g) in ["a", "b"].iter().zip(&figures.growth) {
        println!("[approximate {approximate}] sidecar {side}: {g:?}");
    }
    figures
}

/// The switch on: both sidecars decide the hot key locally and report it, the total admitted
/// stays within [0.9, 1.05] × what the quota allows over the run
/// ([`assert_within_the_bound`]), and a store write covers many times more admitted checks
/// than with the switch off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sidecars_decide_a_hot_key_locally_within_five_percent() {
    let cluster = EtcdCluster::single();
    let url = cluster.url("approximate");
    let on = two_sidecars(&url, "approx-on", true).await;
    let off = two_sidecars(&url, "approx-off", false).await;
    assert_within_the_bound(on.admitted, on.denied, on.allowed);
    for (side, g) in ["a", "b"].iter().zip(&on.growth) {
        assert!(
            g.admitted_locally > 0.0 && g.reports > 0.0,
            "sidecar {side} decided nothing locally: {g:?}"
        );
    }
    let locally: f64 = on.growth.iter().map(|g| g.admitted_locally).sum();
    assert!(
        locally >= 0.8 * on.admitted as f64,
        "only {locally} of {} admitted checks were decided locally",
        on.admitted
    );
    for (side, g) in ["a", "b"].iter().zip(&off.growth) {
        assert_eq!(
            (g.admitted_locally, g.reports),
            (0.0, 0.0),
            "sidecar {side} decided locally with the switch off"
        );
    }
    assert!(
        on.writes_per_admitted * 4.0 < off.writes_per_admitted,
        "approximate: {:.4} writes per admitted check, per check: {:.4}",
        on.writes_per_admitted,
        off.writes_per_admitted
    );
}

/// The RLS's domain: the key `k` at the hot quota (GCRA, 2,000 a second, burst 1,000).
const RLS_DOMAIN: &str = "domain: hot\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, \
     requests_per_unit: 2000}\n    algorithm: gcra\n    burst: 1000\n";

/// The RLS of two sidecars with the switch on, one hot descriptor: both decide it locally,
/// and the total admitted stays within the same bound as over HTTP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rls_decides_a_hot_descriptor_locally() {
    let cluster = EtcdCluster::single();
    let url = cluster.url("approximate-rls");
    let (seen, [a, b]) = two_rls_sidecars(&url, RLS_DOMAIN, "--approximate-hot-keys").await;
    let events = admitted_of(std::slice::from_ref(&seen));
    let denied: u64 = seen.iter().map(|s| s.denied).sum();
    let admitted = events.len() as u64;
    let allowed = gcra_bound(&hot_quota(), span(&events));
    let c = http_client();
    let counts = [
        Counters::of(&c, &a.1.http).await,
        Counters::of(&c, &b.1.http).await,
    ];
    println!(
        "[rls] {CLIENTS} clients on 2 sidecars for {RUN:?}: {admitted} admitted ({:.3} × the \
         {allowed:.0} the quota allows), {denied} denied; {counts:?}",
        admitted as f64 / allowed
    );
    assert!(
        admitted as f64 <= 1.05 * allowed,
        "admitted {admitted} of {allowed:.0} allowed"
    );
    assert_within_the_bound(admitted, denied, allowed);
    for (side, g) in ["a", "b"].iter().zip(&counts) {
        assert!(
            g.admitted_locally > 0.0 && g.reports > 0.0,
            "sidecar {side}'s RLS decided nothing locally: {g:?}"
        );
    }
}

/// At most 1.05 × what the quota `allowed` over the run was admitted; and the quota was used:
/// at least 0.9 × of it when the clients asked half as much again, else at least 0.8 × what
/// they asked (or of the quota, if less). Asking about the quota's rate, they are denied some while the sidecars' shares
/// follow their demands (0.89–0.95 × of what was asked measured), so the 0.9 bound is held
/// to demand well above the quota only.
fn assert_within_the_bound(admitted: u64, denied: u64, allowed: f64) {
    let (admitted, asked) = (admitted as f64, (admitted + denied) as f64);
    assert!(
        admitted <= 1.05 * allowed,
        "admitted {admitted} of {allowed:.0} allowed: over by more than 5%"
    );
    let due = if asked >= 1.5 * allowed {
        0.9 * allowed
    } else {
        0.8 * asked.min(allowed)
    };
    assert!(
        admitted >= due,
        "admitted {admitted} of {allowed:.0} allowed ({asked} asked): less than {due:.0}"
    );
}

/// From the first admitted check's start to the last one's end, in ns.
fn span(events: &[Admitted]) -> u64 {
    let first = events.iter().map(|e| e.start).min().unwrap_or(0);
    events.iter().map(|e| e.end).max().unwrap_or(first) - first
}

/// `serve --check-config ARGS`, bounded.
async fn check_config(args: &[&str]) -> binary::Out {
    let mut all = vec!["serve", "--check-config"];
    all.extend_from_slice(args);
    output(cmd(&all), Duration::from_secs(20)).await
}

/// `serve ARGS` on a free port, bounded: for settings refused before anything is served.
async fn serve(args: &[&str]) -> binary::Out {
    let mut all = vec![
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--store",
        "memory://approx",
    ];
    all.extend_from_slice(args);
    output(cmd(&all), Duration::from_secs(20)).await
}

/// The switch from the config file and the flag, as `--check-config` shows it (saying that
/// it may over-admit); a value that is not a boolean, and both hot-key switches on, are
/// refused with exit 64 by `--check-config` and by `serve` itself, naming what to change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_approximate_switch_is_read_and_never_joins_leases() {
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let on = file("on.toml", "approximate_hot_keys = true\n");
    let off = file("off.toml", "approximate_hot_keys = false\n");
    let bad = file("bad.toml", "approximate_hot_keys = \"yes\"\n");
    let both = file(
        "both.toml",
        "approximate_hot_keys = true\nhot_key_leases = true\n",
    );
    let leases = file("leases.toml", "hot_key_leases = true\n");
    for (args, want) in [
        (vec![], "rate_approx  off"),
        (vec!["--config", off.as_str()], "rate_approx  off"),
        (vec!["--config", on.as_str()], "rate_approx  on"),
        (vec!["--approximate-hot-keys"], "rate_approx  on"),
        // The flag turns it on over a file's `false`.
        (
            vec!["--config", off.as_str(), "--approximate-hot-keys"],
            "rate_approx  on",
        ),
    ] {
        let out = check_config(&args).await;
        assert_eq!(out.code, Some(0), "{args:?}: {}", out.stderr);
        let line = out
            .stdout
            .lines()
            .find(|l| l.starts_with("rate_approx"))
            .unwrap_or_else(|| panic!("{args:?}: no rate_approx line in\n{}", out.stdout));
        assert!(line.starts_with(want), "{args:?}: {want:?} not in {line:?}");
        assert!(
            line.contains("over-admit") && line.contains("hot_key_leases"),
            "{args:?}: the line says nothing of over-admission or the exact switch: {line:?}"
        );
    }
    let out = check_config(&["--config", bad.as_str()]).await;
    assert_eq!(out.code, Some(64), "{}", out.stderr);
    assert!(
        out.stderr.contains("approximate_hot_keys") && out.stderr.contains("bad.toml"),
        "the setting and the file not named:\n{}",
        out.stderr
    );
    let both_on = [
        vec!["--approximate-hot-keys", "--hot-key-leases"],
        vec!["--config", both.as_str()],
        vec!["--config", leases.as_str(), "--approximate-hot-keys"],
    ];
    for args in &both_on {
        for out in [check_config(args).await, serve(args).await] {
            assert_eq!(out.code, Some(64), "{args:?}: {}", out.stderr);
            for words in [
                "hot_key_leases",
                "approximate_hot_keys",
                "turn one of them off",
            ] {
                assert!(
                    out.stderr.contains(words),
                    "{args:?}: {words:?} not in\n{}",
                    out.stderr
                );
            }
            assert_eq!(out.stdout, "", "{args:?}: nothing served or shown");
        }
    }
}
