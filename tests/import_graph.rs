//! No import cycle between the files of `src/` (issue 29): imports run one way, so each file
//! can be read knowing only the files below it.
//!
//! The graph is made from the source text: every `crate::…`, `super::…`, `self::…` path and
//! every path through a child module (in `use` trees and in code) is an arrow from the file it
//! is written in to the file of the deepest module it names. A parent's `mod child;` is not an
//! arrow (declaring is not importing), but its `pub use child::X` is. `#[cfg(test)]` modules
//! inside a file are left out (test code may look anywhere). Both crates are read: the library
//! from `src/lib.rs`, the binary from its `main.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One crate's modules: module path (segments) -> file, and file -> module path.
struct Crate {
    modules: BTreeMap<Vec<String>, PathBuf>,
    files: BTreeMap<PathBuf, Vec<String>>,
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// The source without comments, string and char literals (their text is not code), and
/// without `#[cfg(test)]` modules.
fn code_of(source: &str) -> String {
    let bytes: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let next = bytes.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < bytes.len() && bytes[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            i += 2;
            while i + 1 < bytes.len() && !(bytes[i] == '*' && bytes[i + 1] == '/') {
                i += 1;
            }
            i += 2;
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && !ident_before(&out) {
            // A raw string r"…" / r#"…"#.
            let mut j = i + 1;
            let mut hashes = 0;
            while bytes.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if bytes.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= bytes.len() {
                    break;
                }
                if bytes[j] == '"' && (0..hashes).all(|h| bytes.get(j + 1 + h) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < bytes.len() && bytes[i] != '"' {
                if bytes[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' {
            // A char literal ('a', '\n', '\u{..}') or a lifetime ('a): only the first is skipped.
            let close = if next == Some('\\') {
                (i + 2..bytes.len().min(i + 12)).find(|&j| bytes[j] == '\'')
            } else if bytes.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match close {
                Some(j) => {
                    out.push_str("' '");
                    i = j + 1;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    strip_test_modules(&out)
}

fn ident_before(out: &str) -> bool {
    out.chars()
        .last()
        .is_some_and(|c| c.is_alphanumeric() || c == '_')
}

/// Removes `#[cfg(test)] mod name { … }` blocks (code without comments or strings).
fn strip_test_modules(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "#[cfg(test)]".len()..];
        let trimmed = after.trim_start();
        let is_mod = trimmed.starts_with("mod ") || trimmed.starts_with("pub(crate) mod ");
        let brace = trimmed.find('{');
        let semi = trimmed.find(';');
        match (is_mod, brace) {
            (true, Some(b)) if semi.is_none_or(|s| s > b) => {
                let body = &trimmed[b..];
                let mut depth = 0usize;
                let mut end = body.len();
                for (k, ch) in body.char_indices() {
                    match ch {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = k + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                rest = &body[end..];
            }
            _ => {
                out.push_str("#[cfg(test)]");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// `mod name;` declarations of a file (not inline modules), one per line as rustfmt writes them.
fn declared_modules(code: &str) -> Vec<String> {
    code.lines()
        .filter_map(|line| {
            let line = line.trim();
            let line = ["pub(crate) ", "pub(super) ", "pub "]
                .iter()
                .find_map(|v| line.strip_prefix(v))
                .unwrap_or(line);
            let name = line.strip_prefix("mod ")?.strip_suffix(';')?.trim();
            name.chars()
                .all(|c| c.is_alphanumeric() || c == '_')
                .then(|| name.to_string())
        })
        .collect()
}

/// Where the child module `name` of a module kept in `file` lives.
fn child_file(file: &Path, name: &str) -> Option<PathBuf> {
    let dir = file.parent()?;
    let stem = file.file_stem()?.to_str()?;
    let base = if matches!(stem, "lib" | "main" | "mod") {
        dir.to_path_buf()
    } else {
        dir.join(stem)
    };
    [
        base.join(format!("{name}.rs")),
        base.join(name).join("mod.rs"),
    ]
    .into_iter()
    .find(|p| p.is_file())
}

fn load_crate(root: &Path) -> Crate {
    let mut krate = Crate {
        modules: BTreeMap::new(),
        files: BTreeMap::new(),
    };
    let mut todo = vec![(Vec::<String>::new(), root.to_path_buf())];
    while let Some((path, file)) = todo.pop() {
        let code = code_of(&read(&file));
        for child in declared_modules(&code) {
            let Some(child_path) = child_file(&file, &child) else {
                panic!("{}: `mod {child};` has no file", file.display());
            };
            let mut p = path.clone();
            p.push(child);
            todo.push((p, child_path));
        }
        krate.modules.insert(path.clone(), file.clone());
        krate.files.insert(file, path);
    }
    krate
}

/// Every path of a `use` tree (`a::{b, c::{d, e as f}, self}` → `a::b`, `a::c::d`, …).
fn expand_use(tree: &str) -> Vec<String> {
    let tree: String = tree.split_whitespace().collect::<Vec<_>>().join(" ");
    fn walk(prefix: &str, tree: &str, out: &mut Vec<String>) {
        let tree = tree.trim();
        if let Some(open) = tree.find('{') {
            let head = tree[..open].trim().trim_end_matches("::");
            let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
            let base = join(prefix, head);
            let mut depth = 0;
            let mut start = 0;
            for (k, ch) in inner.char_indices() {
                match ch {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        walk(&base, &inner[start..k], out);
                        start = k + 1;
                    }
                    _ => {}
                }
            }
            walk(&base, &inner[start..], out);
        } else {
            let item = tree.split(" as ").next().unwrap_or("").trim();
            if item.is_empty() {
                return;
            }
            if item == "self" {
                out.push(prefix.to_string());
            } else {
                out.push(join(prefix, item));
            }
        }
    }
    fn join(a: &str, b: &str) -> String {
        match (a.is_empty(), b.is_empty()) {
            (true, _) => b.to_string(),
            (_, true) => a.to_string(),
            _ => format!("{a}::{b}"),
        }
    }
    let mut out = Vec::new();
    walk("", &tree, &mut out);
    out
}

/// The paths a file names: its `use` trees, and `crate::`/`super::`/`self::`/`child::` paths
/// in its code.
fn named_paths(code: &str, children: &BTreeSet<String>) -> Vec<String> {
    let mut paths = Vec::new();
    let mut rest_code = String::new();
    for stmt in code.split_inclusive(';') {
        let t = stmt.trim_start();
        let body = t
            .strip_prefix("pub(crate) use ")
            .or_else(|| t.strip_prefix("pub(super) use "))
            .or_else(|| t.strip_prefix("pub use "))
            .or_else(|| t.strip_prefix("use "));
        // A `use` after attributes (`#[allow(deprecated)] pub use …`).
        let body = body.or_else(|| {
            let at = t.find("use ")?;
            let before = &t[..at];
            (before.trim_end().ends_with(']') || before.trim_end().ends_with("pub"))
                .then(|| &t[at + 4..])
                .filter(|_| before.trim_start().starts_with("#["))
        });
        match body {
            Some(b) => paths.extend(expand_use(b.trim_end_matches(';'))),
            None => rest_code.push_str(stmt),
        }
    }
    let chars: Vec<char> = rest_code.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let boundary = i == 0
            || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_' || chars[i - 1] == ':');
        if boundary && (chars[i].is_alphabetic() || chars[i] == '_') {
            let start = i;
            while i < chars.len()
                && (chars[i].is_alphanumeric()
                    || chars[i] == '_'
                    || (chars[i] == ':' && chars.get(i + 1) == Some(&':'))
                    || (chars[i] == ':' && i > 0 && chars[i - 1] == ':'))
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let first = word.split("::").next().unwrap_or("");
            if word.contains("::")
                && (matches!(first, "crate" | "super" | "self") || children.contains(first))
            {
                paths.push(word.trim_end_matches(':').to_string());
            }
        } else {
            i += 1;
        }
    }
    paths
}

/// The file of the deepest module `path` names, seen from the module `from`.
fn resolve(krate: &Crate, from: &[String], path: &str) -> Option<PathBuf> {
    let segs: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    let mut cur: Vec<String> = from.to_vec();
    let mut k = 0;
    match segs.first().copied() {
        Some("crate") => {
            cur.clear();
            k = 1;
        }
        Some("self") => k = 1,
        Some("super") => {
            while segs.get(k) == Some(&"super") {
                cur.pop();
                k += 1;
            }
        }
        _ => {}
    }
    let mut moved = false;
    for seg in &segs[k..] {
        let mut next = cur.clone();
        next.push((*seg).to_string());
        if krate.modules.contains_key(&next) {
            cur = next;
            moved = true;
        } else {
            break;
        }
    }
    // A bare relative path that names no child module is another crate's.
    if k == 0 && !moved {
        return None;
    }
    krate.modules.get(&cur).cloned()
}

fn edges(krate: &Crate) -> BTreeMap<PathBuf, BTreeMap<PathBuf, BTreeSet<String>>> {
    let mut graph: BTreeMap<PathBuf, BTreeMap<PathBuf, BTreeSet<String>>> = BTreeMap::new();
    for (file, module) in &krate.files {
        let code = code_of(&read(file));
        let children: BTreeSet<String> = declared_modules(&code).into_iter().collect();
        for path in named_paths(&code, &children) {
            if let Some(to) = resolve(krate, module, &path) {
                if &to != file {
                    graph
                        .entry(file.clone())
                        .or_default()
                        .entry(to)
                        .or_default()
                        .insert(path);
                }
            }
        }
        graph.entry(file.clone()).or_default();
    }
    graph
}

/// Strongly connected components of more than one file (Tarjan).
fn cycles(graph: &BTreeMap<PathBuf, BTreeMap<PathBuf, BTreeSet<String>>>) -> Vec<Vec<PathBuf>> {
    struct State<'a> {
        graph: &'a BTreeMap<PathBuf, BTreeMap<PathBuf, BTreeSet<String>>>,
        index: BTreeMap<&'a PathBuf, usize>,
        low: BTreeMap<&'a PathBuf, usize>,
        stack: Vec<&'a PathBuf>,
        on_stack: BTreeSet<&'a PathBuf>,
        next: usize,
        found: Vec<Vec<PathBuf>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a PathBuf) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        let graph = s.graph;
        for w in graph.get(v).into_iter().flat_map(|m| m.keys()) {
            let Some((w, _)) = graph.get_key_value(w) else {
                continue;
            };
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.clone());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.found.push(component);
            }
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.found
}

fn crate_roots() -> Vec<PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut roots = vec![src.join("lib.rs")];
    for main in [src.join("main.rs"), src.join("bin/clusterlimit/main.rs")] {
        if main.is_file() {
            roots.push(main);
        }
    }
    roots
}

fn describe(
    graph: &BTreeMap<PathBuf, BTreeMap<PathBuf, BTreeSet<String>>>,
    cycle: &[PathBuf],
) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let name = |p: &PathBuf| p.strip_prefix(root).unwrap_or(p).display().to_string();
    let mut text = format!(
        "cycle of {} files: {}\n",
        cycle.len(),
        cycle.iter().map(name).collect::<Vec<_>>().join(", ")
    );
    for from in cycle {
        for (to, paths) in &graph[from] {
            if cycle.contains(to) {
                let names: Vec<&str> = paths.iter().map(String::as_str).collect();
                text.push_str(&format!(
                    "  {} -> {}: {}\n",
                    name(from),
                    name(to),
                    names.join(", ")
                ));
            }
        }
    }
    text
}

#[test]
fn no_file_of_src_imports_a_file_that_imports_it_back() {
    let mut report = String::new();
    let mut files = 0;
    for root in crate_roots() {
        let krate = load_crate(&root);
        files += krate.files.len();
        let graph = edges(&krate);
        for cycle in cycles(&graph) {
            report.push_str(&describe(&graph, &cycle));
        }
    }
    assert!(files > 100, "only {files} files found under src/");
    assert!(
        report.is_empty(),
        "imports must run one way: name the file that defines a thing, not a parent that \
         re-exports it, and move what two files share into a third both import.\n{report}"
    );
}

/// The checker itself: a made-up crate with one cycle through a re-export, one through
/// `super::`, and arrows that are not cycles.
#[test]
fn the_checker_finds_cycles_through_reexports_and_super() {
    let dir = std::env::temp_dir().join(format!("import-graph-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let write = |rel: &str, text: &str| {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    };
    write("lib.rs", "mod a;\npub mod b;\npub use a::A;\n");
    write("a/mod.rs", "mod x;\nmod y;\npub use x::A;\n");
    // x -> a/mod.rs (a re-export) -> x: a cycle.
    write("a/x.rs", "use super::Y;\npub struct A;\n");
    write(
        "a/y.rs",
        "pub struct Y; // crate::b::B in a comment is no arrow\n",
    );
    // b -> lib.rs, lib.rs does not import b: no cycle; "crate::a::A" in a string is no arrow.
    write("b.rs", "pub fn f() -> crate::A { let _ = \"crate::a::x\"; crate::A }\n#[cfg(test)]\nmod tests { use crate::a::x::A; }\n");
    let krate = load_crate(&dir.join("lib.rs"));
    assert_eq!(krate.files.len(), 5);
    let graph = edges(&krate);
    let found = cycles(&graph);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(found.len(), 1, "{found:?}");
    let names: Vec<String> = found[0]
        .iter()
        .map(|p| p.strip_prefix(&dir).unwrap_or(p).display().to_string())
        .collect();
    assert_eq!(names, ["a/mod.rs", "a/x.rs"]);
    let b = &graph[&dir.join("b.rs")];
    assert_eq!(b.keys().collect::<Vec<_>>(), [&dir.join("lib.rs")]);
}
