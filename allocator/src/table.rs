//! The side table of tracked and sampled blocks, keyed by address.
//!
//! Only tracked (>= threshold) and sampled blocks enter it, so it is touched
//! on a small fraction of calls. It is split into shards by a hash of the
//! address's 256-byte granule (the sampling filter's, whose counters the
//! shard locks thus guard: `sampling.rs`); each shard is a hashbrown map behind a small lock (one RMW to
//! take, a plain store to give back: see [`Shard`]) whose memory comes from
//! the internal heap, so nothing in a critical section can call back into
//! the global allocator. Critical sections are a single insert or remove.
//!
//! Ordering rule that keeps the table exact under address reuse: a block's
//! entry is inserted after the inner allocator returns it and removed *before*
//! the block is handed back to the inner allocator (free, or a realloc that may
//! move it). Between those two points no other thread can be given the same
//! address.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, Ordering};

use hashbrown::HashMap;

use crate::health::{STALE_ENTRIES, TABLE_INSERT_FAILURES};
use crate::internal::{mix64, ForkHeld, Internal, MixBuild};
use crate::sampling;

const SHARDS: usize = 128;

/// What heaptag knows of one tracked or sampled block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    /// Requested size in bytes.
    pub(crate) size: u64,
    /// Nanoseconds since start at allocation (or last move by realloc).
    pub(crate) time_ns: u64,
    /// Tag id the block is charged to.
    pub(crate) tag: u32,
    /// Number of the allocating thread.
    pub(crate) thread: u32,
    /// Call-stack id (0: not captured).
    pub(crate) stack: u32,
    /// Tracked exactly (`false`: a sampled small block).
    pub(crate) tracked: bool,
    /// Made by a realloc: it held the old block's bytes from its birth, so
    /// its free is fingerprinted however young it is (`log::fingerprint_at_free`).
    pub(crate) resized: bool,
}

type Map = HashMap<usize, Entry, MixBuild, Internal>;

/// One shard: a map behind a test-and-set lock, on cache lines of its own
/// (two threads working in two shards never write the same line).
///
/// Not `std::sync::Mutex`: its unlock is a locked RMW (it must learn whether
/// a waiter sleeps), and a tracked alloc/free pair takes two locks, so that
/// RMW was a sixth of heaptag's cost on a large pair. Here taking the lock
/// is one RMW and releasing it a plain Release store. A waiter spins, then
/// yields, then sleeps (~20 us plus timer slack, see [`nap`]) at a time
/// until the holder is done; holders keep a shard for one insert or remove
/// (or, in `for_each_locked` and across a `fork()`, a bounded walk), never
/// take another lock inside and never call the global allocator, so a wait
/// lasts as long as the holder takes to make that progress: a holder that
/// is stopped (SIGSTOP, a debugger), or a signal handler that allocates
/// into the shard its own thread holds, makes it wait for ever, as with
/// any lock.
#[repr(align(128))]
struct Shard {
    locked: AtomicBool,
    map: UnsafeCell<Map>,
}

// SAFETY: `map` is only reached through a `Guard`, which exists only while
// its thread holds `locked` (Acquire on taking, Release on giving back), so
// accesses to the map are serialized and ordered.
unsafe impl Sync for Shard {}

impl Shard {
    const fn new() -> Shard {
        Shard {
            locked: AtomicBool::new(false),
            map: UnsafeCell::new(HashMap::with_hasher_in(MixBuild::new(), Internal)),
        }
    }

    #[inline]
    fn lock(&'static self) -> Guard {
        // Acquire: pairs with the Release in `Guard::drop`.
        if self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_contended();
        }
        Guard(self)
    }

    #[cold]
    #[inline(never)]
    fn lock_contended(&self) {
        let mut round = 0u32;
        loop {
            // Wait with plain loads (no cache-line ping-pong), then try again.
            while self.locked.load(Ordering::Relaxed) {
                if round < 64 {
                    std::hint::spin_loop();
                } else if round < 80 {
                    std::thread::yield_now();
                } else {
                    // A holder that was preempted or walks the table: sleep
                    // instead of burning the core it may need.
                    nap();
                }
                round = round.saturating_add(1);
            }
            if self
                .locked
                .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
        }
    }
}

/// Sleeps about 20 us (plus the kernel's timer slack, 50 us by default),
/// without allocating, without being a cancellation point and leaving
/// `errno` as it was: this runs inside `malloc`/`free`, which must be none
/// of those (POSIX makes `nanosleep` a cancellation point, so a deferred
/// `pthread_cancel` of a thread waiting here would unwind out of the
/// allocator; a raw `syscall` is not one).
#[cold]
fn nap() {
    let ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 20_000,
    };
    #[cfg(target_os = "linux")]
    {
        // SAFETY: `__errno_location` returns the calling thread's errno
        // slot; `ts` is a valid timespec and the remainder pointer may be
        // null for SYS_clock_nanosleep; the raw call touches nothing else.
        unsafe {
            let errno = *libc::__errno_location();
            libc::syscall(
                libc::SYS_clock_nanosleep,
                libc::CLOCK_MONOTONIC,
                0,
                &ts as *const libc::timespec,
                std::ptr::null_mut::<libc::timespec>(),
            );
            *libc::__errno_location() = errno;
        }
    }
    #[cfg(not(target_os = "linux"))]
    // SAFETY: `ts` is a valid timespec; the remainder pointer may be null.
    unsafe {
        libc::nanosleep(&ts, std::ptr::null_mut());
    }
}

/// A held shard; gives it back when dropped.
struct Guard(&'static Shard);

impl std::ops::Deref for Guard {
    type Target = Map;
    fn deref(&self) -> &Map {
        // SAFETY: this guard holds the shard's lock (see `Shard`).
        unsafe { &*self.0.map.get() }
    }
}

impl std::ops::DerefMut for Guard {
    fn deref_mut(&mut self) -> &mut Map {
        // SAFETY: this guard holds the shard's lock, and `&mut self` makes
        // this the only reference through it.
        unsafe { &mut *self.0.map.get() }
    }
}

impl Drop for Guard {
    #[inline]
    fn drop(&mut self) {
        // Release: the map's changes are visible to the next holder.
        self.0.locked.store(false, Ordering::Release);
    }
}

static TABLE: [Shard; SHARDS] = [const { Shard::new() }; SHARDS];

#[inline]
fn shard(addr: usize) -> Guard {
    // By the sampling filter's granule, not the address: every block whose
    // filter counter is shared lives in one shard, so that lock guards the
    // counter (`sampling::filter_add`). Blocks 256 B apart still spread.
    let i = (mix64(sampling::granule_index(addr) as u64) >> 32) as usize % SHARDS;
    TABLE[i].lock()
}

/// Records a block. Returns false (and counts) when there was no memory to.
///
/// A sampled block also enters the free-side filter (`sampling.rs`), which
/// counts the sampled entries per address granule: frees consult the table
/// only where that count is not 0.
pub(crate) fn insert(addr: usize, entry: Entry) -> bool {
    let mut map = shard(addr);
    if map.try_reserve(1).is_err() {
        TABLE_INSERT_FAILURES.fetch_add(1, Ordering::Relaxed);
        return false;
    }
    if !entry.tracked {
        sampling::filter_add(addr);
    }
    if let Some(old) = map.insert(addr, entry) {
        STALE_ENTRIES.fetch_add(1, Ordering::Relaxed);
        if !old.tracked {
            sampling::filter_remove(addr);
        }
    }
    true
}

/// Removes and returns the entry of a block, if heaptag recorded one (and
/// takes a sampled one out of the free-side filter).
pub(crate) fn remove(addr: usize) -> Option<Entry> {
    let mut map = shard(addr);
    let e = map.remove(&addr);
    if let Some(Entry { tracked: false, .. }) = e {
        // Under the shard's lock: it guards the filter counter.
        sampling::filter_remove(addr);
    }
    drop(map);
    e
}

/// Calls `f` on every entry (shard by shard; not an atomic view).
///
/// Each shard is copied out (into internal memory) and released before `f`
/// runs, so `f` may allocate: an allocation that lands in the shard being
/// read would otherwise deadlock on its lock.
pub(crate) fn for_each(mut f: impl FnMut(usize, &Entry)) {
    let mut copy: allocator_api2::vec::Vec<(usize, Entry), Internal> = allocator_api2::vec::Vec::new_in(Internal);
    for s in &TABLE {
        copy.clear();
        {
            let map = s.lock();
            if copy.try_reserve(map.len()).is_err() {
                continue;
            }
            copy.extend(map.iter().map(|(&a, e)| (a, *e)));
        }
        for (addr, e) in &copy {
            f(*addr, e);
        }
    }
}

/// Calls `f` on every entry while holding the entry's shard, so the block
/// cannot be freed meanwhile (a free removes its entry before releasing the
/// block). `f` must not allocate through the global allocator: an allocation
/// recorded in the held shard would deadlock.
pub(crate) fn for_each_locked(mut f: impl FnMut(usize, &Entry)) {
    for s in &TABLE {
        let map = s.lock();
        for (&addr, e) in map.iter() {
            f(addr, e);
        }
    }
}

/// The shard guards held across a `fork()`.
static FORK_GUARDS: [ForkHeld<Guard>; SHARDS] = [const { ForkHeld::new() }; SHARDS];

/// Locks every shard, in index order, before a `fork()` (the prepare
/// handler in `start.rs`), so a child never inherits a shard locked by a
/// thread that does not exist in it (its next tracked allocation would wait
/// forever). Holders of a shard never take another lock nor call the global
/// allocator, so this cannot wait on a thread that waits on us.
pub(crate) fn fork_prepare() {
    for (g, s) in FORK_GUARDS.iter().zip(&TABLE) {
        // SAFETY: called only from the atfork prepare handler.
        unsafe { g.hold(s.lock()) };
    }
}

/// Unlocks what [`fork_prepare`] locked (atfork parent and child handlers).
pub(crate) fn fork_release() {
    for g in FORK_GUARDS.iter().rev() {
        // SAFETY: called only from the atfork parent and child handlers.
        unsafe { g.release() };
    }
}

/// Number of entries, for overhead reports.
pub(crate) fn len() -> usize {
    TABLE.iter().map(|s| s.lock().len()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_locks_serialize_concurrent_inserts_and_removes() {
        // Four threads insert and remove their own addresses (tracked, so
        // the sampling filter stays out of it) in every shard at once: each
        // remove must return exactly the entry its thread inserted, and the
        // table must end as it began (other tests of this binary may hold
        // entries of their own, at addresses far from these).
        const N: usize = 20_000;
        let threads: Vec<_> = (1..=4u64)
            .map(|t| {
                std::thread::spawn(move || {
                    let mut mismatches = 0;
                    for i in 0..N {
                        let addr = ((0xdead_0000 + t) << 28) as usize | (i << 4);
                        let e = Entry {
                            size: (i as u64) << 8 | t,
                            time_ns: i as u64,
                            tag: t as u32,
                            thread: t as u32,
                            stack: 0,
                            tracked: true,
                            resized: false,
                        };
                        assert!(insert(addr, e));
                        if i % 2 == 1 {
                            let prev = addr - 16;
                            mismatches += usize::from(remove(prev).map(|p| p.size) != Some(((i - 1) as u64) << 8 | t));
                            mismatches += usize::from(remove(addr) != Some(e));
                        }
                    }
                    mismatches
                })
            })
            .collect();
        let bad: usize = threads.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(bad, 0);
        let mut ours = 0;
        for_each(|addr, _| ours += usize::from(addr >> 28 >= 0xdead_0001 && addr >> 28 <= 0xdead_0004));
        assert_eq!(ours, 0, "every entry the threads inserted was removed");
    }
}
