//! Giving memory back once a model or its caches are dropped.

/// Returns MLX's cached buffers and the C heap's free pages to the system. Without the
/// trim, glibc's per-thread arenas keep the freed weights resident: after Free, about 150 MB
/// of a 135M model stayed in RSS (measured on the 4-bit fixture; 15 MB before LoadModel).
pub fn release() {
    if let Err(e) = mlx_rs::memory::clear_cache() {
        tracing::warn!("clearing MLX's cache failed: {e}");
    }
    trim_heap();
}

/// Blocks at least this large get their own mapping, returned to the system when freed.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD: libc::c_int = 4 << 20;
/// Free memory at the top of an arena beyond this goes back to the system at once.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const TRIM_THRESHOLD: libc::c_int = 4 << 20;

/// Fixes glibc's thresholds for large blocks. By default each large free raises them (up to
/// 32 MiB mapped, 64 MiB kept at an arena's top), and `malloc_trim` never shrinks a thread
/// arena's top: ten 20 MB request messages left 74 MiB resident for good, and two answered
/// 1 MB grammars 47-67 MB with the top at 32 MiB (their automata live in the compile threads'
/// arenas). Fixed, a block of 4 MiB or more is mapped alone and unmapped when freed, and an
/// arena gives back free memory above 4 MiB at its top.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn bound_heap() {
    // SAFETY: mallopt takes no pointer; it sets two of the allocator's global parameters.
    let set = unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD)
            & libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    };
    if set != 1 {
        tracing::warn!("setting the C heap's thresholds failed");
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn bound_heap() {}

/// Returns the C heap's free pages to the system (glibc keeps freed memory in its arenas;
/// a grammar compile's freed automata would otherwise stay in its thread's arena).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn trim_heap() {
    // SAFETY: malloc_trim takes no pointer; it only returns free pages of every arena.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Other C libraries (macOS's among them) return large frees to the system themselves.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn trim_heap() {}

mod huge_pages;
pub use huge_pages::on_huge_pages;
