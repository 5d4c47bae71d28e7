//! The `clusterlimit` binary: `run`, `status`, `set-capacity` and the `serve` sidecar.
//! `cli/` parses the command line and runs the one-shot commands, `sidecar/` is the HTTP daemon,
//! `common/` is what both need from a process (exit codes, connecting, durations).
//! Dependencies go one way: cli → sidecar → common → the library.

mod cli;
mod common;
mod live;
mod sidecar;

fn main() -> std::process::ExitCode {
    // `run`'s supervisor of its command (Linux): first, before any thread or runtime exists.
    #[cfg(target_os = "linux")]
    if let Some(code) = cli::supervisor::main_if_asked() {
        return code;
    }
    cli::main()
}
