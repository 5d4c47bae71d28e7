//! The screen's loop, on a thread of its own: wait a little for a key, apply it, draw the
//! latest picture. Never waits for the store: the pictures arrive through a watch channel.

use super::draw;
use super::feed::Feed;
use super::keys::{Action, Selection};
use super::terminal::Screen;
use crate::common::{exit, Failure};
use ratatui::crossterm::event::{self, Event, KeyEventKind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::watch;

/// Redraws at least this often, so "updated Xs ago" keeps counting while the store is slow.
const TICK: Duration = Duration::from_millis(250);

/// Runs until a quit key or `quit` is set; the terminal is restored on every way out.
pub fn run(
    pictures: watch::Receiver<Feed>,
    quit: &AtomicBool,
    interval: Duration,
) -> Result<(), Failure> {
    let mut screen = Screen::enter()?;
    let mut selection = Selection::default();
    let broken = |e: std::io::Error| Failure::new(exit::SOFTWARE, format!("terminal: {e}"));
    while !quit.load(Ordering::Relaxed) {
        let feed = pictures.borrow().clone();
        if let Feed::Fatal { code, message } = feed {
            return Err(Failure::new(code, message));
        }
        screen
            .terminal
            .draw(|frame| draw::draw(frame, &feed, &mut selection, interval))
            .map_err(broken)?;
        // A resize needs nothing but the redraw that follows: drawing fits the new size.
        if event::poll(TICK).map_err(broken)? {
            if let Event::Key(key) = event::read().map_err(broken)? {
                if key.kind == KeyEventKind::Press && selection.key(key) == Action::Quit {
                    break;
                }
            }
        }
    }
    Ok(())
}
