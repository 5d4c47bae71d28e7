//! What a report says about the run's machine and source: commit, CPU, load, tool versions.

/// `HEAD`'s short hash, with `+changes` when tracked files other than BENCHMARKS.md differ.
pub fn commit() -> String {
    let hash = command("git", &["rev-parse", "--short", "HEAD"]);
    let dirty = command(
        "git",
        &[
            "status",
            "--porcelain",
            "--untracked-files=no",
            "--",
            ".",
            ":!BENCHMARKS.md",
        ],
    );
    if dirty.is_empty() {
        hash
    } else {
        format!("{hash}+changes")
    }
}

/// A command's trimmed stdout, run in the crate's folder; `?` when it fails.
pub fn command(program: &str, args: &[&str]) -> String {
    std::process::Command::new(program)
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "?".to_string())
}

pub fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path).map_or_else(|_| "?".to_string(), |s| s.trim().to_string())
}

pub fn cpu_model() -> String {
    read_trimmed("/proc/cpuinfo")
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_else(|| "?".to_string())
}

/// The 1-minute load average (the machine is shared: this says how much).
pub fn load_average() -> String {
    read_trimmed("/proc/loadavg")
        .split_whitespace()
        .next()
        .unwrap_or("?")
        .to_string()
}

/// `etcd --version`'s version number.
pub fn etcd_version(etcd: &std::path::Path) -> String {
    command(&etcd.to_string_lossy(), &["--version"])
        .lines()
        .next()
        .unwrap_or("?")
        .trim_start_matches("etcd Version: ")
        .to_string()
}

/// The two lines under every report's title: when, which commit and build, how long (`what`:
/// "the whole run", "the rate part"), and the machine (`note` follows its kernel, e.g. ", shared
/// with other builds") with the load average before (`load_before`) and now.
pub fn run_lines(took: std::time::Duration, what: &str, note: &str, load_before: &str) -> String {
    let profile = if cfg!(debug_assertions) {
        "debug build"
    } else {
        "release build"
    };
    format!(
        "- {date}, commit {commit}, {profile}, {took:.0} s for {what}\n\
         - machine: {cpus} × {cpu}, Linux {kernel}{note}; load average {load_before} before, {load_after} after\n",
        date = command("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
        commit = commit(),
        took = took.as_secs_f64(),
        cpus = std::thread::available_parallelism().map_or(0, |n| n.get()),
        cpu = cpu_model(),
        kernel = read_trimmed("/proc/sys/kernel/osrelease"),
        load_after = load_average(),
    )
}

/// A run's mode for a report's title.
#[allow(dead_code)] // the rls bench names its mode in its prose
pub fn mode(quick: bool) -> &'static str {
    if quick {
        "quick run (`--quick`: small sizes; figures are smoke, not results)"
    } else {
        "full run"
    }
}
