//! The public API, written down: every public path of the library (modules, types, their
//! fields, variants and methods, trait impls, functions, constants, macros) is listed in
//! `docs/public-api.txt`, and this test fails when the crate no longer matches it. A removed or
//! renamed item is a breaking change for users; an added one is not, but the list must still be
//! refreshed so that reviews see it. After an intended change, refresh the file with
//!
//! ```text
//! CLUSTERLIMIT_PUBLIC_API=refresh cargo test --all-features --test public_api
//! ```
//!
//! and commit it (a removal also needs a deprecated alias first, see `src/deprecated.rs`).
//! Each line is `KIND PATH`, with ` (deprecated)` after a deprecated item; a type's fields,
//! variants, inherent methods and associated constants are listed under its path, and the
//! traits it implements as `impl TRAIT for PATH` (blanket impls left out). Items reachable at
//! two paths (a module's and a re-export's) are listed at both: either path is API.
//!
//! The list comes from rustdoc's JSON output (unstable, so `RUSTC_BOOTSTRAP=1`), built in its
//! own directory under the target dir: the flag changes what some dependencies' build scripts
//! detect, and sharing the main target dir would rebuild them twice on every run. It is built
//! without the `cli` and `zk-tls` features, which add nothing to the library's API (the binary's
//! dependencies and a TLS crypto provider) but cost a C build.

use serde_json::Value;
use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;

const LISTING: &str = "docs/public-api.txt";
const FEATURES: &str = "tower,axum,testing";

/// Builds the rustdoc JSON of the library; returns the file's path.
fn rustdoc_json() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
        .join("public-api");
    let out = Command::new(env!("CARGO"))
        .args(["rustdoc", "--lib", "--quiet", "--no-default-features"])
        .args(["--features", FEATURES])
        .arg("--manifest-path")
        .arg(root.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target)
        .args(["--", "-Z", "unstable-options", "--output-format", "json"])
        .env("RUSTC_BOOTSTRAP", "1")
        .env_remove("RUSTDOCFLAGS")
        .status()
        .expect("run cargo rustdoc");
    assert!(out.success(), "cargo rustdoc (JSON output) failed");
    target.join("doc").join("clusterlimit.json")
}

/// Walks rustdoc's JSON from the crate root through public modules and re-exports.
struct Walk<'a> {
    index: &'a serde_json::Map<String, Value>,
    paths: &'a serde_json::Map<String, Value>,
    lines: BTreeSet<String>,
    /// Items already walked, with the path they were walked under (a type re-exported at
    /// two paths is listed under both, its members once per path).
    seen: HashSet<(String, String)>,
}

/// The kind of an item (`struct`, `fn`, …) and its JSON body.
fn inner(item: &Value) -> (&str, &Value) {
    let (kind, body) = item["inner"]
        .as_object()
        .and_then(|o| o.iter().next())
        .expect("item has an inner kind");
    (kind.as_str(), body)
}

fn id_key(id: &Value) -> String {
    match id {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

impl Walk<'_> {
    fn item(&self, id: &Value) -> Option<&Value> {
        self.index.get(&id_key(id))
    }

    fn add(&mut self, kind: &str, path: &str, item: &Value) {
        let deprecated = if item["deprecation"].is_null() {
            ""
        } else {
            " (deprecated)"
        };
        self.lines.insert(format!("{kind} {path}{deprecated}"));
    }

    /// The name of a trait as users write it: the last segment of its path.
    fn trait_name(&self, t: &Value) -> String {
        let full = self
            .paths
            .get(&id_key(&t["id"]))
            .and_then(|p| p["path"].as_array())
            .and_then(|p| p.last())
            .and_then(Value::as_str)
            .map(str::to_string);
        full.unwrap_or_else(|| {
            let p = t["path"].as_str().or(t["name"].as_str()).unwrap_or("?");
            p.rsplit("::").next().unwrap_or(p).to_string()
        })
    }

    fn visit(&mut self, id: &Value, path: &str) {
        let Some(item) = self.item(id).cloned() else {
            return;
        };
        if !self.seen.insert((id_key(id), path.to_string())) {
            return;
        }
        let (kind, body) = inner(&item);
        match kind {
            "module" => {
                self.add("mod", path, &item);
                for child in body["items"].as_array().into_iter().flatten() {
                    self.child(child, path);
                }
            }
            "struct" | "union" => {
                self.add(kind, path, &item);
                if let Some(fields) = body["kind"]["plain"]["fields"].as_array() {
                    for f in fields {
                        if let Some(name) = self.item(f).and_then(|f| f["name"].as_str()) {
                            let line = format!("field {path}::{name}");
                            self.lines.insert(line);
                        }
                    }
                }
                if let Some(fields) = body["kind"]["tuple"].as_array() {
                    for (i, f) in fields.iter().enumerate() {
                        if !f.is_null() {
                            self.lines.insert(format!("field {path}::{i}"));
                        }
                    }
                }
                self.impls(body, path);
            }
            "enum" => {
                self.add("enum", path, &item);
                for v in body["variants"].as_array().into_iter().flatten() {
                    let Some(variant) = self.item(v).cloned() else {
                        continue;
                    };
                    let name = variant["name"].as_str().unwrap_or("?");
                    let vpath = format!("{path}::{name}");
                    self.add("variant", &vpath, &variant);
                    let (_, vbody) = inner(&variant);
                    for f in vbody["kind"]["struct"]["fields"]
                        .as_array()
                        .into_iter()
                        .flatten()
                    {
                        if let Some(fname) = self.item(f).and_then(|f| f["name"].as_str()) {
                            self.lines.insert(format!("field {vpath}::{fname}"));
                        }
                    }
                }
                self.impls(body, path);
            }
            "trait" => {
                self.add("trait", path, &item);
                for i in body["items"].as_array().into_iter().flatten() {
                    self.member(i, path);
                }
            }
            "function" => self.add("fn", path, &item),
            "constant" => self.add("const", path, &item),
            "static" => self.add("static", path, &item),
            "type_alias" => self.add("type", path, &item),
            "macro" | "proc_macro" => self.add("macro", path, &item),
            other => self.add(other, path, &item),
        }
    }

    /// A module's child: an item, or a re-export (`pub use`).
    fn child(&mut self, id: &Value, prefix: &str) {
        let Some(item) = self.item(id).cloned() else {
            return;
        };
        let (kind, body) = inner(&item);
        if kind != "use" {
            let name = item["name"].as_str().unwrap_or("?");
            self.visit(id, &format!("{prefix}::{name}"));
            return;
        }
        let target = &body["id"];
        if body["is_glob"].as_bool() == Some(true) {
            if let Some(module) = self.item(target).cloned() {
                for c in inner(&module).1["items"].as_array().into_iter().flatten() {
                    self.child(c, prefix);
                }
            }
            return;
        }
        let path = format!("{prefix}::{}", body["name"].as_str().unwrap_or("?"));
        if self.item(target).is_some() {
            self.visit(target, &path);
        } else {
            // A re-export of another crate's item.
            let source = body["source"].as_str().unwrap_or("?");
            self.lines.insert(format!("use {path} = {source}"));
        }
    }

    /// An associated item of a type or trait.
    fn member(&mut self, id: &Value, path: &str) {
        let Some(item) = self.item(id).cloned() else {
            return;
        };
        let Some(name) = item["name"].as_str() else {
            return;
        };
        let kind = match inner(&item).0 {
            "function" => "fn",
            "assoc_const" | "constant" => "const",
            "assoc_type" => "type",
            other => other,
        };
        self.add(kind, &format!("{path}::{name}"), &item);
    }

    /// A type's inherent members and the traits it implements (not blanket impls).
    fn impls(&mut self, body: &Value, path: &str) {
        for i in body["impls"].as_array().into_iter().flatten() {
            let Some(imp) = self.item(i).cloned() else {
                continue;
            };
            let (_, ibody) = inner(&imp);
            if !ibody["blanket_impl"].is_null() {
                continue;
            }
            let t = &ibody["trait"];
            if t.is_null() {
                for m in ibody["items"].as_array().into_iter().flatten() {
                    self.member(m, path);
                }
            } else {
                let neg = if ibody["is_negative"].as_bool() == Some(true) {
                    "!"
                } else {
                    ""
                };
                let name = self.trait_name(t);
                self.lines.insert(format!("impl {neg}{name} for {path}"));
            }
        }
    }
}

fn listing() -> String {
    // `CLUSTERLIMIT_PUBLIC_API_JSON=FILE`: list a JSON built elsewhere (another commit's).
    let json = std::env::var_os("CLUSTERLIMIT_PUBLIC_API_JSON")
        .map(PathBuf::from)
        .unwrap_or_else(rustdoc_json);
    let text =
        std::fs::read_to_string(&json).unwrap_or_else(|e| panic!("read {}: {e}", json.display()));
    let doc: Value = serde_json::from_str(&text).expect("rustdoc JSON parses");
    let mut walk = Walk {
        index: doc["index"].as_object().expect("index"),
        paths: doc["paths"].as_object().expect("paths"),
        lines: BTreeSet::new(),
        seen: HashSet::new(),
    };
    let root = doc["root"].clone();
    walk.visit(&root, "clusterlimit");
    assert!(
        walk.lines.len() > 100,
        "rustdoc's JSON gave only {} public items: has its format changed?",
        walk.lines.len()
    );
    let mut out = String::from(
        "# The public API of clusterlimit (features tower, axum, testing), one item a line.\n\
         # Checked by tests/public_api.rs; refresh after an intended change with\n\
         #   CLUSTERLIMIT_PUBLIC_API=refresh cargo test --all-features --test public_api\n",
    );
    for line in &walk.lines {
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[test]
fn public_api_matches_the_committed_listing() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join(LISTING);
    let now = listing();
    if std::env::var("CLUSTERLIMIT_PUBLIC_API").as_deref() == Ok("refresh") {
        std::fs::write(&file, &now).unwrap_or_else(|e| panic!("write {}: {e}", file.display()));
        return;
    }
    let committed = std::fs::read_to_string(&file).unwrap_or_default();
    let items = |s: &str| -> BTreeSet<String> {
        s.lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(str::to_string)
            .collect()
    };
    let (was, is) = (items(&committed), items(&now));
    let removed: Vec<_> = was.difference(&is).collect();
    let added: Vec<_> = is.difference(&was).collect();
    if removed.is_empty() && added.is_empty() {
        return;
    }
    let mut msg = String::new();
    if !removed.is_empty() {
        msg.push_str(&format!(
            "{} public item(s) of {LISTING} are gone or changed: a breaking change for users. \
             Keep the old path (a deprecated alias, see src/deprecated.rs) unless the break is \
             intended:\n",
            removed.len()
        ));
        for l in &removed {
            msg.push_str(&format!("  - {l}\n"));
        }
    }
    if !added.is_empty() {
        msg.push_str(&format!(
            "{} public item(s) are new and not yet in {LISTING}:\n",
            added.len()
        ));
        for l in &added {
            msg.push_str(&format!("  + {l}\n"));
        }
    }
    msg.push_str(
        "If the change is intended, refresh the listing and commit it:\n  \
         CLUSTERLIMIT_PUBLIC_API=refresh cargo test --all-features --test public_api\n",
    );
    panic!("{msg}");
}
