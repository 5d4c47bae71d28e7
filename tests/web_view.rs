//! The sidecar's web view (`/ui`) driven in a real headless Chromium through chromedriver
//! (WebDriver), against a real etcd: the page refuses without the token, logs in, shows a
//! permit's holder and a key over its limit within 2 s of them happening, and changes a
//! capacity and a quota (after its preview) in the store. Saves a screenshot
//! (`target/web-view.png`; the one in docs/images/ is a copy).
//!
//! A fair semaphore's classes and flows are shown too (memory://, the store that keeps them).
//!
//! Needs `chromium` and `chromedriver` (Debian: `apt-get install chromium chromium-driver`;
//! `scripts/test` installs them). A missing one fails the test with that hint.

use crate::binary;
use crate::support;

use binary::Sidecar;
use clusterlimit::Limiter;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;
use std::process::Stdio;
use std::time::{Duration, Instant};
use support::EtcdCluster;

const TOKEN: &str = "ui-test-token";
/// How soon the page must show a change (the bound).
const SHOWN_WITHIN: Duration = Duration::from_secs(2);

/// chromedriver on a free loopback port; killed on drop.
pub(crate) struct Driver {
    _child: tokio::process::Child,
    url: String,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn which(bin: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(bin))
            .find(|f| f.is_file())
    })
}

impl Driver {
    pub(crate) async fn start() -> Driver {
        let hint = "install Chromium and its WebDriver: apt-get install chromium chromium-driver";
        let bin = which("chromedriver").unwrap_or_else(|| panic!("chromedriver not found: {hint}"));
        which("chromium").unwrap_or_else(|| panic!("chromium not found: {hint}"));
        let port = free_port();
        let child = tokio::process::Command::new(bin)
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start chromedriver");
        let url = format!("http://127.0.0.1:{port}");
        binary::eventually("chromedriver to listen", Duration::from_secs(20), || {
            let addr = format!("127.0.0.1:{port}");
            async move { std::net::TcpStream::connect(addr).ok().map(|_| ()) }
        })
        .await;
        Driver { _child: child, url }
    }

    pub(crate) async fn browser(&self) -> Client {
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".to_string(),
            json!({
                "binary": "/usr/bin/chromium",
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1400,1000"]
            }),
        );
        ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&self.url)
            .await
            .expect("a Chromium session through chromedriver")
    }
}

/// The text of the first element matching `css`, or "" if there is none yet.
async fn text(b: &Client, css: &str) -> String {
    match b.find(Locator::Css(css)).await {
        Ok(e) => e.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    }
}

/// Waits (bounded) until the element `css` contains `needle`; returns how long it took.
pub(crate) async fn shows(b: &Client, css: &str, needle: &str, limit: Duration) -> Duration {
    let start = Instant::now();
    for _ in 0..400 {
        if text(b, css).await.contains(needle) {
            return start.elapsed();
        }
        if start.elapsed() > limit {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!(
        "the page did not show {needle:?} in {css} within {limit:?}; it shows: {:?}",
        text(b, "body").await
    );
}

async fn click(b: &Client, css: &str) {
    b.find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("no {css} on the page: {e}"))
        .click()
        .await
        .unwrap_or_else(|e| panic!("click {css}: {e}"));
}

async fn fill(b: &Client, css: &str, value: &str) {
    let e = b
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("no {css} on the page: {e}"));
    e.clear()
        .await
        .unwrap_or_else(|e| panic!("clear {css}: {e}"));
    e.send_keys(value)
        .await
        .unwrap_or_else(|e| panic!("type into {css}: {e}"));
}

/// Saves what the browser shows as `target/NAME`.
async fn save_screenshot(b: &Client, name: &str) {
    let png = b.screenshot().await.expect("screenshot");
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target")
        .join(name);
    // `target/` is not there when the build goes elsewhere ($CARGO_TARGET_DIR).
    std::fs::create_dir_all(out.parent().expect("target/")).expect("create target/");
    std::fs::write(&out, &png).expect("save the screenshot");
    eprintln!("web view: screenshot saved to {}", out.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_view_shows_holders_and_limited_keys_and_changes_the_store() {
    // A sharded store of two clusters: the second is SIGSTOPped at the end.
    let (etcd, mut second) = (EtcdCluster::single(), EtcdCluster::single());
    let store = format!("{};{}", etcd.url("/webview"), second.url("/webview"));
    let dir = tempfile::tempdir().expect("temp dir");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).expect("write token");
    let token_path = token_file.to_string_lossy().to_string();
    let sidecar = Sidecar::start(&[
        "--store",
        &store,
        "--token-file",
        &token_path,
        "--owner",
        "sidecar-a",
        "--request-timeout",
        "1s",
    ])
    .await;
    let http = reqwest::Client::new();
    let api = |method: reqwest::Method, path: &str| {
        http.request(method, format!("{}{path}", sidecar.url))
            .bearer_auth(TOKEN)
    };
    api(reqwest::Method::PUT, "/v1/semaphores/exports")
        .json(&json!({"capacity": 3}))
        .send()
        .await
        .expect("create the semaphore");
    api(reqwest::Method::PUT, "/v1/ratelimits/api")
        .json(&json!({"limit": 5, "period": "1s"}))
        .send()
        .await
        .expect("create the rate limit");

    // Without the token: the data routes refuse, the page asks for it.
    let refused = http
        .get(format!("{}/v1/live", sidecar.url))
        .send()
        .await
        .expect("GET /v1/live");
    assert_eq!(refused.status(), 401);
    let events = http
        .get(format!("{}/v1/live/events", sidecar.url))
        .send()
        .await
        .expect("GET /v1/live/events");
    assert_eq!(events.status(), 401);

    let driver = Driver::start().await;
    let b = driver.browser().await;
    b.goto(&format!("{}/ui", sidecar.url))
        .await
        .expect("open /ui");
    shows(&b, "#login", "requires its token", Duration::from_secs(10)).await;
    assert!(
        text(&b, "#view").await.is_empty(),
        "data shown before login"
    );
    fill(&b, "#token", "wrong").await;
    click(&b, "#login-form button").await;
    shows(&b, "#login-error", "not this sidecar's token", SHOWN_WITHIN).await;
    fill(&b, "#token", TOKEN).await;
    click(&b, "#login-form button").await;
    shows(&b, "#semaphores", "exports", Duration::from_secs(5)).await;
    // The store's one member, its leader.
    shows(&b, "#store", "leader", SHOWN_WITHIN).await;
    // The cookie is HTTP-only: the page's script cannot read it.
    let cookie_seen = b
        .execute("return document.cookie", vec![])
        .await
        .expect("run a script");
    assert_eq!(cookie_seen, json!(""), "the login cookie must be HTTP-only");

    // A permit taken through the API appears as a holder.
    let taken = Instant::now();
    api(reqwest::Method::POST, "/v1/semaphores/exports/permits")
        .json(&json!({"owner": "nightly-export", "permits": 2}))
        .send()
        .await
        .expect("acquire");
    let seen = shows(
        &b,
        "[data-semaphore=exports]",
        "nightly-export",
        SHOWN_WITHIN,
    )
    .await;
    eprintln!(
        "web view: holder shown {} ms after the acquire returned",
        seen.as_millis()
    );
    assert!(taken.elapsed() < SHOWN_WITHIN + Duration::from_millis(500));
    shows(&b, "[data-semaphore=exports]", "2 of 3 used", SHOWN_WITHIN).await;

    // A key driven over its limit appears under "limited now".
    for _ in 0..30 {
        api(reqwest::Method::POST, "/v1/ratelimits/api/check")
            .json(&json!({"key": "user-42"}))
            .send()
            .await
            .expect("check");
    }
    let seen = shows(
        &b,
        "[data-rate-limit=api] .limited-now",
        "user-42",
        SHOWN_WITHIN,
    )
    .await;
    eprintln!(
        "web view: limited key shown {} ms after the checks",
        seen.as_millis()
    );
    // Named for what it lists: recent denials, not keys over their limit now.
    shows(
        &b,
        "[data-rate-limit=api] .limited-now",
        "Denied in the last 10 s (this sidecar)",
        SHOWN_WITHIN,
    )
    .await;

    // Set a capacity through the page: the store changes.
    let set = b
        .find(Locator::XPath(
            "//*[@data-semaphore='exports']//button[contains(., 'Set capacity')]",
        ))
        .await
        .expect("the Set capacity button");
    set.click().await.expect("click Set capacity");
    fill(&b, "#capacity-input", "7").await;
    click(&b, "#dialog-ok").await;
    let reader = Limiter::connect(&store).await.expect("a reader on etcd");
    let sem = reader.open_semaphore("exports").await.expect("open");
    binary::eventually(
        "the capacity set in the page",
        Duration::from_secs(5),
        || {
            let sem = sem.clone();
            async move { (sem.status().await.ok()?.capacity == 7).then_some(()) }
        },
    )
    .await;
    shows(&b, "[data-semaphore=exports]", "2 of 7 used", SHOWN_WITHIN).await;

    // Set a quota: the first click previews, the second applies.
    let set = b
        .find(Locator::XPath(
            "//*[@data-rate-limit='api']//button[contains(., 'Set quota')]",
        ))
        .await
        .expect("the Set quota button");
    set.click().await.expect("click Set quota");
    fill(&b, "#quota-limit", "2").await;
    fill(&b, "#quota-burst", "2").await;
    click(&b, "#dialog-ok").await;
    shows(&b, "#quota-preview", "denied", Duration::from_secs(5)).await;
    let rl = reader.open_rate_limit("api").await.expect("open the limit");
    assert_eq!(rl.quota().limit, 5, "the preview must change nothing");
    save_screenshot(&b, "web-view-preview.png").await;
    click(&b, "#dialog-ok").await;
    binary::eventually("the quota set in the page", Duration::from_secs(5), || {
        let reader = reader.clone();
        async move {
            let rl = reader.open_rate_limit("api").await.ok()?;
            (rl.quota().limit == 2).then_some(())
        }
    })
    .await;
    shows(&b, "[data-rate-limit=api]", "2 per 1s", SHOWN_WITHIN).await;

    // The screenshot of the live view, for the docs.
    save_screenshot(&b, "web-view.png").await;

    // An adaptive semaphore's controller seat shows on its semaphore's card, not as a card.
    api(reqwest::Method::PUT, "/v1/semaphores/exports.controller")
        .json(&json!({"capacity": 1}))
        .send()
        .await
        .expect("create the seat");
    api(
        reqwest::Method::POST,
        "/v1/semaphores/exports.controller/permits",
    )
    .json(&json!({"owner": "controller-x"}))
    .send()
    .await
    .expect("take the seat");
    shows(
        &b,
        "[data-semaphore=exports]",
        "controller: held by controller-x",
        Duration::from_secs(5),
    )
    .await;
    assert!(
        b.find(Locator::Css("[data-semaphore='exports.controller']"))
            .await
            .is_err(),
        "the seat has a card of its own"
    );

    // Each cluster on a line; the second stopped: unreachable since when, and why, alone.
    shows(
        &b,
        "#clusters [data-cluster='1']",
        "reachable, ",
        SHOWN_WITHIN,
    )
    .await;
    second.pause(0);
    shows(
        &b,
        "#clusters [data-cluster='2']",
        "unreachable since",
        Duration::from_secs(10),
    )
    .await;
    let line = text(&b, "#clusters [data-cluster='2']").await;
    assert!(line.starts_with("cluster 2 of 2 (etcd://"), "{line}");
    assert!(line.contains(", because "), "{line}");
    assert!(
        !text(&b, "#clusters [data-cluster='1']")
            .await
            .contains("unreachable"),
        "cluster 1 answers"
    );
    shows(&b, "#store", "1 of 2 clusters unreachable", SHOWN_WITHIN).await;
    // Semaphores live on the first cluster: read as before, not marked stale.
    shows(&b, "[data-semaphore=exports]", "2 of 7 used", SHOWN_WITHIN).await;
    assert!(text(&b, "#stale").await.is_empty(), "marked stale");
    second.resume(0);

    // Logging out ends the login: the page asks for the token again, the stream is refused.
    click(&b, "#logout").await;
    shows(&b, "#login", "requires its token", SHOWN_WITHIN).await;
    b.close().await.expect("close the browser");
    let _ = reader.close().await;
    drop(sidecar);
}

/// GET `path` of `base` with the token, as JSON.
async fn get_json(http: &reqwest::Client, base: &str, path: &str) -> serde_json::Value {
    http.get(format!("{base}{path}"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"))
        .json()
        .await
        .unwrap_or_else(|e| panic!("GET {path}: not JSON: {e}"))
}

/// The owners in the fleet list of a picture.
fn fleet_owners(picture: &serde_json::Value) -> Vec<String> {
    let mut v: Vec<String> = picture["fleet"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|m| m["owner"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sidecars_on_one_etcd_merge_into_one_fleet_view_and_a_killed_one_vanishes() {
    let etcd = EtcdCluster::single();
    let store = etcd.url("/fleet");
    let dir = tempfile::tempdir().expect("temp dir");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).expect("write token");
    let token_path = token_file.to_string_lossy().to_string();
    let start = |owner: &'static str| {
        let (store, token_path) = (store.clone(), token_path.clone());
        async move {
            Sidecar::start(&[
                "--store",
                &store,
                "--token-file",
                &token_path,
                "--owner",
                owner,
                "--session-ttl",
                "2s",
            ])
            .await
        }
    };
    let a = start("sidecar-a").await;
    let mut b = start("sidecar-b").await;
    let http = reqwest::Client::new();
    let put = http
        .put(format!("{}/v1/ratelimits/api", a.url))
        .bearer_auth(TOKEN)
        .json(&json!({"limit": 5, "period": "1s"}))
        .send()
        .await
        .expect("create the limit");
    assert!(put.status().is_success());
    // Traffic on both: a key over its limit on each, a different one.
    for (sidecar, key) in [(&a, "key-on-a"), (&b, "key-on-b")] {
        for _ in 0..20 {
            http.post(format!("{}/v1/ratelimits/api/check", sidecar.url))
                .bearer_auth(TOKEN)
                .json(&json!({"key": key}))
                .send()
                .await
                .expect("check");
        }
    }
    // Sidecar A's view shows both sidecars and both keys, merged.
    let merged = binary::eventually("both summaries in A's view", Duration::from_secs(8), || {
        let (http, url) = (http.clone(), a.url.clone());
        async move {
            let p = get_json(&http, &url, "/v1/live").await;
            let limited = p["rate_limits"][0]["fleet_limited_now"].to_string();
            (fleet_owners(&p) == ["sidecar-a", "sidecar-b"]
                && limited.contains("key-on-a")
                && limited.contains("key-on-b"))
            .then_some(p)
        }
    })
    .await;
    let keys = merged["rate_limits"][0]["fleet_limited_now"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let on_b = keys
        .iter()
        .find(|k| k["key"] == "key-on-b")
        .expect("key-on-b listed");
    assert_eq!(on_b["sidecars"], json!(["sidecar-b"]));
    assert!(
        merged["rate_limits"][0]["fleet_denied_per_s"]
            .as_f64()
            .unwrap_or(0.0)
            > 0.0
    );

    // B is SIGKILLed: its summary goes with its session (TTL 2 s), nobody removes it by hand.
    let killed = Instant::now();
    b.child.start_kill().expect("kill sidecar-b");
    let _ = b.child.wait().await;
    binary::eventually("B's summary to vanish", Duration::from_secs(8), || {
        let (http, url) = (http.clone(), a.url.clone());
        async move {
            let p = get_json(&http, &url, "/v1/live").await;
            (fleet_owners(&p) == ["sidecar-a"]).then_some(())
        }
    })
    .await;
    eprintln!(
        "fleet: a SIGKILLed sidecar's summary vanished {} ms after the kill (TTL 2 s)",
        killed.elapsed().as_millis()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_cookie_reads_but_changes_only_with_its_csrf_value() {
    let dir = tempfile::tempdir().expect("temp dir");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).expect("write token");
    let token_path = token_file.to_string_lossy().to_string();
    let sidecar = Sidecar::start(&["--store", "memory://login", "--token-file", &token_path]).await;
    let http = reqwest::Client::new();
    let url = |p: &str| format!("{}{p}", sidecar.url);
    let wrong = http
        .post(url("/ui/login"))
        .json(&json!({"token": "nope"}))
        .send()
        .await
        .expect("login");
    assert_eq!(wrong.status(), 401);
    assert!(wrong.headers().get("set-cookie").is_none());
    let ok = http
        .post(url("/ui/login"))
        .json(&json!({"token": TOKEN}))
        .send()
        .await
        .expect("login");
    assert_eq!(ok.status(), 200);
    let set_cookie = ok
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .expect("a cookie")
        .to_string();
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(set_cookie.contains(attr), "{set_cookie}");
    }
    let cookie = set_cookie.split(';').next().unwrap_or_default().to_string();
    let csrf = ok.json::<serde_json::Value>().await.expect("JSON")["csrf"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(csrf.len() >= 32);
    let status = |r: reqwest::Response| r.status().as_u16();
    // Reads: the cookie is enough.
    let read = http
        .get(url("/v1/semaphores"))
        .header("cookie", &cookie)
        .send()
        .await
        .expect("GET");
    assert_eq!(status(read), 200);
    // Changes: the cookie alone, or with a wrong CSRF value, is refused and changes nothing.
    let put = |csrf: Option<&str>| {
        let mut r = http
            .put(url("/v1/semaphores/jobs"))
            .header("cookie", &cookie)
            .json(&json!({"capacity": 3}));
        if let Some(c) = csrf {
            r = r.header("x-csrf-token", c);
        }
        r.send()
    };
    // Each refusal says what is missing and what to do: the CSRF header by name.
    let refused = |r: reqwest::Response| async move {
        assert_eq!(r.status().as_u16(), 401);
        r.json::<serde_json::Value>().await.expect("a problem body")
    };
    let missing = refused(put(None).await.expect("PUT")).await;
    assert_eq!(missing["code"], "csrf_missing", "{missing}");
    let detail = missing["detail"].as_str().unwrap_or_default();
    for want in [
        "`x-csrf-token` header",
        "reload the page",
        "Authorization: Bearer",
    ] {
        assert!(detail.contains(want), "{want:?} in {detail}");
    }
    let mismatch = refused(put(Some("0000")).await.expect("PUT")).await;
    assert_eq!(mismatch["code"], "csrf_mismatch", "{mismatch}");
    let detail = mismatch["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("`x-csrf-token` header is not this login's CSRF value"),
        "{detail}"
    );
    let listed = get_json(&http, &sidecar.url, "/v1/semaphores").await;
    assert_eq!(listed, json!([]), "a refused change must change nothing");
    assert_eq!(status(put(Some(&csrf)).await.expect("PUT")), 200);
    // After logout the cookie is worth nothing.
    let out = http
        .post(url("/ui/logout"))
        .header("cookie", &cookie)
        .header("x-csrf-token", &csrf)
        .send()
        .await
        .expect("logout");
    assert_eq!(status(out), 204);
    let read = http
        .get(url("/v1/live"))
        .header("cookie", &cookie)
        .send()
        .await
        .expect("GET");
    let ended = refused(read).await;
    assert_eq!(ended["code"], "login_ended", "{ended}");
    // A login body that is not the JSON asked for is answered without repeating it: it may be
    // the token itself, pasted raw.
    for raw in [TOKEN.to_string(), "1234567890abcdef".to_string()] {
        let r = http
            .post(url("/ui/login"))
            .header("content-type", "application/json")
            .body(raw.clone())
            .send()
            .await
            .expect("login");
        assert_eq!(r.status(), 400);
        let body = r.text().await.expect("a body");
        assert!(body.contains("{\\\"token\\\": \\\"…\\\"}"), "{body}");
        assert!(
            !body.contains(&raw[..6]),
            "the body echoes what was sent: {body}"
        );
        assert!(!body.contains("12345"), "{body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_event_stream_does_not_hold_up_a_graceful_exit() {
    let mut sidecar = Sidecar::start(&["--store", "memory://exit"]).await;
    let http = reqwest::Client::new();
    let mut stream = http
        .get(format!("{}/v1/live/events", sidecar.url))
        .send()
        .await
        .expect("open the event stream");
    assert_eq!(stream.status(), 200);
    let first = binary::within("the first picture", Duration::from_secs(5), stream.chunk())
        .await
        .expect("read the stream")
        .expect("a chunk");
    assert!(String::from_utf8_lossy(&first).contains("event: picture"));
    let signalled = Instant::now();
    binary::signal(sidecar.pid(), "TERM");
    let st = binary::within(
        "the sidecar to exit with a stream open",
        Duration::from_secs(5),
        sidecar.child.wait(),
    )
    .await
    .expect("wait for the sidecar");
    assert_eq!(st.code(), Some(0));
    eprintln!(
        "web view: exit with an open stream took {} ms",
        signalled.elapsed().as_millis()
    );
}

/// A fair semaphore (declared in the config, memory://): the live picture and the page show
/// each class's usage (borrowing, waiting flows) and each holder's flow and class.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_semaphore_shows_its_classes_and_waiting_flows() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("clusterlimit.toml");
    std::fs::write(
        &config,
        "store = \"memory://fair-view\"\n\n\
         [[semaphores]]\nname = \"db\"\ncapacity = 2\nclasses = \"critical=1,batch\"\n",
    )
    .expect("write the config");
    let sidecar = Sidecar::start(&["--config", config.to_str().unwrap()]).await;
    let http = reqwest::Client::new();
    let acquire = |body: serde_json::Value| {
        http.post(format!("{}/v1/semaphores/db/permits", sidecar.url))
            .json(&body)
            .send()
    };
    for owner in ["web-1", "web-2"] {
        let r =
            acquire(json!({"flow": "tenant-a", "class": "batch", "owner": owner, "ttl_ms": 60000}))
                .await
                .expect("acquire");
        assert_eq!(r.status(), 201);
    }
    // Tenant B waits in the class critical (both permits are lent to batch).
    let waiting = tokio::spawn(acquire(
        json!({"flow": "tenant-b", "class": "critical", "timeout_ms": 30000}),
    ));
    let db = binary::eventually(
        "the live picture to show B waiting",
        Duration::from_secs(10),
        || {
            let http = http.clone();
            let url = format!("{}/v1/live", sidecar.url);
            async move {
                let p: serde_json::Value = http.get(url).send().await.ok()?.json().await.ok()?;
                let db = p["semaphores"]
                    .as_array()?
                    .iter()
                    .find(|s| s["name"] == "db")?
                    .clone();
                (db["classes"][0]["waiting"] == 1).then_some(db)
            }
        },
    )
    .await;
    assert_eq!(
        db["classes"],
        json!([
            {"name": "critical", "guaranteed": 1, "held": 0, "waiting": 1, "waiting_flows": ["tenant-b"]},
            {"name": "batch", "guaranteed": 0, "held": 2, "waiting": 0, "waiting_flows": []}
        ]),
        "{db}"
    );
    assert_eq!(db["holders"][0]["flow"], "tenant-a", "{db}");
    assert_eq!(db["waiters"][0]["class"], "critical", "{db}");

    let driver = Driver::start().await;
    let b = driver.browser().await;
    b.goto(&format!("{}/ui", sidecar.url))
        .await
        .expect("open /ui");
    let limit = Duration::from_secs(10);
    shows(
        &b,
        "#semaphores",
        "critical: held 0 of 1 guaranteed, 1 waiting: tenant-b",
        limit,
    )
    .await;
    shows(
        &b,
        "#semaphores",
        "batch: held 2 of 0 guaranteed (borrowing 2), 0 waiting",
        limit,
    )
    .await;
    shows(&b, "#semaphores", "web-1 (tenant-a / batch)", limit).await;
    shows(&b, "#semaphores", "(tenant-b / critical)", limit).await;
    b.close().await.expect("close the browser");
    waiting.abort();
}
