//! deploy/k8s as a cluster gets it: `kubectl kustomize` renders the base and each shape (the
//! overlays sidecar-per-pod, rls and daemonset; deploy/k8s itself is sidecar-per-pod), and the
//! checks run on what it renders: the kinds each shape promises and how they select each other;
//! the clusterlimit container's args run through `clusterlimit serve --check-config`, with the
//! rendered ConfigMaps where the pod mounts them, listening where its ports and probes point;
//! requests, limits, non-root, read-only; the token and store credentials mounted from Secrets,
//! none committed; one image tag, the crate's version.
//!
//! kubectl is needed (`scripts/test --install-deps` installs Debian's kubernetes-client;
//! `$CLUSTERLIMIT_KUBECTL` names another): without it these tests fail with that hint.

use crate::binary::{cmd, output, within};
use crate::deploy_files::{
    assert_env_holds_no_secret, at, deploy, field, files, list, pod_containers, read, text,
    toml_table, yaml_docs,
};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use yaml_rust2::{Yaml, YamlLoader};

/// Each shape: its directory under deploy/k8s and the kinds it renders, with their counts.
const SHAPES: [(&str, &[(&str, usize)]); 4] = [
    ("base", &[("ConfigMap", 2), ("Deployment", 1)]),
    (
        "overlays/sidecar-per-pod",
        &[("ConfigMap", 2), ("Deployment", 1), ("NetworkPolicy", 1)],
    ),
    (
        "overlays/rls",
        &[
            ("ConfigMap", 3),
            ("Deployment", 1),
            ("PodDisruptionBudget", 1),
            ("Service", 1),
        ],
    ),
    (
        "overlays/daemonset",
        &[("ConfigMap", 2), ("DaemonSet", 1), ("Service", 1)],
    ),
];

fn kubectl() -> PathBuf {
    if let Some(path) = std::env::var_os("CLUSTERLIMIT_KUBECTL") {
        return path.into();
    }
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join("kubectl"))
                .find(|p| p.is_file())
        })
        .unwrap_or_else(|| {
            panic!(
                "kubectl is not on PATH: these tests render deploy/k8s with `kubectl kustomize`. \
                 Install it with `scripts/test --install-deps` (Debian's kubernetes-client), or \
                 set CLUSTERLIMIT_KUBECTL to a kubectl binary"
            )
        })
}

/// What `kubectl kustomize deploy/k8s/DIR` renders, without the empty documents kustomize 2.0
/// may add.
async fn render(dir: &str) -> Vec<Yaml> {
    let path = deploy().join("k8s").join(dir);
    let mut c = tokio::process::Command::new(kubectl());
    c.arg("kustomize")
        .arg(&path)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let out = within("kubectl kustomize", Duration::from_secs(60), c.output())
        .await
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", kubectl().display()));
    assert!(
        out.status.success(),
        "kubectl kustomize {} failed: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let rendered = String::from_utf8(out.stdout).expect("kubectl prints UTF-8");
    YamlLoader::load_from_str(&rendered)
        .unwrap_or_else(|e| panic!("{dir} renders YAML that does not parse: {e}"))
        .into_iter()
        .filter(|d| d.as_hash().is_some_and(|h| !h.is_empty()))
        .collect()
}

/// One shape as rendered.
struct Shape {
    dir: &'static str,
    docs: Vec<Yaml>,
}

impl Shape {
    fn of_kind(&self, kind: &str) -> impl Iterator<Item = &Yaml> + '_ {
        let kind = kind.to_string();
        self.docs
            .iter()
            .filter(move |d| text(field(d, "kind")) == kind)
    }

    fn named(&self, kind: &str, name: &str) -> &Yaml {
        self.of_kind(kind)
            .find(|d| text(at(d, "metadata.name")) == name)
            .unwrap_or_else(|| panic!("{}: no {kind} {name}", self.dir))
    }

    /// The Deployment or DaemonSet: exactly one per shape.
    fn workload(&self) -> &Yaml {
        let all: Vec<&Yaml> = self
            .of_kind("Deployment")
            .chain(self.of_kind("DaemonSet"))
            .collect();
        assert_eq!(all.len(), 1, "{}: one workload", self.dir);
        all[0]
    }

    fn pod(&self) -> &Yaml {
        at(self.workload(), "spec.template.spec")
    }

    /// The clusterlimit container and the list it is in.
    fn clusterlimit(&self) -> (&'static str, &Yaml) {
        pod_containers(self.workload())
            .into_iter()
            .find(|(_, c)| text(field(c, "name")) == "clusterlimit")
            .unwrap_or_else(|| panic!("{}: no clusterlimit container", self.dir))
    }

    /// `data.KEY` of the ConfigMap a volume or env reference names.
    fn config_map_value(&self, name: &str, key: &str) -> String {
        let data = field(self.named("ConfigMap", name), "data");
        assert!(
            !field(data, key).is_badvalue(),
            "{}: ConfigMap {name} has no {key}",
            self.dir
        );
        text(field(data, key))
    }

    /// The volume of the pod a container's mount names.
    fn volume(&self, mount: &Yaml) -> &Yaml {
        field(self.pod(), "volumes")
            .as_vec()
            .into_iter()
            .flatten()
            .find(|v| field(v, "name") == field(mount, "name"))
            .unwrap_or_else(|| panic!("{}: no volume for the mount {mount:?}", self.dir))
    }
}

async fn shapes() -> Vec<Shape> {
    let mut all = Vec::new();
    for (dir, _) in SHAPES {
        all.push(Shape {
            dir,
            docs: render(dir).await,
        });
    }
    all
}

fn labels_select(selector: &Yaml, labels: &Yaml) -> bool {
    let (Some(selector), Some(labels)) = (selector.as_hash(), labels.as_hash()) else {
        return false;
    };
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// The container port a probe or Service names (by name or number).
fn container_port(container: &Yaml, port: &Yaml) -> i64 {
    let wanted = text(port);
    field(container, "ports")
        .as_vec()
        .into_iter()
        .flatten()
        .find(|p| text(field(p, "name")) == wanted || text(field(p, "containerPort")) == wanted)
        .and_then(|p| field(p, "containerPort").as_i64())
        .unwrap_or_else(|| panic!("no container port {wanted}"))
}

#[tokio::test]
async fn each_shape_renders_the_kinds_it_promises_selecting_its_pods() {
    for (shape, (_, kinds)) in shapes().await.iter().zip(SHAPES) {
        let mut counted = BTreeMap::new();
        for d in &shape.docs {
            *counted.entry(text(field(d, "kind"))).or_insert(0) += 1;
        }
        let wanted: BTreeMap<String, usize> =
            kinds.iter().map(|(k, n)| (k.to_string(), *n)).collect();
        assert_eq!(counted, wanted, "{}: the kinds rendered", shape.dir);

        let workload = shape.workload();
        let labels = at(workload, "spec.template.metadata.labels");
        assert!(
            labels_select(at(workload, "spec.selector.matchLabels"), labels),
            "{}: the selector does not match the pod labels",
            shape.dir
        );
        let (_, clusterlimit) = shape.clusterlimit();
        for service in shape.of_kind("Service") {
            assert!(labels_select(
                field(at(service, "spec"), "selector"),
                labels
            ));
            for p in field(at(service, "spec"), "ports").as_vec().unwrap() {
                container_port(clusterlimit, field(p, "targetPort"));
            }
        }
        for pdb in shape.of_kind("PodDisruptionBudget") {
            assert!(labels_select(at(pdb, "spec.selector.matchLabels"), labels));
            let min = at(pdb, "spec.minAvailable").as_i64().unwrap();
            let replicas = at(workload, "spec.replicas").as_i64().unwrap();
            assert!(
                min >= 1 && replicas > min,
                "{}: {replicas} replicas, {min} kept",
                shape.dir
            );
        }
        for policy in shape.of_kind("NetworkPolicy") {
            assert!(labels_select(
                at(policy, "spec.podSelector.matchLabels"),
                labels
            ));
        }
    }
    // `kubectl apply -k deploy/k8s` (the docs' command) applies the sidecar shape.
    assert_eq!(render(".").await, render("overlays/sidecar-per-pod").await);
}

#[tokio::test]
async fn each_shape_puts_clusterlimit_where_its_shape_says() {
    let all = shapes().await;
    let shape = |dir: &str| all.iter().find(|s| s.dir.ends_with(dir)).unwrap();

    // sidecar-per-pod: a native sidecar beside the app, which other pods reach on its port only.
    let sidecar = shape("sidecar-per-pod");
    let (list_name, container) = sidecar.clusterlimit();
    assert_eq!(list_name, "initContainers");
    assert_eq!(text(field(container, "restartPolicy")), "Always");
    let apps: Vec<_> = pod_containers(sidecar.workload())
        .into_iter()
        .filter(|(k, _)| *k == "containers")
        .collect();
    assert_eq!(apps.len(), 1, "one app container");
    // The app talks to the sidecar over the pod's loopback, on the sidecar's port.
    let sidecar_url = field(apps[0].1, "env")
        .as_vec()
        .unwrap()
        .iter()
        .find(|e| text(field(e, "name")) == "CLUSTERLIMIT_SIDECAR")
        .map(|e| text(field(e, "value")))
        .expect("the app is told where the sidecar is");
    let port = container_port(container, &Yaml::String("http".into()));
    assert_eq!(sidecar_url, format!("http://127.0.0.1:{port}"));
    let policy = sidecar.of_kind("NetworkPolicy").next().unwrap();
    let open: Vec<String> = field(at(policy, "spec"), "ingress")
        .as_vec()
        .unwrap()
        .iter()
        .flat_map(|rule| field(rule, "ports").as_vec().cloned().unwrap_or_default())
        .map(|p| text(field(&p, "port")))
        .collect();
    assert!(!open.is_empty(), "the policy admits nothing at all");
    assert!(!open.contains(&"7878".to_string()), "{open:?}");

    // rls: 2+ replicas behind a Service with the gRPC port, the rules a mounted directory.
    let rls = shape("rls");
    assert!(at(rls.workload(), "spec.replicas").as_i64().unwrap() >= 2);
    let service = rls.of_kind("Service").next().unwrap();
    let names: BTreeSet<String> = field(at(service, "spec"), "ports")
        .as_vec()
        .unwrap()
        .iter()
        .map(|p| text(field(p, "name")))
        .collect();
    assert_eq!(names, BTreeSet::from(["grpc".into(), "http".into()]));
    let (_, container) = rls.clusterlimit();
    for mount in field(container, "volumeMounts").as_vec().unwrap() {
        assert!(
            field(mount, "subPath").is_badvalue(),
            "a subPath mount never sees a ConfigMap update"
        );
    }

    // daemonset: one per node, reached on its own node only.
    let daemonset = shape("daemonset");
    assert_eq!(text(field(daemonset.workload(), "kind")), "DaemonSet");
    assert!(at(daemonset.workload(), "spec.replicas").is_badvalue());
    let service = daemonset.of_kind("Service").next().unwrap();
    assert_eq!(text(at(service, "spec.internalTrafficPolicy")), "Local");
}

/// Writes the ConfigMaps the container mounts under `root` (at their mount paths) and returns
/// (mount path, where it is under root), longest first.
fn materialize(shape: &Shape, container: &Yaml, root: &Path) -> Vec<(String, PathBuf)> {
    let mut mounts = Vec::new();
    for mount in field(container, "volumeMounts").as_vec().unwrap() {
        let volume = shape.volume(mount);
        let map = text(at(volume, "configMap.name"));
        if map.is_empty() {
            continue;
        }
        let mount_path = text(field(mount, "mountPath"));
        let local = root.join(mount_path.trim_start_matches('/'));
        std::fs::create_dir_all(&local).unwrap();
        let data = field(shape.named("ConfigMap", &map), "data");
        for (key, value) in data.as_hash().unwrap() {
            std::fs::write(local.join(text(key)), text(value)).unwrap();
        }
        mounts.push((mount_path, local));
    }
    mounts.sort_by_key(|(m, _)| std::cmp::Reverse(m.len()));
    mounts
}

/// The container's environment as the kubelet sets it (`pod-0` for the pod's name).
fn environment(shape: &Shape, container: &Yaml) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for e in field(container, "env").as_vec().into_iter().flatten() {
        let value = if !at(e, "valueFrom.configMapKeyRef").is_badvalue() {
            let key_ref = at(e, "valueFrom.configMapKeyRef");
            shape.config_map_value(&text(field(key_ref, "name")), &text(field(key_ref, "key")))
        } else if !at(e, "valueFrom.fieldRef").is_badvalue() {
            "pod-0".to_string()
        } else {
            text(field(e, "value"))
        };
        env.insert(text(field(e, "name")), value);
    }
    env
}

/// The container's args as `serve` gets them: `$(VAR)` expanded, mounted paths moved under the
/// test's directory.
fn args_as_run(
    args: &[String],
    env: &BTreeMap<String, String>,
    mounts: &[(String, PathBuf)],
) -> Vec<String> {
    args.iter()
        .map(|a| {
            let mut a = a.clone();
            for (k, v) in env {
                a = a.replace(&format!("$({k})"), v);
            }
            match mounts.iter().find(|(m, _)| Path::new(&a).starts_with(m)) {
                Some((m, local)) => local
                    .join(Path::new(&a).strip_prefix(m).unwrap())
                    .to_string_lossy()
                    .into_owned(),
                None => a,
            }
        })
        .collect()
}

/// The value `serve --check-config` prints after `label`.
fn setting(stdout: &str, label: &str) -> String {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(label).filter(|rest| rest.starts_with(' ')))
        .unwrap_or_else(|| panic!("no {label} in:\n{stdout}"))
        .trim()
        .to_string()
}

fn port_of(address: &str) -> i64 {
    address.rsplit(':').next().unwrap().parse().unwrap()
}

#[tokio::test]
async fn each_shape_runs_serve_listening_where_its_ports_and_probes_point() {
    for shape in shapes().await {
        let (_, container) = shape.clusterlimit();
        let dir = tempfile::tempdir().unwrap();
        let mounts = materialize(&shape, container, dir.path());
        let env = environment(&shape, container);
        let args = list(field(container, "args"));
        assert_eq!(args.first().map(String::as_str), Some("serve"));
        let mut run = args_as_run(&args, &env, &mounts);
        // The token is a Secret, not rendered: one written for the test (flags win over the file).
        let token = dir.path().join("token");
        std::fs::write(&token, "k8s-render-test-token\n").unwrap();
        run.extend(["--check-config".into(), "--token-file".into()]);
        run.push(token.to_string_lossy().into_owned());
        let refs: Vec<&str> = run.iter().map(String::as_str).collect();
        let mut c = cmd(&refs);
        c.envs(env.iter().filter(|(k, _)| k.starts_with("CLUSTERLIMIT_")));
        let out = output(c, Duration::from_secs(20)).await;
        assert_eq!(
            out.code,
            Some(0),
            "{}: serve {run:?}: {}",
            shape.dir,
            out.stderr
        );
        let stdout = out.stdout;

        // HTTP on every interface (the kubelet probes the pod IP), on the probed port.
        let listen = setting(&stdout, "listen");
        assert!(listen.starts_with("0.0.0.0:"), "{}: {listen}", shape.dir);
        for (probe, path) in [
            ("startupProbe", "/healthz"),
            ("livenessProbe", "/healthz"),
            ("readinessProbe", "/readyz"),
        ] {
            let p = field(container, probe);
            assert_eq!(text(at(p, "httpGet.path")), path, "{}: {probe}", shape.dir);
            let port = container_port(container, at(p, "httpGet.port"));
            assert_eq!(port, port_of(&listen), "{}: {probe}", shape.dir);
        }
        // Each container port is one serve listens on: HTTP, and gRPC where the RLS is on.
        let mut listening = BTreeSet::from([port_of(&listen)]);
        if let Some(grpc) = stdout.lines().find_map(|l| l.strip_prefix("grpc_listen")) {
            let grpc = grpc.trim().trim_start_matches("grpc://");
            assert_eq!(
                container_port(container, &Yaml::String("grpc".into())),
                port_of(grpc)
            );
            listening.insert(port_of(grpc));
        }
        let ports: BTreeSet<i64> = field(container, "ports")
            .as_vec()
            .unwrap()
            .iter()
            .filter_map(|p| field(p, "containerPort").as_i64())
            .collect();
        assert_eq!(ports, listening, "{}: container ports", shape.dir);
        assert_eq!(
            shape.dir.ends_with("rls"),
            stdout.contains("grpc_listen"),
            "{}: the RLS is on in the rls shape only",
            shape.dir
        );
        if shape.dir.ends_with("rls") {
            // The rules of the rendered ConfigMap, loaded from where the pod mounts it.
            let domain = setting(&stdout, "rls domain");
            assert!(domain.starts_with("edge (2 rules"), "{domain}");
        }
        // The store of the base's ConfigMap, the owner the pod's name.
        assert_eq!(setting(&stdout, "store"), env["CLUSTERLIMIT_STORE"]);
        assert!(env["CLUSTERLIMIT_STORE"].starts_with("etcds://"));
        assert_eq!(setting(&stdout, "owner"), "pod-0");
    }
}

#[tokio::test]
async fn every_pod_is_sized_and_unprivileged() {
    for shape in shapes().await {
        let pod = shape.pod();
        assert_eq!(text(at(pod, "securityContext.runAsNonRoot")), "true");
        assert_ne!(text(at(pod, "securityContext.runAsUser")), "0");
        assert_eq!(
            text(at(pod, "securityContext.seccompProfile.type")),
            "RuntimeDefault"
        );
        for (_, c) in pod_containers(shape.workload()) {
            let name = format!("{}: {}", shape.dir, text(field(c, "name")));
            for r in ["requests.cpu", "requests.memory", "limits.memory"] {
                assert!(
                    !text(at(c, &format!("resources.{r}"))).is_empty(),
                    "{name}: no {r}"
                );
            }
            for (key, want) in [
                ("allowPrivilegeEscalation", "false"),
                ("readOnlyRootFilesystem", "true"),
            ] {
                let got = text(at(c, &format!("securityContext.{key}")));
                assert_eq!(got, want, "{name}: {key}");
            }
            assert_eq!(
                list(at(c, "securityContext.capabilities.drop")),
                ["ALL"],
                "{name}"
            );
        }
    }
}

/// Where a container mounts Secret volumes (each read-only).
fn secret_mounts(shape: &Shape, container: &Yaml) -> Vec<String> {
    field(container, "volumeMounts")
        .as_vec()
        .into_iter()
        .flatten()
        .filter(|m| !field(shape.volume(m), "secret").is_badvalue())
        .map(|m| {
            assert_eq!(text(field(m, "readOnly")), "true", "{m:?} is writable");
            text(field(m, "mountPath"))
        })
        .collect()
}

/// The TOML the container's `--config` names, from the ConfigMap mounted there.
fn config_of(shape: &Shape, container: &Yaml) -> toml::Table {
    let args = list(field(container, "args"));
    let at_path = PathBuf::from(&args[args.iter().position(|a| a == "--config").unwrap() + 1]);
    let mount = field(container, "volumeMounts")
        .as_vec()
        .unwrap()
        .iter()
        .find(|m| at_path.starts_with(text(field(m, "mountPath"))))
        .expect("the config directory is mounted");
    let map = text(at(shape.volume(mount), "configMap.name"));
    let key = at_path.file_name().unwrap().to_str().unwrap();
    toml_table(&at_path, &shape.config_map_value(&map, key))
}

#[tokio::test]
async fn no_secret_is_committed_and_credentials_are_mounted_files() {
    for shape in shapes().await {
        assert_eq!(
            shape.of_kind("Secret").count(),
            0,
            "{}: a Secret",
            shape.dir
        );
        // No secret reaches any container through its environment.
        for (_, c) in pod_containers(shape.workload()) {
            let name = format!("{}: {}", shape.dir, text(field(c, "name")));
            assert!(field(c, "envFrom").is_badvalue(), "{name}: envFrom");
            for e in field(c, "env").as_vec().into_iter().flatten() {
                let var = text(field(e, "name"));
                assert!(
                    at(e, "valueFrom.secretKeyRef").is_badvalue(),
                    "{name}: {var} comes from a Secret through the environment"
                );
                assert_env_holds_no_secret(&name, &var, &text(field(e, "value")));
            }
        }
        // The config reads the token and every store credential from the Secret mounts.
        let (_, container) = shape.clusterlimit();
        let mounts = secret_mounts(&shape, container);
        let config = config_of(&shape, container);
        for key in ["token_file", "etcd_cacert", "etcd_cert", "etcd_key"] {
            let path = config
                .get(key)
                .and_then(|v| v.as_str())
                .unwrap_or_else(|| panic!("{}: the config has no {key}", shape.dir));
            assert!(
                mounts.iter().any(|m| Path::new(path).starts_with(m)),
                "{}: {key} = {path:?} is not in a Secret mount: {mounts:?}",
                shape.dir
            );
        }
        assert!(
            !config.contains_key("store"),
            "the store is set in one place"
        );
    }
    // The app reads the same token as the sidecar, from its own read-only mount.
    let sidecar = Shape {
        dir: "overlays/sidecar-per-pod",
        docs: render("overlays/sidecar-per-pod").await,
    };
    let (_, container) = sidecar.clusterlimit();
    let token_at = config_of(&sidecar, container)["token_file"]
        .as_str()
        .unwrap()
        .to_string();
    let (_, app) = pod_containers(sidecar.workload())
        .into_iter()
        .find(|(k, _)| *k == "containers")
        .unwrap();
    let told = field(app, "env")
        .as_vec()
        .unwrap()
        .iter()
        .find(|e| text(field(e, "name")) == "CLUSTERLIMIT_TOKEN_FILE")
        .map(|e| text(field(e, "value")))
        .expect("the app is told where the token is");
    assert_eq!(told, token_at);
    assert!(secret_mounts(&sidecar, app)
        .iter()
        .any(|m| Path::new(&told).starts_with(m)));
}

#[tokio::test]
async fn every_image_is_this_version() {
    let want = format!("clusterlimit:{}", env!("CARGO_PKG_VERSION"));
    for shape in shapes().await {
        let (_, container) = shape.clusterlimit();
        assert_eq!(text(field(container, "image")), want, "{}", shape.dir);
    }
    // The image that compose runs and the Dockerfile's build command names.
    let compose = read(&deploy().join("docker-compose.yml"));
    assert!(
        compose.contains(&format!("image: {want}")),
        "docker-compose.yml"
    );
    let dockerfile = read(&deploy().join("Dockerfile"));
    assert!(
        dockerfile.contains(&format!("-t {want} ")),
        "deploy/Dockerfile"
    );
}

/// The files a kustomization.yaml names (resources, patches, generators' files), by file name.
fn named_by(kustomization: &Yaml) -> BTreeSet<String> {
    let mut named: BTreeSet<String> = ["resources", "patchesStrategicMerge"]
        .iter()
        .flat_map(|k| list(field(kustomization, k)))
        .collect();
    for patch in field(kustomization, "patchesJson6902")
        .as_vec()
        .into_iter()
        .flatten()
    {
        named.insert(text(field(patch, "path")));
    }
    for generator in field(kustomization, "configMapGenerator")
        .as_vec()
        .into_iter()
        .flatten()
    {
        named.extend(list(field(generator, "files")));
    }
    named
}

#[test]
fn every_manifest_is_named_by_its_kustomization() {
    let k8s = deploy().join("k8s");
    let mut dirs = BTreeSet::new();
    for file in files(&k8s, &["yaml", "yml", "toml"]) {
        dirs.insert(file.parent().unwrap().to_path_buf());
    }
    let shapes: BTreeSet<PathBuf> = SHAPES.iter().map(|(d, _)| k8s.join(d)).collect();
    dirs.remove(&k8s);
    assert_eq!(
        dirs, shapes,
        "a directory under deploy/k8s that is not a shape"
    );
    for dir in shapes.iter().chain([&k8s]) {
        let kustomization = &yaml_docs(&dir.join("kustomization.yaml"))[0];
        let present: BTreeSet<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_file() && p.file_name().unwrap() != "kustomization.yaml")
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(named_by(kustomization), present, "{}", dir.display());
    }
}
