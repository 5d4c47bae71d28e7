//! Locking the front ends' shared tables.

use std::sync::{Mutex, MutexGuard};

/// Locks ignoring poison: the maps and counters behind these locks are updated in single
/// steps that a panic cannot leave half-done, and a panicked request task must not turn every
/// later request into a panic or a silently skipped update. (The library keeps the same rule
/// in `backend::lock`, which is private to it.)
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
