//! The bounded event queue between the allocator hot path and the writer.
//!
//! A Vyukov bounded MPMC queue used with many producers (any thread that
//! makes a tracked or sampled event) and one consumer (the writer). A push is
//! a CAS on the enqueue index and two stores; it never blocks and never
//! allocates. When the queue is full the event is dropped and counted.
//!
//! The events are `heaptag_format::Event`: the ring kinds of the log's record
//! table, one fixed-size `Copy` value each, so what the hot path queues is
//! exactly what the writer encodes.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

use allocator_api2::alloc::Allocator;
pub(crate) use heaptag_format::Event;

use crate::internal::Internal;

struct Cell {
    seq: AtomicUsize,
    ev: UnsafeCell<MaybeUninit<Event>>,
}

/// The queue. Its buffer is allocated once, from the internal heap, when the
/// log starts; before that every push fails (and is not counted: logging is
/// off).
pub(crate) struct Ring {
    buf: AtomicPtr<Cell>,
    mask: AtomicUsize,
    enq: crate::log::Padded<AtomicUsize>,
    deq: crate::log::Padded<AtomicUsize>,
}

// SAFETY: a cell's event is written only by the producer that won its slot
// (CAS on `enq`) and read only by the single consumer after the producer's
// Release store of `seq`; `seq` hands the cell back and forth.
unsafe impl Sync for Ring {}

impl Ring {
    pub(crate) const fn new() -> Ring {
        Ring {
            buf: AtomicPtr::new(ptr::null_mut()),
            mask: AtomicUsize::new(0),
            enq: crate::log::Padded(AtomicUsize::new(0)),
            deq: crate::log::Padded(AtomicUsize::new(0)),
        }
    }

    /// Allocates room for `capacity` events (rounded up to a power of two).
    /// Called once, by the thread starting the log, before logging is on.
    pub(crate) fn init(&self, capacity: usize) -> bool {
        if !self.buf.load(Ordering::Acquire).is_null() {
            return true;
        }
        let cap = capacity.clamp(64, 1 << 24).next_power_of_two();
        let Ok(layout) = std::alloc::Layout::array::<Cell>(cap) else {
            return false;
        };
        let Ok(mem) = Internal.allocate(layout) else {
            return false;
        };
        let cells: NonNull<Cell> = mem.cast();
        for i in 0..cap {
            // SAFETY: `i < cap` cells fit in the block just allocated for
            // `cap` cells; each is initialised once, before publication.
            unsafe {
                cells.as_ptr().add(i).write(Cell {
                    seq: AtomicUsize::new(i),
                    ev: UnsafeCell::new(MaybeUninit::uninit()),
                })
            };
        }
        self.mask.store(cap - 1, Ordering::Relaxed);
        // Release: the initialised cells and mask are visible to any thread
        // that sees the buffer pointer.
        self.buf.store(cells.as_ptr(), Ordering::Release);
        true
    }

    /// Adds an event; false (and counted) when the queue is full.
    pub(crate) fn push(&self, ev: Event) -> bool {
        // Acquire: pairs with the Release in `init`.
        let buf = self.buf.load(Ordering::Acquire);
        if buf.is_null() {
            return false;
        }
        let mask = self.mask.load(Ordering::Relaxed);
        let mut pos = self.enq.0.load(Ordering::Relaxed);
        loop {
            // SAFETY: `pos & mask` < capacity; cells live for the process.
            let cell = unsafe { &*buf.add(pos & mask) };
            // Acquire: the consumer's Release after reading the cell.
            let seq = cell.seq.load(Ordering::Acquire);
            let diff = seq as isize - pos as isize;
            if diff == 0 {
                // Relaxed CAS: the cell's `seq` store below publishes the event.
                match self
                    .enq
                    .0
                    .compare_exchange_weak(pos, pos + 1, Ordering::Relaxed, Ordering::Relaxed)
                {
                    Ok(_) => {
                        // SAFETY: winning the CAS for `pos` gives this thread
                        // exclusive access to the cell until `seq` is stored.
                        unsafe { (*cell.ev.get()).write(ev) };
                        // Release: the event is visible before the cell is marked full.
                        cell.seq.store(pos + 1, Ordering::Release);
                        return true;
                    }
                    Err(actual) => pos = actual,
                }
            } else if diff < 0 {
                // Full: the consumer has not freed this cell yet.
                crate::health::LOG_RING_FULL.fetch_add(1, Ordering::Relaxed);
                return false;
            } else {
                pos = self.enq.0.load(Ordering::Relaxed);
            }
        }
    }

    /// Capacity in events (0 before `init`).
    pub(crate) fn capacity(&self) -> usize {
        // Acquire: pairs with the Release in `init` (the mask is set before).
        if self.buf.load(Ordering::Acquire).is_null() {
            return 0;
        }
        self.mask.load(Ordering::Relaxed) + 1
    }

    /// Events queued and not taken yet: a figure (producers and the
    /// consumer may move on meanwhile), for the count of events lost when
    /// `finish()` gives up.
    pub(crate) fn len(&self) -> usize {
        // Relaxed: a figure, nothing is read through it.
        let enq = self.enq.0.load(Ordering::Relaxed);
        enq.saturating_sub(self.deq.0.load(Ordering::Relaxed))
    }

    /// Events queued so far (the next enqueue position). An event whose push
    /// returned before this call is below it.
    pub(crate) fn enqueued(&self) -> u64 {
        // SeqCst: ordered after the writer's reads that decided a tag
        // retires (see `tag.rs`), which saw those pushes done.
        self.enq.0.load(Ordering::SeqCst) as u64
    }

    /// Events taken so far (the next dequeue position).
    pub(crate) fn dequeued(&self) -> u64 {
        self.deq.0.load(Ordering::Relaxed) as u64
    }

    /// Takes the oldest event, if one is ready. Single consumer only (the
    /// caller holds the writer lock).
    pub(crate) fn pop(&self) -> Option<Event> {
        let buf = self.buf.load(Ordering::Acquire);
        if buf.is_null() {
            return None;
        }
        let mask = self.mask.load(Ordering::Relaxed);
        let pos = self.deq.0.load(Ordering::Relaxed);
        // SAFETY: as in `push`.
        let cell = unsafe { &*buf.add(pos & mask) };
        // Acquire: pairs with the producer's Release after writing the event.
        if cell.seq.load(Ordering::Acquire) != pos + 1 {
            return None;
        }
        // SAFETY: `seq == pos + 1` means a producer wrote this cell and no
        // one else reads it (single consumer).
        let ev = unsafe { (*cell.ev.get()).assume_init() };
        // Release: our read happens before a producer reuses the cell.
        cell.seq.store(pos + mask + 1, Ordering::Release);
        self.deq.0.store(pos + 1, Ordering::Relaxed);
        Some(ev)
    }
}
