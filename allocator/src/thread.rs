//! Per-thread state: the current tag id and the thread's counter slot.
//!
//! Frequent counts (bytes and blocks allocated per tag, small frees) are kept
//! per thread, so the hot path writes only cache lines its own thread owns:
//! a shared counter per tag made a tracking allocator 13x slower than bare
//! jemalloc on small churn (DESIGN.md). Snapshots add the slots up.
//!
//! A thread takes a [`Slot`] from a fixed pool at its first allocation and
//! gives it back when it exits, so thousands of short-lived threads reuse a
//! bounded set of slots; their counts stay in the slot and keep adding up.
//! Slots are taken lowest first, so readers visit only the slots below the
//! high-water mark of threads alive at once, not all 1,024.
//!
//! A slot's counters for a tag id live in a page of 256 ids, created on
//! first use. When the tag table retires every id of a range (`tag.rs`), it
//! zeroes their counters and frees the range's pages ([`free_range`]), so a
//! daemon that makes new tags forever keeps a bounded number of pages.
//! Threads that find the pool exhausted, or allocate while their thread-locals
//! are being torn down, use the shared slot, whose counters are atomic RMWs.

use std::cell::Cell;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};

use crate::health::THREADS_SEEN;
use crate::internal::{free_leaked, leak_zeroed};

/// Number of thread slots; beyond this many live threads, the shared slot.
pub const MAX_THREAD_SLOTS: usize = 1024;
/// Tag ids a slot has counters for (`0..TAG_IDS`): the tag table hands out
/// no more ([`MAX_TAGS`](crate::MAX_TAGS) is this number). Defined here, below
/// the tag table, so this module needs nothing from `tag.rs`.
pub(crate) const TAG_IDS: usize = PAGE * PAGES;
const PAGE: usize = 256;
const PAGES: usize = 256;

/// Ids per counter page (and per range of the tag table).
pub(crate) const RANGE: usize = PAGE;

/// One thread's counts for one tag.
#[derive(Default)]
pub(crate) struct TagCounter {
    /// Bytes allocated under the tag, all sizes.
    pub(crate) alloc_bytes: AtomicU64,
    /// Blocks allocated under the tag, all sizes.
    pub(crate) alloc_count: AtomicU64,
    /// Of those, bytes of tracked blocks (recorded in the table).
    pub(crate) tracked_alloc_bytes: AtomicU64,
    /// Of those, tracked blocks.
    pub(crate) tracked_alloc_count: AtomicU64,
    /// Bytes of the tag's tracked blocks freed by this thread.
    pub(crate) tracked_free_bytes: AtomicU64,
    /// The tag's tracked blocks freed by this thread.
    pub(crate) tracked_free_count: AtomicU64,
}

/// A sum of [`TagCounter`]s, as snapshots read them.
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct TagCounts {
    pub(crate) alloc_bytes: u64,
    pub(crate) alloc_count: u64,
    pub(crate) tracked_alloc_bytes: u64,
    pub(crate) tracked_alloc_count: u64,
    pub(crate) tracked_free_bytes: u64,
    pub(crate) tracked_free_count: u64,
}

/// Which pair of a [`TagCounter`] an event adds to (bytes, and one block).
#[derive(Clone, Copy)]
pub(crate) enum Pair {
    TrackedAlloc,
    TrackedFree,
}

type CounterPage = [TagCounter; PAGE];

/// Adds to a counter that only the calling thread writes (its own slot).
///
/// Single writer, so load + store cannot lose an update and costs no locked
/// instruction; readers (snapshots) see a value at worst a moment old.
#[inline(always)]
fn add_owned(c: &AtomicU64, n: u64) {
    c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

/// Adds to a counter of the shared slot, which many threads write.
#[inline]
fn add_shared(c: &AtomicU64, n: u64) {
    // Relaxed: an independent statistic.
    c.fetch_add(n, Ordering::Relaxed);
}

/// One thread's counters (or, for the shared slot, many threads').
#[repr(align(128))]
pub(crate) struct Slot {
    /// True while a thread owns the slot. Acquire on take / Release on give
    /// back order the previous owner's plain counter writes before the next's.
    in_use: AtomicBool,
    pub(crate) small_free_bytes: AtomicU64,
    pub(crate) small_free_count: AtomicU64,
    pages: [AtomicPtr<CounterPage>; PAGES],
}

impl Slot {
    const fn new() -> Slot {
        Slot {
            in_use: AtomicBool::new(false),
            small_free_bytes: AtomicU64::new(0),
            small_free_count: AtomicU64::new(0),
            pages: [const { AtomicPtr::new(ptr::null_mut()) }; PAGES],
        }
    }

    /// The counter of `tag` in this slot, creating its page if needed; `None`
    /// for an out-of-range tag or when no page could be allocated.
    fn counter(&self, tag: u32) -> Option<&TagCounter> {
        let tag = tag as usize;
        let page_slot = self.pages.get(tag / PAGE)?;
        // Acquire: pairs with the publication of a new page below.
        let mut page = page_slot.load(Ordering::Acquire);
        if page.is_null() {
            let fresh = leak_zeroed::<CounterPage>()?.as_ptr();
            // AcqRel: publish the zeroed page; the shared slot has many
            // writers, so the loser of a race keeps the winner's page (its
            // own is a bounded, counted leak of one page).
            page = match page_slot.compare_exchange(ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => fresh,
                Err(existing) => existing,
            };
        }
        // SAFETY: pages are zeroed `CounterPage`s (valid atomics). A page is
        // freed only by `free_range`, when every id of its range is free in
        // the tag table: then no thread holds one of them (so none calls
        // this for them) and no block of them is alive (so no free counts
        // into them). `tag % PAGE` is in bounds.
        Some(unsafe { &(*page)[tag % PAGE] })
    }

    /// Zeroes this slot's counters of `tag` (a retired id, which no thread
    /// writes: see `tag.rs`, retirement).
    fn zero(&self, tag: u32) {
        let tag = tag as usize;
        let Some(page_slot) = self.pages.get(tag / PAGE) else {
            return;
        };
        let page = page_slot.load(Ordering::Acquire);
        if page.is_null() {
            return;
        }
        // SAFETY: as in `counter`.
        let c = unsafe { &(*page)[tag % PAGE] };
        for a in [
            &c.alloc_bytes,
            &c.alloc_count,
            &c.tracked_alloc_bytes,
            &c.tracked_alloc_count,
            &c.tracked_free_bytes,
            &c.tracked_free_count,
        ] {
            a.store(0, Ordering::Relaxed);
        }
    }

    /// Adds what this slot holds for `tag` to `sum`.
    fn read_into(&self, tag: u32, sum: &mut TagCounts) {
        let tag = tag as usize;
        let Some(page_slot) = self.pages.get(tag / PAGE) else {
            return;
        };
        let page = page_slot.load(Ordering::Acquire);
        if page.is_null() {
            return;
        }
        // SAFETY: as in `counter`.
        let c = unsafe { &(*page)[tag % PAGE] };
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
        sum.alloc_bytes = sum.alloc_bytes.wrapping_add(ld(&c.alloc_bytes));
        sum.alloc_count = sum.alloc_count.wrapping_add(ld(&c.alloc_count));
        sum.tracked_alloc_bytes = sum.tracked_alloc_bytes.wrapping_add(ld(&c.tracked_alloc_bytes));
        sum.tracked_alloc_count = sum.tracked_alloc_count.wrapping_add(ld(&c.tracked_alloc_count));
        sum.tracked_free_bytes = sum.tracked_free_bytes.wrapping_add(ld(&c.tracked_free_bytes));
        sum.tracked_free_count = sum.tracked_free_count.wrapping_add(ld(&c.tracked_free_count));
    }
}

static SLOTS: [Slot; MAX_THREAD_SLOTS] = [const { Slot::new() }; MAX_THREAD_SLOTS];
/// For threads without a slot of their own: attaching (re-entrant calls),
/// tearing down, or beyond `MAX_THREAD_SLOTS`. Written with atomic RMWs.
static SHARED: Slot = Slot::new();
/// One more than the highest slot index ever taken: readers visit only
/// `SLOTS[..SLOTS_USED]` and the shared slot.
static SLOTS_USED: AtomicU32 = AtomicU32::new(0);

/// Every slot ever owned, shared one included, for snapshots.
pub(crate) fn all_slots() -> impl Iterator<Item = &'static Slot> {
    // Acquire: pairs with the fetch_max in `take_slot`; a slot taken later
    // holds nothing this reader could miss that it does not miss anyway.
    let used = SLOTS_USED.load(Ordering::Acquire) as usize;
    SLOTS[..used.min(MAX_THREAD_SLOTS)]
        .iter()
        .chain(std::iter::once(&SHARED))
}

/// The sum over every slot of `tag`'s counters. The caller holds the tag
/// table's lock, so no page is freed meanwhile (see `free_range`).
pub(crate) fn read_counts(tag: u32) -> TagCounts {
    let mut sum = TagCounts::default();
    for s in all_slots() {
        s.read_into(tag, &mut sum);
    }
    sum
}

/// Bytes of small (unrecorded) frees, all slots: they carry no tag.
pub(crate) fn small_free_bytes() -> u64 {
    all_slots().fold(0u64, |n, s| n.wrapping_add(s.small_free_bytes.load(Ordering::Relaxed)))
}

/// Zeroes `tag`'s counters in every slot: the id is being retired (no
/// thread holds it, no block of it is alive). Under the tag table's lock.
pub(crate) fn zero_counts(tag: u32) {
    for s in all_slots() {
        s.zero(tag);
    }
}

/// Frees every slot's page of ids `range * RANGE ..` (range 0, which holds
/// the untagged id, is never freed). The caller holds the tag table's lock
/// and every id of the range is free: no thread holds one (so no thread
/// points its hot-path counter into the page or creates it again
/// meanwhile) and no block of one is alive (so no free counts into it).
/// Returns the pages freed.
pub(crate) fn free_range(range: usize) -> usize {
    if range == 0 || range >= PAGES {
        return 0;
    }
    let mut freed = 0;
    for s in all_slots() {
        // AcqRel: takes the page out before freeing it.
        let page = s.pages[range].swap(ptr::null_mut(), Ordering::AcqRel);
        if let Some(p) = std::ptr::NonNull::new(page) {
            // SAFETY: `p` came from `leak_zeroed::<CounterPage>` and is no
            // longer reachable (swapped out above; see the caller's rule).
            unsafe { free_leaked(p) };
            freed += 1;
        }
    }
    freed
}

const NEW: u8 = 0;
const ATTACHING: u8 = 1;
const ATTACHED: u8 = 2;
const DETACHED: u8 = 3;

struct ThreadState {
    /// Bytes this thread may still allocate before its next sample point
    /// (`sampling.rs`); at or below 0 before the first draw, so the first
    /// small allocation seeds the generator.
    sample_left: Cell<i64>,
    /// The thread's sample-point generator (0: not seeded yet).
    rng: Cell<u64>,
    /// This thread's copy of the tracking threshold (`HOT.threshold`) for
    /// the allocation fast path; 0 until the thread's first slow-path
    /// allocation with tracking on copies it (`count_alloc_sampled_slow`), so
    /// until then every allocation takes the slow path, which decides by
    /// the real threshold. A thread-local beside the countdown, so the fast
    /// path's test after the inner call needs no pointer to `HOT` kept
    /// across that call (and the switched-off path of `alloc` no stack frame).
    track_from: Cell<usize>,
    /// The current tag id.
    tag: Cell<u32>,
    /// This thread's number (0 until it first allocates).
    thread: Cell<u32>,
    /// The thread's own slot; null before attaching, after detaching, or
    /// when the pool was exhausted.
    own: Cell<*const Slot>,
    /// The counter of (own slot, current tag), kept in step with `tag` by
    /// `swap_tag`; null whenever `own` is. The hot path reads only this.
    counter: Cell<*const TagCounter>,
    phase: Cell<u8>,
    /// heaptag's own thread (the log writer, `finish()`): its blocks are
    /// never recorded, sampled or logged.
    internal: Cell<bool>,
}

thread_local! {
    // No destructor and const-initialised: readable at any point of the
    // thread's life, including other thread-locals' destructors.
    static STATE: ThreadState = const {
        ThreadState {
            sample_left: Cell::new(0),
            rng: Cell::new(0),
            track_from: Cell::new(0),
            tag: Cell::new(0),
            thread: Cell::new(0),
            own: Cell::new(ptr::null()),
            counter: Cell::new(ptr::null()),
            phase: Cell::new(NEW),
            internal: Cell::new(false),
        }
    };
    // Gives the slot back when the thread exits.
    static OWNER: SlotOwner = const { SlotOwner(Cell::new(ptr::null())) };
}

struct SlotOwner(Cell<*const Slot>);

impl Drop for SlotOwner {
    fn drop(&mut self) {
        let slot = self.0.replace(ptr::null());
        // Later allocations of this thread (other thread-locals' destructors)
        // go to the shared slot.
        let _ = STATE.try_with(|s| {
            s.own.set(ptr::null());
            s.counter.set(ptr::null());
            s.phase.set(DETACHED);
        });
        if !slot.is_null() {
            // SAFETY: `slot` points into the static SLOTS array.
            let slot = unsafe { &*slot };
            // Release: our counter writes happen-before the next owner's.
            slot.in_use.store(false, Ordering::Release);
        }
    }
}

/// Counts an allocation of `size` bytes under the calling thread's tag.
#[inline(always)]
pub(crate) fn count_alloc(size: u64) {
    let done = STATE
        .try_with(|s| {
            let c = s.counter.get();
            if c.is_null() {
                return false;
            }
            // SAFETY: a non-null `counter` points into a page of this
            // thread's own slot (pages are never freed), and only this
            // thread writes it while it owns the slot.
            let c = unsafe { &*c };
            add_owned(&c.alloc_bytes, size);
            add_owned(&c.alloc_count, 1);
            true
        })
        .unwrap_or(false);
    if !done {
        count_alloc_slow(size);
    }
}

/// Counts an allocation of `size` bytes under the calling thread's tag and
/// runs its sample countdown: true when that is all (not sampled, below the
/// tracking threshold); false when the caller must go on with
/// [`count_alloc_sampled_slow`] (the countdown crossed a sample point, the
/// block may be tracked, or the thread has no counter of its own and
/// nothing was counted). The hot path of every allocation with tracking on:
/// two adds to the thread's counter, one subtraction from its countdown,
/// three tests, all on thread-local memory.
#[inline(always)]
pub(crate) fn count_alloc_fast(size: u64) -> bool {
    STATE
        .try_with(|s| {
            let c = s.counter.get();
            if c.is_null() {
                return false;
            }
            // SAFETY: as in `count_alloc`.
            let c = unsafe { &*c };
            add_owned(&c.alloc_bytes, size);
            add_owned(&c.alloc_count, 1);
            let left = s.sample_left.get().wrapping_sub(size as i64);
            s.sample_left.set(left);
            left >= 0 && (size as usize) < s.track_from.get()
        })
        .unwrap_or(false)
}

/// After [`count_alloc_fast`] returned false for the block at `addr`: the
/// countdown crossed a sample point, or the block is at or above the
/// thread's copy of the threshold (the caller tests the real one), or the
/// thread has no counter of its own yet (first allocation, pool exhausted,
/// torn down) and the block is counted here. Refreshes the thread's copy of
/// the threshold (tracking is on: the settings are final). Returns whether
/// the block is sampled: never one at or above the threshold, which is
/// tracked exactly and whose bytes the countdown gives back (as a realloc's
/// and C's tracked blocks never take them): the small blocks' sampling
/// skips them, which the process being memoryless leaves unbiased, and no
/// gap is drawn (a `log`, ~20 ns) for a block that needs none.
pub(crate) fn count_alloc_sampled_slow(addr: usize, size: u64) -> bool {
    let threshold = crate::config::HOT.threshold.load(Ordering::Relaxed);
    let tracked = size >= threshold as u64;
    let own = STATE
        .try_with(|s| {
            s.track_from.set(threshold);
            let own = !s.counter.get().is_null();
            if own && tracked {
                // `count_alloc_fast` charged the countdown (it does when the
                // thread has a counter); `size` fits in i64 (a Layout's does).
                s.sample_left.set(s.sample_left.get().wrapping_add(size as i64));
            }
            own
        })
        .unwrap_or(false);
    if !own {
        count_alloc_slow(size);
    }
    if tracked {
        return false;
    }
    // The countdown was already charged when the thread had a counter.
    sample_inner(addr, size, !own)
}

/// Whether a new block of `size` bytes at `addr` is sampled, without
/// counting it (a realloc's new block, counted by the caller).
pub(crate) fn sample(addr: usize, size: u64) -> bool {
    sample_inner(addr, size, true)
}

/// Runs the countdown for a block of `size` bytes (subtracting them first
/// when `charge`) and returns whether it crossed a sample point. After a
/// crossing the countdown restarts with a fresh gap from the block's end:
/// the Poisson process is memoryless, so the distance from there to the
/// next point is again exponential, whatever the block's size (one draw per
/// sample, however many points a large block spans). Without thread-local
/// state, the address-keyed coin decides (same probability).
fn sample_inner(addr: usize, size: u64, charge: bool) -> bool {
    STATE
        .try_with(|s| {
            let rate = crate::config::HOT.rate.load(Ordering::Relaxed);
            let mut rng = s.rng.get();
            let mut left = s.sample_left.get();
            let size = i64::try_from(size).unwrap_or(i64::MAX);
            if rng == 0 {
                // First sample decision of this thread: start its process at
                // this block (memoryless, so unbiased).
                rng = crate::sampling::thread_seed(s.thread.get());
                left = crate::sampling::next_gap(&mut rng, rate).saturating_sub(size);
            } else if charge {
                left = left.saturating_sub(size);
            }
            let sampled = left < 0;
            if sampled {
                left = crate::sampling::next_gap(&mut rng, rate);
            }
            s.rng.set(rng);
            s.sample_left.set(left);
            sampled
        })
        .unwrap_or_else(|_| crate::sampling::is_sampled(addr, size as usize))
}

#[cold]
#[inline(never)]
fn count_alloc_slow(size: u64) {
    let (tag, _) = charged();
    if let Some(c) = SHARED.counter(tag) {
        add_shared(&c.alloc_bytes, size);
        add_shared(&c.alloc_count, 1);
    }
}

/// Adds `bytes` and one block to a pair of `tag`'s counters in the calling
/// thread's slot (the shared slot if it has none). Off the hot path: tracked
/// events and reallocs keeping an old tag.
pub(crate) fn count_pair(tag: u32, pair: Option<Pair>, bytes: u64) {
    let own = STATE.try_with(|s| s.own.get()).unwrap_or(ptr::null());
    let (slot, add): (&Slot, fn(&AtomicU64, u64)) = if own.is_null() {
        (&SHARED, add_shared)
    } else {
        // SAFETY: a non-null `own` points into the static SLOTS array, and
        // this thread is its only writer while it owns it.
        (unsafe { &*own }, add_owned)
    };
    let Some(c) = slot.counter(tag) else { return };
    let (b, n) = match pair {
        None => (&c.alloc_bytes, &c.alloc_count),
        Some(Pair::TrackedAlloc) => (&c.tracked_alloc_bytes, &c.tracked_alloc_count),
        Some(Pair::TrackedFree) => (&c.tracked_free_bytes, &c.tracked_free_count),
    };
    add(b, bytes);
    add(n, 1);
}

/// Counts the free of a block without a record in the calling thread's own
/// slot; false (nothing counted) when it has none: then the caller counts
/// with [`count_small_free`].
#[inline(always)]
pub(crate) fn count_small_free_owned(size: u64) -> bool {
    STATE
        .try_with(|s| {
            let own = s.own.get();
            if own.is_null() {
                return false;
            }
            // SAFETY: a non-null `own` points into the static SLOTS array,
            // and this thread is its only writer while it owns it.
            let own = unsafe { &*own };
            add_owned(&own.small_free_bytes, size);
            add_owned(&own.small_free_count, 1);
            true
        })
        .unwrap_or(false)
}

/// Counts the free of a block without a record (its tag is unknown).
#[inline(always)]
pub(crate) fn count_small_free(size: u64) {
    let done = STATE
        .try_with(|s| {
            let own = s.own.get();
            if own.is_null() {
                return false;
            }
            // SAFETY: a non-null `own` points into the static SLOTS array,
            // and this thread is its only writer while it owns it.
            let own = unsafe { &*own };
            add_owned(&own.small_free_bytes, size);
            add_owned(&own.small_free_count, 1);
            true
        })
        .unwrap_or(false);
    if !done {
        count_small_free_slow(size);
    }
}

/// Counts an unrecorded free in the shared slot without attaching the
/// thread: for frees before heaptag has started (the `native` shim, from
/// the dynamic loader or C constructors), where a thread must not take a
/// slot yet.
#[cfg_attr(not(feature = "native"), allow(dead_code))]
pub(crate) fn count_small_free_shared(size: u64) {
    add_shared(&SHARED.small_free_bytes, size);
    add_shared(&SHARED.small_free_count, 1);
}

#[cold]
#[inline(never)]
fn count_small_free_slow(size: u64) {
    let _ = charged();
    add_shared(&SHARED.small_free_bytes, size);
    add_shared(&SHARED.small_free_count, 1);
}

/// The (tag, thread number) the calling thread's allocations are charged to,
/// attaching the thread to a slot on its first call. While attaching (a
/// re-entrant call from heaptag's own setup) the tag is 0 (untagged).
pub(crate) fn charged() -> (u32, u32) {
    STATE
        .try_with(|s| {
            match s.phase.get() {
                NEW => attach(s),
                ATTACHING => return (0, s.thread.get()),
                _ => {}
            }
            (s.tag.get(), s.thread.get())
        })
        .unwrap_or((0, 0))
}

/// First allocation of a thread: take a slot and arrange to give it back.
#[cold]
#[inline(never)]
fn attach(s: &ThreadState) {
    s.phase.set(ATTACHING);
    // Relaxed: see THREADS_SEEN.
    s.thread.set(THREADS_SEEN.fetch_add(1, Ordering::Relaxed) + 1);
    let Some(slot) = take_slot() else {
        // Pool exhausted: this thread counts in the shared slot.
        s.phase.set(ATTACHED);
        return;
    };
    // Registering OWNER's destructor may allocate (std keeps a list); those
    // re-entrant calls see ATTACHING and count in the shared slot, untagged.
    if OWNER.try_with(|o| o.0.set(slot)).is_ok() {
        s.own.set(slot);
        s.counter
            .set(slot.counter(s.tag.get()).map_or(ptr::null(), ptr::from_ref));
        s.phase.set(ATTACHED);
    } else {
        // The thread is already tearing down: nobody would give the slot back.
        slot.in_use.store(false, Ordering::Release);
        s.phase.set(DETACHED);
    }
}

/// The lowest free slot: a scan once per thread start, so that readers
/// (snapshots, the writer's samples) visit only as many slots as threads
/// were ever alive at once.
fn take_slot() -> Option<&'static Slot> {
    for (i, slot) in SLOTS.iter().enumerate() {
        // Acquire: the previous owner's counter writes happen-before ours.
        if !slot.in_use.load(Ordering::Relaxed)
            && slot
                .in_use
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            // Release: readers that see the new mark see the slot taken.
            SLOTS_USED.fetch_max(i as u32 + 1, Ordering::Release);
            return Some(slot);
        }
    }
    None
}

/// The calling thread's number (0 before its first allocation).
pub(crate) fn number() -> u32 {
    STATE.try_with(|s| s.thread.get()).unwrap_or(0)
}

/// The calling thread's tag id (0 when none is set).
#[inline]
pub(crate) fn current_tag() -> u32 {
    STATE.try_with(|s| s.tag.get()).unwrap_or(0)
}

/// Sets the calling thread's tag id, returning the previous one, and points
/// the hot path at the new tag's counter.
pub(crate) fn swap_tag(id: u32) -> u32 {
    STATE
        .try_with(|s| {
            let prev = s.tag.replace(id);
            let own = s.own.get();
            if !own.is_null() {
                // SAFETY: a non-null `own` points into the static SLOTS array.
                let own = unsafe { &*own };
                s.counter.set(own.counter(id).map_or(ptr::null(), ptr::from_ref));
            }
            prev
        })
        .unwrap_or(0)
}

/// Marks the calling thread as heaptag's own (or not), returning the
/// previous mark: its allocations are still counted (under its tag), but
/// never recorded in the table, sampled or logged.
pub(crate) fn set_internal(yes: bool) -> bool {
    STATE.try_with(|s| s.internal.replace(yes)).unwrap_or(false)
}

/// True on a thread marked by [`set_internal`]. Off the hot path (only
/// where a block is about to be recorded).
pub(crate) fn is_internal() -> bool {
    STATE.try_with(|s| s.internal.get()).unwrap_or(false)
}

/// Number of slots currently owned by live threads.
pub(crate) fn slots_in_use() -> usize {
    all_slots()
        .take(MAX_THREAD_SLOTS)
        .filter(|s| !ptr::eq(*s, &SHARED) && s.in_use.load(Ordering::Relaxed))
        .count()
}

/// In a forked child (the atfork child handler in `start.rs`): gives back
/// the slots of every thread but the calling one, the only thread a child
/// has, so the child's own threads can reuse them. Their counts stay in the
/// slots and keep adding up, as when a thread exits.
pub(crate) fn after_fork_in_child() {
    let own = STATE.try_with(|s| s.own.get()).unwrap_or(ptr::null());
    for slot in &SLOTS {
        if !ptr::eq(slot, own) {
            // Release: as when an exiting thread gives its slot back.
            slot.in_use.store(false, Ordering::Release);
        }
    }
}
