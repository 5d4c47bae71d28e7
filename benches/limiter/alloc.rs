//! A global allocator that can count live heap bytes, so "memory per waiter in the client" is
//! measured exactly (RSS moves in pages and allocator arenas, far coarser than one waiter).
//!
//! Counting is off except inside [`track`]'s windows (the scale rows): an atomic add on every
//! allocation, from every thread, would slow the latency rows, and slow the library (which
//! allocates more per request than a raw client) more than its floor. The net change over a
//! window is exact all the same: allocations in it minus frees in it, whenever the freed blocks
//! were allocated.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering::Relaxed};

pub struct Counting;

static ON: AtomicBool = AtomicBool::new(false);
static LIVE: AtomicIsize = AtomicIsize::new(0);

/// Counts allocations until the returned guard is dropped.
pub fn track() -> Tracking {
    ON.store(true, Relaxed);
    Tracking
}

pub struct Tracking;

impl Drop for Tracking {
    fn drop(&mut self) {
        ON.store(false, Relaxed);
    }
}

/// Heap bytes allocated minus freed while counting, process-wide.
pub fn live_bytes() -> isize {
    LIVE.load(Relaxed)
}

/// [`live_bytes`] once it stops moving (background tasks of earlier rows, e.g. sessions being
/// closed, still free memory for a while): two readings 50 ms apart within 4 KiB, or the last
/// of 40 readings.
pub async fn settled_live_bytes() -> isize {
    let mut last = live_bytes();
    for _ in 0..40 {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let now = live_bytes();
        if (now - last).abs() < 4096 {
            return now;
        }
        last = now;
    }
    last
}

fn count(bytes: isize) {
    if ON.load(Relaxed) {
        LIVE.fetch_add(bytes, Relaxed);
    }
}

// SAFETY: every call is forwarded unchanged to the system allocator; only a counter is added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(layout);
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        count(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = System.realloc(ptr, layout, new_size);
        if !p.is_null() {
            count(new_size as isize - layout.size() as isize);
        }
        p
    }
}
