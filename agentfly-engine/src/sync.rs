//! Locking the crate's mutexes.

use std::sync::{Mutex, MutexGuard};

/// `m`'s guard, even if a thread panicked holding it: what the crate's mutexes guard
/// (counters, the engine's statistics, a saved model's path, a checkpoint writer's handle)
/// is whole between two statements, so a panic elsewhere leaves nothing half-written.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
