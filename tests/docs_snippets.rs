//! The docs cannot drift: README.md, CONTRIBUTING.md, BENCHMARKS.md and docs/*.md are checked
//! here.
//!
//! - Every relative link resolves (to a file, and to a heading when it names one), and every
//!   path cited in inline code under `src/`, `tests/`, `benches/`, `examples/`, `deploy/`,
//!   `docs/` or `scripts/` exists.
//! - Every fenced block marked `runnable` runs with the built `clusterlimit` first on `PATH`,
//!   from the repository's root:
//!   - ```` ```sh runnable ````: a bash script (`set -euo pipefail`) that must exit 0;
//!   - ```` ```console runnable ````: a session. Each `$ ` line (with its `\` continuations)
//!     runs in one bash, must exit 0 and print what the lines under it show. In an expected
//!     line `…` matches any text; a line that is only `…` matches any number of lines.
//!   - with `sidecar` too, the block runs against a fresh `clusterlimit serve` on `memory://`;
//!   - with `etcd` too, against a fresh etcd of the test harness: `etcd://10.0.0.1:2379/` in
//!     the block is replaced by that server's URL.
//!
//!   In every runnable block the port `7878` is replaced by a free one (the sidecar's, for a
//!   `sidecar` block), so the tests never meet a sidecar running on the machine.
//!
//! The Rust snippets of the same files are compiled as doctests (`src/lib.rs`).

use crate::binary;
use crate::support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// Paths the docs cite that are made by the reader, not kept in the repository.
const PATHS_MADE_BY_THE_READER: &[&str] = &[
    // The compose secret the reader writes before `docker compose up` (git-ignored).
    "deploy/secrets/clusterlimit-token",
];

/// Prefixes of the repository paths whose citations are checked.
const CITED_ROOTS: &[&str] = &[
    "src/",
    "tests/",
    "benches/",
    "examples/",
    "deploy/",
    "docs/",
    "scripts/",
];

/// How long one runnable block may take.
const BLOCK_LIMIT: Duration = Duration::from_secs(60);

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md, CONTRIBUTING.md, BENCHMARKS.md and every docs/*.md, relative to the root.
fn doc_files() -> Vec<String> {
    let mut files = vec![
        "README.md".to_string(),
        "CONTRIBUTING.md".to_string(),
        "BENCHMARKS.md".to_string(),
    ];
    let mut docs: Vec<String> = std::fs::read_dir(root().join("docs"))
        .expect("read docs/")
        .map(|e| {
            e.expect("docs/ entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
}

/// A fenced code block: its info string, body and the line its fence opens on (1-based).
struct Block {
    info: String,
    body: String,
    line: usize,
}

/// The fenced blocks of a Markdown text, and its lines outside them (with their numbers).
fn split_fences(text: &str) -> (Vec<Block>, Vec<(usize, &str)>) {
    let mut blocks = Vec::new();
    let mut prose = Vec::new();
    let mut open: Option<(String, usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        match open.take() {
            None if trimmed.starts_with("```") => {
                open = Some((trimmed[3..].trim().to_string(), i + 1, String::new()));
            }
            None => prose.push((i + 1, line)),
            Some((info, start, body)) if trimmed == "```" => blocks.push(Block {
                info,
                body,
                line: start,
            }),
            Some((info, start, mut body)) => {
                body.push_str(line);
                body.push('\n');
                open = Some((info, start, body));
            }
        }
    }
    assert!(open.is_none(), "a code fence is never closed");
    (blocks, prose)
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces as `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    let (_, prose) = split_fences(text);
    prose
        .iter()
        .filter_map(|(_, l)| {
            let hashes = l.chars().take_while(|&c| c == '#').count();
            (hashes > 0 && l[hashes..].starts_with(' ')).then(|| slug(&l[hashes..]))
        })
        .collect()
}

/// The inline code spans of a line, and the line with them blanked out.
fn code_spans(line: &str) -> (Vec<&str>, String) {
    let mut spans = Vec::new();
    let mut rest = String::new();
    let mut i = 0;
    let bytes = line.as_bytes();
    while i < bytes.len() {
        if bytes[i] == b'`' {
            let ticks = line[i..].chars().take_while(|&c| c == '`').count();
            let fence = &line[i..i + ticks];
            if let Some(end) = line[i + ticks..].find(fence) {
                spans.push(line[i + ticks..i + ticks + end].trim());
                i += ticks + end + ticks;
                rest.push(' ');
                continue;
            }
            rest.push_str(fence);
            i += ticks;
            continue;
        }
        let c = line[i..].chars().next().expect("a char");
        rest.push(c);
        i += c.len_utf8();
    }
    (spans, rest)
}

/// The targets of the Markdown links `[text](target)` in a line without code spans.
fn link_targets(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(pos) = rest.find("](") {
        let after = &rest[pos + 2..];
        match after.find(')') {
            Some(end) => {
                out.push(after[..end].trim().to_string());
                rest = &after[end..];
            }
            None => break,
        }
    }
    out
}

fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

#[test]
fn links_and_cited_paths_exist() {
    let mut problems = Vec::new();
    for file in doc_files() {
        let text = read(&file);
        let dir = Path::new(&file)
            .parent()
            .unwrap_or(Path::new(""))
            .to_path_buf();
        let (_, prose) = split_fences(&text);
        for (n, line) in prose {
            let (spans, without_code) = code_spans(line);
            for target in link_targets(&without_code) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                let (path, anchor) = match target.split_once('#') {
                    Some((p, a)) => (p, Some(a)),
                    None => (target.as_str(), None),
                };
                let rel = if path.is_empty() {
                    PathBuf::from(&file)
                } else {
                    normalize(&dir.join(path))
                };
                let rel_str = rel.to_string_lossy().into_owned();
                if !root().join(&rel).exists() {
                    problems.push(format!(
                        "{file}:{n}: link to {target}: {rel_str} does not exist"
                    ));
                    continue;
                }
                if let Some(anchor) = anchor {
                    if rel_str.ends_with(".md") && !anchors(&read(&rel_str)).contains(anchor) {
                        problems.push(format!(
                            "{file}:{n}: link to {target}: no heading #{anchor} in {rel_str}"
                        ));
                    }
                }
            }
            for span in spans {
                let cited = span.trim_end_matches([',', '.', ';', ':']);
                let checked = CITED_ROOTS.iter().any(|r| cited.starts_with(r))
                    && !cited.contains(char::is_whitespace)
                    && !cited.contains(['*', '<', '{', '$', '…']);
                if checked
                    && !root().join(cited).exists()
                    && !PATHS_MADE_BY_THE_READER.contains(&cited)
                {
                    problems.push(format!("{file}:{n}: cites `{cited}`, which does not exist"));
                }
            }
        }
    }
    assert!(
        problems.is_empty(),
        "broken links or paths in the docs:\n{}",
        problems.join("\n")
    );
}

/// `pat` (with `…` matching any text) matches the whole of `line`.
fn line_matches(pat: &str, line: &str) -> bool {
    let parts: Vec<&str> = pat.split('…').collect();
    if parts.len() == 1 {
        return pat == line;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !line.starts_with(first) || line.len() < first.len() + last.len() || !line.ends_with(last) {
        return false;
    }
    let mut rest = &line[first.len()..line.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    true
}

/// `expected` (a line that is only `…` matching any number of lines) matches `actual`.
fn lines_match(expected: &[String], actual: &[String]) -> bool {
    match expected.split_first() {
        None => actual.is_empty(),
        Some((first, rest)) if first == "…" => {
            (0..=actual.len()).any(|skip| lines_match(rest, &actual[skip..]))
        }
        Some((first, rest)) => match actual.split_first() {
            Some((a, arest)) => line_matches(first, a) && lines_match(rest, arest),
            None => false,
        },
    }
}

/// One `$ ` command of a console block and the output the doc shows for it.
struct Step {
    command: String,
    expected: Vec<String>,
}

fn console_steps(body: &str) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    let mut continuing = false;
    for line in body.lines() {
        if continuing {
            let step = steps.last_mut().expect("a command");
            step.command.push('\n');
            step.command.push_str(line);
            continuing = line.ends_with('\\');
        } else if let Some(cmd) = line.strip_prefix("$ ") {
            steps.push(Step {
                command: cmd.to_string(),
                expected: Vec::new(),
            });
            continuing = cmd.ends_with('\\');
        } else {
            steps
                .last_mut()
                .expect("a console block starts with a `$ ` command")
                .expected
                .push(line.to_string());
        }
    }
    steps
}

fn output_lines(s: &str) -> Vec<String> {
    let mut lines: Vec<String> = s
        .replace('\r', "")
        .lines()
        .map(|l| l.trim_end().to_string())
        .collect();
    while lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    lines
}

const MARK: &str = "@@clusterlimit-docs-step";

/// Runs `script` with bash from the root, the binary first on PATH, in a process group of its
/// own that is killed afterwards (a background `serve` never outlives the block).
async fn run_bash(script: &str) -> (Option<i32>, String, String) {
    let bin_dir = Path::new(binary::BIN).parent().expect("the binary's dir");
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut c = tokio::process::Command::new("bash");
    c.arg("-c")
        .arg(script)
        .current_dir(root())
        .env("PATH", path)
        .env_remove("CLUSTERLIMIT_STORE")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let child = c.spawn().expect("spawn bash");
    let pgid = child.id().expect("bash's pid");
    let out = tokio::time::timeout(BLOCK_LIMIT, child.wait_with_output()).await;
    let _ = std::process::Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .stderr(Stdio::null())
        .status();
    let out = out
        .unwrap_or_else(|_| panic!("a runnable block took over {BLOCK_LIMIT:?}:\n{script}"))
        .expect("wait for bash");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind a free port")
        .local_addr()
        .expect("its address")
        .port()
}

/// Runs one runnable block; `Err` says what went wrong.
async fn run_block(block: &Block) -> Result<(), String> {
    let tags: Vec<&str> = block
        .info
        .split([' ', ','])
        .filter(|t| !t.is_empty())
        .collect();
    let sidecar = if tags.contains(&"sidecar") {
        Some(binary::Sidecar::start(&[]).await)
    } else {
        None
    };
    let port = match &sidecar {
        Some(s) => s.url.rsplit(':').next().expect("a port").to_string(),
        None => free_port().to_string(),
    };
    let etcd = tags
        .contains(&"etcd")
        .then(|| tokio::task::block_in_place(support::EtcdCluster::single));
    let mut body = block.body.replace("7878", &port);
    if let Some(etcd) = &etcd {
        body = body.replace("etcd://10.0.0.1:2379/", &etcd.url(""));
    }
    match tags.first().copied() {
        Some("sh") => {
            let (code, stdout, stderr) = run_bash(&format!("set -euo pipefail\n{body}")).await;
            if code != Some(0) {
                return Err(format!(
                    "exited {code:?}\n--- stdout\n{stdout}--- stderr\n{stderr}"
                ));
            }
        }
        Some("console") => {
            let steps = console_steps(&body);
            let mut script = String::new();
            for (i, step) in steps.iter().enumerate() {
                script.push_str(&step.command);
                script.push_str(&format!("\nprintf '\\n{MARK} {i} %d\\n' $?\n"));
            }
            let (_, stdout, stderr) = run_bash(&script).await;
            let mut rest = stdout.as_str();
            for (i, step) in steps.iter().enumerate() {
                let mark = format!("\n{MARK} {i} ");
                let Some(at) = rest.find(&mark) else {
                    return Err(format!(
                        "`{}` did not finish\n--- stdout\n{stdout}--- stderr\n{stderr}",
                        step.command
                    ));
                };
                let output = &rest[..at];
                let after = &rest[at + mark.len()..];
                let (code, next) = after.split_once('\n').unwrap_or((after, ""));
                rest = next;
                if code != "0" {
                    return Err(format!(
                        "`{}` exited {code}\n--- its output\n{output}\n--- stderr\n{stderr}",
                        step.command
                    ));
                }
                let actual = output_lines(output);
                let expected: Vec<String> = output_lines(&step.expected.join("\n"));
                if !lines_match(&expected, &actual) {
                    return Err(format!(
                        "`{}` printed\n{}\n--- but the doc shows\n{}\n--- stderr\n{stderr}",
                        step.command,
                        actual.join("\n"),
                        expected.join("\n")
                    ));
                }
            }
        }
        other => return Err(format!("runnable block of unknown kind {other:?}")),
    }
    drop(sidecar);
    drop(etcd);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runnable_snippets_run() {
    let mut failures = Vec::new();
    let mut ran = 0;
    for file in doc_files() {
        let (blocks, _) = split_fences(&read(&file));
        for block in blocks {
            if !block.info.split([' ', ',']).any(|t| t == "runnable") {
                continue;
            }
            ran += 1;
            eprintln!("{file}:{}: {}", block.line, block.info);
            if let Err(e) = run_block(&block).await {
                failures.push(format!("{file}:{}: {e}", block.line));
            }
        }
    }
    assert!(ran >= 8, "only {ran} runnable blocks found");
    assert!(
        failures.is_empty(),
        "runnable doc snippets failed:\n\n{}",
        failures.join("\n\n")
    );
}

#[test]
fn the_matcher_matches_what_it_should() {
    assert!(line_matches("a…c", "abbbc"));
    assert!(line_matches(
        "{\"id\":\"…\",\"n\":1}",
        "{\"id\":\"x1\",\"n\":1}"
    ));
    assert!(!line_matches("a…c", "abd"));
    assert!(line_matches("a…b…c", "a1b2c"));
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert!(lines_match(&s(&["x", "…", "y"]), &s(&["x", "1", "2", "y"])));
    assert!(lines_match(&s(&["x", "…", "y"]), &s(&["x", "y"])));
    assert!(!lines_match(&s(&["x", "y"]), &s(&["x", "z"])));
    assert_eq!(
        slug("Quick start: `clusterlimit run`"),
        "quick-start-clusterlimit-run"
    );
    assert_eq!(
        slug("Measured: the failover suite"),
        "measured-the-failover-suite"
    );
    let steps = console_steps("$ a \\\n  b\nout\n$ c\n");
    assert_eq!(steps.len(), 2);
    assert_eq!(steps[0].command, "a \\\n  b");
    assert_eq!(steps[0].expected, vec!["out".to_string()]);
}
