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
//! Threads that find the pool exhausted, or allocate while their thread-locals
//! are being torn down, use the shared slot, whose counters are atomic RMWs.

use std::cell::Cell;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};

use crate::internal::leak_zeroed;
use crate::tag::MAX_TAGS;

/// Number of thread slots; beyond this many live threads, the shared slot.
pub const MAX_THREAD_SLOTS: usize = 1024;
const PAGE: usize = 256;
const PAGES: usize = MAX_TAGS / PAGE;

/// Bytes and blocks allocated under one tag by one thread.
#[derive(Default)]
pub(crate) struct TagCounter {
    pub(crate) alloc_bytes: AtomicU64,
    pub(crate) alloc_count: AtomicU64,
}

type CounterPage = [TagCounter; PAGE];

/// One thread's counters.
#[repr(align(128))]
pub(crate) struct Slot {
    /// True while a thread owns the slot. Acquire on take / Release on give
    /// back order the previous owner's plain counter writes before the next's.
    in_use: AtomicBool,
    /// The shared slot is written by many threads and uses atomic RMWs.
    shared: bool,
    pub(crate) small_free_bytes: AtomicU64,
    pub(crate) small_free_count: AtomicU64,
    pages: [AtomicPtr<CounterPage>; PAGES],
}

impl Slot {
    const fn new(shared: bool) -> Slot {
        Slot {
            in_use: AtomicBool::new(false),
            shared,
            small_free_bytes: AtomicU64::new(0),
            small_free_count: AtomicU64::new(0),
            pages: [const { AtomicPtr::new(ptr::null_mut()) }; PAGES],
        }
    }

    /// Adds `n` to a counter of this slot.
    #[inline(always)]
    fn add(&self, c: &AtomicU64, n: u64) {
        if self.shared {
            // Relaxed: an independent statistic.
            c.fetch_add(n, Ordering::Relaxed);
        } else {
            // Single writer (the owning thread), so load + store cannot lose
            // an update, and costs no locked instruction. Readers (snapshots)
            // see a value that is at worst a moment old.
            c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
        }
    }

    /// Counts an allocation of `size` bytes under tag `tag`.
    #[inline(always)]
    pub(crate) fn count_alloc(&self, tag: u32, size: u64) {
        if let Some(c) = self.counter(tag) {
            self.add(&c.alloc_bytes, size);
            self.add(&c.alloc_count, 1);
        }
    }

    /// Counts the free of a small (untracked) block; its tag is unknown here.
    #[inline(always)]
    pub(crate) fn count_small_free(&self, size: u64) {
        self.add(&self.small_free_bytes, size);
        self.add(&self.small_free_count, 1);
    }

    #[inline(always)]
    fn counter(&self, tag: u32) -> Option<&TagCounter> {
        let tag = tag as usize;
        let page_slot = self.pages.get(tag / PAGE)?;
        // Acquire: pairs with the Release store of a new page below.
        let mut page = page_slot.load(Ordering::Acquire);
        if page.is_null() {
            page = self.new_page(page_slot)?;
        }
        // SAFETY: pages are zeroed `CounterPage`s (valid atomics), published
        // once and never freed; `tag % PAGE` is in bounds.
        Some(unsafe { &(*page)[tag % PAGE] })
    }

    #[cold]
    fn new_page(&self, page_slot: &AtomicPtr<CounterPage>) -> Option<*mut CounterPage> {
        let fresh = leak_zeroed::<CounterPage>()?.as_ptr();
        // Release: the zeroed page is visible before its pointer. The shared
        // slot has many writers, so install with a CAS and keep the winner (the
        // loser's page is a bounded, counted leak of one page).
        match page_slot.compare_exchange(ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => Some(fresh),
            Err(existing) => Some(existing),
        }
    }

    /// The (alloc bytes, alloc count) this slot holds for `tag`, if any.
    pub(crate) fn read(&self, tag: u32) -> (u64, u64) {
        let tag = tag as usize;
        let Some(page_slot) = self.pages.get(tag / PAGE) else {
            return (0, 0);
        };
        let page = page_slot.load(Ordering::Acquire);
        if page.is_null() {
            return (0, 0);
        }
        // SAFETY: as in `counter`.
        let c = unsafe { &(*page)[tag % PAGE] };
        (c.alloc_bytes.load(Ordering::Relaxed), c.alloc_count.load(Ordering::Relaxed))
    }
}

static SLOTS: [Slot; MAX_THREAD_SLOTS] = [const { Slot::new(false) }; MAX_THREAD_SLOTS];
static SHARED: Slot = Slot::new(true);
/// Where the next slot search starts (spreads threads, keeps the scan short).
static NEXT_SLOT: AtomicU32 = AtomicU32::new(0);
/// Thread numbers handed out; also the number of threads that allocated.
static THREADS: AtomicU32 = AtomicU32::new(0);

/// Every slot, shared one included, for snapshots.
pub(crate) fn all_slots() -> impl Iterator<Item = &'static Slot> {
    SLOTS.iter().chain(std::iter::once(&SHARED))
}

/// Number of threads that have allocated through heaptag.
pub(crate) fn threads_seen() -> u32 {
    THREADS.load(Ordering::Relaxed)
}

/// The shared slot (re-entrant calls, initialisation, teardown).
pub(crate) fn shared_slot() -> &'static Slot {
    &SHARED
}

struct ThreadState {
    tag: Cell<u32>,
    slot: Cell<*const Slot>,
    /// Set while heaptag itself runs code that may allocate on this thread.
    busy: Cell<bool>,
    thread: Cell<u32>,
}

thread_local! {
    // No destructor and const-initialised: readable at any point of the
    // thread's life, including other thread-locals' destructors.
    static STATE: ThreadState = const {
        ThreadState {
            tag: Cell::new(0),
            slot: Cell::new(ptr::null()),
            busy: Cell::new(false),
            thread: Cell::new(0),
        }
    };
    // Gives the slot back when the thread exits.
    static OWNER: SlotOwner = const { SlotOwner(Cell::new(ptr::null())) };
}

struct SlotOwner(Cell<*const Slot>);

impl Drop for SlotOwner {
    fn drop(&mut self) {
        let slot = self.0.replace(ptr::null());
        if slot.is_null() {
            return;
        }
        // Later allocations of this thread (other thread-locals' destructors)
        // go to the shared slot.
        let _ = STATE.try_with(|s| s.slot.set(&SHARED));
        // SAFETY: `slot` points into the static SLOTS array.
        let slot = unsafe { &*slot };
        // Release: our counter writes happen-before the next owner's.
        slot.in_use.store(false, Ordering::Release);
    }
}

/// What the hot path needs from the calling thread.
#[derive(Clone, Copy)]
pub(crate) struct Current {
    pub(crate) tag: u32,
    pub(crate) thread: u32,
    pub(crate) slot: &'static Slot,
    /// True when heaptag itself is running on this thread (re-entrant call).
    pub(crate) busy: bool,
}

/// The calling thread's tag, slot and re-entrancy state.
#[inline(always)]
pub(crate) fn current() -> Current {
    STATE
        .try_with(|s| {
            let slot = s.slot.get();
            if slot.is_null() && !s.busy.get() {
                return attach(s);
            }
            Current {
                tag: s.tag.get(),
                thread: s.thread.get(),
                // SAFETY: a non-null slot pointer always points into the
                // static SLOTS array or at SHARED.
                slot: if slot.is_null() { &SHARED } else { unsafe { &*slot } },
                busy: s.busy.get(),
            }
        })
        .unwrap_or(Current {
            tag: 0,
            thread: 0,
            slot: &SHARED,
            busy: true,
        })
}

/// First allocation of a thread: take a slot and arrange to give it back.
#[cold]
#[inline(never)]
fn attach(s: &ThreadState) -> Current {
    s.busy.set(true);
    let thread = THREADS.fetch_add(1, Ordering::Relaxed) + 1;
    s.thread.set(thread);
    let slot = take_slot();
    // Registering OWNER's destructor may allocate (std keeps a list); `busy`
    // sends those allocations to the shared slot.
    let registered = OWNER.try_with(|o| o.0.set(slot)).is_ok();
    let slot: &'static Slot = if registered {
        slot
    } else {
        // The thread is already tearing down: nobody would give the slot back.
        if !ptr::eq(slot, &SHARED) {
            slot.in_use.store(false, Ordering::Release);
        }
        &SHARED
    };
    s.slot.set(slot);
    s.busy.set(false);
    Current {
        tag: s.tag.get(),
        thread,
        slot,
        busy: false,
    }
}

fn take_slot() -> &'static Slot {
    let start = NEXT_SLOT.fetch_add(1, Ordering::Relaxed) as usize;
    for i in 0..MAX_THREAD_SLOTS {
        let slot = &SLOTS[(start + i) % MAX_THREAD_SLOTS];
        // Acquire: the previous owner's counter writes happen-before ours.
        if !slot.in_use.load(Ordering::Relaxed)
            && slot
                .in_use
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            return slot;
        }
    }
    &SHARED
}

/// The calling thread's tag id (0 when none is set).
#[inline]
pub(crate) fn current_tag() -> u32 {
    STATE.try_with(|s| s.tag.get()).unwrap_or(0)
}

/// Sets the calling thread's tag id, returning the previous one.
#[inline]
pub(crate) fn swap_tag(id: u32) -> u32 {
    STATE.try_with(|s| s.tag.replace(id)).unwrap_or(0)
}

/// Number of slots currently owned by live threads.
pub(crate) fn slots_in_use() -> usize {
    SLOTS.iter().filter(|s| s.in_use.load(Ordering::Relaxed)).count()
}
