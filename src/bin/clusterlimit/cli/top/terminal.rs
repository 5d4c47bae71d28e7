//! The terminal in raw mode on the alternate screen, and given back as it was on every way
//! out: a normal return, an error (drop) and a panic (ratatui's hook, then drop on unwind).

use crate::common::{exit, Failure};
use ratatui::DefaultTerminal;

/// Restores the terminal when dropped.
pub struct Screen {
    pub terminal: DefaultTerminal,
    _restore: Restore,
}

struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        // Harmless when raw mode or the alternate screen was never entered.
        let _ = ratatui::try_restore();
    }
}

impl Screen {
    /// Enters raw mode and the alternate screen.
    pub fn enter() -> Result<Screen, Failure> {
        // Armed first: a failure halfway in (raw mode on, no alternate screen) is undone too.
        let restore = Restore;
        let terminal = ratatui::try_init().map_err(|e| {
            Failure::new(exit::SOFTWARE, format!("cannot set up the terminal: {e}"))
        })?;
        Ok(Screen {
            terminal,
            _restore: restore,
        })
    }
}
