//! Where a decode step runs: on one of rayon's worker threads.

/// Runs `f` on one of rayon's worker threads (here, if this is one). A decode step's
/// products and attention split their work over rayon's threads; called from a thread
/// outside the pool, that thread sleeps on every split while rayon's threads, between
/// splits, spin and compete with it for the cores. On a worker, the thread that runs the
/// step is one of those that share its work.
pub(super) fn on_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    if rayon::current_thread_index().is_some() {
        f()
    } else {
        rayon::scope(|_| f())
    }
}
