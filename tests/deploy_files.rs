//! deploy/ cannot be run here (no container engine, no cluster, no systemd as PID 1), so it is
//! checked by parsing: every YAML and TOML file parses, every sidecar config passes
//! `clusterlimit serve --check-config`, and the facts each file promises hold (3 etcd + 3
//! ZooKeeper + 2 sidecars + a demo job; systemd hardening; a multi-stage non-root image). Also
//! the errors of `--check-config` itself. The Kubernetes manifests are rendered and checked as a
//! cluster gets them in tests/k8s_render.rs, with the helpers here.

use crate::binary;

use binary::{cmd, output};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;
use yaml_rust2::{Yaml, YamlLoader};

pub(crate) fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

/// Every file under `dir` whose name ends with one of `exts`, sorted.
pub(crate) fn files(dir: &Path, exts: &[&str]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("read {}: {e}", d.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if exts
                .iter()
                .any(|x| path.extension().is_some_and(|e| e == *x))
            {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

pub(crate) fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

pub(crate) fn yaml_docs(path: &Path) -> Vec<Yaml> {
    YamlLoader::load_from_str(&read(path))
        .unwrap_or_else(|e| panic!("{} is not valid YAML: {e}", path.display()))
}

pub(crate) fn toml_table(path: &Path, text: &str) -> toml::Table {
    toml::from_str(text).unwrap_or_else(|e| panic!("{} is not valid TOML: {e}", path.display()))
}

/// `node[key]`, following YAML merge keys (`<<: *anchor`), which the parser leaves as keys.
pub(crate) fn field<'a>(node: &'a Yaml, key: &str) -> &'a Yaml {
    static BAD: Yaml = Yaml::BadValue;
    let Some(hash) = node.as_hash() else {
        return &BAD;
    };
    if let Some(v) = hash.get(&Yaml::String(key.into())) {
        return v;
    }
    match hash.get(&Yaml::String("<<".into())) {
        Some(Yaml::Array(sources)) => sources
            .iter()
            .map(|s| field(s, key))
            .find(|v| !v.is_badvalue())
            .unwrap_or(&BAD),
        Some(source) => field(source, key),
        None => &BAD,
    }
}

/// `node.a.b.c` by a dotted path of keys.
pub(crate) fn at<'a>(node: &'a Yaml, path: &str) -> &'a Yaml {
    path.split('.').fold(node, field)
}

pub(crate) fn text(node: &Yaml) -> String {
    match node {
        Yaml::String(s) | Yaml::Real(s) => s.clone(),
        Yaml::Integer(i) => i.to_string(),
        Yaml::Boolean(b) => b.to_string(),
        _ => String::new(),
    }
}

pub(crate) fn list(node: &Yaml) -> Vec<String> {
    node.as_vec()
        .map(|v| v.iter().map(text).collect())
        .unwrap_or_default()
}

/// Runs `clusterlimit serve --check-config --config PATH`; panics unless it accepts it. A
/// config's `token_file` names where the deployment mounts the secret; here `--token-file`
/// points it at a token written for the test (flags override the file), and the printed
/// settings must not show that token.
pub(crate) async fn assert_config_ok(path: &Path) -> String {
    let config = toml_table(path, &read(path));
    let dir = tempfile::tempdir().unwrap();
    let token_path = dir.path().join("token");
    let token = "deploy-test-token-9f8e7d";
    std::fs::write(&token_path, format!("{token}\n")).unwrap();
    let mut args = vec![
        "serve",
        "--check-config",
        "--config",
        path.to_str().unwrap(),
    ];
    if config.contains_key("token_file") {
        args.extend(["--token-file", token_path.to_str().unwrap()]);
    }
    let out = output(cmd(&args), Duration::from_secs(20)).await;
    assert_eq!(
        out.code,
        Some(0),
        "`serve --check-config` rejects {}: {}",
        path.display(),
        out.stderr
    );
    assert!(out.stdout.starts_with("config ok"), "{}", out.stdout);
    assert!(
        !out.stdout.contains(token) && !out.stderr.contains(token),
        "the token is printed: {}{}",
        out.stdout,
        out.stderr
    );
    out.stdout
}

/// The port of a sidecar config's `listen` address.
pub(crate) fn listen_port(config: &toml::Table) -> u16 {
    let listen = config["listen"].as_str().expect("listen is set");
    listen.rsplit(':').next().unwrap().parse().unwrap()
}

/// A JSON patch (a kustomize `patchesJson6902` file): a list of operations on paths.
fn is_json_patch(doc: &Yaml) -> bool {
    doc.as_vec().is_some_and(|ops| {
        !ops.is_empty()
            && ops.iter().all(|op| {
                !text(field(op, "op")).is_empty() && text(field(op, "path")).starts_with('/')
            })
    })
}

#[test]
fn every_yaml_and_toml_file_parses() {
    let yaml = files(&deploy(), &["yml", "yaml"]);
    let toml_files = files(&deploy(), &["toml"]);
    assert!(
        yaml.len() >= 5 && toml_files.len() >= 3,
        "{yaml:?} {toml_files:?}"
    );
    for path in &yaml {
        let docs = yaml_docs(path);
        assert!(!docs.is_empty(), "{} has no document", path.display());
        for doc in &docs {
            assert!(
                doc.as_hash().is_some() || is_json_patch(doc),
                "{}: a document is neither a mapping nor a JSON patch",
                path.display()
            );
        }
    }
    for path in &toml_files {
        toml_table(path, &read(path));
    }
}

#[tokio::test]
async fn every_sidecar_config_passes_check_config() {
    let mut checked = 0;
    for path in files(&deploy(), &["toml"]) {
        assert_config_ok(&path).await;
        checked += 1;
    }
    assert!(checked >= 4, "only {checked} sidecar configs found");
}

#[test]
fn compose_runs_three_etcd_three_zookeeper_two_sidecars_and_a_demo_job() {
    let path = deploy().join("docker-compose.yml");
    let doc = &yaml_docs(&path)[0];
    let services = field(doc, "services").as_hash().expect("services");
    let named = |pred: &dyn Fn(&Yaml) -> bool| -> Vec<String> {
        services
            .iter()
            .filter(|(_, s)| pred(s))
            .map(|(name, _)| text(name))
            .collect()
    };
    let etcd = named(&|s| text(field(s, "image")).starts_with("quay.io/coreos/etcd:"));
    let zk = named(&|s| text(field(s, "image")).starts_with("zookeeper:"));
    let sidecars = named(&|s| {
        list(field(s, "command"))
            .first()
            .is_some_and(|c| c == "serve")
    });
    assert_eq!(etcd.len(), 3, "etcd members: {etcd:?}");
    assert_eq!(zk.len(), 3, "ZooKeeper nodes: {zk:?}");
    assert_eq!(sidecars.len(), 2, "sidecars: {sidecars:?}");

    // etcd: every member is in the initial cluster under its own name.
    let etcd_1 = &services[&Yaml::String(etcd[0].clone())];
    let initial = text(at(etcd_1, "environment.ETCD_INITIAL_CLUSTER"));
    for name in &etcd {
        let s = &services[&Yaml::String(name.clone())];
        let command = list(field(s, "command"));
        let own = command
            .iter()
            .position(|a| a == "--name")
            .map(|i| command[i + 1].clone());
        assert_eq!(own.as_deref(), Some(name.as_str()), "{name}: --name");
        assert!(
            initial.contains(&format!("{name}=http://{name}:2380")),
            "{initial}"
        );
    }
    // ZooKeeper: 3 servers listed, one distinct id each.
    let mut ids = BTreeSet::new();
    for name in &zk {
        let s = &services[&Yaml::String(name.clone())];
        let servers = text(at(s, "environment.ZOO_SERVERS"));
        assert_eq!(servers.split_whitespace().count(), 3, "{servers}");
        assert!(servers.contains(&format!("={name}:2888:3888")), "{servers}");
        ids.insert(text(at(s, "environment.ZOO_MY_ID")));
    }
    assert_eq!(ids.len(), 3, "ZOO_MY_ID values: {ids:?}");

    // Each sidecar: a config file that exists, names the hosts of one store in this file, and
    // listens on the port it publishes.
    let mut stores = BTreeSet::new();
    for name in &sidecars {
        let s = &services[&Yaml::String(name.clone())];
        let command = list(field(s, "command"));
        let config_at = command
            .iter()
            .position(|a| a == "--config")
            .map(|i| command[i + 1].clone())
            .expect("the sidecar runs with --config");
        let volume = list(field(s, "volumes"))
            .into_iter()
            .find(|v| v.split(':').nth(1) == Some(config_at.as_str()))
            .unwrap_or_else(|| panic!("{name}: no volume mounts {config_at}"));
        let host_file = deploy().join(volume.split(':').next().unwrap());
        let config = toml_table(&host_file, &read(&host_file));
        let store = config["store"].as_str().unwrap().to_string();
        let members = if store.starts_with("etcd://") {
            &etcd
        } else {
            &zk
        };
        for m in members {
            assert!(
                store.contains(&format!("{m}:")),
                "{name}: {store} lacks {m}"
            );
        }
        stores.insert(store.split("://").next().unwrap().to_string());
        let port = listen_port(&config);
        assert!(
            list(field(s, "ports"))
                .iter()
                .any(|p| p.ends_with(&format!(":{port}"))),
            "{name}: port {port} not published"
        );
        assert_eq!(text(field(s, "read_only")), "true", "{name}: read_only");
    }
    assert_eq!(stores, BTreeSet::from(["etcd".into(), "zk".into()]));

    // The demo job: the stdlib client from examples/, through both sidecars.
    let demo = named(&|s| {
        list(field(s, "volumes"))
            .iter()
            .any(|v| v.contains("sidecar_client.py"))
    });
    assert_eq!(demo.len(), 1, "demo job: {demo:?}");
    let job = &services[&Yaml::String(demo[0].clone())];
    let script = list(field(job, "command")).join(" ");
    for name in &sidecars {
        assert!(
            script.contains(name.as_str()),
            "the demo job does not use {name}"
        );
        assert!(
            list(field(job, "depends_on")).contains(name),
            "depends_on {name}"
        );
    }
    let client = list(field(job, "volumes"))[0]
        .split(':')
        .next()
        .unwrap()
        .to_string();
    assert!(
        deploy().join(client).is_file(),
        "the demo job mounts a missing client"
    );
}

/// The pod template's containers (init containers first), each with its `kind` of list.
pub(crate) fn pod_containers(deployment: &Yaml) -> Vec<(&'static str, &Yaml)> {
    let spec = at(deployment, "spec.template.spec");
    let mut all = Vec::new();
    for kind in ["initContainers", "containers"] {
        if let Some(cs) = field(spec, kind).as_vec() {
            all.extend(cs.iter().map(|c| (kind, c)));
        }
    }
    all
}

/// `[section] key=value` lines of a systemd unit; a key may repeat.
fn unit_entries(unit: &str) -> Vec<(String, String, String)> {
    let mut section = String::new();
    let mut entries = Vec::new();
    for line in unit.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_string();
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("not key=value: {line:?}"));
        assert!(!section.is_empty(), "{k} outside any section");
        entries.push((section.clone(), k.trim().to_string(), v.trim().to_string()));
    }
    entries
}

#[tokio::test]
async fn systemd_unit_is_hardened_and_starts_a_checked_config() {
    let unit_path = deploy().join("systemd/clusterlimit.service");
    let unit = read(&unit_path);
    let entries = unit_entries(&unit);
    let get = |section: &str, key: &str| -> Vec<String> {
        entries
            .iter()
            .filter(|(s, k, _)| s == section && k == key)
            .map(|(_, _, v)| v.clone())
            .collect()
    };
    let one = |key: &str| get("Service", key).last().cloned().unwrap_or_default();
    for (key, want) in [
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("PrivateDevices", "yes"),
        ("ProtectKernelTunables", "yes"),
        ("ProtectKernelModules", "yes"),
        ("ProtectControlGroups", "yes"),
        ("RestrictNamespaces", "yes"),
        ("RestrictSUIDSGID", "yes"),
        ("LockPersonality", "yes"),
        ("MemoryDenyWriteExecute", "yes"),
        ("CapabilityBoundingSet", ""),
        ("Restart", "on-failure"),
    ] {
        assert_eq!(one(key), want, "[Service] {key}");
    }
    assert!(
        one("DynamicUser") == "yes" || !matches!(one("User").as_str(), "" | "root" | "0"),
        "runs as root"
    );
    assert!(!get("Service", "RestrictAddressFamilies").is_empty());
    assert!(!get("Service", "SystemCallFilter").is_empty());
    assert_eq!(get("Install", "WantedBy"), ["multi-user.target"]);

    // ExecStart serves the config shipped beside the unit; ExecStartPre checks it first.
    let start = one("ExecStart");
    let config_at = start
        .split_whitespace()
        .skip_while(|a| *a != "--config")
        .nth(1)
        .expect("ExecStart passes --config");
    assert!(start.contains("clusterlimit serve"), "{start}");
    let pre = one("ExecStartPre");
    assert!(
        pre.contains("serve --check-config") && pre.contains(config_at),
        "{pre}"
    );
    let shipped = deploy()
        .join("systemd")
        .join(Path::new(config_at).file_name().unwrap());
    assert_config_ok(&shipped).await;

    // systemd's own parser, where the machine has it, on the unit pointed at this build.
    let analyze = Path::new("/usr/bin/systemd-analyze");
    if analyze.is_file() {
        let dir = tempfile::tempdir().unwrap();
        let local = dir.path().join("clusterlimit.service");
        let unit = unit
            .replace("/usr/local/bin/clusterlimit", binary::BIN)
            .replace(config_at, shipped.to_str().unwrap());
        std::fs::write(&local, unit).unwrap();
        let out = std::process::Command::new(analyze)
            .arg("verify")
            .arg(&local)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && stderr.trim().is_empty(),
            "systemd-analyze verify: {stderr}"
        );
    } else {
        eprintln!("note: no /usr/bin/systemd-analyze here; the unit was checked by parsing only");
    }
}

/// Dockerfile instructions, continuation lines joined: (INSTRUCTION, arguments).
fn dockerfile(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || (line.is_empty() && current.is_empty()) {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(part) => current.push_str(part),
            None => {
                current.push_str(line);
                let full = std::mem::take(&mut current);
                let (ins, args) = full.split_once(char::is_whitespace).unwrap_or((&full, ""));
                out.push((ins.to_uppercase(), args.trim().to_string()));
            }
        }
    }
    out
}

/// `X.Y[.Z]` as (X, Y).
fn version(text: &str) -> Option<(u32, u32)> {
    let mut parts = text.split('.');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// The highest `rust-version` among the crate and everything its build compiles (normal and
/// build dependencies, with the default features the image builds, as locked), and who asks
/// for it. (Not `--all-features`: in the workspace that also turns on every feature of the
/// vendored etcd client, e.g. its OpenSSL TLS, which clusterlimit never builds.)
fn rust_needed_to_build_the_binary() -> ((u32, u32), String) {
    let out = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--locked"])
        .arg("--manifest-path")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rust_version = |id: &str| {
        meta["packages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["id"] == id)
            .and_then(|p| p["rust_version"].as_str().and_then(version))
    };
    let nodes = meta["resolve"]["nodes"].as_array().unwrap();
    let mut todo = vec![meta["resolve"]["root"].as_str().unwrap().to_string()];
    let mut seen = BTreeSet::new();
    let mut needed = ((1, 0), String::new());
    while let Some(id) = todo.pop() {
        if !seen.insert(id.clone()) {
            continue;
        }
        if let Some(v) = rust_version(&id) {
            if v > needed.0 {
                needed = (v, id.clone());
            }
        }
        let node = nodes.iter().find(|n| n["id"] == id.as_str()).unwrap();
        for dep in node["deps"].as_array().unwrap() {
            let built = dep["dep_kinds"]
                .as_array()
                .unwrap()
                .iter()
                .any(|k| k["kind"].is_null() || k["kind"] == "build");
            if built {
                todo.push(dep["pkg"].as_str().unwrap().to_string());
            }
        }
    }
    needed
}

#[test]
fn dockerfile_is_multi_stage_with_a_small_non_root_runtime() {
    let steps = dockerfile(&read(&deploy().join("Dockerfile")));
    let froms: Vec<usize> = steps
        .iter()
        .enumerate()
        .filter(|(_, (i, _))| i == "FROM")
        .map(|(n, _)| n)
        .collect();
    assert!(froms.len() >= 2, "not multi-stage");
    let last = &steps[*froms.last().unwrap()..];
    let build = &steps[froms[0]..froms[1]];

    // Build stage: a toolchain new enough for the crate and every dependency locked in
    // Cargo.lock, and a locked release build of the binary.
    let build_from = &build[0].1;
    let image_rust = build_from
        .strip_prefix("rust:")
        .and_then(|rest| version(rest.split('-').next().unwrap()))
        .unwrap_or_else(|| panic!("build stage {build_from:?} is not a rust:X.Y image"));
    let (needed, by) = rust_needed_to_build_the_binary();
    assert!(
        image_rust >= needed,
        "build stage {build_from:?}: {by} needs Rust {}.{}",
        needed.0,
        needed.1
    );
    let stage = build_from.split_whitespace().last().unwrap();
    assert!(build
        .iter()
        .any(|(i, a)| i == "RUN" && a.contains("cargo build --release --locked")));

    // Runtime stage: a small base, only the binary copied from the build, a non-root user.
    let base = &last[0].1;
    assert!(
        ["distroless", "-slim", "alpine", "scratch"]
            .iter()
            .any(|b| base.contains(b)),
        "runtime base {base:?} is not a small image"
    );
    assert!(last
        .iter()
        .any(|(i, a)| i == "COPY" && a.contains(&format!("--from={stage}"))));
    let user = last
        .iter()
        .rev()
        .find(|(i, _)| i == "USER")
        .map(|(_, a)| a.clone())
        .expect("the runtime stage sets USER");
    let uid = user.split(':').next().unwrap();
    assert!(!matches!(uid, "root" | "0"), "runs as {user}");
    let entry = last
        .iter()
        .find(|(i, _)| i == "ENTRYPOINT")
        .expect("ENTRYPOINT");
    assert!(entry.1.contains("clusterlimit"));
    assert!(last.iter().any(|(i, a)| i == "EXPOSE" && a == "7878"));
}

/// A fresh machine builds with the Rust toolchain alone: no crate that runs a protobuf compiler
/// at build time is locked (vendor/etcd-client carries its generated code), and the image's
/// build stage installs none.
#[test]
fn building_needs_no_protoc() {
    let lock = read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.lock"));
    for generator in [
        "prost-build",
        "tonic-build",
        "tonic-prost-build",
        "protoc-bin-vendored",
    ] {
        assert!(
            !lock.contains(&format!("name = \"{generator}\"\n")),
            "Cargo.lock has {generator}: a build script runs protoc again (see vendor/etcd-client/README.md)"
        );
    }
    let etcd = Path::new(env!("CARGO_MANIFEST_DIR")).join("vendor/etcd-client");
    assert!(
        !etcd.join("build.rs").exists(),
        "vendor/etcd-client has a build script"
    );
    assert!(read(&etcd.join("src/rpc/pb.rs")).contains("include!(\"generated/etcdserverpb.rs\")"));
    let image = read(&deploy().join("Dockerfile"));
    assert!(
        !image.contains("protobuf-compiler"),
        "deploy/Dockerfile installs protoc"
    );
}

/// `serve --check-config` on a config with `body`: (exit code, stderr).
async fn check(body: &str) -> (Option<i32>, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, body).unwrap();
    let out = binary::check_config(&path).await;
    (out.code, out.stdout, out.stderr)
}

#[tokio::test]
async fn check_config_names_the_field_at_fault() {
    for (body, field) in [
        ("stor = \"memory://\"", "stor"),
        ("listen = \"nope\"", "listen"),
        ("session_ttl = \"soon\"", "session_ttl"),
        ("session_ttl = \"1s\"", "session_ttl"),
        ("permit_ttl = \"100ms\"", "permit TTL"),
        ("store = \"consul://h:1\"", "store"),
        ("store = \"etcd://h\"", "store"),
        ("owner = \"a\\u0001b\"", "owner"),
        ("[[semaphores]]\nname = \"a b\"\ncapacity = 1", "semaphores[0].name"),
        ("[[semaphores]]\nname = \"a\"\ncapacity = 0", "semaphores[0].capacity"),
        ("[[semaphores]]\nname = \"a\"\ncapacity = 1\n[[semaphores]]\nname = \"a\"\ncapacity = 2", "semaphores[1].name"),
        ("[[semaphores]]\nname = \"a\"", "capacity"),
    ] {
        let (code, stdout, stderr) = check(body).await;
        assert_eq!(code, Some(64), "{body:?} accepted: {stdout}{stderr}");
        assert!(stderr.contains(field), "{body:?}: {field:?} not named in: {stderr}");
        assert!(stderr.contains("Usage:"), "{stderr}");
    }
    let out = output(
        cmd(&["serve", "--check-config", "--config", "/nonexistent/c.toml"]),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(out.code, Some(64));
    assert!(out.stderr.contains("cannot read config"), "{}", out.stderr);
}

#[tokio::test]
async fn check_config_prints_the_settings_without_connecting() {
    // Nothing listens on this port: a check that connected would fail (exit 69).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let started = std::time::Instant::now();
    let (code, stdout, stderr) = check(&format!(
        "store = \"etcd://127.0.0.1:{port}/x\"\nsession_ttl = \"3s\"\n\
         [[semaphores]]\nname = \"exports\"\ncapacity = 4\n"
    ))
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(5));
    for want in [
        format!("etcd://127.0.0.1:{port}/x"),
        "session_ttl  3s".to_string(),
        "exports (capacity 4)".to_string(),
        "listen       127.0.0.1:7878".to_string(),
    ] {
        assert!(stdout.contains(&want), "{want:?} not in:\n{stdout}");
    }
    // Flags are checked with the file: a bad --store fails the check too.
    let out = output(
        cmd(&["serve", "--check-config", "--store", "nope"]),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(out.code, Some(64));
    assert!(out.stderr.contains("store"), "{}", out.stderr);
}

/// Whether an environment variable's name says it carries a secret. etcd's
/// `ETCD_INITIAL_CLUSTER_TOKEN` is a cluster id that keeps two clusters apart, not a credential.
fn secret_name(name: &str) -> bool {
    let n = name.to_ascii_uppercase();
    n != "ETCD_INITIAL_CLUSTER_TOKEN"
        && ["TOKEN", "PASSWORD", "SECRET", "DIGEST", "KEY", "CREDENTIAL"]
            .iter()
            .any(|s| n.contains(s))
}

/// Asserts that a secret-named variable carries a path (`…_FILE` = `/…`), never a value.
pub(crate) fn assert_env_holds_no_secret(what: &str, name: &str, value: &str) {
    if secret_name(name) {
        assert!(
            name.ends_with("_FILE") && value.starts_with('/'),
            "{what}: {name} carries a secret in the environment ({value:?}); mount it as a file"
        );
    }
}

#[test]
fn compose_and_systemd_hand_the_token_over_as_a_file() {
    let doc = &yaml_docs(&deploy().join("docker-compose.yml"))[0];
    let secrets = field(doc, "secrets").as_hash().expect("top-level secrets");
    for (name, def) in secrets {
        let file = text(field(def, "file"));
        assert!(
            file.starts_with("./secrets/"),
            "{}: secret source {file:?} outside deploy/secrets",
            text(name)
        );
    }
    // deploy/secrets/ is never committed (nor sent to the image build).
    let ignore = read(&deploy().join("secrets/.gitignore"));
    assert!(ignore.lines().any(|l| l.trim() == "*"), "{ignore}");
    assert!(read(&deploy().join("Dockerfile.dockerignore")).contains("deploy/secrets"));

    let services = field(doc, "services").as_hash().unwrap();
    let mut sidecars = 0;
    for (name, s) in services {
        let name = text(name);
        if let Some(env) = field(s, "environment").as_hash() {
            for (k, v) in env {
                assert_env_holds_no_secret(&name, &text(k), &text(v));
            }
        }
        let command = list(field(s, "command"));
        if command.first().map(String::as_str) != Some("serve") {
            continue;
        }
        sidecars += 1;
        let config_at = &command[command.iter().position(|a| a == "--config").unwrap() + 1];
        let host = list(field(s, "volumes"))
            .into_iter()
            .find(|v| v.split(':').nth(1) == Some(config_at.as_str()))
            .unwrap();
        let host_file = deploy().join(host.split(':').next().unwrap());
        let config = toml_table(&host_file, &read(&host_file));
        let token_file = config["token_file"].as_str().expect("token_file");
        let mounted = list(field(s, "secrets"));
        assert!(
            mounted
                .iter()
                .any(|m| token_file == format!("/run/secrets/{m}")
                    && secrets.contains_key(&Yaml::String(m.clone()))),
            "{name}: token_file {token_file} is not one of its secrets {mounted:?}"
        );
    }
    assert_eq!(sidecars, 2);
    // The demo job sends the token: it mounts the secret and points the client at it.
    let job = services
        .values()
        .find(|s| {
            list(field(s, "volumes"))
                .iter()
                .any(|v| v.contains("sidecar_client.py"))
        })
        .unwrap();
    let token_file = text(at(job, "environment.CLUSTERLIMIT_TOKEN_FILE"));
    assert!(list(field(job, "secrets"))
        .iter()
        .any(|m| token_file == format!("/run/secrets/{m}")));

    // systemd: a credential only the service can read, where the shipped config looks.
    let unit = read(&deploy().join("systemd/clusterlimit.service"));
    let credential = unit_entries(&unit)
        .into_iter()
        .find(|(s, k, _)| s == "Service" && k == "LoadCredential")
        .map(|(_, _, v)| v)
        .expect("LoadCredential");
    let (id, _) = credential.split_once(':').unwrap();
    let toml_path = deploy().join("systemd/clusterlimit.toml");
    let config = toml_table(&toml_path, &read(&toml_path));
    assert_eq!(
        config["token_file"].as_str(),
        Some(format!("/run/credentials/clusterlimit.service/{id}").as_str())
    );
    assert!(
        !unit
            .lines()
            .any(|l| l.trim_start().starts_with("Environment=")
                && secret_name(l.split('=').nth(1).unwrap_or(""))),
        "a secret in Environment="
    );
}

#[tokio::test]
async fn check_config_checks_the_access_settings() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cr3t-deploy-token\n").unwrap();
    let empty = dir.path().join("empty");
    std::fs::write(&empty, "\n").unwrap();
    let token = token.to_str().unwrap();
    let empty = empty.to_str().unwrap();

    // Refused: the field (or address) is named, and the way out.
    for (body, wants) in [
        (
            "listen = \"0.0.0.0:7878\"".to_string(),
            &["0.0.0.0:7878", "--token-file", "--insecure-allow-remote"][..],
        ),
        (
            "token_file = \"/nonexistent/token\"".to_string(),
            &["token_file", "/nonexistent/token"],
        ),
        (format!("token_file = {empty:?}"), &["token_file", "empty"]),
        ("socket_mode = \"0999\"".to_string(), &["socket_mode"]),
        ("socket_mode = \"1777\"".to_string(), &["socket_mode"]),
        (
            "metrics_without_token = \"yes\"".to_string(),
            &["metrics_without_token"],
        ),
        (
            "store = \"etcd://h:1/p\"\netcd_password_file = \"/p\"".to_string(),
            &["etcd_password_file", "--etcd-user"],
        ),
        (
            "store = \"etcd://u:pw-in-url@h:1/p\"".to_string(),
            &["never put in a URL"],
        ),
    ] {
        let (code, stdout, stderr) = check(&body).await;
        assert_eq!(code, Some(64), "{body:?} accepted: {stdout}{stderr}");
        for want in wants {
            assert!(stderr.contains(want), "{body:?}: {want:?} not in: {stderr}");
        }
        assert!(!stderr.contains("pw-in-url"), "{stderr}");
    }

    // Accepted: a token, or the explicit override; the token itself is never printed.
    let (code, stdout, stderr) = check(&format!(
        "listen = \"0.0.0.0:7878\"\ntoken_file = {token:?}\nsocket_mode = \"0600\"\n\
         unix = \"/run/cl.sock\"\nmetrics_without_token = true\n\
         store = \"etcds://h:1/p\"\netcd_cacert = \"/ca.pem\"\netcd_user = \"svc\"\n\
         etcd_password_file = \"/pw\"\n"
    ))
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    for want in [
        format!("bearer token from {token} (/metrics open)"),
        "(mode 0600)".to_string(),
        "etcd_cacert=/ca.pem".to_string(),
        "etcd_user=svc".to_string(),
    ] {
        assert!(stdout.contains(&want), "{want:?} not in:\n{stdout}");
    }
    assert!(!stdout.contains("s3cr3t-deploy-token"), "{stdout}");
    let (code, stdout, stderr) =
        check("listen = \"0.0.0.0:7878\"\ninsecure_allow_remote = true\n").await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("none (insecure_allow_remote)"), "{stdout}");
    // Loopback needs no token; the socket defaults to 0660.
    let (code, stdout, stderr) = check("unix = \"/run/cl.sock\"\n").await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.contains("(mode 0660)") && stdout.contains("none (loopback only)"),
        "{stdout}"
    );
}
