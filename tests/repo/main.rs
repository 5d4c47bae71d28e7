//! The repository around the code: the docs' snippets, links and cited paths, the deploy
//! files, the import graph, the examples, and this layout of test targets.
//!
//! One test binary for this area (tower's `tests/<area>/main.rs` shape): each former test
//! file is a module, still at its path under tests/, and the helpers are compiled once.
//! A test's name is its former name under its file's module (`etcd_faults::…`).

#[path = "../binary/mod.rs"]
#[cfg(feature = "cli")]
mod binary;
#[path = "../support/mod.rs"]
#[cfg(feature = "cli")]
mod support;

#[path = "../deploy_files.rs"]
#[cfg(feature = "cli")]
mod deploy_files;
// deploy/k8s rendered by `kubectl kustomize`: the base and each shape (overlay).
#[path = "../k8s_render.rs"]
#[cfg(feature = "cli")]
mod k8s_render;
// README.md, CONTRIBUTING.md and docs/*.md: runnable shell snippets run with the real binary,
// links and cited paths exist (the Rust snippets are doctests, see src/lib.rs).
#[path = "../docs_snippets.rs"]
#[cfg(feature = "cli")]
mod docs_snippets;
#[path = "../examples_run.rs"]
#[cfg(all(
    feature = "cli",
    feature = "tower",
    feature = "axum",
    feature = "testing"
))]
mod examples_run;
#[path = "../import_graph.rs"]
mod import_graph;

// Every tests/*.rs file is in a test target (Cargo.toml lists them).
mod test_targets;
