//! The signals `run` forwards to its command: SIGINT, SIGTERM, SIGHUP.

use crate::common::{exit, Failure};
use nix::sys::signal::Signal;
use tokio::signal::unix::{signal, SignalKind};

/// Handlers for the forwarded signals, installed once (a handler replaces the default action,
/// so from then on these signals no longer end our process).
pub struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    /// Installs the three handlers.
    pub fn install() -> Result<Signals, Failure> {
        let install = |kind| {
            signal(kind).map_err(|e| {
                Failure::new(
                    exit::SOFTWARE,
                    format!("cannot install signal handler: {e}"),
                )
            })
        };
        Ok(Signals {
            int: install(SignalKind::interrupt())?,
            term: install(SignalKind::terminate())?,
            hup: install(SignalKind::hangup())?,
        })
    }

    /// Waits for the next of the three signals. Cancel-safe.
    pub async fn recv(&mut self) -> Signal {
        tokio::select! {
            _ = self.int.recv() => Signal::SIGINT,
            _ = self.term.recv() => Signal::SIGTERM,
            _ = self.hup.recv() => Signal::SIGHUP,
        }
    }
}
