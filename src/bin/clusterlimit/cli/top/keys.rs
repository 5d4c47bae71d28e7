//! What the keys do: which pane has the focus and which row of each is selected.

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

/// The two panes a selection moves in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pane {
    #[default]
    Semaphores,
    RateLimits,
}

/// The screen's state between pictures.
#[derive(Debug, Default)]
pub struct Selection {
    pub focus: Pane,
    /// Selected row in each pane (kept within the rows shown when drawn).
    pub semaphore: usize,
    pub rate_limit: usize,
}

/// What a key asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Action {
    Quit,
    Redraw,
    Ignore,
}

impl Selection {
    /// Applies one key press.
    pub fn key(&mut self, key: KeyEvent) -> Action {
        let row = match self.focus {
            Pane::Semaphores => &mut self.semaphore,
            Pane::RateLimits => &mut self.rate_limit,
        };
        match key.code {
            KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => Action::Quit,
            KeyCode::Char('q') | KeyCode::Esc => Action::Quit,
            KeyCode::Up | KeyCode::Char('k') => {
                *row = row.saturating_sub(1);
                Action::Redraw
            }
            // Past the last row is brought back when drawn: the count may change meanwhile.
            KeyCode::Down | KeyCode::Char('j') => {
                *row = row.saturating_add(1);
                Action::Redraw
            }
            KeyCode::Tab | KeyCode::BackTab => {
                self.focus = match self.focus {
                    Pane::Semaphores => Pane::RateLimits,
                    Pane::RateLimits => Pane::Semaphores,
                };
                Action::Redraw
            }
            _ => Action::Ignore,
        }
    }

    /// Keeps the selections within `semaphores` and `rate_limits` rows. An empty list (the
    /// store unreachable for a moment) leaves its selection as it was.
    pub fn clamp(&mut self, semaphores: usize, rate_limits: usize) {
        if semaphores > 0 {
            self.semaphore = self.semaphore.min(semaphores - 1);
        }
        if rate_limits > 0 {
            self.rate_limit = self.rate_limit.min(rate_limits - 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn press(s: &mut Selection, code: KeyCode) -> Action {
        s.key(KeyEvent::new(code, KeyModifiers::NONE))
    }

    #[test]
    fn keys_move_within_the_focused_pane() {
        let mut s = Selection::default();
        press(&mut s, KeyCode::Down);
        press(&mut s, KeyCode::Char('j'));
        press(&mut s, KeyCode::Down);
        s.clamp(2, 3);
        assert_eq!((s.semaphore, s.rate_limit), (1, 0));
        press(&mut s, KeyCode::Tab);
        assert_eq!(s.focus, Pane::RateLimits);
        press(&mut s, KeyCode::Down);
        press(&mut s, KeyCode::Char('k'));
        press(&mut s, KeyCode::Up);
        assert_eq!((s.semaphore, s.rate_limit), (1, 0));
        s.clamp(0, 0);
        assert_eq!((s.semaphore, s.rate_limit), (1, 0));
        assert_eq!(press(&mut s, KeyCode::Char('x')), Action::Ignore);
        assert_eq!(press(&mut s, KeyCode::Char('q')), Action::Quit);
        assert_eq!(press(&mut s, KeyCode::Esc), Action::Quit);
        let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
        assert_eq!(s.key(ctrl_c), Action::Quit);
    }
}
