//! `clusterlimit top`: the live picture (`crate::live`) drawn in a terminal, for operators on
//! a host without a browser. A task takes pictures (`feed.rs`); a thread of its own reads keys
//! and draws the latest one (`screen.rs`, `draw.rs`), so a slow store never holds up a key.

mod draw;
mod feed;
mod keys;
mod screen;
mod store_lines;
mod terminal;

use super::args::TopArgs;
use crate::common::{exit, refuse_userinfo, Failure};
use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long the screen gets to stop after a signal before the process leaves without it.
const SIGNAL_GRACE: Duration = Duration::from_secs(1);
/// How long quitting waits for the store to end top's session (its TTL frees it otherwise).
const CLOSE_WITHIN: Duration = Duration::from_millis(500);

/// Runs `top` until a quit key, a signal, or a store URL the store side rejects.
pub async fn top(args: TopArgs) -> Result<ExitCode, Failure> {
    if !std::io::stdout().is_terminal() {
        return Err(Failure::new(
            exit::USAGE,
            "top draws a live screen and needs a terminal, but its output is not one; \
             for scripts use `clusterlimit status` (or `clusterlimit rate status`)",
        ));
    }
    // Argument errors before the screen is taken over, so they read like every command's.
    refuse_userinfo(&args.store.store)?;
    clusterlimit::StoreUrl::parse(&args.store.store).map_err(Failure::from_lib)?;
    args.store.security().check(&args.store.store)?;

    let quit = Arc::new(AtomicBool::new(false));
    let mut signals = Box::pin(tokio::spawn(quit_on_signals(quit.clone())));
    let (feed, pictures) = feed::start(&args);
    let interval = args.interval;
    let mut screen = tokio::task::spawn_blocking({
        let quit = quit.clone();
        move || screen::run(pictures, &quit, interval)
    });
    let shown = tokio::select! {
        shown = &mut screen => shown,
        _ = async {
            let _ = (&mut *signals).await;
            tokio::time::sleep(SIGNAL_GRACE).await;
        } => {
            // A signal, and the screen has not stopped: its terminal is gone (a closed pty,
            // which crossterm keeps reading without returning). Leave now; the store session's
            // TTL frees what `close` would have.
            let _ = ratatui::try_restore();
            std::process::exit(0);
        }
    };
    quit.store(true, Ordering::Relaxed);
    signals.abort();
    let limiter = feed.stop();
    if let Some(limiter) = limiter {
        let _ = tokio::time::timeout(CLOSE_WITHIN, limiter.close()).await;
    }
    match shown {
        Ok(Ok(())) => Ok(ExitCode::SUCCESS),
        Ok(Err(failure)) => Err(failure),
        Err(_) => Err(Failure::new(
            exit::SOFTWARE,
            "the screen stopped unexpectedly (the terminal was restored)",
        )),
    }
}

/// SIGTERM, SIGHUP (the terminal went away) and SIGINT quit like `q`, so the terminal is
/// restored on the way out.
async fn quit_on_signals(quit: Arc<AtomicBool>) {
    use tokio::signal::unix::{signal, SignalKind};
    let kinds = [
        SignalKind::terminate(),
        SignalKind::hangup(),
        SignalKind::interrupt(),
    ];
    let mut streams = Vec::new();
    for k in kinds {
        if let Ok(s) = signal(k) {
            streams.push(s);
        }
    }
    if streams.is_empty() {
        // No signal can be caught: never report one (that would end the screen).
        std::future::pending::<()>().await;
    }
    futures::future::select_all(streams.iter_mut().map(|s| Box::pin(s.recv()))).await;
    quit.store(true, Ordering::Relaxed);
}
