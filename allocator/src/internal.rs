//! heaptag's own memory: bookkeeping that must never enter the tracking path.
//!
//! Every table, chunk and map heaptag keeps is allocated from [`System`]
//! (glibc's malloc unless jemalloc is built unprefixed), never from the global
//! allocator, so the allocator cannot recurse into itself while it holds a
//! lock. The bytes are counted in [`OVERHEAD_BYTES`] and reported as heaptag's
//! own overhead, charged to no user tag.

use std::alloc::{GlobalAlloc, Layout, System};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use allocator_api2::alloc::{AllocError, Allocator};

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
/// are published once and never freed. Returns `None` when the system is out
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

/// A small, fast, non-allocating hasher for addresses and tag keys.
///
/// Addresses are 16-byte aligned and clustered, so the finaliser must spread
/// low-entropy input over all 64 bits (hashbrown uses the top 7 bits as a tag
/// and the low bits as the bucket index).
#[derive(Default, Clone, Copy)]
pub(crate) struct MixHasher(u64);

impl std::hash::Hasher for MixHasher {
    fn finish(&self) -> u64 {
        mix64(self.0)
    }
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut buf = [0u8; 8];
            buf[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(buf));
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }
    fn write_u8(&mut self, v: u8) {
        self.write_u64(u64::from(v));
    }
}

/// `BuildHasher` for [`MixHasher`], constructible in a `const` context.
pub(crate) type MixBuild = std::hash::BuildHasherDefault<MixHasher>;

/// splitmix64's finaliser: a bijection on `u64` with full avalanche.
#[inline]
pub(crate) const fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

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
