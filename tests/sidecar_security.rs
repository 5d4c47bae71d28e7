//! The sidecar's access control and secret handling, on the real `clusterlimit serve` process
//! over real HTTP (etcd where a store's state is checked; memory:// where none is needed):
//! the bearer token, the Unix socket's mode, the refusal of an open non-loopback address,
//! store credentials reaching the library, and secrets never printed.

use crate::binary;
use crate::support;

use binary::{cmd, output, signal, within};
use clusterlimit::Limiter;
use reqwest::{Client, Method, StatusCode};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::EtcdCluster;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::Child;

/// A token long and odd enough that finding it in output cannot be a coincidence.
const TOKEN: &str = "tok-7Qz9xK2mVb4nR8wLpT3s";

/// A running `clusterlimit serve` whose stdout and stderr are both captured.
struct Served {
    child: Child,
    /// `http://127.0.0.1:PORT` (a wildcard listen address is reached on loopback).
    url: String,
    output: Arc<Mutex<String>>,
    readers: Vec<tokio::task::JoinHandle<()>>,
}

impl Served {
    /// Starts `serve ARGS` with `RUST_LOG=debug` (the most it would ever log).
    async fn start(args: &[&str]) -> Served {
        let mut all = vec!["serve"];
        all.extend_from_slice(args);
        let mut c = cmd(&all);
        c.env("RUST_LOG", "debug")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().expect("spawn clusterlimit serve");
        let output = Arc::new(Mutex::new(String::new()));
        let (addr_tx, addr_rx) = tokio::sync::oneshot::channel();
        let mut addr_tx = Some(addr_tx);
        let out = output.clone();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let stdout_reader = tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(rest) = line.split("listening on http://").nth(1) {
                    let addr = rest.split_whitespace().next().unwrap_or("").to_string();
                    if let Some(tx) = addr_tx.take() {
                        let _ = tx.send(addr);
                    }
                }
                out.lock().unwrap().push_str(&(line + "\n"));
            }
        });
        let out = output.clone();
        let mut err_lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let stderr_reader = tokio::spawn(async move {
            while let Ok(Some(line)) = err_lines.next_line().await {
                out.lock().unwrap().push_str(&(line + "\n"));
            }
        });
        let addr = within(
            "serve to print its address",
            Duration::from_secs(20),
            addr_rx,
        )
        .await
        .unwrap_or_else(|_| panic!("serve exited: {}", output.lock().unwrap()));
        Served {
            child,
            url: format!("http://{}", addr.replace("0.0.0.0", "127.0.0.1")),
            output,
            readers: vec![stdout_reader, stderr_reader],
        }
    }

    /// SIGTERM, wait for the exit, and return everything it printed.
    async fn stop(mut self) -> String {
        signal(self.child.id().expect("still running"), "TERM");
        let status = within("serve to exit", Duration::from_secs(15), self.child.wait())
            .await
            .unwrap();
        assert!(status.success(), "serve exited with {status}");
        for r in self.readers.drain(..) {
            within("output to end", Duration::from_secs(5), r)
                .await
                .unwrap();
        }
        let out = self.output.lock().unwrap().clone();
        out
    }
}

fn client() -> Client {
    Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// Sends one request with the given `Authorization` value (if any): (status, headers, JSON).
/// `GET /v1/semaphores` with no credentials.
async fn list_without_token(
    c: &Client,
    base: &str,
) -> (StatusCode, reqwest::header::HeaderMap, Value) {
    send(c, Method::GET, &format!("{base}/v1/semaphores"), None, None).await
}

async fn send(
    c: &Client,
    method: Method,
    url: &str,
    body: Option<Value>,
    auth: Option<&str>,
) -> (StatusCode, reqwest::header::HeaderMap, Value) {
    let mut r = c.request(method, url);
    if let Some(b) = body {
        r = r.json(&b);
    }
    if let Some(a) = auth {
        r = r.header("authorization", a);
    }
    let resp = r.send().await.unwrap();
    let (status, headers) = (resp.status(), resp.headers().clone());
    (status, headers, resp.json().await.unwrap_or(Value::Null))
}

fn bearer() -> String {
    format!("Bearer {TOKEN}")
}

/// One HTTP/1.1 GET over a Unix socket; the answer's status code.
async fn unix_get(socket: &Path, target: &str, auth: Option<&str>) -> u16 {
    let mut s = tokio::net::UnixStream::connect(socket).await.unwrap();
    let auth = auth.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
    s.write_all(
        format!("GET {target} HTTP/1.1\r\nHost: sidecar\r\n{auth}Connection: close\r\n\r\n")
            .as_bytes(),
    )
    .await
    .unwrap();
    let mut answer = String::new();
    within(
        "the answer over the socket",
        Duration::from_secs(10),
        s.read_to_string(&mut answer),
    )
    .await
    .unwrap();
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {answer:?}"))
}

fn token_file(dir: &Path) -> String {
    let path = dir.join("token");
    std::fs::write(&path, format!("{TOKEN}\n")).unwrap();
    path.to_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_token_every_route_but_health_is_401_and_nothing_changes() {
    let cluster = EtcdCluster::single();
    let url = cluster.url("guarded");
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("cl.sock");
    let sc = Served::start(&[
        "--listen",
        "127.0.0.1:0",
        "--store",
        &url,
        "--token-file",
        &token_file(dir.path()),
        "--unix",
        socket.to_str().unwrap(),
    ])
    .await;
    let c = client();
    let base = &sc.url;
    let auth = bearer();

    // With the token: a semaphore of capacity 2, one permit held.
    let (s, _, held) = send(
        &c,
        Method::POST,
        &format!("{base}/v1/semaphores/jobs/permits"),
        Some(json!({"capacity": 2, "ttl_ms": 60000})),
        Some(&auth),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{held}");
    let id = held["id"].as_str().unwrap().to_string();

    // Without it, or with anything else: 401 on every route, answered before any handler.
    let requests = [
        (
            Method::POST,
            "/v1/semaphores/jobs/permits".to_string(),
            Some(json!({"permits": 1})),
        ),
        (
            Method::POST,
            "/v1/semaphores/other/permits".to_string(),
            Some(json!({"capacity": 5})),
        ),
        (
            Method::PUT,
            "/v1/semaphores/jobs".to_string(),
            Some(json!({"capacity": 9})),
        ),
        (Method::DELETE, format!("/v1/permits/{id}"), None),
        (Method::POST, format!("/v1/permits/{id}/keepalive"), None),
        (Method::GET, "/v1/semaphores".to_string(), None),
        (Method::GET, "/v1/semaphores/jobs".to_string(), None),
        (Method::GET, "/metrics".to_string(), None),
        (Method::GET, "/no-such-route".to_string(), None),
    ];
    let wrong = [
        None,
        Some("Bearer wrong".to_string()),
        Some(format!("Bearer {TOKEN}x")),
        Some(format!("Bearer {}", &TOKEN[..TOKEN.len() - 1])),
        Some(format!("Basic {TOKEN}")),
        Some(TOKEN.to_string()),
    ];
    for (method, path, body) in &requests {
        for a in &wrong {
            let (s, headers, problem) = send(
                &c,
                method.clone(),
                &format!("{base}{path}"),
                body.clone(),
                a.as_deref(),
            )
            .await;
            let what = format!("{method} {path} with {a:?}");
            assert_eq!(s, StatusCode::UNAUTHORIZED, "{what}: {problem}");
            let challenge = headers["www-authenticate"].to_str().unwrap();
            assert!(challenge.starts_with("Bearer"), "{what}: {challenge}");
            assert_eq!(
                headers["content-type"], "application/problem+json",
                "{what}"
            );
            assert_eq!(problem["status"], 401, "{what}: {problem}");
            let code = if a.is_some() {
                "invalid_token"
            } else {
                "unauthorized"
            };
            assert_eq!(problem["code"], code, "{what}: {problem}");
        }
    }

    // Nothing changed, as the store itself sees it: no new semaphore, capacity 2, our permit
    // held and nothing queued.
    let direct = Limiter::connect(&url).await.unwrap();
    assert_eq!(direct.semaphores().await.unwrap(), ["jobs"]);
    let st = direct
        .open_semaphore("jobs")
        .await
        .unwrap()
        .status()
        .await
        .unwrap();
    assert_eq!((st.capacity, st.used, st.waiting), (2, 1, 0));
    direct.close().await.unwrap();
    // The health routes stay open; with the token everything answers and the permit lives.
    for path in ["/healthz", "/readyz"] {
        let r = c.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{path}");
    }
    let (s, _, st) = send(
        &c,
        Method::GET,
        &format!("{base}/v1/semaphores/jobs"),
        None,
        Some(&auth),
    )
    .await;
    assert_eq!((s, st["used"].clone()), (StatusCode::OK, json!(1)));
    let lower = format!("bearer {TOKEN}");
    let r = c
        .get(format!("{base}/metrics"))
        .header("authorization", &lower)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK, "the scheme is case-insensitive");
    // Every refusal is counted.
    let metrics = r.text().await.unwrap();
    let refused = (requests.len() * wrong.len()).to_string();
    assert!(
        metrics
            .lines()
            .any(|l| l == format!("clusterlimit_http_unauthorized_total {refused}")),
        "{refused} 401s not counted:\n{metrics}"
    );
    let (s, _, _) = send(
        &c,
        Method::POST,
        &format!("{base}/v1/permits/{id}/keepalive"),
        None,
        Some(&auth),
    )
    .await;
    assert_eq!(s, StatusCode::OK);

    // The Unix socket: created 0660 by default, and guarded by the same token.
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o660, "socket mode {mode:o}");
    assert_eq!(unix_get(&socket, "/v1/semaphores", None).await, 401);
    assert_eq!(unix_get(&socket, "/v1/semaphores", Some(&auth)).await, 200);
    assert_eq!(unix_get(&socket, "/healthz", None).await, 200);

    let (s, _, _) = send(
        &c,
        Method::DELETE,
        &format!("{base}/v1/permits/{id}"),
        None,
        Some(&auth),
    )
    .await;
    assert_eq!(s, StatusCode::NO_CONTENT);

    // Everything it printed at debug level: the token never, though requests carried it.
    let out = sc.stop().await;
    assert!(out.contains("serving"), "output not captured: {out}");
    assert!(
        out.contains("without a valid token"),
        "401s are logged: {out}"
    );
    assert!(!out.contains(TOKEN), "the token is in the output:\n{out}");
    assert!(
        !out.contains(&TOKEN[4..]),
        "part of the token is in the output:\n{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_can_be_left_open_while_the_api_stays_guarded() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("c.toml");
    std::fs::write(
        &config,
        format!(
            "token_file = {:?}\nmetrics_without_token = true\n",
            token_file(dir.path())
        ),
    )
    .unwrap();
    // By the flag, and by the config key.
    for args in [
        vec![
            "--token-file",
            &token_file(dir.path()),
            "--metrics-without-token",
        ],
        vec!["--config", config.to_str().unwrap()],
    ] {
        let mut all = vec![
            "--listen",
            "127.0.0.1:0",
            "--store",
            "memory://metrics-open",
        ];
        all.extend(args.iter().copied());
        let sc = Served::start(&all).await;
        let c = client();
        let r = c.get(format!("{}/metrics", sc.url)).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{args:?}");
        assert!(r.text().await.unwrap().contains("clusterlimit_"));
        let (s, _, _) = list_without_token(&c, &sc.url).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED, "{args:?}");
        let out = sc.stop().await;
        assert!(!out.contains(TOKEN), "{out}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn socket_mode_is_configurable() {
    let dir = tempfile::tempdir().unwrap();
    for (flag, want) in [("0600", 0o600), ("0666", 0o666)] {
        let socket = dir.path().join(format!("s{flag}.sock"));
        let sc = Served::start(&[
            "--listen",
            "127.0.0.1:0",
            "--store",
            "memory://socket-mode",
            "--unix",
            socket.to_str().unwrap(),
            "--socket-mode",
            flag,
        ])
        .await;
        let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, want, "--socket-mode {flag}: {mode:o}");
        // No token configured, loopback: open.
        assert_eq!(unix_get(&socket, "/v1/semaphores", None).await, 200);
        sc.stop().await;
    }
    // A file that is not a socket is never replaced.
    let file = dir.path().join("not-a-socket");
    std::fs::write(&file, "keep me").unwrap();
    let out = output(
        cmd(&[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--store",
            "memory://socket-mode",
            "--unix",
            file.to_str().unwrap(),
        ]),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(out.code, Some(69), "{}", out.stderr);
    assert!(out.stderr.contains("not a socket"), "{}", out.stderr);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_loopback_address_needs_a_token_or_the_explicit_flag() {
    // Refused at start, before listening: the address and both ways out are named.
    let out = output(
        cmd(&[
            "serve",
            "--listen",
            "0.0.0.0:0",
            "--store",
            "memory://remote",
        ]),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(out.code, Some(64), "{}{}", out.stdout, out.stderr);
    for want in ["0.0.0.0:0", "--token-file", "--insecure-allow-remote"] {
        assert!(out.stderr.contains(want), "{want:?} not in {}", out.stderr);
    }
    assert!(!out.stdout.contains("listening"), "{}", out.stdout);

    // The explicit override serves without a token.
    let sc = Served::start(&[
        "--listen",
        "0.0.0.0:0",
        "--store",
        "memory://remote",
        "--insecure-allow-remote",
    ])
    .await;
    let c = client();
    let (s, _, _) = list_without_token(&c, &sc.url).await;
    assert_eq!(s, StatusCode::OK);
    sc.stop().await;

    // A token makes it acceptable, and is then required.
    let dir = tempfile::tempdir().unwrap();
    let sc = Served::start(&[
        "--listen",
        "0.0.0.0:0",
        "--store",
        "memory://remote",
        "--token-file",
        &token_file(dir.path()),
    ])
    .await;
    let url = format!("{}/v1/semaphores", sc.url);
    assert_eq!(
        send(&c, Method::GET, &url, None, None).await.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        send(&c, Method::GET, &url, None, Some(&bearer())).await.0,
        StatusCode::OK
    );
    sc.stop().await;
}

#[tokio::test]
async fn a_password_in_a_store_url_is_never_printed() {
    const PW: &str = "pw-Hx81QaZ";
    for store in [
        format!("etcd://user:{PW}@127.0.0.1:1/p"),
        format!("zk://user:{PW}@127.0.0.1:1/p"),
        format!("etcd://127.0.0.1:1/p?password={PW}"),
        format!("zk://127.0.0.1:1/p?digest={PW}"),
        format!("etcds://127.0.0.1:1/p?cacert=/ca.pem&secret={PW}"),
    ] {
        for args in [
            vec!["serve", "--check-config", "--store", &store],
            vec!["serve", "--listen", "127.0.0.1:0", "--store", &store],
            vec!["status", "--store", &store],
            vec!["set-capacity", "--store", &store, "s", "1"],
            vec!["run", "--store", &store, "--semaphore", "s", "--", "true"],
        ] {
            let mut c = cmd(&args);
            c.env("RUST_LOG", "debug");
            let out = output(c, Duration::from_secs(20)).await;
            assert_eq!(out.code, Some(64), "{args:?}: {}{}", out.stdout, out.stderr);
            assert!(out.stderr.contains("store URL"), "{args:?}: {}", out.stderr);
            assert!(
                !out.stdout.contains(PW) && !out.stderr.contains(PW),
                "{args:?} printed the password:\n{}{}",
                out.stdout,
                out.stderr
            );
        }
    }
}

#[tokio::test]
async fn store_credential_flags_and_keys_reach_the_library() {
    // Each setting is refused by the library for a store it does not belong to: proof that
    // the flag (or config key) reached `LimiterBuilder` without a store to connect to.
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, &str, &str, &str); 5] = [
        (
            "memory://creds",
            "etcd-cacert",
            "/ca.pem",
            "memory:// takes no TLS",
        ),
        (
            "memory://creds",
            "etcd-cert",
            "/c.pem",
            "memory:// takes no TLS",
        ),
        (
            "memory://creds",
            "etcd-key",
            "/k.pem",
            "memory:// takes no TLS",
        ),
        (
            "etcd://127.0.0.1:1/p",
            "zk-digest-file",
            "/d",
            "ZooKeeper digest file was given for an etcd store",
        ),
        (
            "zk://127.0.0.1:1/p",
            "etcd-user",
            "svc",
            "etcd user was given for a ZooKeeper store",
        ),
    ];
    for (store, flag, value, want) in cases {
        // etcd_cert and etcd_key only come together.
        let pair: Vec<&str> = match flag {
            "etcd-cert" => vec!["--etcd-key", "/k.pem"],
            "etcd-key" => vec!["--etcd-cert", "/c.pem"],
            _ => vec![],
        };
        let flag = format!("--{flag}");
        let mut serve = vec![
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--store",
            store,
            &flag,
            value,
        ];
        serve.extend(&pair);
        let mut status = vec!["status", "--store", store, &flag, value];
        status.extend(&pair);
        let key = flag.trim_start_matches("--").replace('-', "_");
        let config = dir.path().join(format!("{key}.toml"));
        let mut body = format!("store = {store:?}\n{key} = {value:?}\n");
        for kv in pair.chunks(2) {
            body += &format!(
                "{} = {:?}\n",
                kv[0].trim_start_matches("--").replace('-', "_"),
                kv[1]
            );
        }
        std::fs::write(&config, body).unwrap();
        let from_file = vec![
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--config",
            config.to_str().unwrap(),
        ];
        for args in [serve, status, from_file] {
            let out = output(cmd(&args), Duration::from_secs(20)).await;
            assert_eq!(out.code, Some(64), "{args:?}: {}{}", out.stdout, out.stderr);
            assert!(
                out.stderr.contains(want),
                "{args:?}: {want:?} not in {}",
                out.stderr
            );
        }
    }
    // A password file needs a user.
    let out = output(
        cmd(&[
            "status",
            "--store",
            "etcd://127.0.0.1:1/p",
            "--etcd-password-file",
            "/pw",
        ]),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(out.code, Some(64));
    assert!(out.stderr.contains("etcd_user"), "{}", out.stderr);
}

/// The Python client in examples/ (used by the compose demo and the k8s app pattern) sends the
/// token from `--token-file` or `$CLUSTERLIMIT_TOKEN_FILE`, and reports a 401 as exit 64.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_client_sends_the_token_from_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path());
    let sc = Served::start(&[
        "--listen",
        "127.0.0.1:0",
        "--store",
        "memory://client-token",
        "--token-file",
        &token,
    ])
    .await;
    let client = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/sidecar_client.py");
    let run = |extra: Vec<String>, env_file: Option<String>| {
        let mut c = tokio::process::Command::new("python3");
        c.arg(client)
            .args(["--url", &sc.url, "--semaphore", "jobs", "--capacity", "1"])
            .args(extra)
            .args(["--", "sh", "-c", "test -n \"$CLUSTERLIMIT_FENCING_TOKEN\""])
            .env_remove("CLUSTERLIMIT_TOKEN_FILE")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        if let Some(f) = env_file {
            c.env("CLUSTERLIMIT_TOKEN_FILE", f);
        }
        output(c, Duration::from_secs(30))
    };
    let out = run(vec!["--token-file".into(), token.clone()], None).await;
    assert_eq!(out.code, Some(0), "--token-file: {}", out.stderr);
    let out = run(vec![], Some(token.clone())).await;
    assert_eq!(out.code, Some(0), "CLUSTERLIMIT_TOKEN_FILE: {}", out.stderr);
    let out = run(vec![], None).await;
    assert_eq!(out.code, Some(64), "no token: {}", out.stderr);
    assert!(out.stderr.contains("Bearer"), "{}", out.stderr);
    let printed = sc.stop().await;
    assert!(!printed.contains(TOKEN), "{printed}");
}
