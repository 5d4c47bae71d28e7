//! `clusterlimit rate …` as real processes against real etcd and ZooKeeper.

use crate::binary;
use crate::support;

use binary::{cmd, output, Out};
use clusterlimit::{Limiter, Quota};
use std::time::{Duration, Instant};
use support::{EtcdCluster, ZkCluster};

const LIMIT: Duration = Duration::from_secs(30);

async fn rate(url: &str, args: &[&str]) -> Out {
    let mut all = vec!["rate", args[0], "--store", url];
    all.extend_from_slice(&args[1..]);
    output(cmd(&all), LIMIT).await
}

/// `rate`, asserting exit 0 (stderr shown when not).
async fn rate_ok(url: &str, args: &[&str]) -> Out {
    let out = rate(url, args).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    out
}

fn assert_stdout_has(out: &Out, text: &str) {
    assert!(out.stdout.contains(text), "{}", out.stdout);
}

/// The names `rate status --json` lists, in its order.
fn listed_names(out: &Out) -> Vec<serde_json::Value> {
    json(out)
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["name"].clone())
        .collect()
}

/// `set-quota login`: 5 per minute, fixed window, a 10 minute ban.
const SET_LOGIN: &[&str] = &[
    "set-quota",
    "login",
    "--limit",
    "5",
    "--per",
    "1m",
    "--algorithm",
    "fixed_window",
    "--ban",
    "10m",
];

/// `set-quota q` with a valid limit and period, then `extra`.
fn set_q<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    [
        &["set-quota", "q", "--limit", "5", "--per", "1m"][..],
        extra,
    ]
    .concat()
}

/// The quota of limit `name` as stored, read with the library.
async fn stored_quota(url: &str, name: &str) -> clusterlimit::Quota {
    Limiter::connect(url)
        .await
        .unwrap()
        .open_rate_limit(name)
        .await
        .unwrap()
        .quota()
}

fn json(out: &Out) -> serde_json::Value {
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", out.stdout))
}

/// Every subcommand and exit code on one store.
async fn every_subcommand(url: &str) {
    // An absent limit without a quota: exit 1, as `status NAME`.
    for args in [
        &["check", "nightly", "host-a"][..],
        &["wait", "nightly", "host-a", "--timeout", "1s"],
        &["status", "nightly"],
        &["status", "nightly", "host-a"],
        &["reset", "nightly", "host-a"],
    ] {
        let out = rate(url, args).await;
        assert_eq!(out.code, Some(1), "{args:?}: {}", out.stderr);
        // The hint fits the command: check and wait take a quota, status and reset do not.
        let hint = match args[0] {
            "check" | "wait" => "give --limit and --per to create it",
            _ => "create it with `clusterlimit rate set-quota nightly --limit N --per DUR`",
        };
        assert!(out.stderr.contains(hint), "{args:?}: {}", out.stderr);
    }

    // check creates it given a quota; then 2 admitted, the third denied (75) with when to retry.
    let odd = "host/a b ü";
    let out = rate_ok(
        url,
        &["check", "nightly", odd, "--limit", "2", "--per", "1h"],
    )
    .await;
    assert_stdout_has(&out, "admitted");
    assert_stdout_has(&out, "1 of 2 left");
    let out = rate_ok(url, &["check", "nightly", odd, "--json"]).await;
    let d = json(&out);
    assert_eq!(
        (&d["allowed"], &d["remaining"], &d["key"]),
        (&true.into(), &0.into(), &odd.into())
    );
    let out = rate(url, &["check", "nightly", odd]).await;
    assert_eq!(out.code, Some(75), "{}", out.stderr);
    assert!(
        out.stdout.contains("denied") && out.stdout.contains("retry after"),
        "{}",
        out.stdout
    );
    let out = rate(url, &["check", "nightly", odd, "--json"]).await;
    assert_eq!(out.code, Some(75));
    let d = json(&out);
    assert_eq!(d["allowed"], false);
    assert!(d["retry_after_ms"].as_u64().unwrap() > 1_000_000, "{d}");

    // A quota on an existing limit with another one: the stored one is kept, with a warning.
    let out = rate_ok(
        url,
        &["check", "nightly", "other", "--limit", "9", "--per", "1m"],
    )
    .await;
    assert!(out.stderr.contains("keeping it"), "{}", out.stderr);
    assert_stdout_has(&out, "1 of 2 left");

    // status: the key's state (nothing consumed), the limit, every limit.
    let out = rate_ok(url, &["status", "nightly", odd]).await;
    assert!(
        out.stdout.contains("0 of 2 left") && out.stdout.contains("denied"),
        "{}",
        out.stdout
    );
    let out = rate(url, &["status", "nightly", odd, "--json"]).await;
    let d = json(&out);
    assert_eq!((&d["cost"], &d["remaining"]), (&0.into(), &0.into()));
    let out = rate(url, &["status", "nightly", "--json"]).await;
    let q = json(&out);
    assert_eq!(
        (&q["limit"], &q["period_ms"], &q["algorithm"]),
        (&2.into(), &3_600_000.into(), &"gcra".into())
    );

    // set-quota: creates, changes, leaves alone.
    let out = rate_ok(url, SET_LOGIN).await;
    assert_stdout_has(&out, "created");
    let out = rate(url, SET_LOGIN).await;
    assert_stdout_has(&out, "unchanged");
    let out = rate_ok(
        url,
        &["set-quota", "nightly", "--limit", "3", "--per", "1h"],
    )
    .await;
    assert_eq!(
        out.stdout.trim(),
        "nightly: 2 per 1h (gcra, burst 2) → 3 per 1h (gcra, burst 3)"
    );
    let limiter = Limiter::connect(url).await.unwrap();
    let stored = limiter.open_rate_limit("nightly").await.unwrap().quota();
    assert_eq!(stored, Quota::per_hour(3));
    let out = rate_ok(url, &["status"]).await;
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(lines[0].starts_with("RATE LIMIT"), "{}", out.stdout);
    assert!(
        lines[1].starts_with("login")
            && lines[1].contains("fixed_window")
            && lines[1].contains("10m"),
        "{}",
        out.stdout
    );
    assert!(
        lines[2].starts_with("nightly") && lines[2].contains("1h"),
        "{}",
        out.stdout
    );
    let out = rate(url, &["status", "--json"]).await;
    assert_eq!(listed_names(&out), ["login", "nightly"]);

    assert!(lines[0].ends_with("BAN       WARM-UP"), "{}", out.stdout);
    assert!(lines[2].ends_with("  -"), "no warm-up: {}", out.stdout);

    // A warm-up quota: its column, and a key line that says what a cold key admits.
    rate_ok(
        url,
        &[
            "set-quota",
            "warm",
            "--limit",
            "10",
            "--per",
            "1s",
            "--warmup",
            "10s",
        ],
    )
    .await;
    let out = rate_ok(url, &["status", "warm"]).await;
    assert!(out.stdout.contains("10s ×3"), "{}", out.stdout);
    let out = rate_ok(url, &["status", "warm", "cold-key"]).await;
    assert_eq!(
        out.stdout.trim(),
        "warm \"cold-key\": one check of up to 10 (of 10) would pass now, full again in 0s; \
         a request of 1 would be admitted now; warm-up 10s ×3: a key idle 10s is cold and \
         admits requests one by one at 3.3 per 1s, rising to 10 per 1s over 10s of traffic \
         (the key's warmth is not shown)"
    );
    rate_ok(url, &["reset", "warm", "cold-key"]).await;

    // reset: the key is full again.
    rate_ok(url, &["reset", "nightly", odd]).await;
    let out = rate(url, &["status", "nightly", odd, "--json"]).await;
    assert_eq!(json(&out)["remaining"], 3);

    // wait: admitted at once, admitted after a pause, timed out with nothing consumed.
    // 2 per 6 s: the third waits ~3 s. The peek just before shows it must wait; how long it
    // took is only printed.
    rate_ok(url, &["wait", "fast", "k", "--limit", "2", "--per", "6s"]).await;
    rate_ok(url, &["check", "fast", "k"]).await;
    let peek = json(&rate(url, &["status", "fast", "k", "--json"]).await);
    assert_eq!(peek["allowed"], false, "{peek}");
    let t = Instant::now();
    let out = rate(url, &["wait", "fast", "k", "--timeout", "20s"]).await;
    println!(
        "rate wait admitted after {:?} (expected ~3 s, process start included)",
        t.elapsed()
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    for _ in 0..3 {
        assert_eq!(rate(url, &["check", "nightly", "w"]).await.code, Some(0));
    }
    let before = json(&rate(url, &["status", "nightly", "w", "--json"]).await);
    let out = rate(url, &["wait", "nightly", "w", "--timeout", "500ms"]).await;
    assert_eq!(out.code, Some(75), "{}", out.stderr);
    assert!(out.stderr.contains("nothing consumed"), "{}", out.stderr);
    let after = json(&rate(url, &["status", "nightly", "w", "--json"]).await);
    assert_eq!(before["remaining"], 0, "{before}");
    assert_eq!(after["remaining"], 0, "{after}");
    // Nothing consumed: a consumed hit would push the key's reset further out, while time only
    // brings it closer.
    let (b, a) = (
        before["reset_after_ms"].as_u64().unwrap(),
        after["reset_after_ms"].as_u64().unwrap(),
    );
    assert!(a <= b, "reset_after_ms {b} before the wait, {a} after");
    // With --json, a timed-out wait prints its last denial as `check --json` does.
    let out = rate(
        url,
        &["wait", "nightly", "w", "--timeout", "500ms", "--json"],
    )
    .await;
    assert_eq!(out.code, Some(75), "{}", out.stderr);
    let d = json(&out);
    assert_eq!(
        (&d["allowed"], &d["remaining"], &d["key"], &d["cost"]),
        (
            &serde_json::json!(false),
            &serde_json::json!(0),
            &serde_json::json!("w"),
            &serde_json::json!(1)
        ),
        "{d}"
    );
    assert!(d["retry_after_ms"].as_u64().unwrap() > 500, "{d}");
    // Denied at once: its retry_after (20 min) reaches far past the timeout.
    assert!(after["retry_after_ms"].as_u64().unwrap() > 1_000_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_subcommand_on_etcd() {
    let cluster = EtcdCluster::single();
    every_subcommand(&cluster.url("cli-rate")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_subcommand_on_zookeeper() {
    let zk = ZkCluster::single();
    every_subcommand(&zk.url("/cli-rate")).await;
}

/// N processes at once: never more admitted than the limit.
async fn processes_never_exceed_the_limit(url: &str) {
    rate_ok(url, &["set-quota", "fleet", "--limit", "5", "--per", "1h"]).await;
    let mut children = Vec::new();
    for i in 0..12 {
        let kind = if i % 2 == 0 { "check" } else { "wait" };
        let mut args = vec!["rate", kind, "--store", url, "fleet", "host"];
        if kind == "wait" {
            args.extend_from_slice(&["--timeout", "1s"]);
        }
        children.push(tokio::spawn(output(cmd(&args), LIMIT)));
    }
    let mut admitted = 0;
    for c in children {
        let out = c.await.unwrap();
        assert!(
            matches!(out.code, Some(0 | 75)),
            "{:?}: {}",
            out.code,
            out.stderr
        );
        admitted += usize::from(out.code == Some(0));
    }
    println!("12 processes (checks and waits) on a limit of 5: {admitted} admitted");
    assert_eq!(admitted, 5, "exactly the limit, never over it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_on_etcd_never_exceed_the_limit() {
    let cluster = EtcdCluster::single();
    processes_never_exceed_the_limit(&cluster.url("cli-fleet")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_on_zookeeper_never_exceed_the_limit() {
    let zk = ZkCluster::single();
    processes_never_exceed_the_limit(&zk.url("/cli-fleet")).await;
}

/// `set-quota` on an existing limit changes only the fields given and prints old → new, its
/// durations as typed; `--replace` takes the flags as the whole quota.
async fn set_quota_keeps_what_is_not_given(url: &str) {
    let set = |extra: &[&'static str]| [&["set-quota", "keep"][..], extra].concat();
    let out = rate_ok(
        url,
        &set(&["--limit", "5", "--per", "400d", "--ban", "90s"]),
    )
    .await;
    assert_eq!(
        out.stdout.trim(),
        "keep: created with quota 5 per 400d (gcra, burst 5, ban 1m30s)"
    );
    // Only the limit: period and ban kept, the default burst follows the limit.
    let out = rate_ok(url, &set(&["--limit", "10"])).await;
    assert_eq!(
        out.stdout.trim(),
        "keep: 5 per 400d (gcra, burst 5, ban 1m30s) → 10 per 400d (gcra, burst 10, ban 1m30s)"
    );
    // A burst set on purpose is kept when the limit changes.
    rate_ok(url, &set(&["--burst", "2"])).await;
    let out = rate_ok(url, &set(&["--limit", "20"])).await;
    assert!(
        out.stdout
            .contains("→ 20 per 400d (gcra, burst 2, ban 1m30s)"),
        "{}",
        out.stdout
    );
    let stored = stored_quota(url, "keep").await;
    let day = Duration::from_secs(86_400);
    assert_eq!(
        stored,
        Quota::new(20, 400 * day)
            .burst(2)
            .ban(Duration::from_secs(90))
    );
    // The status table shows the durations as typed too.
    let out = rate_ok(url, &["status", "keep"]).await;
    assert!(
        out.stdout.contains("400d") && out.stdout.contains("1m30s"),
        "{}",
        out.stdout
    );
    // --replace: the flags are the whole quota (defaults for the rest), and need --limit --per.
    let out = rate_ok(url, &set(&["--limit", "3", "--per", "1m", "--replace"])).await;
    assert!(
        out.stdout.trim().ends_with("→ 3 per 1m (gcra, burst 3)"),
        "{}",
        out.stdout
    );
    let out = rate(url, &set(&["--limit", "3", "--replace"])).await;
    assert_eq!(out.code, Some(64), "{}", out.stderr);
    assert!(out.stderr.contains("--per"), "{}", out.stderr);
    // Nothing to set, and creating without --limit/--per: 64 saying what is needed.
    let out = rate(url, &set(&[])).await;
    assert_eq!(out.code, Some(64), "{}", out.stderr);
    assert!(
        out.stderr.contains("give the quota fields"),
        "{}",
        out.stderr
    );
    let out = rate(url, &["set-quota", "absent", "--limit", "3"]).await;
    assert_eq!(out.code, Some(64), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("does not exist; creating it needs --limit N and --per DUR"),
        "{}",
        out.stderr
    );
    // A warm-up: printed, stored, kept when other fields change, its cold factor with it.
    let out = rate_ok(url, &set(&["--warmup", "30m", "--cold-factor", "4"])).await;
    assert!(
        out.stdout
            .trim()
            .ends_with("→ 3 per 1m (gcra, burst 3, warm-up 30m ×4)"),
        "{}",
        out.stdout
    );
    let out = rate_ok(url, &set(&["--limit", "6"])).await;
    assert!(
        out.stdout
            .trim()
            .ends_with("→ 6 per 1m (gcra, burst 6, warm-up 30m ×4)"),
        "{}",
        out.stdout
    );
    let out = rate_ok(url, &["status", "keep", "--json"]).await;
    let q = json(&out);
    assert_eq!(
        (&q["warmup"], &q["warmup_ms"], &q["cold_factor"]),
        (&"30m".into(), &1_800_000.into(), &4.into()),
        "{q}"
    );
    let stored = stored_quota(url, "keep").await;
    assert_eq!(
        stored,
        Quota::new(6, Duration::from_secs(60))
            .warmup(Duration::from_secs(1800))
            .cold_factor(4)
    );
    // A cold key: 1 at once of the burst of 6 (T = 10 s, the first costs 39.8 s, the second
    // 39.4 s more: past the 60 s tolerance), then a wait.
    rate_ok(url, &["check", "keep", "cold"]).await;
    let out = rate(url, &["check", "keep", "cold"]).await;
    assert_eq!(out.code, Some(75), "{}{}", out.stdout, out.stderr);
    // --warmup 0 removes it, the cold factor back to its default.
    let out = rate_ok(url, &set(&["--warmup", "0s"])).await;
    assert!(
        out.stdout.trim().ends_with("→ 6 per 1m (gcra, burst 6)"),
        "{}",
        out.stdout
    );
    let out = rate_ok(url, &["status", "keep", "--json"]).await;
    assert!(json(&out).get("warmup").is_none(), "{}", out.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_quota_on_etcd_keeps_what_is_not_given() {
    let cluster = EtcdCluster::single();
    set_quota_keeps_what_is_not_given(&cluster.url("cli-keep")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_quota_on_zookeeper_keeps_what_is_not_given() {
    let zk = ZkCluster::single();
    set_quota_keeps_what_is_not_given(&zk.url("/cli-keep")).await;
}

/// `--reserve CLASS=N` declares a priority class, `rate check --class` checks as it: the class
/// stops with its reserve left, a check without a class takes the reserve, `set-quota` keeps
/// the reserves unless given, `rate wait --class` waits as the class, and an unknown class exits
/// 64.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reserve_and_class_on_etcd() {
    let cluster = EtcdCluster::single();
    let url = cluster.url("cli-reserve");
    let set = ["set-quota", "jobs", "--limit", "10", "--per", "365d"];
    rate_ok(&url, &[&set[..], &["--reserve", "batch=3"]].concat()).await;
    let batch = |cost: &'static str| ["check", "jobs", "k", "--cost", cost, "--class", "batch"];
    let out = rate_ok(&url, &[&batch("7")[..], &["--json"]].concat()).await;
    let d = json(&out);
    assert_eq!(
        (&d["allowed"], &d["remaining"], &d["class"]),
        (
            &serde_json::json!(true),
            &serde_json::json!(0),
            &serde_json::json!("batch")
        ),
        "{d}"
    );
    let out = rate(&url, &batch("1")).await;
    assert_eq!(
        out.code,
        Some(75),
        "batch is at its reserve: {}",
        out.stdout
    );
    let out = rate_ok(&url, &["check", "jobs", "k", "--cost", "3"]).await;
    assert_stdout_has(&out, "0 of 10 left");
    // A new limit keeps the reserve.
    rate_ok(&url, &["set-quota", "jobs", "--limit", "12"]).await;
    let out = rate_ok(&url, &["status", "jobs", "--json"]).await;
    assert_eq!(
        json(&out)["reserves"],
        serde_json::json!({"batch": 3}),
        "{}",
        out.stdout
    );
    let out = rate(&url, &["check", "jobs", "k", "--class", "bulk"]).await;
    assert_eq!(out.code, Some(64), "{}", out.stderr);
    assert!(out.stderr.contains(r#"no class "bulk""#), "{}", out.stderr);
    // Batch's next unit is days away: a wait with a timeout is denied at once.
    let wait = ["wait", "jobs", "k", "--class", "batch", "--timeout", "5s"];
    let out = rate(&url, &wait).await;
    assert_eq!(out.code, Some(75), "{} {}", out.stdout, out.stderr);
    let out = rate(
        &url,
        &["wait", "jobs", "k2", "--class", "batch", "--cost", "9"],
    )
    .await;
    assert_eq!(
        out.code,
        Some(0),
        "batch takes 12 − 3 on a fresh key: {}",
        out.stderr
    );
    let out = rate(&url, &[&set[..], &["--reserve", "batch=10"]].concat()).await;
    assert_eq!(out.code, Some(64), "{}", out.stderr);
    assert!(
        out.stderr.contains("must be below the burst"),
        "{}",
        out.stderr
    );
}

/// `--fair-flows` on a quota (kept by set-quota unless switched off with `--no-fair-flows`),
/// `--flow` on check and wait: a flow that asked is kept its share from the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_flows_and_flow_on_etcd() {
    let cluster = EtcdCluster::single();
    let url = cluster.url("cli-flows");
    let set = ["set-quota", "api", "--limit", "10", "--per", "365d"];
    let set_fair = [&set[..], &["--algorithm", "fixed_window", "--fair-flows"]].concat();
    rate_ok(&url, &set_fair).await;
    let out = rate_ok(&url, &["status", "api", "--json"]).await;
    assert_eq!(
        json(&out)["fair_flows"],
        serde_json::json!(true),
        "{}",
        out.stdout
    );
    let flow =
        |f: &'static str, cost: &'static str| ["check", "api", "k", "--flow", f, "--cost", cost];
    let out = rate_ok(&url, &[&flow("a", "8")[..], &["--json"]].concat()).await;
    assert_eq!(json(&out)["flow"], serde_json::json!("a"), "{}", out.stdout);
    // b asks 5 with 2 left: denied, and counted; a must leave b those 2.
    assert_eq!(rate(&url, &flow("b", "5")).await.code, Some(75));
    let out = rate(&url, &flow("a", "1")).await;
    assert_eq!(out.code, Some(75), "a keeps b's share: {}", out.stdout);
    // A new limit keeps fair flows; the wait of b takes its 2 at once.
    rate_ok(&url, &["set-quota", "api", "--ban", "0s"]).await;
    let out = rate_ok(&url, &["status", "api"]).await;
    assert_stdout_has(&out, "fair flows");
    let wait = [
        "wait",
        "api",
        "k",
        "--flow",
        "b",
        "--cost",
        "2",
        "--timeout",
        "5s",
    ];
    rate_ok(&url, &wait).await;
    // Off: flows are ignored, a takes what is left on a fresh key.
    rate_ok(&url, &["set-quota", "api", "--no-fair-flows"]).await;
    let out = rate_ok(&url, &["status", "api", "--json"]).await;
    assert!(json(&out).get("fair_flows").is_none(), "{}", out.stdout);
    let out = rate(&url, &["check", "api", "k", "--flow", ""]).await;
    assert_eq!(out.code, Some(64), "{}", out.stderr);
    assert!(
        out.stderr.contains("flow name must be 1-128 bytes"),
        "{}",
        out.stderr
    );
    let both = [&set[..], &["--fair-flows", "--no-fair-flows"]].concat();
    assert_eq!(rate(&url, &both).await.code, Some(64));
    let warm = [&set[..], &["--warmup", "200d", "--fair-flows", "--replace"]].concat();
    let out = rate(&url, &warm).await;
    assert_eq!(out.code, Some(64), "{}", out.stderr);
    assert!(out.stderr.contains("without a warm-up"), "{}", out.stderr);
}

/// Bad input exits 64 naming the flag or argument at fault, before touching the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_exits_64_naming_the_flag() {
    let cluster = EtcdCluster::single();
    let url = cluster.url("cli-bad");
    rate_ok(
        &url,
        &[
            "set-quota",
            "small",
            "--limit",
            "2",
            "--per",
            "1m",
            "--algorithm",
            "sliding_window",
        ],
    )
    .await;
    let long_key = "k".repeat(513);
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["check", "small", "k", "--cost", "0"], "--cost"),
        (vec!["check", "small", "k", "--cost", "-1"], "-1"),
        (vec!["check", "small", "k", "--cost", "3"], "--cost"),
        (vec!["wait", "small", "k", "--cost", "3"], "--cost"),
        (vec!["check", "small", ""], "KEY"),
        (vec!["check", "small", &long_key], "KEY"),
        (vec!["status", "small", ""], "KEY"),
        (vec!["reset", "small", ""], "KEY"),
        (vec!["check", "bad name", "k"], "NAME"),
        (vec!["check", "new", "k", "--limit", "5"], "--per"),
        (vec!["check", "new", "k", "--per", "1m"], "--limit"),
        (vec!["wait", "small", "k", "--timeout", "soon"], "--timeout"),
        (vec!["set-quota", "q", "--limit", "5"], "--per"),
        (
            vec!["set-quota", "q", "--limit", "0", "--per", "1m"],
            "--limit",
        ),
        (
            vec!["set-quota", "q", "--limit", "5", "--per", "0s"],
            "--per",
        ),
        (
            vec!["set-quota", "q", "--limit", "5", "--per", "soon"],
            "--per",
        ),
        (set_q(&["--burst", "0"]), "--burst"),
        (
            set_q(&["--algorithm", "fixed_window", "--burst", "2"]),
            "--burst",
        ),
        (set_q(&["--algorithm", "leaky"]), "--algorithm"),
        (set_q(&["--ban", "1000000d"]), "--ban"),
        (
            set_q(&["--warmup", "1000000d"]),
            "--warmup: warmup must be at most 400d",
        ),
        (
            set_q(&["--warmup", "1s"]),
            "--warmup: warmup must be at least cold_factor × period / limit (36s",
        ),
        (
            set_q(&["--algorithm", "fixed_window", "--warmup", "1h"]),
            "--warmup: warmup applies to gcra only",
        ),
        (set_q(&["--warmup", "soon"]), "--warmup"),
        (
            set_q(&["--warmup", "1h", "--cold-factor", "11"]),
            "--cold-factor must be a whole number from 2 to 10, got 11",
        ),
        (
            set_q(&["--cold-factor", "5"]),
            "--cold-factor: cold_factor applies with a warmup only",
        ),
        (set_q(&["--warmup", "1h", "--cold-factor", "-1"]), "-1"),
        (vec!["status", "--bogus"], "--bogus"),
        (vec!["check", "small"], "KEY"),
    ];
    for (args, want) in cases {
        let out = rate(&url, &args).await;
        assert_eq!(out.code, Some(64), "{args:?}: {}{}", out.stdout, out.stderr);
        assert!(
            out.stderr.contains(want),
            "{args:?}: {want} in {}",
            out.stderr
        );
        assert!(
            out.stderr.contains("Usage: clusterlimit rate"),
            "{args:?}: {}",
            out.stderr
        );
    }
    // None of them created or consumed anything.
    let out = rate(&url, &["status", "--json"]).await;
    assert_eq!(listed_names(&out), ["small"]);
    let out = rate(&url, &["status", "small", "k", "--json"]).await;
    assert_eq!(json(&out)["remaining"], 2);
    // An unreachable store: 69, whichever subcommand.
    for args in [
        &["check", "small", "k"][..],
        &["status"],
        &["status", "small"],
        &["status", "small", "k"],
    ] {
        let mut all = vec!["rate", args[0], "--store", "etcd://127.0.0.1:1"];
        all.extend_from_slice(&args[1..]);
        let out = output(cmd(&all), LIMIT).await;
        assert_eq!(out.code, Some(69), "{args:?}: {}", out.stderr);
    }
}
