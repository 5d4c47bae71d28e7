//! The command line both benches read (each bench's plan.rs turns it into its sizes).
//!
//! `cargo bench` passes `--bench`: a full run, writing into BENCHMARKS.md unless `--out` says
//! otherwise. `cargo test --all-targets` runs a `harness = false` bench without `--bench`:
//! that is the quick mode, and libtest's own options and name filters are honoured as far as
//! a single test named after the bench needs (`--list`, `--ignored`, `--skip`, filters), so
//! cargo-nextest runs the quick mode as one test too.

use std::path::PathBuf;

/// Result of reading the command line.
pub enum Parsed<T> {
    Run(T),
    /// Nothing to run; print this and exit 0.
    Exit(String),
}

impl<T> Parsed<T> {
    /// The run's plan made from `T`; an exit stays an exit.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Parsed<U> {
        match self {
            Parsed::Run(t) => Parsed::Run(f(t)),
            Parsed::Exit(message) => Parsed::Exit(message),
        }
    }
}

/// The options of a run, before the bench picks its sizes.
#[derive(Debug)]
pub struct Args {
    pub quick: bool,
    /// Markdown file whose generated block is replaced; `None` prints only.
    pub out: Option<PathBuf>,
    /// Which of the bench's own flags (`flags` of [`parse`]) were given.
    #[allow(dead_code)] // the rls bench has none
    pub flags: Vec<String>,
}

/// libtest options that take a value (`cargo test -- --test-threads 1`), so it is not taken
/// for a filter.
const LIBTEST_VALUED: &[&str] = &["--test-threads", "--format", "--color", "--logfile", "-Z"];

/// Reads `args` (without the program's path) for the bench `name` (what a `cargo test` filter
/// is matched against); `flags` are the bench's own switches besides `--quick` and `--out`.
pub fn parse(
    name: &str,
    usage: &str,
    flags: &[&str],
    args: impl IntoIterator<Item = String>,
) -> Result<Parsed<Args>, String> {
    let mut bench = false;
    let mut quick = false;
    let mut given = Vec::new();
    let mut out = None;
    let mut filters = Vec::new();
    let mut skips = Vec::new();
    let mut list = false;
    let mut ignored = false;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--bench" => bench = true,
            "--quick" => quick = true,
            a if flags.contains(&a) => given.push(a.to_string()),
            "--out" => out = Some(PathBuf::from(args.next().ok_or("--out needs a path")?)),
            "--help" | "-h" => return Ok(Parsed::Exit(usage.to_string())),
            "--list" => list = true,
            "--ignored" => ignored = true,
            "--skip" => skips.push(args.next().unwrap_or_default()),
            a if LIBTEST_VALUED.contains(&a) => {
                args.next();
            }
            a if a.starts_with('-') => {
                // Other libtest flags (--nocapture, --exact, …) change nothing here.
                if bench {
                    return Err(format!("unknown option {a}\n{usage}"));
                }
            }
            filter => filters.push(filter.to_string()),
        }
    }
    if list {
        // libtest's terse listing: the quick mode is one test, never an ignored one. cargo-nextest
        // lists this way and then runs it with `--exact NAME`.
        let listing = if ignored {
            String::new()
        } else {
            format!("{name}: test")
        };
        return Ok(Parsed::Exit(listing));
    }
    // `--ignored` runs ignored tests only, and the quick mode is not one.
    let filtered_out = ignored
        || (!filters.is_empty() && !filters.iter().any(|f| name.contains(f.as_str())))
        || skips.iter().any(|s| name.contains(s.as_str()));
    if filtered_out {
        return Ok(Parsed::Exit(format!("{name}: filtered out")));
    }
    // Without --bench we run as a test (cargo test): always the quick mode.
    let quick = quick || !bench;
    if !quick && out.is_none() {
        out = Some(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("BENCHMARKS.md"));
    }
    Ok(Parsed::Run(Args {
        quick,
        out,
        flags: given,
    }))
}
