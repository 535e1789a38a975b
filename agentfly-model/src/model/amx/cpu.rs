//! Whether the CPU and the OS let this process use AMX: CPUID, then Linux' `arch_prctl`
//! for the tile data permission.
#![allow(unsafe_code)] // The arch_prctl system call (inline assembly).

use std::sync::OnceLock;

/// Whether this process can run [`super::matmul`]: the CPU has AMX-BF16 and the OS granted the
/// tile data state. Asked once.
pub fn available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(detect)
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn detect() -> bool {
    use std::arch::x86_64::__cpuid_count;
    // CPUID leaf 7: EDX bit 22 AMX-BF16, bit 24 AMX-TILE; leaf 0 gives the highest leaf.
    let (max_leaf, edx) = (__cpuid_count(0, 0).eax, __cpuid_count(7, 0).edx);
    if max_leaf < 7 || edx & (1 << 22) == 0 || edx & (1 << 24) == 0 {
        return false;
    }
    // Leaf 7.1 EAX bit 5: AVX512-BF16, which packing uses (every AMX CPU has it).
    if __cpuid_count(7, 1).eax & (1 << 5) == 0 {
        return false;
    }
    const ARCH_REQ_XCOMP_PERM: i64 = 0x1023;
    const XFEATURE_XTILEDATA: i64 = 18;
    const SYS_ARCH_PRCTL: i64 = 158;
    let ret: i64;
    // SAFETY: arch_prctl(ARCH_REQ_XCOMP_PERM) only changes which state the kernel lets this
    // process use; it reads no memory. The syscall clobbers rcx and r11.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") SYS_ARCH_PRCTL => ret,
            in("rdi") ARCH_REQ_XCOMP_PERM,
            in("rsi") XFEATURE_XTILEDATA,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack)
        );
    }
    ret == 0
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn detect() -> bool {
    false
}
