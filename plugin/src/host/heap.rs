//! Giving the heap's free pages back to the kernel after a burst that is over.
//!
//! glibc's malloc keeps freed memory in its arenas (one per thread that allocated, up to eight per
//! CPU) for reuse, so a process's resident size stays at its peak: after the pod watch's list
//! (every pod of the node parsed from one response, then mostly dropped) or a large Synchronize,
//! that is megabytes the node agent will not need again soon. `malloc_trim(0)` walks every arena
//! and returns whole free pages (glibc 2.8 and later: not only the top of the heap; see
//! malloc/malloc.c `mtrim`). Other C libraries (musl) give memory back on their own: nothing to do.

/// Returns the heap's free pages to the kernel (glibc); a no-op elsewhere. Walks every arena: call
/// it after a burst, off the async runtime, never on an event's path.
pub fn release_freed() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes no pointer and has no precondition; glibc serialises it with
    // every other malloc call through each arena's lock, so it may run beside any thread.
    unsafe {
        libc::malloc_trim(0);
    }
}
