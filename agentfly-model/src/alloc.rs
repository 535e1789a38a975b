//! The allocator for training binaries.
//!
//! A training step allocates and frees gigabytes in blocks of tens to hundreds of megabytes
//! (activations kept for the backward pass, logits, gradients). glibc's `malloc` serves
//! every block over 32 MB with a fresh `mmap` and gives it back on `free`, so the next step
//! faults every page in again and the kernel zeroes it: on a 2-core machine that was a
//! third of a step's time (BENCHMARKS.md). mimalloc with purging off keeps freed memory
//! mapped and reuses it; the process's resident size then stays at its peak.
//!
//! A binary opts in with two lines (the `agentfly` binary, the benches and the examples do):
//!
//! ```ignore
//! #[global_allocator]
//! static ALLOC: agentfly_model::alloc::Allocator = agentfly_model::alloc::Allocator;
//! ```
//!
//! and the trainer calls [`retain_freed_memory`] when it starts (harmless without it).

pub use mimalloc::MiMalloc as Allocator;

/// `mi_option_purge_delay` in mimalloc v3's `mi_option_e` (the crate's Rust bindings do
/// not name it); the test below checks it against the option's default.
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Tells mimalloc never to return freed memory to the operating system, so that the next
/// training step reuses it instead of faulting fresh pages in. Idempotent; does nothing
/// useful (and no harm) when mimalloc is not the global allocator.
pub fn retain_freed_memory() {
    // SAFETY: `mi_option_set` writes one of mimalloc's option globals (an atomic store in
    // its C code); `PURGE_DELAY` is a valid option id (checked by the test below) and -1
    // is the documented "never purge" value.
    #[allow(unsafe_code)]
    unsafe {
        libmimalloc_sys::mi_option_set(PURGE_DELAY, -1);
    }
}

/// The current purge delay in milliseconds (-1: never), for tests and diagnostics.
pub fn purge_delay_ms() -> i64 {
    // SAFETY: reads one of mimalloc's option globals; `PURGE_DELAY` is a valid id.
    #[allow(unsafe_code)]
    let value = unsafe { libmimalloc_sys::mi_option_get(PURGE_DELAY) };
    // `c_long` is 64 bits here but 32 on some platforms.
    #[allow(clippy::useless_conversion)]
    i64::from(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_option_id_is_the_purge_delay() {
        // mimalloc v3's options.c gives the purge delay a default of 1000 ms, which no
        // other option has.
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            assert_eq!(purge_delay_ms(), 1000);
        }
        retain_freed_memory();
        assert_eq!(purge_delay_ms(), -1);
    }
}
