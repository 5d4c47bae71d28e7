//! The `clusterlimit` binary: `run`, `status`, `set-capacity` and the `serve` sidecar.
//! Everything lives in `cli/` (one-shot commands) and `sidecar/` (the HTTP daemon).

mod cli;
mod sidecar;

fn main() -> std::process::ExitCode {
    cli::main()
}
