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

/// Allocations up to this size come from the heap, not a mapping of their own.
pub const MMAP_THRESHOLD: usize = 4 << 20;
/// Free memory at the top of the heap up to this size stays mapped for reuse.
pub const TRIM_THRESHOLD: usize = 8 << 20;

/// Keeps the pages at the top of the allocator's heap mapped while they are reused, and
/// says whether the allocator took the setting.
///
/// glibc starts by mapping every allocation over 128 KiB on its own and returning the
/// top of the heap once 256 KiB of it is free, then raises both limits by the sizes it
/// happens to see freed. A relay that frees and allocates buffers of about 1 MiB (an HTTP/2
/// connection's read buffer, grown to the peer's frames) could land either side of those
/// limits: then the heap's top was given back and faulted in again at every buffer, up to
/// 110,000 page faults and 3,500 `brk` calls a second, a fifth of the relay's CPU time.
/// Fixed limits of [`MMAP_THRESHOLD`] and [`TRIM_THRESHOLD`] (glibc's own limits go up to
/// 32 and 64 MiB) end that; memory freed below the top is still given back by
/// [`release_free_memory`].
///
/// Elsewhere (musl, other systems) it does nothing and returns false.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub fn keep_heap_top() -> bool {
    let set = |param, value: usize| {
        let value = libc::c_int::try_from(value).unwrap_or(libc::c_int::MAX);
        // SAFETY: mallopt takes no pointer; it sets one of the allocator's parameters under
        // the lock every other allocator call takes too.
        unsafe { libc::mallopt(param, value) == 1 }
    };
    set(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD) & set(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD)
}

/// Keeps the pages at the top of the allocator's heap mapped: nothing to do here.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn keep_heap_top() -> bool {
    false
}

#[cfg(test)]
#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::release_free_memory;

    /// The tests read the whole process's resident memory: one at a time.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// Resident bytes of this process (`/proc/self/statm`, pages of 4 KiB).
    fn resident() -> u64 {
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
        let pages: u64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
        pages * 4096
    }

    #[test]
    fn memory_freed_below_a_live_allocation_leaves_the_resident_set() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
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

    #[test]
    fn a_freed_buffer_at_the_top_of_the_heap_stays_mapped_for_the_next() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
        assert!(super::keep_heap_top(), "glibc refused the limits");
        // 2 MiB: mapped on its own (and unmapped when freed) under glibc's first limits,
        // from the heap under ours, and left there when freed.
        let before = resident();
        let buf = vec![7u8; 2 << 20];
        let with = resident();
        drop(buf);
        let after = resident();
        assert!(with >= before + (2 << 20) - (64 << 10), "{before} -> {with}");
        assert!(after + (64 << 10) >= with, "the freed buffer went back to the system: {with} -> {after}");
    }
}
