//! The `native` feature: C and C++ allocations served by jemalloc and
//! charged to heaptag's tags (docs/NATIVE.md).
//!
//! This module defines the malloc family (`malloc`, `calloc`, `realloc`,
//! `reallocarray`, `free`, `posix_memalign`, `aligned_alloc`, `memalign`,
//! `valloc`, `pvalloc`, `malloc_usable_size`, `malloc_trim`) as unmangled C
//! symbols. Defined in the executable, they interpose glibc's for every
//! library of the process (the dynamic linker resolves `malloc` to the
//! executable's definition first), libstdc++'s `operator new`/`delete`
//! included. Each one calls tikv-jemalloc-sys's prefixed function
//! (`_rjem_malloc`, ...) and counts around it as `global.rs` does for Rust:
//!
//! - the size a native block is judged by is jemalloc's usable size
//!   (`nallocx` from the request at `malloc`, `sallocx` from the block at
//!   `free`, which then frees sized: `sdallocx`), the only size a `free`
//!   can know: a block whose usable size
//!   is at least the threshold is tracked exactly (its record keeps the
//!   requested size, so per-tag figures and fingerprints are of what C
//!   asked for), a smaller one is sampled by the same byte countdown as Rust
//!   blocks, with its usable size;
//! - the tag is the calling thread's, a free is charged to the tag stored
//!   at allocation whichever thread frees, and the tag's native figures
//!   (`TagEntry::native_*`) move beside its tracked and sampled ones;
//! - in the log a native block is an ordinary `alloc`/`sample_alloc`
//!   followed by a `native` record naming its address.
//!
//! Pitfalls handled here:
//!
//! - before heaptag has started (the dynamic loader, C constructors before
//!   `main`), and when tracking is off, calls go to jemalloc with nothing
//!   recorded (before start-up, counted untagged in the shared slot: the
//!   later free is then a small free like any other). The native path never
//!   starts heaptag itself: the Rust allocator's builder settings would be
//!   lost;
//! - re-entry: the one thing in the tracking path that can call `malloc`
//!   is the unwinder capturing a stack (libgcc may allocate on first use);
//!   a thread-local flag makes a nested call record its block without a
//!   stack. heaptag's own memory comes from prefixed jemalloc directly
//!   (`internal.rs`), never through these functions;
//! - glibc semantics: `free(NULL)` does nothing, `realloc(NULL, n)` is
//!   `malloc(n)`, `realloc(p, 0)` frees `p` and returns NULL,
//!   `posix_memalign` returns `EINVAL` for an alignment that is not a power
//!   of two multiple of `sizeof(void *)`, `aligned_alloc` and `memalign` round
//!   a non-power-of-two alignment up to one (as glibc does), an overflowing
//!   `calloc`/`reallocarray` or an exhausted heap returns NULL with `errno`
//!   set to `ENOMEM`;
//! - fork: jemalloc registers its own atfork handlers; heaptag's (start.rs)
//!   are registered after jemalloc has started, so its prepare handler runs
//!   first and takes its locks before jemalloc's;
//! - thread exit: the thread-locals used here need no destructor, so calls
//!   from other thread-locals' destructors work; such a call is charged
//!   through the shared slot (`thread.rs`).

use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::sync::atomic::Ordering;

use tikv_jemalloc_sys as je;

use crate::config::{HOT, OFF, ON};
use crate::health::ALLOC_FAILURES;
use crate::log::ring::Event;
use crate::table::{self, Entry};
use crate::thread::{self, Pair};
use crate::{clock, jemalloc, log, sampling, tag};

thread_local! {
    // Const-initialised, no destructor: readable at any point of a thread's
    // life. True while this thread captures a stack for a native block.
    static CAPTURING: Cell<bool> = const { Cell::new(false) };
}

/// Called once when tracking starts (`start.rs`): keeps this module, and so
/// the malloc family above, in every binary that links heaptag with the
/// feature on, whatever the linker's archive order.
#[inline(never)]
pub(crate) fn linked() {
    std::hint::black_box(malloc as unsafe extern "C" fn(usize) -> *mut c_void);
}

/// The calling thread's `errno`.
fn errno() -> c_int {
    // SAFETY: `__errno_location` returns the calling thread's errno slot.
    unsafe { *libc::__errno_location() }
}

/// `errno = e`.
fn set_errno(e: c_int) {
    // SAFETY: `__errno_location` returns the calling thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// jemalloc's usable size of a live block of its own.
///
/// # Safety
/// `p` is a live, non-null block of jemalloc.
#[inline]
unsafe fn usable(p: *mut c_void) -> usize {
    // SAFETY: the caller's guarantee.
    unsafe { je::sallocx(p, 0) }
}

/// Whether a new native block of this usable size at this address gets a
/// record: tracked by size, or sampled by the calling thread's byte
/// countdown, the same sampling process as its Rust blocks (`thread.rs`).
#[inline]
fn should_record(addr: usize, usable: usize) -> bool {
    usable >= HOT.threshold.load(Ordering::Relaxed) || thread::sample(addr, usable as u64)
}

/// Whether a native block about to be freed may have a record: tracked by
/// size, or in the free-side filter of sampled blocks; the side table
/// decides (`table::remove`).
#[inline]
fn may_be_recorded(addr: usize, usable: usize) -> bool {
    usable >= HOT.threshold.load(Ordering::Relaxed) || sampling::may_be_sampled(addr)
}

/// `after_alloc` for a block of `malloc`/`calloc`, whose usable size is
/// jemalloc's size class of the request (`nallocx`: a computation, no
/// lookup of the block).
#[inline]
fn after_plain_alloc(p: *mut c_void, requested: usize) {
    // Acquire: pairs with the Release in `start::tracking`.
    if p.is_null() || HOT.mode.load(Ordering::Acquire) != ON {
        return after_alloc(p, requested);
    }
    // SAFETY: nallocx has no preconditions for a non-zero size (jemalloc
    // serves malloc(0) as a 1-byte request).
    let usable = unsafe { je::nallocx(requested.max(1), 0) };
    if usable == 0 {
        return after_alloc(p, requested);
    }
    on_alloc(p as usize, requested, usable, false);
}

/// Counts (and records when due) the native block `p` just allocated for a
/// request of `requested` bytes.
#[inline]
fn after_alloc(p: *mut c_void, requested: usize) {
    // Acquire: pairs with the Release in `start::tracking`.
    let mode = HOT.mode.load(Ordering::Acquire);
    if mode == OFF {
        return;
    }
    if p.is_null() {
        if mode == ON {
            ALLOC_FAILURES.fetch_add(1, Ordering::Relaxed);
        }
        return;
    }
    // SAFETY: `p` was just returned by jemalloc.
    let usable = unsafe { usable(p) };
    if mode != ON {
        // Not started yet (or starting on another thread): counted
        // untagged, as the Rust path counts its allocations meanwhile.
        thread::count_pair(0, None, usable as u64);
        return;
    }
    on_alloc(p as usize, requested, usable, false);
}

#[inline]
fn on_alloc(addr: usize, requested: usize, usable: usize, resized: bool) {
    if !should_record(addr, usable) {
        thread::count_alloc(usable as u64);
        return;
    }
    record(addr, requested, usable, resized);
}

/// Records a native block that `should_record`.
#[cold]
#[inline(never)]
fn record(addr: usize, requested: usize, usable: usize, resized: bool) {
    let tracked = usable >= HOT.threshold.load(Ordering::Relaxed);
    let size = if tracked { requested } else { usable } as u64;
    if thread::is_internal() {
        // heaptag's own threads (the log writer) never enter tracking; the
        // block is counted as its unrecorded free will be, by usable size.
        thread::count_alloc(usable as u64);
        return;
    }
    let (tag_id, thread) = thread::charged();
    let logging = log::on();
    // The coarse clock without the log, as in `global::record`.
    let now = if logging { clock::now_ns() } else { clock::coarse_ns() };
    let stack = if logging { capture() } else { 0 };
    let entry = Entry {
        size,
        time_ns: now,
        tag: tag_id,
        thread,
        stack,
        tracked,
        resized,
    };
    // Without a record the block is counted as its free will be: unrecorded,
    // by usable size.
    let Some(t) = tag::entry(tag_id) else {
        thread::count_alloc(usable as u64);
        return;
    };
    if !table::insert(addr, entry) {
        thread::count_alloc(usable as u64);
        return;
    }
    thread::count_alloc(size);
    if tracked {
        thread::count_pair(tag_id, Some(Pair::TrackedAlloc), size);
        t.native_live.fetch_add(size, Ordering::Relaxed);
        t.native_blocks.fetch_add(1, Ordering::Relaxed);
        t.tracked_add(size);
    } else {
        let w = sampling::weight(usable);
        t.native_small.fetch_add(w.bytes, Ordering::Relaxed);
        t.sampled_add(&w);
    }
    if logging {
        emit_enter(addr, &entry, now);
    }
}

/// The calling thread's stack, or 0 when it is already capturing one (the
/// unwinder allocated: this is a nested call).
fn capture() -> u32 {
    let first = CAPTURING.try_with(|c| !c.replace(true)).unwrap_or(false);
    if !first {
        return 0;
    }
    let id = log::stacks::capture();
    let _ = CAPTURING.try_with(|c| c.set(false));
    id
}

/// Queues the events that start a native record's life: the block's own
/// (as a Rust block's), then `native`.
fn emit_enter(addr: usize, e: &Entry, now: u64) {
    log::emit_enter(addr, e, now);
    log::emit(Event::Native { addr: addr as u64 });
}

/// Takes the record of the native block `p` (about to be freed or resized)
/// out of the table, if it has one; counts an unrecorded block as a small
/// free. Returns the record.
///
/// # Safety
/// `p` is a live, non-null block of jemalloc, not freed during the call.
unsafe fn take(p: *mut c_void) -> Option<Entry> {
    // SAFETY: the caller's guarantee.
    unsafe { take_usable(p, usable(p)) }
}

/// `take` with the block's usable size already known.
///
/// # Safety
/// As `take`; `usable` is the block's usable size.
unsafe fn take_usable(p: *mut c_void, usable: usize) -> Option<Entry> {
    let addr = p as usize;
    let e = if may_be_recorded(addr, usable) {
        table::remove(addr)
    } else {
        None
    };
    if e.is_none() {
        // Unrecorded (small, or allocated before start-up): its tag is
        // unknown, as for a small Rust block.
        thread::count_small_free(usable as u64);
    }
    e
}

/// Undoes `record` for a native block leaving: event first, then counts,
/// the live count last (it may let the tag retire, `tag.rs`).
fn release(addr: usize, e: &Entry, event: bool, at: Option<u64>) {
    let Some(t) = tag::entry(e.tag) else { return };
    if event && log::on() {
        log::emit_leave(addr, e, at);
    }
    t.release_block(e, e.size, true);
}

/// The bookkeeping of `free(p)` with tracking on, before jemalloc's free.
///
/// # Safety
/// As `free`, with `p` non-null.
#[inline]
unsafe fn before_free(p: *mut c_void, usable: usize) {
    // SAFETY: forwarded.
    if let Some(e) = unsafe { take_usable(p, usable) } {
        // The Fingerprint's time is the Free's too (one clock read; none
        // for a block freed before it could be filled).
        let at = (e.tracked && log::wants_fingerprint(e.size)).then(|| {
            // SAFETY: the block is still allocated (freed by our caller
            // after this) and this thread is the one freeing it.
            unsafe { log::fingerprint_at_free(p as usize, &e) }
        });
        release(p as usize, &e, true, at);
    }
}

/// C's `malloc`, served by jemalloc and charged to the calling thread's tag.
///
/// # Safety
/// As C's `malloc`.
#[no_mangle]
pub unsafe extern "C" fn malloc(size: usize) -> *mut c_void {
    // SAFETY: jemalloc's malloc has C's contract.
    let p = unsafe { je::malloc(size) };
    after_plain_alloc(p, size);
    p
}

/// C's `calloc`: `NULL` and `ENOMEM` when `n * size` overflows.
///
/// # Safety
/// As C's `calloc`.
#[no_mangle]
pub unsafe extern "C" fn calloc(n: usize, size: usize) -> *mut c_void {
    let Some(total) = n.checked_mul(size) else {
        set_errno(libc::ENOMEM);
        return std::ptr::null_mut();
    };
    // SAFETY: jemalloc's calloc has C's contract.
    let p = unsafe { je::calloc(n, size) };
    after_plain_alloc(p, total);
    p
}

/// C's `free`: `free(NULL)` does nothing.
///
/// # Safety
/// As C's `free`: `p` is NULL or a live block of this family.
#[no_mangle]
pub unsafe extern "C" fn free(p: *mut c_void) {
    if p.is_null() {
        return;
    }
    // `free` never changes errno (glibc since 2.33, POSIX.1-2024), and C
    // code relies on it (`free(buf); return -errno;`): the bookkeeping may
    // wait on a lock, whose futex call can set it.
    let saved = errno();
    // SAFETY: our caller's guarantee, forwarded.
    unsafe { free_inner(p) };
    set_errno(saved);
}

/// `free` of a non-null `p`, which may change errno.
///
/// # Safety
/// As C's `free`, with `p` non-null.
#[inline(always)]
unsafe fn free_inner(p: *mut c_void) {
    // Acquire: as in `after_alloc`.
    match HOT.mode.load(Ordering::Acquire) {
        ON => {
            // SAFETY: our caller's guarantee; `p` is a live block.
            let usable = unsafe { usable(p) };
            // SAFETY: as above.
            unsafe { before_free(p, usable) };
            // The size looked up once: jemalloc's sized free skips its
            // own lookup.
            // SAFETY: `usable` is the block's usable size, which sdallocx
            // accepts (any size from the request to the usable size).
            return unsafe { je::sdallocx(p, usable, 0) };
        }
        OFF => {}
        // Before start-up: undo the count of `after_alloc`, without
        // attaching the thread.
        // SAFETY: our caller's guarantee; `p` is non-null.
        _ => thread::count_small_free_shared(unsafe { usable(p) } as u64),
    }
    // SAFETY: our caller's guarantee.
    unsafe { je::free(p) }
}

/// C's `realloc`, with glibc's edge cases: `realloc(NULL, n)` is
/// `malloc(n)`; `realloc(p, 0)` frees `p` and returns NULL. The old block
/// leaves its tag as a free would; the new one is an allocation of the
/// calling thread's tag (the realloc rule of docs/REPORTS.md).
///
/// # Safety
/// As C's `realloc`.
#[no_mangle]
pub unsafe extern "C" fn realloc(p: *mut c_void, size: usize) -> *mut c_void {
    if p.is_null() {
        // SAFETY: forwarded.
        return unsafe { malloc(size) };
    }
    if size == 0 {
        // SAFETY: forwarded.
        unsafe { free(p) };
        return std::ptr::null_mut();
    }
    // Acquire: as in `after_alloc`.
    let mode = HOT.mode.load(Ordering::Acquire);
    if mode != ON {
        // SAFETY: our caller's guarantee (a live block), read before the
        // realloc may free it.
        let old_usable = if mode == OFF { 0 } else { unsafe { usable(p) } };
        // SAFETY: our caller's guarantee.
        let new = unsafe { je::realloc(p, size) };
        if !new.is_null() && mode != OFF {
            thread::count_small_free_shared(old_usable as u64);
        }
        after_alloc(new, size);
        return new;
    }
    // SAFETY: our caller's guarantee; the record leaves the table before
    // jemalloc may free the old address (table.rs's ordering rule).
    let old = unsafe { take(p) };
    if let (true, Some(e)) = (log::on(), old) {
        // Before the realloc, which may hand the old address to another
        // thread: in the log, nothing reuses it before this free.
        log::emit_leave(p as usize, &e, None);
    }
    // SAFETY: our caller's guarantee.
    let new = unsafe { je::realloc(p, size) };
    if new.is_null() {
        // The old block is still allocated and unchanged: restore it.
        ALLOC_FAILURES.fetch_add(1, Ordering::Relaxed);
        if let Some(e) = old {
            if table::insert(p as usize, e) && log::on() {
                emit_enter(p as usize, &e, clock::now_ns());
            }
        } else {
            // SAFETY: `p` is still a live block of jemalloc.
            thread::count_alloc(unsafe { usable(p) } as u64);
        }
        set_errno(libc::ENOMEM);
        return new;
    }
    if let Some(e) = old {
        release(p as usize, &e, false, None);
    }
    // SAFETY: `new` was just returned by jemalloc.
    let usable = unsafe { usable(new) };
    on_alloc(new as usize, size, usable, true);
    new
}

/// glibc's `reallocarray`: `realloc(p, n * size)`, NULL and `ENOMEM` on
/// overflow.
///
/// # Safety
/// As glibc's `reallocarray`.
#[no_mangle]
pub unsafe extern "C" fn reallocarray(p: *mut c_void, n: usize, size: usize) -> *mut c_void {
    match n.checked_mul(size) {
        // SAFETY: forwarded.
        Some(total) => unsafe { realloc(p, total) },
        None => {
            set_errno(libc::ENOMEM);
            std::ptr::null_mut()
        }
    }
}

/// POSIX `posix_memalign`: `EINVAL` (and `*out` untouched) unless
/// `alignment` is a power of two multiple of `sizeof(void *)`; `ENOMEM`
/// when out of memory.
///
/// # Safety
/// As POSIX `posix_memalign`: `out` is valid for a pointer write.
#[no_mangle]
pub unsafe extern "C" fn posix_memalign(out: *mut *mut c_void, alignment: usize, size: usize) -> c_int {
    if !alignment.is_power_of_two() || !alignment.is_multiple_of(size_of::<*mut c_void>()) {
        return libc::EINVAL;
    }
    // SAFETY: the alignment is valid; `out` is our caller's.
    let rc = unsafe { je::posix_memalign(out, alignment, size) };
    if rc == 0 {
        // SAFETY: jemalloc wrote the new block to `*out`.
        after_alloc(unsafe { *out }, size);
    } else if HOT.mode.load(Ordering::Relaxed) == ON {
        ALLOC_FAILURES.fetch_add(1, Ordering::Relaxed);
    }
    rc
}

/// A block of `size` bytes aligned to `alignment` rounded up to a power of
/// two (glibc's `memalign` rule); NULL with `EINVAL` when no power of two
/// is that large.
fn aligned(alignment: usize, size: usize) -> *mut c_void {
    let Some(a) = alignment.max(1).checked_next_power_of_two() else {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    };
    // SAFETY: `a` is a power of two, as jemalloc's aligned_alloc requires.
    let p = unsafe { je::aligned_alloc(a, size) };
    after_alloc(p, size);
    p
}

/// C17 `aligned_alloc`: an alignment that is not a power of two (0
/// included) gives NULL with `EINVAL`, as glibc 2.38 and later do (glibc
/// before 2.38 rounded it up, as `memalign` still does).
///
/// # Safety
/// As C's `aligned_alloc`.
#[no_mangle]
pub unsafe extern "C" fn aligned_alloc(alignment: usize, size: usize) -> *mut c_void {
    if !alignment.is_power_of_two() {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    aligned(alignment, size)
}

/// The obsolete `memalign`.
///
/// # Safety
/// As glibc's `memalign`.
#[no_mangle]
pub unsafe extern "C" fn memalign(alignment: usize, size: usize) -> *mut c_void {
    aligned(alignment, size)
}

/// The system's page size.
fn page() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

/// The obsolete `valloc`: page-aligned.
///
/// # Safety
/// As glibc's `valloc`.
#[no_mangle]
pub unsafe extern "C" fn valloc(size: usize) -> *mut c_void {
    aligned(page(), size)
}

/// The obsolete `pvalloc`: page-aligned, the size rounded up to whole pages
/// (one page for 0).
///
/// # Safety
/// As glibc's `pvalloc`.
#[no_mangle]
pub unsafe extern "C" fn pvalloc(size: usize) -> *mut c_void {
    let pg = page();
    let Some(rounded) = size.max(1).checked_next_multiple_of(pg) else {
        set_errno(libc::ENOMEM);
        return std::ptr::null_mut();
    };
    aligned(pg, rounded)
}

/// glibc's `malloc_usable_size`: jemalloc's usable size (0 for NULL).
///
/// # Safety
/// As glibc's `malloc_usable_size`: `p` is NULL or a live block of this
/// family.
#[no_mangle]
pub unsafe extern "C" fn malloc_usable_size(p: *mut c_void) -> usize {
    if p.is_null() {
        return 0;
    }
    // SAFETY: our caller's guarantee.
    unsafe { je::malloc_usable_size(p) }
}

/// glibc's `malloc_trim`: purges every jemalloc arena's unused dirty pages
/// (`arena.<all>.purge`, as [`purge`](crate::purge)); returns 1 when the
/// purge ran, 0 when jemalloc refused it.
///
/// # Safety
/// None beyond C's: safe to call at any time.
#[no_mangle]
pub unsafe extern "C" fn malloc_trim(_pad: usize) -> c_int {
    c_int::from(jemalloc::purge().is_ok())
}
