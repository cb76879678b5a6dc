//! heaptag's own memory: bookkeeping that must never enter the tracking path.
//!
//! Every table, chunk and map heaptag keeps is allocated from [`System`]
//! (glibc's malloc unless jemalloc is built unprefixed), never from the global
//! allocator, so the allocator cannot recurse into itself while it holds a
//! lock. The bytes are counted in [`OVERHEAD_BYTES`] and reported as heaptag's
//! own overhead, charged to no user tag.

use std::alloc::{GlobalAlloc, Layout};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use allocator_api2::alloc::{AllocError, Allocator};

// The heap heaptag's own memory comes from: glibc's malloc, or with the
// `native` feature (where `malloc` is heaptag's own shim, `native.rs`)
// jemalloc's prefixed functions directly, so heaptag's bookkeeping never
// enters the shim's tracking path either.
#[cfg(not(feature = "native"))]
use std::alloc::System;
#[cfg(feature = "native")]
use tikv_jemallocator::Jemalloc as System;

/// Bytes heaptag currently holds for its own bookkeeping.
// Relaxed: a statistic; nothing is published through it.
pub(crate) static OVERHEAD_BYTES: AtomicU64 = AtomicU64::new(0);

/// Allocator for heaptag's internal collections (hashbrown maps).
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct Internal;

// SAFETY: `allocate` returns blocks from `System` that stay valid until
// `deallocate` is called with the same layout; `Internal` is a stateless
// handle, so clones share the same (system) heap.
unsafe impl Allocator for Internal {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        let ptr = if layout.size() == 0 {
            // A dangling, well-aligned pointer is the conventional zero-size block.
            layout.align() as *mut u8
        } else {
            // SAFETY: the layout has a non-zero size.
            let p = unsafe { System.alloc(layout) };
            if !p.is_null() {
                OVERHEAD_BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
            }
            p
        };
        let ptr = NonNull::new(ptr).ok_or(AllocError)?;
        Ok(NonNull::slice_from_raw_parts(ptr, layout.size()))
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        if layout.size() != 0 {
            OVERHEAD_BYTES.fetch_sub(layout.size() as u64, Ordering::Relaxed);
            // SAFETY: the caller guarantees `ptr` came from `allocate` with this
            // layout, i.e. from `System.alloc(layout)`.
            unsafe { System.dealloc(ptr.as_ptr(), layout) };
        }
    }
}

/// Allocates a zeroed `T` from the system heap for the life of the process.
///
/// Used for lazily created chunks (tag tables, per-thread counter pages) that
/// are published once; counter pages of a retired range are given back with
/// [`free_leaked`]. Returns `None` when the system is out
/// of memory; callers degrade (count and skip), never abort.
pub(crate) fn leak_zeroed<T>() -> Option<NonNull<T>> {
    let layout = Layout::new::<T>();
    // SAFETY: every `T` this is used with is a non-zero-sized aggregate of
    // atomics and `MaybeUninit`, for which all-zero bytes are a valid value.
    let p = unsafe { System.alloc_zeroed(layout) };
    let p = NonNull::new(p.cast::<T>())?;
    OVERHEAD_BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
    Some(p)
}

/// Frees a block of [`leak_zeroed`] (a counter page of a retired range).
///
/// # Safety
/// `p` came from `leak_zeroed::<T>()`, is freed once, and nothing reads it
/// after.
pub(crate) unsafe fn free_leaked<T>(p: NonNull<T>) {
    let layout = Layout::new::<T>();
    OVERHEAD_BYTES.fetch_sub(layout.size() as u64, Ordering::Relaxed);
    // SAFETY: the caller's guarantee: `p` is `System.alloc_zeroed(layout)`'s.
    unsafe { System.dealloc(p.as_ptr().cast(), layout) };
}

/// A lock guard kept across `fork()`: taken by the prepare handler, dropped
/// by the parent and child handlers (see `start.rs`, "fork").
///
/// Only atfork handlers touch it: POSIX runs prepare, then parent (in the
/// parent) or child (in the child), on the one thread that called `fork()`,
/// one after the other, so the cell is never accessed concurrently.
pub(crate) struct ForkHeld<G>(std::cell::UnsafeCell<Option<G>>);

// SAFETY: see the type's docs: accesses are serialized by fork() itself.
unsafe impl<G> Sync for ForkHeld<G> {}

impl<G> ForkHeld<G> {
    /// Holds nothing.
    pub(crate) const fn new() -> Self {
        ForkHeld(std::cell::UnsafeCell::new(None))
    }

    /// Keeps `guard` until [`release`](ForkHeld::release).
    ///
    /// # Safety
    /// Only from an atfork prepare handler.
    pub(crate) unsafe fn hold(&self, guard: G) {
        // SAFETY: the caller's guarantee (see the type's docs).
        unsafe { *self.0.get() = Some(guard) };
    }

    /// Drops the guard kept by [`hold`](ForkHeld::hold), if any.
    ///
    /// # Safety
    /// Only from an atfork parent or child handler.
    pub(crate) unsafe fn release(&self) {
        // SAFETY: the caller's guarantee (see the type's docs).
        drop(unsafe { (*self.0.get()).take() });
    }
}

/// The one hasher of addresses and tag keys, shared with the analyzer
/// (heaptag-format's `hash`): non-allocating, `const`-constructible.
pub(crate) use heaptag_format::hash::{mix64, MixBuild};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_allocator_counts_and_returns_bytes() {
        let before = OVERHEAD_BYTES.load(Ordering::Relaxed);
        let layout = Layout::from_size_align(4096, 64).unwrap();
        let block = Internal.allocate(layout).unwrap();
        assert!(OVERHEAD_BYTES.load(Ordering::Relaxed) >= before + 4096);
        // SAFETY: `block` was allocated by `Internal` with `layout`.
        unsafe { Internal.deallocate(block.cast(), layout) };
    }

    #[test]
    fn mix64_spreads_aligned_addresses() {
        // Consecutive 16-byte aligned addresses must land in different buckets.
        let mut buckets = [0u32; 64];
        for i in 0..64_000u64 {
            buckets[(mix64(0x7f00_0000_0000 + i * 16) & 63) as usize] += 1;
        }
        assert!(buckets.iter().all(|&n| n > 800 && n < 1200), "{buckets:?}");
    }
}
