//! The `clusterlimit` binary: `run`, `status`, `set-capacity`, `rate`, `top` and the `serve`
//! sidecar. `cli/` parses the command line and runs the one-shot commands, `sidecar/` is the
//! HTTP/gRPC daemon, `live/` the live view's data that both show, `common/` what both need
//! from a process (exit codes, connecting, durations, quotas).
//! Dependencies go one way: cli → sidecar → live → common → the library.

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
