//! Cargo.toml lists the test targets (`autotests = false`): one binary per area,
//! `tests/<area>/main.rs`, declaring the test files of its area as modules, and the few test
//! files that are binaries of their own. A test file in neither would never run: this fails on
//! one, naming the ways in.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `path` without `.` and `..` components.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The value of `key = "…"` on a line of a TOML table, if that line sets it.
fn string_value<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let rest = line
        .trim()
        .strip_prefix(key)?
        .trim_start()
        .strip_prefix('=')?;
    rest.trim().strip_prefix('"')?.strip_suffix('"')
}

/// The `[[test]]` targets of Cargo.toml: (name, path relative to the root).
fn targets() -> Vec<(String, PathBuf)> {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).expect("read Cargo.toml");
    let mut out = Vec::new();
    for table in manifest.split("\n[").skip(1) {
        if !table.starts_with("[test]]") {
            continue;
        }
        let name = table.lines().find_map(|l| string_value(l, "name"));
        let name = name.expect("a [[test]] without a name").to_string();
        let path = table.lines().find_map(|l| string_value(l, "path"));
        let path = path.map_or_else(|| PathBuf::from(format!("tests/{name}.rs")), PathBuf::from);
        out.push((name, path));
    }
    out
}

/// The files an area's main.rs declares as modules with `#[path = "…"]`, relative to the root.
fn modules_of(main: &Path) -> Vec<PathBuf> {
    let text = std::fs::read_to_string(root().join(main))
        .unwrap_or_else(|e| panic!("read {}: {e}", main.display()));
    let dir = main.parent().expect("main.rs has a directory");
    text.lines()
        .filter_map(|l| {
            let l = l.trim().strip_prefix("#[path = \"")?;
            l.strip_suffix("\"]")
        })
        .map(|p| normalize(&dir.join(p)))
        .collect()
}

#[test]
fn every_test_file_is_in_a_target() {
    let targets = targets();
    assert!(!targets.is_empty(), "no [[test]] in Cargo.toml");
    let mut reached = BTreeSet::new();
    let mut problems = Vec::new();
    for (name, path) in &targets {
        if !root().join(path).is_file() {
            problems.push(format!(
                "[[test]] {name}: {} does not exist",
                path.display()
            ));
            continue;
        }
        if path.file_name().is_some_and(|f| f == "main.rs") {
            reached.extend(modules_of(path));
        }
        reached.insert(path.clone());
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("tests"))
        .expect("read tests/")
        .map(|e| e.expect("a tests/ entry").path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "rs"))
        .map(|p| {
            p.strip_prefix(root())
                .expect("under the root")
                .to_path_buf()
        })
        .collect();
    files.sort();
    for file in files {
        if !reached.contains(&file) {
            let stem = file.file_stem().unwrap_or_default().to_string_lossy();
            problems.push(format!(
                "{} is in no test target, so its tests never run: declare it in its area's \
                 tests/<area>/main.rs (`#[path = \"../{stem}.rs\"] mod {stem};`, its `mod support;` \
                 becoming `use crate::support;`), or, if it needs its process to itself, give it a \
                 [[test]] of its own in Cargo.toml",
                file.display()
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
