//! The only `unsafe impl GlobalAlloc` of heaptag.
//!
//! Every call goes to the inner allocator unchanged (same layout, no header,
//! jemalloc's own `realloc`); heaptag only counts around it:
//!
//! - every allocation: `alloc_bytes`/`alloc_count` of the current tag, in the
//!   calling thread's slot (no shared cache line, no locked instruction);
//! - blocks `>= threshold`: an entry in the side table, exact per-tag live;
//! - smaller blocks whose address hashes into the sample: an entry too, for
//!   the per-tag live estimate;
//! - every free: the size from the `Layout` decides "tracked?", the address
//!   hash decides "sampled?"; only those touch the table, and the free is
//!   charged to the tag stored at allocation, whichever thread frees.
//!
//! It never panics, never allocates through itself, and holds a lock only for
//! one table insert or remove (tracked and sampled blocks only).

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicU64, Ordering};

use tikv_jemallocator::Jemalloc;

use crate::config::{self, Settings, MODE, OFF, ON, THRESHOLD};
use crate::table::{self, Entry};
use crate::thread::{self, Slot};
use crate::{clock, sampling, tag};

/// Allocations the inner allocator refused (null returns), passed through.
pub(crate) static ALLOC_FAILURES: AtomicU64 = AtomicU64::new(0);
/// Frees of blocks of tracked size that heaptag has no record of (allocated
/// while it initialised, or when the table could not grow). Counted, never fatal.
pub(crate) static UNTRACKED_FREES: AtomicU64 = AtomicU64::new(0);

/// heaptag's global allocator: wraps an inner allocator (jemalloc by default)
/// and charges every allocation to the calling thread's [`Tag`](crate::Tag).
///
/// ```no_run
/// #[global_allocator]
/// static GLOBAL: heaptag_alloc::Alloc = heaptag_alloc::Alloc::new();
/// ```
///
/// The builder methods set compiled-in defaults that the `HEAPTAG*`
/// environment variables override (see [`Settings`]). All instances share one
/// process-wide state; install one as the global allocator.
#[derive(Debug)]
pub struct Alloc<A = Jemalloc> {
    inner: A,
    settings: Settings,
}

impl Alloc<Jemalloc> {
    /// heaptag around tikv-jemallocator, with the default settings.
    pub const fn new() -> Self {
        Alloc::with_inner(Jemalloc)
    }
}

impl Default for Alloc<Jemalloc> {
    fn default() -> Self {
        Self::new()
    }
}

impl<A> Alloc<A> {
    /// heaptag around any allocator (e.g. `std::alloc::System` for tests).
    pub const fn with_inner(inner: A) -> Self {
        Alloc {
            inner,
            settings: Settings::DEFAULT,
        }
    }

    /// Default tracking threshold in bytes (`0` tracks every block exactly).
    pub const fn threshold(mut self, bytes: usize) -> Self {
        self.settings.threshold = bytes;
        self
    }

    /// Default mean bytes between sampled small blocks (`0`: no sampling).
    pub const fn sample_rate(mut self, bytes: u64) -> Self {
        self.settings.sample_rate = bytes;
        self
    }

    /// Fixed salt for the sampling hash, for reproducible estimates.
    pub const fn seed(mut self, seed: u64) -> Self {
        self.settings.seed = Some(seed);
        self
    }

    /// Whether tracking is on by default (`HEAPTAG=on|off` overrides).
    pub const fn enabled(mut self, on: bool) -> Self {
        self.settings.enabled = on;
        self
    }

    /// The inner allocator.
    pub const fn inner(&self) -> &A {
        &self.inner
    }

    /// The process mode, initialising it on the first call.
    #[inline(always)]
    fn mode(&self) -> u8 {
        // Acquire: pairs with the Release in `config::init`, so the settings
        // are visible once ON is seen.
        let m = MODE.load(Ordering::Acquire);
        if m >= ON {
            m
        } else {
            config::init(&self.settings)
        }
    }
}

// SAFETY: every method forwards the caller's arguments unchanged to the inner
// allocator, which upholds the `GlobalAlloc` contract; the bookkeeping around
// it reads only the pointer value and the layout, never the block's memory,
// never unwinds, and never allocates through the global allocator.
unsafe impl<A: GlobalAlloc> GlobalAlloc for Alloc<A> {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded from our caller, who upholds `alloc`'s contract.
        let p = unsafe { self.inner.alloc(layout) };
        let mode = self.mode();
        if mode != OFF {
            on_alloc(mode, p, layout.size());
        }
        p
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded from our caller, who upholds `alloc_zeroed`'s contract.
        let p = unsafe { self.inner.alloc_zeroed(layout) };
        let mode = self.mode();
        if mode != OFF {
            on_alloc(mode, p, layout.size());
        }
        p
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let mode = self.mode();
        if mode != OFF {
            // Before the inner free: once freed, the address may be handed to
            // another thread, whose insert must not meet our stale entry.
            on_free(ptr as usize, layout.size());
        }
        // SAFETY: forwarded from our caller: `ptr` was allocated by this
        // allocator (hence by `inner`) with `layout`.
        unsafe { self.inner.dealloc(ptr, layout) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let mode = self.mode();
        if mode == OFF {
            // SAFETY: forwarded from our caller unchanged.
            return unsafe { self.inner.realloc(ptr, layout, new_size) };
        }
        let old_size = layout.size();
        let addr = ptr as usize;
        // Take the old block's record out before the inner realloc can free it.
        let old_entry = if is_recorded(addr, old_size) {
            table::remove(addr)
        } else {
            None
        };
        // SAFETY: forwarded from our caller unchanged; jemalloc's own realloc
        // keeps in-place growth.
        let new = unsafe { self.inner.realloc(ptr, layout, new_size) };
        if new.is_null() {
            // The old block is still allocated and unchanged: restore it.
            ALLOC_FAILURES.fetch_add(1, Ordering::Relaxed);
            if let Some(e) = old_entry {
                table::insert(addr, e);
            }
            return new;
        }
        let cur = thread::current();
        let (slot, cur_tag) = if cur.busy { (thread::shared_slot(), 0) } else { (cur.slot, cur.tag) };
        // The old block goes away, charged to its own tag ...
        let (tag, birth) = match old_entry {
            Some(e) => {
                release(slot, &e, old_size);
                (e.tag, Some(e))
            }
            None => {
                untracked_free(slot, old_size);
                (cur_tag, None)
            }
        };
        // ... and the new one comes under the same tag (the current thread's
        // when the old block was small and unsampled, so its tag is unknown).
        slot.count_alloc(tag, new_size as u64);
        record(new as usize, new_size, tag, cur.thread, birth);
        new
    }
}

/// True when a block of this size at this address has (or should have) an entry.
#[inline(always)]
fn is_recorded(addr: usize, size: usize) -> bool {
    size >= THRESHOLD.load(Ordering::Relaxed) || sampling::is_sampled(addr, size)
}

#[inline(always)]
fn on_alloc(mode: u8, p: *mut u8, size: usize) {
    if p.is_null() {
        ALLOC_FAILURES.fetch_add(1, Ordering::Relaxed);
        return;
    }
    if mode != ON {
        // Another thread is still initialising: count, untagged, untracked.
        thread::shared_slot().count_alloc(0, size as u64);
        return;
    }
    let cur = thread::current();
    let (slot, tag) = if cur.busy { (thread::shared_slot(), 0) } else { (cur.slot, cur.tag) };
    slot.count_alloc(tag, size as u64);
    if is_recorded(p as usize, size) {
        record(p as usize, size, tag, cur.thread, None);
    }
}

#[inline(always)]
fn on_free(addr: usize, size: usize) {
    let cur = thread::current();
    let slot = if cur.busy { thread::shared_slot() } else { cur.slot };
    if is_recorded(addr, size) {
        if let Some(e) = table::remove(addr) {
            release(slot, &e, size);
            return;
        }
    }
    untracked_free(slot, size);
}

/// Counts the free of a block without an entry.
#[inline(always)]
fn untracked_free(slot: &Slot, size: usize) {
    if size >= THRESHOLD.load(Ordering::Relaxed) {
        UNTRACKED_FREES.fetch_add(1, Ordering::Relaxed);
    }
    slot.count_small_free(size as u64);
}

/// Records a new block that `is_recorded`: tracked exactly or sampled.
/// `birth` carries time and stack over from the block a realloc replaced.
#[cold]
#[inline(never)]
fn record(addr: usize, size: usize, tag_id: u32, thread: u32, birth: Option<Entry>) {
    let tracked = size >= THRESHOLD.load(Ordering::Relaxed);
    if !tracked && !sampling::is_sampled(addr, size) {
        return;
    }
    let entry = Entry {
        size: size as u64,
        time_ns: birth.map_or_else(clock::now_ns, |b| b.time_ns),
        tag: tag_id,
        thread,
        stack: birth.map_or(0, |b| b.stack),
        tracked,
    };
    let Some(t) = tag::entry(tag_id) else { return };
    if !table::insert(addr, entry) {
        // No record: the free will be counted as untracked.
        return;
    }
    // Relaxed throughout: independent statistics (see TagEntry).
    if tracked {
        let s = entry.size;
        t.tracked_alloc_bytes.fetch_add(s, Ordering::Relaxed);
        t.tracked_alloc_count.fetch_add(1, Ordering::Relaxed);
        t.tracked_live_count.fetch_add(1, Ordering::Relaxed);
        let live = t.tracked_live.fetch_add(s, Ordering::Relaxed) + s;
        t.tracked_peak.fetch_max(live, Ordering::Relaxed);
        t.combined_add(s);
    } else {
        let w = sampling::weight(size);
        t.sampled_weight.fetch_add(w.bytes, Ordering::Relaxed);
        t.sampled_var.fetch_add(w.var, Ordering::Relaxed);
        t.sampled_count_fx.fetch_add(w.count_fx, Ordering::Relaxed);
        t.sampled_live.fetch_add(1, Ordering::Relaxed);
        t.combined_add(w.bytes);
    }
}

/// Undoes `record` for a block leaving (freed, or replaced by realloc).
#[cold]
#[inline(never)]
fn release(slot: &Slot, e: &Entry, size: usize) {
    let Some(t) = tag::entry(e.tag) else { return };
    if e.tracked {
        let s = e.size;
        t.tracked_free_bytes.fetch_add(s, Ordering::Relaxed);
        t.tracked_free_count.fetch_add(1, Ordering::Relaxed);
        t.tracked_live_count.fetch_sub(1, Ordering::Relaxed);
        t.tracked_live.fetch_sub(s, Ordering::Relaxed);
        t.combined_sub(s);
    } else {
        let w = sampling::weight(e.size as usize);
        t.sampled_weight.fetch_sub(w.bytes, Ordering::Relaxed);
        t.sampled_var.fetch_sub(w.var, Ordering::Relaxed);
        t.sampled_count_fx.fetch_sub(w.count_fx, Ordering::Relaxed);
        t.sampled_live.fetch_sub(1, Ordering::Relaxed);
        t.combined_sub(w.bytes);
        slot.count_small_free(size as u64);
    }
}
