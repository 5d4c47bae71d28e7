//! `clusterlimit top` in a real terminal: tmux runs it in a detached session whose screen the
//! tests read (`capture-pane`) and type into (`send-keys`), against real etcd.

use crate::binary;
use crate::support;

use binary::{cmd, eventually, output, BIN};
use clusterlimit::{AcquireOptions, Limiter, Quota};
use std::process::Command;
use std::time::{Duration, Instant};
use support::{EtcdCluster, FaultProxy};

const LIMIT: Duration = Duration::from_secs(20);

/// A detached tmux session running one command, on a tmux server of its own (its socket in a
/// temporary directory): killed when dropped, even when the test panics.
struct Tmux {
    dir: tempfile::TempDir,
    /// Unique per test too, for anyone listing sessions.
    session: String,
}

impl Tmux {
    /// Runs `clusterlimit ARGS` in a `width`×`height` terminal; its stderr goes to a file.
    fn start(tag: &str, args: &[&str], width: u16, height: u16) -> Tmux {
        Tmux::start_then(tag, args, "", width, height)
    }

    /// As `start`, with shell commands run in the terminal after `clusterlimit` exits.
    fn start_then(tag: &str, args: &[&str], then: &str, width: u16, height: u16) -> Tmux {
        match Command::new("tmux").arg("-V").output() {
            Ok(o) if o.status.success() => {}
            _ => panic!("tests/top.rs needs tmux for a real terminal: apt-get install tmux"),
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let mut line = vec![quote(BIN)];
        line.extend(args.iter().map(|a| quote(a)));
        let line = format!(
            "{} 2>{}{then}",
            line.join(" "),
            quote(&dir.path().join("stderr").to_string_lossy())
        );
        let t = Tmux {
            dir,
            session: format!("cltop-{}-{tag}", std::process::id()),
        };
        let (w, h) = (width.to_string(), height.to_string());
        let s = t.session.as_str();
        t.tmux(&["new-session", "-d", "-s", s, "-x", &w, "-y", &h, &line]);
        t
    }

    fn tmux(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .arg("-S")
            .arg(self.dir.path().join("socket"))
            .args(args)
            .env_remove("CLUSTERLIMIT_STORE")
            .env("TERM", "xterm-256color")
            .output()
            .expect("run tmux")
    }

    /// The screen as text, one line per row.
    fn screen(&self) -> String {
        String::from_utf8_lossy(
            &self
                .tmux(&["capture-pane", "-p", "-t", &self.session])
                .stdout,
        )
        .into_owned()
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", &self.session];
        args.extend_from_slice(keys);
        assert!(self.tmux(&args).status.success(), "tmux send-keys");
    }

    /// Whether the terminal shows its alternate screen.
    fn alternate_screen(&self) -> bool {
        let out = self.tmux(&[
            "display-message",
            "-p",
            "-t",
            &self.session,
            "#{alternate_on}",
        ]);
        String::from_utf8_lossy(&out.stdout).trim() == "1"
    }

    fn alive(&self) -> bool {
        self.tmux(&["has-session", "-t", &self.session])
            .status
            .success()
    }

    /// What `top` wrote to stderr (why it ended, if it did).
    fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr")).unwrap_or_default()
    }

    /// Presses `q` and waits (5 s at most) for `top` to exit, without a word on stderr.
    async fn quit(&self) {
        self.quit_even_with_stderr().await;
        assert_eq!(self.stderr(), "", "top wrote to stderr");
    }

    /// Presses `q` and waits (5 s at most) for `top` to exit.
    async fn quit_even_with_stderr(&self) {
        self.keys(&["q"]);
        eventually("top to exit on q", Duration::from_secs(5), || async {
            (!self.alive()).then_some(())
        })
        .await;
    }

    /// Waits until the screen satisfies `ok`, and returns it.
    async fn until(&self, what: &str, limit: Duration, ok: impl Fn(&str) -> bool) -> String {
        let mut last = String::new();
        let deadline = Instant::now() + limit;
        // Bounded by count and by time.
        for _ in 0..1000 {
            last = self.screen();
            if ok(&last) {
                return last;
            }
            if Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "{what}: not within {limit:?}; screen:\n{last}\nstderr: {}",
            self.stderr()
        )
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.tmux(&["kill-server"]);
    }
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The width the screen was drawn to: the widest line (pane borders span the whole width).
fn drawn_width(screen: &str) -> usize {
    screen
        .lines()
        .map(|l| l.trim_end().chars().count())
        .max()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shows_holders_and_limits_follows_keys_and_resizes() {
    let cluster = EtcdCluster::single();
    let url = cluster.url("top");
    let limiter = Limiter::connect(&url).await.unwrap();
    let alpha = limiter.semaphore("alpha", 3).await.unwrap();
    let beta = limiter.semaphore("beta", 1).await.unwrap();
    let _a = alpha
        .acquire_with(AcquireOptions::new().permits(2).owner("holder-of-alpha"))
        .await
        .unwrap();
    let _b = beta
        .acquire_with(AcquireOptions::new().owner("holder-of-beta"))
        .await
        .unwrap();
    // Queued behind holder-of-beta until the test ends.
    let waiter = tokio::spawn({
        let beta = beta.clone();
        async move {
            beta.acquire_with(AcquireOptions::new().owner("waiter-on-beta"))
                .await
        }
    });
    limiter
        .rate_limit("api", Quota::per_second(5))
        .await
        .unwrap();
    limiter
        .rate_limit("batch", Quota::per_minute(100))
        .await
        .unwrap();

    let top = Tmux::start("main", &["top", "--store", &url], 160, 45);
    let screen = top
        .until("the holder and the rate limit shown", LIMIT, |s| {
            s.contains("holder-of-alpha") && s.contains("5 per 1s") && s.contains("waiter")
        })
        .await;
    assert!(screen.contains("reachable"), "{screen}");
    // The store's members, the leader starred.
    assert!(
        screen.contains("members ") && screen.contains('*'),
        "{screen}"
    );
    assert!(screen.contains("Holders of alpha"), "{screen}");
    assert!(screen.contains("2/3"), "{screen}");
    assert!(
        screen.contains("api") && screen.contains("batch"),
        "{screen}"
    );
    assert!(
        screen.contains("Keys denied in the last 10 s in api"),
        "{screen}"
    );
    // Checked by no sidecar: the rates are unknown, not 0, and the pane says so.
    assert!(screen.contains("Rate limits (sidecar rates)"), "{screen}");
    assert!(screen.contains("—"), "{screen}");
    assert!(
        screen.contains("not published: no sidecar checks this limit"),
        "{screen}"
    );
    assert!(!screen.contains("holder-of-beta"), "{screen}");
    assert_eq!(drawn_width(&screen), 160, "{screen}");

    // Down selects beta: its holder, and its waiter in the queue, replace alpha's.
    top.keys(&["Down"]);
    let screen = top
        .until("beta's details after Down", LIMIT, |s| {
            s.contains("Holders of beta") && s.contains("waiter-on-beta")
        })
        .await;
    assert!(screen.contains("holder-of-beta"), "{screen}");
    assert!(!screen.contains("holder-of-alpha"), "{screen}");

    // Tab moves the focus to the rate limits, where j selects the next one.
    top.keys(&["Tab"]);
    top.until("the focus on rate limits", LIMIT, |s| {
        s.contains("Rate limits (sidecar rates) [focus]")
    })
    .await;
    top.keys(&["j"]);
    let screen = top
        .until("batch's keys after j", LIMIT, |s| {
            s.contains("Keys denied in the last 10 s in batch")
        })
        .await;
    // The semaphore selection stayed.
    assert!(screen.contains("Holders of beta"), "{screen}");

    // A smaller terminal: drawn again to its width.
    top.tmux(&["resize-window", "-t", &top.session, "-x", "100", "-y", "30"]);
    let screen = top
        .until("a redraw at 100 columns", LIMIT, |s| {
            // The footer within 30 rows: a whole new frame, not the old one cropped by tmux.
            drawn_width(s) == 100
                && s.lines().count() <= 30
                && s.contains("q quit")
                && s.contains("Rate limits (sidecar rates) [focus]")
        })
        .await;
    assert!(screen.contains("Holders of beta"), "{screen}");
    // What no longer fits its column is cut with an ellipsis.
    assert!(screen.contains("5 per 1s (gc…"), "{screen}");

    top.quit().await;
    waiter.abort();
}

/// On Redis: the holders, the rate limits and the store's members (the server itself).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shows_a_redis_store() {
    let redis = tokio::task::spawn_blocking(support::redis::RedisServer::start)
        .await
        .unwrap();
    let url = redis.url("top");
    let limiter = Limiter::connect(&url).await.unwrap();
    let sem = limiter.semaphore("alpha", 2).await.unwrap();
    let _held = sem
        .acquire_with(AcquireOptions::new().owner("holder-on-redis"))
        .await
        .unwrap();
    limiter
        .rate_limit("api", Quota::per_second(5))
        .await
        .unwrap();
    let top = Tmux::start("redis", &["top", "--store", &url], 160, 45);
    let screen = top
        .until("the Redis holder and rate limit shown", LIMIT, |s| {
            s.contains("holder-on-redis") && s.contains("5 per 1s") && s.contains("reachable")
        })
        .await;
    assert!(screen.contains("1/2"), "{screen}");
    assert!(
        screen.contains(&redis.host()),
        "the server among the members: {screen}"
    );
    top.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_store_is_shown_not_waited_for() {
    // A port nobody listens on: connections are refused.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("etcd://127.0.0.1:{port}");
    // After top: the terminal's modes, read by the shell, then a pause to look at the screen.
    let modes = tempfile::NamedTempFile::new().unwrap();
    let then = format!(
        "; stty -a >{}; exec sleep 60",
        quote(&modes.path().to_string_lossy())
    );
    let started = Instant::now();
    let top = Tmux::start_then("refused", &["top", "--store", &url], &then, 120, 30);
    let screen = top
        .until("unreachable shown", Duration::from_secs(2), |s| {
            s.contains("unreachable")
        })
        .await;
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(screen.contains(&url), "{screen}");
    // The reason, on the store's line.
    assert!(screen.contains("unreachable, because"), "{screen}");
    assert!(top.alternate_screen(), "top draws on the alternate screen");
    // Still answering keys; the terminal given back as it was.
    top.keys(&["Escape"]);
    let modes = eventually("top to exit on Esc", Duration::from_secs(5), || async {
        let m = std::fs::read_to_string(modes.path()).unwrap_or_default();
        (!m.is_empty()).then_some(m)
    })
    .await;
    let words: Vec<&str> = modes.split_whitespace().collect();
    for mode in ["icanon", "echo", "isig", "opost"] {
        assert!(words.contains(&mode), "{mode} not restored: {modes}");
    }
    assert!(!top.alternate_screen(), "the alternate screen was left");
    assert_eq!(top.stderr(), "", "top wrote to stderr");
}

#[tokio::test]
async fn without_a_terminal_or_with_a_bad_interval_it_exits_64() {
    let store = ["--store", "etcd://127.0.0.1:1"];
    let out = output(cmd(&["top", store[0], store[1]]), LIMIT).await;
    assert_eq!(out.code, Some(64), "{}", out.stderr);
    assert!(out.stderr.contains("needs a terminal"), "{}", out.stderr);
    assert!(out.stderr.contains("clusterlimit status"), "{}", out.stderr);
    assert!(out.stdout.is_empty(), "{}", out.stdout);

    for bad in ["10ms", "2m", "soon"] {
        let out = output(cmd(&["top", store[0], store[1], "--interval", bad]), LIMIT).await;
        assert_eq!(out.code, Some(64), "{bad}: {}", out.stderr);
        assert!(out.stderr.contains("--interval"), "{bad}: {}", out.stderr);
        assert!(
            out.stderr.contains("Usage: clusterlimit top"),
            "{}",
            out.stderr
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_stops_answering_is_shown_while_keys_still_work() {
    let cluster = EtcdCluster::single();
    let proxy = FaultProxy::start(cluster.endpoints()[0].as_str());
    let url = format!("etcd://{}/hung", proxy.connect_string());
    let limiter = Limiter::connect(&cluster.url("hung")).await.unwrap();
    let gamma = limiter.semaphore("gamma", 2).await.unwrap();
    let _g = gamma
        .acquire_with(AcquireOptions::new().owner("holder-of-gamma"))
        .await
        .unwrap();

    let args = ["top", "--store", &url, "--request-timeout", "1s"];
    let top = Tmux::start("hung", &args, 140, 40);
    top.until("the holder shown", LIMIT, |s| s.contains("holder-of-gamma"))
        .await;

    // Partitioned: each read gives up after --request-timeout, and the screen says so.
    proxy.blackhole();
    let screen = top
        .until("unreachable shown", Duration::from_secs(5), |s| {
            s.contains("unreachable")
        })
        .await;
    assert!(screen.contains("unreachable since"), "{screen}");
    assert!(screen.contains("UTC, because "), "{screen}");
    // Keys are answered at once while the store hangs.
    let pressed = Instant::now();
    top.keys(&["Tab"]);
    top.until("Tab answered", Duration::from_secs(1), |s| {
        s.contains("Rate limits (sidecar rates) [focus]")
    })
    .await;
    assert!(pressed.elapsed() < Duration::from_secs(1));

    proxy.pass();
    top.until("the holder shown again", LIMIT, |s| {
        s.contains("reachable,") && s.contains("holder-of-gamma")
    })
    .await;
    top.keys(&["C-c"]);
    eventually("top to exit on Ctrl-C", Duration::from_secs(5), || async {
        (!top.alive()).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_bad_store_url_in_a_terminal_exits_64_before_drawing() {
    let code = tempfile::NamedTempFile::new().unwrap();
    let then = format!("; echo $? >{}", quote(&code.path().to_string_lossy()));
    let top = Tmux::start_then(
        "bad-url",
        &["top", "--store", "consul://x:1"],
        &then,
        100,
        30,
    );
    let code = eventually("top to exit", Duration::from_secs(5), || async {
        let c = std::fs::read_to_string(code.path()).unwrap_or_default();
        (!c.is_empty()).then_some(c)
    })
    .await;
    assert_eq!(code.trim(), "64", "stderr: {}", top.stderr());
    let stderr = top.stderr();
    assert!(stderr.contains("consul://x:1"), "{stderr}");
    assert!(stderr.contains("Usage: clusterlimit top"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shows_a_key_limited_now_through_a_sidecar_of_the_fleet() {
    let cluster = EtcdCluster::single();
    let url = cluster.url("topfleet");
    let sidecar = binary::Sidecar::start(&["--store", &url, "--owner", "edge-sidecar"]).await;
    let http = reqwest::Client::new();
    let put = http
        .put(format!("{}/v1/ratelimits/api", sidecar.url))
        .json(&serde_json::json!({"limit": 5, "period": "1s"}))
        .send()
        .await
        .unwrap();
    assert!(put.status().is_success());
    let top = Tmux::start("fleet", &["top", "--store", &url], 160, 45);
    // Keep the key over its limit while top looks (bounded: at most LIMIT).
    let started = Instant::now();
    let screen = loop {
        for _ in 0..10 {
            http.post(format!("{}/v1/ratelimits/api/check", sidecar.url))
                .json(&serde_json::json!({"key": "user-42"}))
                .send()
                .await
                .unwrap();
        }
        let s = top.screen();
        if s.contains("user-42") && s.contains("edge-sidecar") {
            break s;
        }
        assert!(
            started.elapsed() < LIMIT,
            "top never showed the limited key: {s}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        screen.contains("Keys denied in the last 10 s in api"),
        "{screen}"
    );
    // Reported by a sidecar: its rates, not the dash of an unpublished limit.
    assert!(!screen.contains("not published"), "{screen}");
    top.quit_even_with_stderr().await;
}

/// Whether a process whose command line contains `needle` runs (read from /proc).
fn process_with(needle: &str) -> bool {
    std::fs::read_dir("/proc")
        .map(|dir| {
            dir.filter_map(|e| e.ok())
                .filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .chars()
                        .all(|c| c.is_ascii_digit())
                })
                .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
                .any(|cmd| String::from_utf8_lossy(&cmd).contains(needle))
        })
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_terminal_ends_top_instead_of_leaving_it_running() {
    let store = format!("memory://hangup-{}", std::process::id());
    let top = Tmux::start("hangup", &["top", "--store", &store], 120, 30);
    top.until("the screen", LIMIT, |s| s.contains("clusterlimit top"))
        .await;
    assert!(process_with(&store), "top is not running");
    // The terminal goes away (SIGHUP, then reads of a closed pty).
    assert!(top
        .tmux(&["kill-session", "-t", &top.session])
        .status
        .success());
    eventually(
        "top to exit once its terminal is gone",
        Duration::from_secs(5),
        || async { (!process_with(&store)).then_some(()) },
    )
    .await;
}

/// Semaphore `sem` held by `owner`, and a rate limit `api`, made through `url`.
async fn holder_and_limit(url: &str, sem: &str, owner: &str) -> (Limiter, clusterlimit::Permit) {
    let limiter = Limiter::connect(url).await.unwrap();
    let s = limiter.semaphore(sem, 2).await.unwrap();
    let permit = s
        .acquire_with(AcquireOptions::new().owner(owner))
        .await
        .unwrap();
    limiter
        .rate_limit("api", Quota::per_second(5))
        .await
        .unwrap();
    (limiter, permit)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_second_cluster_is_shown_alone_with_since_and_why() {
    let (a, mut b) = (EtcdCluster::single(), EtcdCluster::single());
    let url = format!("{};{}", a.url("p"), b.url("p"));
    let (_limiter, _permit) = holder_and_limit(&url, "delta", "holder-of-delta").await;
    let args = ["top", "--store", &url, "--request-timeout", "1s"];
    let top = Tmux::start("sharded", &args, 200, 45);
    top.until("both clusters reachable and the holder", LIMIT, |s| {
        s.contains("holder-of-delta") && s.matches("reachable, ").count() >= 2
    })
    .await;

    b.pause(0);
    let screen = top
        .until("cluster 2 unreachable", Duration::from_secs(10), |s| {
            s.contains("cluster 2 of 2") && s.contains("unreachable since")
        })
        .await;
    let line = |needle: &str| {
        screen
            .lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no line with {needle}: {screen}"))
            .to_string()
    };
    let second = line("cluster 2 of 2");
    assert!(second.contains(&b.endpoints()[0]), "{screen}");
    assert!(
        second.contains("unreachable since")
            && second.contains("UTC, because ")
            && second.contains("answer within"),
        "{screen}"
    );
    assert!(line("cluster 1 of 2").contains("reachable, "), "{screen}");
    assert!(!line("cluster 1 of 2").contains("unreachable"), "{screen}");
    assert!(screen.contains("1 of 2 clusters unreachable"), "{screen}");
    // Semaphores and quotas live on the first cluster: the panes are read as before.
    assert!(screen.contains("holder-of-delta"), "{screen}");
    assert!(screen.contains("5 per 1s"), "{screen}");
    assert!(!screen.contains("as of "), "{screen}");
    b.resume(0);
    top.until("cluster 2 answering again", LIMIT, |s| {
        !s.contains("unreachable since") && s.contains("is answering again")
    })
    .await;
    top.keys(&["q"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_store_keeps_the_last_panes_marked_stale_with_the_reason() {
    let mut cluster = EtcdCluster::single();
    let url = cluster.url("stale");
    let (_limiter, _permit) = holder_and_limit(&url, "epsilon", "holder-of-epsilon").await;
    let args = ["top", "--store", &url, "--request-timeout", "1s"];
    let top = Tmux::start("stale", &args, 160, 40);
    top.until("the holder and the limit", LIMIT, |s| {
        s.contains("holder-of-epsilon") && s.contains("5 per 1s")
    })
    .await;

    cluster.pause(0);
    let screen = top
        .until("the panes marked stale", Duration::from_secs(10), |s| {
            s.contains("store unreachable") && s.contains("as of ")
        })
        .await;
    assert!(screen.contains("unreachable since"), "{screen}");
    assert!(screen.contains("UTC, because"), "{screen}");
    assert!(
        screen.contains("the panes below are the last read, as of"),
        "{screen}"
    );
    // Both panes' titles say so.
    assert!(screen.contains("Semaphores [focus] — as of"), "{screen}");
    assert!(
        screen.contains("Rate limits (sidecar rates) — as of"),
        "{screen}"
    );
    // The last picture, not an empty one.
    assert!(screen.contains("holder-of-epsilon"), "{screen}");
    assert!(screen.contains("5 per 1s"), "{screen}");
    cluster.resume(0);
    top.until("fresh panes again", LIMIT, |s| {
        s.contains("reachable, ") && !s.contains("as of ") && s.contains("holder-of-epsilon")
    })
    .await;
    top.keys(&["q"]);
}
