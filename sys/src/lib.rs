//! The calls into the C library that Wharf makes and that need `unsafe`: each behind a safe
//! function. Every other crate of the workspace forbids unsafe code.

/// Gives the system back the pages the allocator holds free, in every arena, and says
/// whether any were given back.
///
/// glibc returns freed memory to the system only from the top of a heap; the pages of
/// chunks freed below a live allocation stay resident for reuse. A config rebuilt over
/// 10,000 certificates frees tens of megabytes of that kind (the objects read, the
/// translation's working copies), so after each config swap the process would otherwise
/// stay resident at its peak. `malloc_trim(0)` walks each arena under its lock and
/// `madvise`s the free whole pages away; a thread allocating in that arena meanwhile waits.
///
/// Elsewhere (musl, other systems) it does nothing and returns false.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub fn release_free_memory() -> bool {
    // SAFETY: malloc_trim takes no pointer and touches only the allocator's own free
    // chunks, under the arena locks every other allocator call takes too.
    unsafe { libc::malloc_trim(0) == 1 }
}

/// Gives the system back the pages the allocator holds free: nothing to do here.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn release_free_memory() -> bool {
    false
}

#[cfg(test)]
#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::release_free_memory;

    /// Resident bytes of this process (`/proc/self/statm`, pages of 4 KiB).
    fn resident() -> u64 {
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
        let pages: u64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
        pages * 4096
    }

    #[test]
    fn memory_freed_below_a_live_allocation_leaves_the_resident_set() {
        // 64 MiB in 16 KiB chunks (below glibc's mmap threshold, so on the heap), each
        // written so that its pages are resident; then every chunk but the last freed: the
        // last one pins the top of the heap, so glibc's own trimming gives nothing back.
        let mut chunks: Vec<Vec<u8>> = (0..4096).map(|i| vec![(i % 251) as u8 + 1; 16 * 1024]).collect();
        let last = chunks.pop();
        drop(chunks);
        let before = resident();
        assert!(release_free_memory(), "malloc_trim gave nothing back");
        let after = resident();
        assert!(
            before.saturating_sub(after) > 48 << 20,
            "resident {} MiB before and {} MiB after",
            before >> 20,
            after >> 20
        );
        assert_eq!(last.map(|c| c[0]), Some(80));
    }
}
