//! The only `unsafe impl GlobalAlloc` of heaptag.
//!
//! Every call goes to the inner allocator unchanged (same layout, no header,
//! jemalloc's own `realloc`); heaptag only counts around it:
//!
//! - every allocation: `alloc_bytes`/`alloc_count` of the current tag, in the
//!   calling thread's slot (no shared cache line, no locked instruction);
//! - blocks `>= threshold`: an entry in the side table, exact per-tag live;
//! - smaller blocks that cross the thread's next sample point (a countdown
//!   of bytes, `sampling.rs`): an entry too, for the per-tag live estimate;
//! - every free: the size from the `Layout` decides "tracked?", the free-side
//!   filter of sampled addresses decides "maybe sampled?"; only those touch
//!   the table, and the free is charged to the tag stored at allocation,
//!   whichever thread frees;
//! - every realloc: a free of the old block (as above) and an allocation of
//!   the new one under the reallocating thread's tag, in every mode.
//!
//! It never panics, never allocates through itself, and holds a lock only for
//! one table insert or remove (tracked and sampled blocks only).

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::Ordering;

use tikv_jemallocator::Jemalloc;

use crate::config::{Settings, HOT, OFF, ON};
use crate::health::{ALLOC_FAILURES, UNTRACKED_FREES};
use crate::log::ring::Event;
use crate::table::{self, Entry};
use crate::thread::{self, Pair};
use crate::{clock, log, sampling, start, tag};

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
}

impl<A: GlobalAlloc> Alloc<A> {
    /// `alloc` (`ZEROED = false`) or `alloc_zeroed` (`true`): when switched
    /// off, a load, a branch and a jump to the inner allocator; otherwise a
    /// jump to `alloc_counted`. ZEROED is a compile-time choice: two copies,
    /// no branch per call.
    ///
    /// # Safety
    /// As `GlobalAlloc::alloc`.
    #[inline(always)]
    unsafe fn alloc_any<const ZEROED: bool>(&self, layout: Layout) -> *mut u8 {
        // Acquire: pairs with the Release in `start::tracking`, so the settings
        // are visible once ON is seen. A plain load on x86.
        let mode = HOT.mode.load(Ordering::Acquire);
        if mode == OFF {
            // SAFETY: forwarded from our caller unchanged.
            return unsafe { self.inner_alloc::<ZEROED>(layout) };
        }
        // SAFETY: forwarded from our caller unchanged; `plain_align` is
        // computed from the same layout.
        unsafe {
            if plain_align(layout) {
                Self::alloc_counted::<ZEROED, true>(layout.size(), layout.align(), mode, self)
            } else {
                Self::alloc_counted::<ZEROED, false>(layout.size(), layout.align(), mode, self)
            }
        }
    }

    /// `alloc` with tracking on: the inner call and `on_alloc`'s counts and
    /// tests (a call out only for a tracked or sampled block); before
    /// start-up is done, `alloc_uninit`. Out of line so that the switched-off
    /// path of `alloc` needs no stack frame (this one saves the size across
    /// the inner call).
    ///
    /// # Safety
    /// As `GlobalAlloc::alloc`.
    /// Takes the layout as (size, align), the order of `__rust_alloc`'s
    /// arguments, and `self` last, so the jump here moves no register.
    /// `PLAIN`: [`plain_align`] holds for the layout (the caller tested it).
    #[inline(never)]
    unsafe fn alloc_counted<const ZEROED: bool, const PLAIN: bool>(
        size: usize,
        align: usize,
        mode: u8,
        this: &Self,
    ) -> *mut u8 {
        // SAFETY: `size` and `align` came from a valid `Layout`; with PLAIN
        // the caller found `plain_align` true of them.
        let layout = unsafe { counted_layout::<PLAIN>(size, align) };
        if mode != ON {
            // SAFETY: forwarded from our caller unchanged.
            return unsafe { this.alloc_uninit::<ZEROED>(layout) };
        }
        // SAFETY: forwarded from our caller unchanged.
        let p = unsafe { this.inner_alloc::<ZEROED>(layout) };
        if p.is_null() {
            alloc_failed();
            return p;
        }
        // The way out of line is a tail call: only the size is kept across
        // the inner call. The threshold test is in `count_alloc_fast`, on
        // the thread's copy of it.
        if !thread::count_alloc_fast(size as u64) {
            return alloc_slow(p, size);
        }
        p
    }

    /// The inner allocator's `alloc` or `alloc_zeroed`.
    ///
    /// # Safety
    /// As `GlobalAlloc::alloc`.
    #[inline(always)]
    unsafe fn inner_alloc<const ZEROED: bool>(&self, layout: Layout) -> *mut u8 {
        if ZEROED {
            // SAFETY: forwarded from our caller unchanged.
            unsafe { self.inner.alloc_zeroed(layout) }
        } else {
            // SAFETY: forwarded from our caller unchanged.
            unsafe { self.inner.alloc(layout) }
        }
    }

    /// `alloc` before start-up is done (the first call runs it).
    ///
    /// # Safety
    /// As `GlobalAlloc::alloc`.
    #[cold]
    #[inline(never)]
    unsafe fn alloc_uninit<const ZEROED: bool>(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded from our caller unchanged.
        let p = unsafe { self.inner_alloc::<ZEROED>(layout) };
        self.on_alloc_uninit(p, layout.size());
        p
    }

    /// `dealloc` with tracking on (or not yet initialised): an unrecorded
    /// block is counted and freed (a tail call); a recorded one goes to
    /// `dealloc_recorded`. Out of line (no frame: every way out is a tail
    /// call), so that `dealloc` stays small enough to inline into callers.
    ///
    /// # Safety
    /// As `GlobalAlloc::dealloc`.
    /// Takes the layout as (size, align), the order of `__rust_dealloc`'s
    /// arguments, and `self` last, so the jump here moves no register.
    /// `PLAIN`: [`plain_align`] holds for the layout (the caller tested it).
    #[inline(never)]
    unsafe fn dealloc_counted<const PLAIN: bool>(ptr: *mut u8, size: usize, align: usize, this: &Self) {
        // SAFETY: `size` and `align` came from a valid `Layout`; with PLAIN
        // the caller found `plain_align` true of them.
        let layout = unsafe { counted_layout::<PLAIN>(size, align) };
        if may_be_recorded(ptr as usize, size) {
            // SAFETY: our caller's guarantees, passed on.
            return unsafe { this.dealloc_recorded(ptr, layout) };
        }
        if !thread::count_small_free_owned(size as u64) {
            // SAFETY: our caller's guarantees, passed on.
            return unsafe { this.dealloc_shared_slot(ptr, layout) };
        }
        // SAFETY: forwarded from our caller: `ptr` was allocated by this
        // allocator (hence by `inner`) with `layout`.
        unsafe { this.inner.dealloc(ptr, layout) }
    }

    /// An unrecorded free on a thread without a slot of its own: counted in
    /// the shared slot, then freed. A tail call out of `dealloc_counted`, so
    /// that its fast path needs no stack frame.
    ///
    /// # Safety
    /// As `GlobalAlloc::dealloc`.
    #[cold]
    #[inline(never)]
    unsafe fn dealloc_shared_slot(&self, ptr: *mut u8, layout: Layout) {
        thread::count_small_free(layout.size() as u64);
        // SAFETY: forwarded from our caller unchanged.
        unsafe { self.inner.dealloc(ptr, layout) }
    }

    /// The first calls, before the mode is known (or while another thread
    /// starts heaptag): the first one runs start-up; until it is done, count
    /// but record nothing, since the threshold and sampling salt may not be
    /// final.
    #[cold]
    #[inline(never)]
    fn on_alloc_uninit(&self, p: *mut u8, size: usize) {
        match start::tracking(&self.settings) {
            ON => on_alloc(p, size),
            OFF => {}
            _ if p.is_null() => {
                ALLOC_FAILURES.fetch_add(1, Ordering::Relaxed);
            }
            _ => thread::count_alloc(size as u64),
        }
    }

    /// Frees a block that has (or should have) a record: the record goes
    /// first, the block after, so a reuse of the address by another thread
    /// cannot meet our stale record.
    ///
    /// # Safety
    /// As `GlobalAlloc::dealloc`.
    #[cold]
    #[inline(never)]
    unsafe fn dealloc_recorded(&self, ptr: *mut u8, layout: Layout) {
        match table::remove(ptr as usize) {
            Some(e) => {
                // The Fingerprint's time is the Free's too (one clock read; none
                // for a block freed before it could be filled).
                let at = (e.tracked && log::wants_fingerprint(e.size)).then(|| {
                    // SAFETY: the block is still allocated (it is freed
                    // below) and this thread is the one freeing it.
                    unsafe { log::fingerprint_at_free(ptr as usize, &e) }
                });
                release(ptr as usize, &e, layout.size(), true, at);
            }
            None => untracked_free(layout.size()),
        }
        // SAFETY: forwarded from our caller: `ptr` was allocated by this
        // allocator (hence by `inner`) with `layout`.
        unsafe { self.inner.dealloc(ptr, layout) }
    }
}

// SAFETY: every method forwards the caller's arguments unchanged to the inner
// allocator, which upholds the `GlobalAlloc` contract; the bookkeeping around
// it reads the pointer value and the layout, never writes the block, reads it
// only to fingerprint a tracked block still allocated (before its free), never
// unwinds, and never allocates through the global allocator.
unsafe impl<A: GlobalAlloc> GlobalAlloc for Alloc<A> {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded from our caller unchanged.
        unsafe { self.alloc_any::<false>(layout) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded from our caller unchanged.
        unsafe { self.alloc_any::<true>(layout) }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // Acquire: as in `alloc_any`.
        if HOT.mode.load(Ordering::Acquire) == OFF {
            // SAFETY: forwarded from our caller unchanged.
            return unsafe { self.inner.dealloc(ptr, layout) };
        }
        // SAFETY: forwarded from our caller unchanged; `plain_align` is
        // computed from the same layout.
        unsafe {
            if plain_align(layout) {
                Self::dealloc_counted::<true>(ptr, layout.size(), layout.align(), self)
            } else {
                Self::dealloc_counted::<false>(ptr, layout.size(), layout.align(), self)
            }
        }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // Acquire: as in `alloc_any`.
        if HOT.mode.load(Ordering::Acquire) != ON {
            // SAFETY: forwarded from our caller unchanged.
            let new = unsafe { self.inner.realloc(ptr, layout, new_size) };
            return realloc_untracked(new, layout.size(), new_size);
        }
        // SAFETY: forwarded from our caller unchanged.
        unsafe { self.realloc_counted(ptr, layout, new_size) }
    }
}

impl<A: GlobalAlloc> Alloc<A> {
    /// `realloc` with tracking on.
    ///
    /// The old block's record leaves the table before the inner realloc,
    /// which may free the old address (see `table.rs`). When logging, the
    /// event that ends the old address's record (a `ReallocBegin` if the
    /// block stays tracked, else its `Free`) is queued before too, so in the
    /// log no reuse of the address can come before it.
    ///
    /// # Safety
    /// As `GlobalAlloc::realloc`.
    #[inline(never)]
    unsafe fn realloc_counted(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let old_size = layout.size();
        let addr = ptr as usize;
        let old_entry = if may_be_recorded(addr, old_size) {
            table::remove(addr)
        } else {
            None
        };
        let stays_tracked = old_entry.is_some_and(|e| e.tracked) && new_size >= HOT.threshold.load(Ordering::Relaxed);
        let logging = log::on();
        if let (true, Some(e)) = (logging, old_entry) {
            if stays_tracked {
                log::emit(Event::ReallocBegin {
                    time_ns: clock::now_ns(),
                    thread: thread::number(),
                    addr: addr as u64,
                });
            } else {
                log::emit_leave(addr, &e, None);
            }
        }
        // SAFETY: forwarded from our caller unchanged; jemalloc's own realloc
        // keeps in-place growth.
        let new = unsafe { self.inner.realloc(ptr, layout, new_size) };
        if new.is_null() {
            // The old block is still allocated and unchanged: restore it.
            ALLOC_FAILURES.fetch_add(1, Ordering::Relaxed);
            if let Some(e) = old_entry {
                table::insert(addr, e);
                if logging {
                    if stays_tracked {
                        emit_realloc(addr, &e, e.tag, addr, e.size);
                    } else {
                        log::emit_enter(addr, &e, clock::now_ns());
                    }
                }
            }
            return new;
        }
        // The realloc rule (docs/REPORTS.md), the same in every mode: the old
        // block goes away as a free would (from the tag holding it when it
        // has a record, else as an unrecorded small free), and the new block
        // is a new allocation of the reallocating thread's current tag. It
        // never needs the tag of an unrecorded block, which no mode knows,
        // so per-tag tracked figures do not depend on the threshold.
        let (tag, thread) = thread::charged();
        // The old block's tag stays held until the Realloc event that moves
        // its bytes is queued: it cannot retire (and its id be reused) in
        // between, so in the log its retirement comes after the event.
        let held = match old_entry {
            Some(e) if logging && stays_tracked && e.tag != tag => tag::hold_live(e.tag).then_some(e.tag),
            _ => None,
        };
        match old_entry {
            Some(e) => release(addr, &e, old_size, false, None),
            None => untracked_free(old_size),
        }
        thread::count_pair(tag, None, new_size as u64);
        if new_size >= HOT.threshold.load(Ordering::Relaxed) || thread::sample(new as usize, new_size as u64) {
            let recorded = record(new as usize, new_size, tag, thread, old_entry, !stays_tracked, true);
            if let (true, true, Some(e)) = (recorded && logging, stays_tracked, old_entry) {
                emit_realloc(addr, &e, tag, new as usize, new_size as u64);
            }
        }
        if let Some(old_tag) = held {
            tag::mark_dirty(old_tag);
            tag::release_hold(old_tag);
        }
        new
    }
}

/// Queues a Realloc of the tracked block `old` at `from` to `to`, `size`
/// bytes, charged to `tag` (the reallocating thread's; readers move the old
/// bytes off `old.tag`).
fn emit_realloc(from: usize, old: &Entry, tag: u32, to: usize, size: u64) {
    log::emit(Event::Realloc {
        time_ns: clock::now_ns(),
        thread: thread::number(),
        tag,
        old_addr: from as u64,
        old_size: old.size,
        addr: to as u64,
        size,
    });
}

/// A realloc while tracking is off or not yet initialised.
#[cold]
fn realloc_untracked(new: *mut u8, old_size: usize, new_size: usize) -> *mut u8 {
    if HOT.mode.load(Ordering::Acquire) != OFF && !new.is_null() {
        thread::count_small_free(old_size as u64);
        thread::count_alloc(new_size as u64);
    }
    new
}

/// The alignment malloc gives every block (16 on 64-bit Linux): jemalloc's
/// and the system allocator's `MIN_ALIGN`.
const PLAIN_ALIGN: usize = 16;

/// Whether `layout` needs no alignment beyond what malloc gives any block of
/// its size (`align <= 16 && align <= size`): the test jemalloc's (and the
/// system allocator's) `alloc` makes to choose `malloc` over `mallocx`, and
/// `dealloc` to choose no flags. Made in the inlined caller, where a constant
/// alignment folds most of it away, it picks a copy of the counted path in
/// which [`counted_layout`] lets the compiler fold the inner allocator's own
/// test: without it the out-of-line path would redo the whole test on every
/// call, which bare jemalloc inlined into the same caller does not.
#[inline(always)]
fn plain_align(layout: Layout) -> bool {
    layout.align() <= PLAIN_ALIGN && layout.align() <= layout.size()
}

/// The layout of (`size`, `align`), with `PLAIN` telling the compiler that
/// [`plain_align`] holds for it.
///
/// # Safety
/// `size` and `align` are a valid `Layout`'s; with `PLAIN`, `plain_align`
/// is true of it.
#[inline(always)]
unsafe fn counted_layout<const PLAIN: bool>(size: usize, align: usize) -> Layout {
    if PLAIN {
        // SAFETY: the caller's guarantee.
        unsafe { core::hint::assert_unchecked(align <= PLAIN_ALIGN && align <= size) };
    }
    // SAFETY: the caller's guarantee.
    unsafe { Layout::from_size_align_unchecked(size, align) }
}

/// False when a block of this size at this address being freed surely has
/// no record: it is small and no sampled block shares its filter granule
/// (`sampling.rs`). True sends the free to the table, which has the last word.
#[inline(always)]
fn may_be_recorded(addr: usize, size: usize) -> bool {
    size >= HOT.threshold.load(Ordering::Relaxed) || sampling::may_be_sampled(addr)
}

/// Counts a new block (`p`, `size` bytes; null: a failed allocation) and
/// records it if it is tracked or sampled: inline in every allocation.
#[inline(always)]
fn on_alloc(p: *mut u8, size: usize) {
    if p.is_null() {
        return alloc_failed();
    }
    if !thread::count_alloc_fast(size as u64) {
        alloc_slow(p, size);
    }
}

/// A new block `p` whose counting needs more than the fast path (a sample
/// point crossed, a block at or above the thread's copy of the threshold,
/// or no counter of the thread's own): counts it if it was not counted,
/// records it if sampled or tracked (by the real threshold); returns `p`.
#[cold]
#[inline(never)]
fn alloc_slow(p: *mut u8, size: usize) -> *mut u8 {
    let sampled = thread::count_alloc_sampled_slow(p as usize, size as u64);
    if sampled || size >= HOT.threshold.load(Ordering::Relaxed) {
        return record_new(p, size);
    }
    p
}

#[cold]
#[inline(never)]
fn alloc_failed() {
    ALLOC_FAILURES.fetch_add(1, Ordering::Relaxed);
}

/// A new block to record (tracked or sampled), under the thread's tag;
/// returns `p`.
#[cold]
#[inline(never)]
fn record_new(p: *mut u8, size: usize) -> *mut u8 {
    let (tag, thread) = thread::charged();
    record(p as usize, size, tag, thread, None, true, false);
    p
}

/// Counts the free of a block without a record.
fn untracked_free(size: usize) {
    // A block of heaptag's own threads has no record by design.
    if size >= HOT.threshold.load(Ordering::Relaxed) && !thread::is_internal() {
        UNTRACKED_FREES.fetch_add(1, Ordering::Relaxed);
    }
    thread::count_small_free(size as u64);
}

/// Records a block that is tracked exactly (by its size) or sampled; queues
/// its event when logging and `event`. `birth` carries time and stack over
/// from the block a realloc replaced; `resized`: the block is a realloc's
/// (with or without a record of the old one). Returns whether it was
/// recorded.
#[cold]
#[inline(never)]
fn record(
    addr: usize,
    size: usize,
    tag_id: u32,
    thread: u32,
    birth: Option<Entry>,
    event: bool,
    resized: bool,
) -> bool {
    if thread::is_internal() {
        // heaptag's own threads (the log writer) never enter tracking.
        return false;
    }
    let tracked = size >= HOT.threshold.load(Ordering::Relaxed);
    let logging = log::on();
    // Without the log the time is only the block's birth time for
    // `tracked_blocks()`: the coarse clock is enough there (and ~18 ns
    // cheaper per tracked allocation); events need the precise one.
    let now = match (logging, birth) {
        (true, _) => clock::now_ns(),
        (false, None) => clock::coarse_ns(),
        (false, Some(_)) => 0,
    };
    let entry = Entry {
        size: size as u64,
        time_ns: birth.map_or(now, |b| b.time_ns),
        tag: tag_id,
        thread,
        stack: match birth {
            Some(b) => b.stack,
            None if logging => log::stacks::capture(),
            None => 0,
        },
        tracked,
        resized,
    };
    let Some(t) = tag::entry(tag_id) else { return false };
    if !table::insert(addr, entry) {
        // No record: the free will be counted as untracked.
        return false;
    }
    if tracked {
        thread::count_pair(tag_id, Some(Pair::TrackedAlloc), entry.size);
        t.tracked_add(entry.size);
    } else {
        t.sampled_add(&sampling::weight(size));
    }
    if logging && event {
        log::emit_enter(addr, &entry, now);
    }
    true
}

/// Undoes `record` for the block at `addr` leaving (freed, or replaced by
/// realloc); queues its event when logging and `event`. The event and the
/// counts go before the live count drops, which may let the tag retire
/// (`tag.rs`): its retirement then comes after them, in the log too. The
/// event's time is `at` when the caller read the clock already.
fn release(addr: usize, e: &Entry, size: usize, event: bool, at: Option<u64>) {
    let Some(t) = tag::entry(e.tag) else { return };
    if event && log::on() {
        log::emit_leave(addr, e, at);
    }
    t.release_block(e, size as u64, false);
}
