//! Call-stack capture and deduplication for tracked and sampled blocks.
//!
//! Capture walks the stack with the unwinder (`_Unwind_Backtrace`, directly
//! on x86_64 Linux, through `backtrace::trace_unsynchronized` elsewhere),
//! which reads unwind tables and never calls the Rust global allocator, into
//! a buffer on the stack. On x86_64 Linux a per-thread cache recognises a
//! stack the thread has unwound before by re-reading the return addresses
//! where the last unwind found them, and returns its id without unwinding or
//! taking the table's lock (`cache.rs`, which argues why that is exact).
//! Stacks are deduplicated by a hash of their frames in a table on the
//! internal heap, behind one lock taken only by full unwinds; the writer
//! sends each stack's definition once, before its first use.
//!
//! The table is bounded, since a long run keeps making new distinct stacks
//! (rayon's work stealing nests its frames differently every time): past
//! [`FRAMES_SOFT`] frames stored, a new stack is stored cut to its innermost
//! [`CUT_DEPTH`] frames (the call site and its nearest callers, which few
//! distinct stacks share: counted in `Health::stacks_truncated`), and past
//! [`FRAMES_HARD`] not at all (`Health::stacks_not_stored`, its events carry
//! no stack).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use allocator_api2::vec::Vec as IVec;
use hashbrown::HashMap;

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod cache;

use crate::health::{STACKS_NOT_STORED, STACKS_TRUNCATED};
use crate::internal::{mix64, ForkHeld, Internal, MixBuild};

/// Deepest stack recorded.
pub(crate) const MAX_DEPTH: usize = 128;

/// Frames stored (8 bytes each) past which new stacks are stored cut to
/// [`CUT_DEPTH`] frames: 16 MiB.
pub(crate) const FRAMES_SOFT: usize = 2 << 20;
/// Frames stored past which new stacks are not stored: 24 MiB.
pub(crate) const FRAMES_HARD: usize = 3 << 20;
/// Frames kept of a stack cut because the table passed [`FRAMES_SOFT`].
pub(crate) const CUT_DEPTH: usize = 8;

/// Frames to capture (0: stacks off). Set when the log starts.
pub(crate) static DEPTH: AtomicU32 = AtomicU32::new(0);

struct Table {
    by_hash: HashMap<u64, u32, MixBuild, Internal>,
    frames: IVec<u64, Internal>,
    /// Per id - 1: (offset into `frames`, length).
    index: IVec<(u32, u16), Internal>,
}

static TABLE: Mutex<Table> = Mutex::new(Table {
    by_hash: HashMap::with_hasher_in(MixBuild::new(), Internal),
    frames: IVec::new_in(Internal),
    index: IVec::new_in(Internal),
});

/// Captures the calling thread's stack and returns its id (0 when stacks are
/// off or it could not be stored).
///
/// On x86_64 Linux a stack seen before on this thread is recognised from the
/// thread's cache without unwinding (see [`cache`]); otherwise the stack is
/// unwound and interned, and remembered in the cache when it can be checked.
#[inline(never)]
pub(crate) fn capture() -> u32 {
    let depth = (DEPTH.load(Ordering::Relaxed) as usize).min(MAX_DEPTH);
    if depth == 0 {
        return 0;
    }
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        // Read once, at one instruction of this never-inlined function: its
        // distance to this frame's canonical frame address is fixed.
        let regs = cache::registers();
        cache::capture(regs, depth, capture as *const () as usize)
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    {
        let mut buf = [0u64; MAX_DEPTH];
        let n = unwind_portable(&mut buf, depth, capture as *const () as usize);
        intern(&buf[..n])
    }
}

/// Unwinds with the `backtrace` crate into `buf` (the targets without the
/// cache); returns the number of frames.
#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn unwind_portable(buf: &mut [u64; MAX_DEPTH], depth: usize, me: usize) -> usize {
    let mut n = 0;
    // The unwinder's own frames and this function's come first: they are
    // dropped by position, up to and including the frame whose enclosing
    // function is `capture` (it is never inlined, so it has a frame of its
    // own). Names cannot decide this: with `debug = "line-tables-only"` the
    // inlined unwinder frames carry short names (`trace`).
    let mut skipped = 0;
    let mut found = false;
    // SAFETY: `trace_unsynchronized` requires that no other unsynchronized
    // trace runs concurrently only on platforms whose unwinder is not
    // thread-safe (Windows' dbghelp); elsewhere `_Unwind_Backtrace` is
    // thread-safe. The callback only writes into `buf` and never allocates
    // (`symbol_address` is `_Unwind_FindEnclosingFunction`, a lookup in the
    // same unwind tables the walk reads).
    unsafe {
        backtrace::trace_unsynchronized(|frame| {
            if !found && skipped < LOOK {
                skipped += 1;
                if frame.symbol_address() as usize == me {
                    found = true;
                    n = 0;
                    return true;
                }
            }
            buf[n] = frame.ip() as u64;
            n += 1;
            n < depth
        })
    };
    n
}

/// Frames looked at for `capture` before giving up and keeping them all.
const LOOK: usize = 8;

/// Returns the id of `frames`, storing them on first sight.
pub(crate) fn intern(frames: &[u64]) -> u32 {
    if frames.is_empty() {
        return 0;
    }
    let mut t = TABLE.lock().unwrap_or_else(PoisonError::into_inner);
    intern_in(&mut t, frames)
}

fn hash(frames: &[u64]) -> u64 {
    let mut h = frames.len() as u64;
    for &f in frames {
        h = mix64(h ^ f);
    }
    h
}

/// [`intern`] into `t`.
fn intern_in(t: &mut Table, frames: &[u64]) -> u32 {
    let mut frames = frames;
    let mut h = hash(frames);
    if let Some(&id) = t.by_hash.get(&h) {
        if t.get(id) == Some(frames) {
            return id;
        }
        // A hash collision: store the stack under a new id, not deduplicated.
    }
    if t.frames.len() >= FRAMES_SOFT && frames.len() > CUT_DEPTH {
        // The table is full: the innermost frames only (frames come
        // innermost first), deduplicated as any stack.
        frames = &frames[..CUT_DEPTH];
        h = hash(frames);
        if let Some(&id) = t.by_hash.get(&h) {
            if t.get(id) == Some(frames) {
                return id;
            }
        }
        STACKS_TRUNCATED.fetch_add(1, Ordering::Relaxed);
    }
    if t.frames.len() + frames.len() > FRAMES_HARD {
        STACKS_NOT_STORED.fetch_add(1, Ordering::Relaxed);
        return 0;
    }
    let id = t.index.len() as u32 + 1;
    let off = t.frames.len() as u32;
    if t.frames.try_reserve(frames.len()).is_err()
        || t.index.try_reserve(1).is_err()
        || t.by_hash.try_reserve(1).is_err()
    {
        STACKS_NOT_STORED.fetch_add(1, Ordering::Relaxed);
        return 0;
    }
    t.frames.extend_from_slice(frames);
    t.index.push((off, frames.len() as u16));
    t.by_hash.entry(h).or_insert(id);
    id
}

impl Table {
    fn get(&self, id: u32) -> Option<&[u64]> {
        let &(off, len) = self.index.get(id.checked_sub(1)? as usize)?;
        self.frames.get(off as usize..off as usize + len as usize)
    }
}

/// Number of stacks stored (ids are `1..=count`).
pub(crate) fn count() -> u32 {
    TABLE.lock().unwrap_or_else(PoisonError::into_inner).index.len() as u32
}

/// Calls `f` with the frames of each id in `from..=to`.
///
/// The frames are copied out (to the internal heap) and the lock released
/// before `f` runs, so `f` may allocate: an allocation that captures a stack
/// would otherwise deadlock on the table lock.
pub(crate) fn each(from: u32, to: u32, mut f: impl FnMut(u32, &[u64])) {
    let mut flat: IVec<u64, Internal> = IVec::new_in(Internal);
    let mut spans: IVec<(u32, usize, usize), Internal> = IVec::new_in(Internal);
    {
        let t = TABLE.lock().unwrap_or_else(PoisonError::into_inner);
        for id in from..=to {
            if let Some(frames) = t.get(id) {
                if flat.try_reserve(frames.len()).is_err() || spans.try_reserve(1).is_err() {
                    break;
                }
                spans.push((id, flat.len(), frames.len()));
                flat.extend_from_slice(frames);
            }
        }
    }
    for &(id, off, len) in spans.iter() {
        f(id, &flat[off..off + len]);
    }
}

/// Every distinct frame address, for symbolization at `finish()`.
pub(crate) fn all_frames() -> Vec<u64> {
    // Copied into internal memory first: the table's holders never call the
    // global allocator (an allocation could capture a stack, and see "fork"
    // in `start.rs`).
    let mut copy: IVec<u64, Internal> = IVec::new_in(Internal);
    {
        let t = TABLE.lock().unwrap_or_else(PoisonError::into_inner);
        if copy.try_reserve(t.frames.len()).is_ok() {
            copy.extend_from_slice(&t.frames);
        }
    }
    let mut v: Vec<u64> = copy.to_vec();
    drop(copy);
    v.sort_unstable();
    v.dedup();
    v
}

static FORK_TABLE: ForkHeld<MutexGuard<'static, Table>> = ForkHeld::new();

/// Locks the stack table before a `fork()` (the prepare handler in
/// `start.rs`). Its holders use only the internal heap and take no other lock.
pub(crate) fn fork_prepare() {
    // SAFETY: called only from the atfork prepare handler.
    unsafe { FORK_TABLE.hold(TABLE.lock().unwrap_or_else(PoisonError::into_inner)) };
}

/// Unlocks what [`fork_prepare`] locked (atfork parent and child handlers).
pub(crate) fn fork_release() {
    // SAFETY: called only from the atfork parent and child handlers.
    unsafe { FORK_TABLE.release() };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Table {
        Table {
            by_hash: HashMap::with_hasher_in(MixBuild::new(), Internal),
            frames: IVec::new_in(Internal),
            index: IVec::new_in(Internal),
        }
    }

    #[test]
    fn the_table_cuts_then_refuses_new_stacks_past_its_bounds() {
        let mut t = table();
        let stack = |seed: u64, len: usize| -> Vec<u64> { (0..len as u64).map(|i| seed << 32 | i).collect() };
        let early = stack(1, 32);
        let early_id = intern_in(&mut t, &early);
        assert_eq!(intern_in(&mut t, &early), early_id, "deduplicated");
        // Fill past the soft bound with long distinct stacks.
        let mut seed = 2;
        while t.frames.len() < FRAMES_SOFT {
            assert_ne!(intern_in(&mut t, &stack(seed, 60_000)), 0);
            seed += 1;
        }
        let truncated = STACKS_TRUNCATED.load(Ordering::Relaxed);
        let late = stack(seed, 32);
        let late_id = intern_in(&mut t, &late);
        assert_eq!(
            t.get(late_id),
            Some(&late[..CUT_DEPTH]),
            "stored cut to its innermost frames"
        );
        assert_eq!(STACKS_TRUNCATED.load(Ordering::Relaxed), truncated + 1);
        assert_eq!(intern_in(&mut t, &late), late_id, "the cut stack is deduplicated");
        assert_eq!(STACKS_TRUNCATED.load(Ordering::Relaxed), truncated + 1, "counted once");
        assert_eq!(
            intern_in(&mut t, &early),
            early_id,
            "a stack stored before keeps its id"
        );
        // Past the hard bound nothing new is stored.
        while t.frames.len() + CUT_DEPTH <= FRAMES_HARD {
            seed += 1;
            assert_ne!(intern_in(&mut t, &stack(seed, 32)), 0);
        }
        let not_stored = STACKS_NOT_STORED.load(Ordering::Relaxed);
        assert_eq!(intern_in(&mut t, &stack(seed + 1, 32)), 0);
        assert_eq!(STACKS_NOT_STORED.load(Ordering::Relaxed), not_stored + 1);
        assert_eq!(intern_in(&mut t, &early), early_id);
    }
}
