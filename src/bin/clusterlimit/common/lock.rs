//! The binary's one lock helper (the library has its own, `backend::lock`, private to it).

use std::sync::{Mutex, MutexGuard};

/// Locks ignoring poison: the tables and counters behind these locks (the sidecar's permits,
/// metrics and rate-limit handles, the live view's memory, the web view's logins) are updated
/// in single steps that a panic cannot leave half-done, and a panicked request task must not
/// turn every later request into a panic or a silently skipped update.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
