//! Where a decode step runs: on one of rayon's worker threads, the others kept awake.

use std::sync::atomic::{AtomicBool, Ordering};

/// Runs `f` on one of rayon's worker threads (here, if this is one). A decode step's
/// products and attention split their work over rayon's threads; called from a thread
/// outside the pool, that thread sleeps on every split while rayon's threads, between
/// splits, spin and compete with it for the cores. On a worker, the thread that runs the
/// step is one of those that share its work.
///
/// The other workers stay awake for the step: between two of its parallel operations
/// (a few tens of microseconds of serial work) an idle rayon thread would go to sleep
/// and be woken by the next one's first split, a system call on the step's path each
/// time, ~180 times a step. Each of them runs a job that takes the step's work as it
/// appears ([`rayon::yield_now`]) until `f` returns.
pub(super) fn on_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    let done = AtomicBool::new(false);
    let run = || {
        let here = rayon::current_thread_index();
        rayon::scope(|scope| {
            for _ in 1..rayon::current_num_threads() {
                let done = &done;
                scope.spawn(move |_| {
                    // Taken back by the thread running `f` (while it waits on a split):
                    // nothing to keep awake there, and spinning would hold `f` up.
                    if rayon::current_thread_index() == here {
                        return;
                    }
                    while !done.load(Ordering::Acquire) {
                        if rayon::yield_now() != Some(rayon::Yield::Executed) {
                            // A few hundred cycles between looks at the step's queue,
                            // which its own thread pushes to and pops from.
                            for _ in 0..16 {
                                std::hint::spin_loop();
                            }
                        }
                    }
                });
            }
            // Set when `f` returns or unwinds: a spinner left waiting would hold the scope.
            let _release = Release(&done);
            f()
        })
    };
    if rayon::current_thread_index().is_some() {
        run()
    } else {
        rayon::scope(|_| run())
    }
}

/// Sets its flag when dropped.
struct Release<'a>(&'a AtomicBool);

impl Drop for Release<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::on_pool;

    #[test]
    fn returns_what_f_returns_from_outside_and_inside_the_pool() {
        let sum = on_pool(|| (0..1000u64).map(|i| i * i).sum::<u64>());
        assert_eq!(sum, 332_833_500);
        let nested = rayon::scope(|_| on_pool(|| on_pool(|| 7)));
        assert_eq!(nested, 7);
    }

    #[test]
    fn a_panic_in_f_reaches_the_caller_and_frees_the_pool() {
        let caught = std::panic::catch_unwind(|| on_pool(|| panic!("a step failed")));
        assert!(caught.is_err());
        // The pool still runs work: no spinner was left waiting.
        let total: u64 = on_pool(|| {
            use rayon::prelude::*;
            (0..10_000u64).into_par_iter().sum()
        });
        assert_eq!(total, 49_995_000);
    }
}
