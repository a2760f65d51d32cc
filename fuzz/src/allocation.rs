//! The allocator of every binary that links the targets: the system's,
//! aborting the process on any single allocation larger than any input could
//! justify, so that an allocation sized by what an input claims rather than
//! by what it holds is a crash the fuzzer reports, not a machine that swaps.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;

/// The largest allocation any target may make. Inputs are at most a few
/// hundred KiB (`scripts/fuzz` sets `-max_len`); resmux's own limits, such
/// as 16 MiB for a stdio line, stay below it.
const MOST_BYTES: usize = 64 * 1024 * 1024;

struct Bounded;

#[global_allocator]
static ALLOCATOR: Bounded = Bounded;

fn check(layout: Layout) {
    if layout.size() > MOST_BYTES {
        // Formatting would allocate: write a fixed message, then abort.
        let _ = std::io::stderr()
            .write_all(b"fuzz: an allocation over 64 MiB, out of proportion to any input\n");
        std::process::abort();
    }
}

// SAFETY: every call is passed to the system allocator unchanged.
unsafe impl GlobalAlloc for Bounded {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        check(layout);
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        check(layout);
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        unsafe { System.dealloc(pointer, layout) }
    }

    unsafe fn realloc(&self, pointer: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        check(Layout::from_size_align(new_size, layout.align()).unwrap_or(layout));
        unsafe { System.realloc(pointer, layout, new_size) }
    }
}
