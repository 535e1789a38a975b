//! Which of the CPU kernels' hardware paths run on this machine. Every kernel with an
//! AVX-512 path keeps a portable one that runs everywhere and computes the same; the tests
//! check the portable path always (the switch below forces it) and the hardware path where
//! the CPU has it, and `hardware_paths_here` lists which ran.

use std::sync::atomic::{AtomicBool, Ordering};

/// Set by tests: every dispatcher takes its portable path.
static PORTABLE_ONLY: AtomicBool = AtomicBool::new(false);

/// Whether the AVX-512 paths run: the CPU has AVX-512F, and no test forced the portable
/// paths.
#[inline]
pub(crate) fn avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        !PORTABLE_ONLY.load(Ordering::Relaxed) && std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether the CPU has AVX-512F at all.
pub(crate) fn cpu_has_avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The kernels' hardware paths and whether each runs here.
pub fn paths() -> Vec<(&'static str, bool)> {
    let avx512 = cpu_has_avx512();
    let amx = super::amx::available();
    vec![
        ("AVX-512: packed products (decode)", avx512),
        ("AVX-512: SwiGLU forward and backward", avx512),
        ("AVX-512: exp of softmax rows", avx512),
        ("AVX-512: decode attention", avx512),
        ("AMX: bf16 products", amx),
        ("AVX512-BF16: f32 to bf16 conversion", amx),
    ]
}

/// Runs `f` with every dispatcher on its portable path (tests only; concurrent users of the
/// switch are serialised, and other tests meanwhile merely run portable code too).
#[cfg(test)]
pub(crate) fn portable<T>(f: impl FnOnce() -> T) -> T {
    static USERS: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = USERS.lock().unwrap_or_else(|p| p.into_inner());
    PORTABLE_ONLY.store(true, Ordering::Relaxed);
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    PORTABLE_ONLY.store(false, Ordering::Relaxed);
    out.unwrap_or_else(|e| std::panic::resume_unwind(e))
}

/// Runs `check` on the portable paths, then again on the hardware ones where the CPU has
/// them; says which ran.
#[cfg(test)]
pub(crate) fn on_every_path(what: &str, check: impl Fn()) {
    portable(&check);
    if cpu_has_avx512() {
        check();
        eprintln!("{what}: portable and AVX-512 paths checked");
    } else {
        eprintln!("{what}: portable path checked; NOT RUN HERE: AVX-512 (no AVX-512F)");
    }
}

#[cfg(test)]
mod tests {
    /// Lists, in the test output (`--nocapture`; the test command prints it), which hardware
    /// paths this machine ran and which it could not.
    #[test]
    fn hardware_paths_here() {
        for (path, runs) in super::paths() {
            println!(
                "hardware path {path}: {}",
                if runs {
                    "RAN"
                } else {
                    "NOT RUN (not on this CPU)"
                }
            );
        }
    }
}
