//! The `clusterlimit` binary: `run`, `status`, `set-capacity` and the `serve` sidecar.
//! `cli/` parses the command line and runs the one-shot commands, `sidecar/` is the HTTP daemon,
//! `frontend/` is what both need from a process (exit codes, connecting, durations).
//! Dependencies go one way: cli → sidecar → frontend → the library.

mod cli;
mod frontend;
mod sidecar;

fn main() -> std::process::ExitCode {
    cli::main()
}
