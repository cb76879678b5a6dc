//! Stack capture without unwinding for stacks a thread has seen before
//! (x86_64 Linux).
//!
//! A full unwind (`_Unwind_Backtrace`, about 1 us for 32 frames) yields, per
//! frame, its return address and its stack pointer at the call it made
//! (`_Unwind_GetCFA`); on x86_64 the return address is the word the `call`
//! pushed just below that stack pointer. After an unwind, those slots'
//! positions relative to the stack pointer of [`capture`](super::capture)
//! (the anchor) and the values found there are kept in a small per-thread
//! cache with the stack's id. The next capture on the thread at the same
//! anchor reads those slots again (a few dozen independent loads: no lock,
//! no unwinding, no hashing) and, when every one still holds the same return
//! address, returns the cached id.
//!
//! Why equal slots mean an equal stack: `capture`'s frame has a fixed size,
//! so the innermost slot is the real return address of its caller. Given a
//! frame's position and return address (so its code, and the unwind rule at
//! that address, are the same as last time), its caller's position follows
//! from the frame's size, which is fixed for an `rsp`-based frame. A frame
//! whose CFA is its frame pointer (`rbp + 16`: frame-pointer builds, and
//! functions that realign their stack for an over-aligned local, whose size
//! depends on where they were entered) is pinned by its `rbp`: the
//! unwinder restored that value from a word saved by a frame inside it,
//! the innermost one whose own `rbp` differs, so every word holding that
//! value in the frames from it out is checked too (one of them is the real
//! save slot); when no frame inside changed `rbp`, the live register in
//! `capture` is compared on a hit instead. A stack where no such word is
//! found, or that needs more than [`SCAN_WORDS`] words scanned, is not
//! cached. By induction every slot read on a hit
//! is the real return address of its frame, and equal values give the
//! unwinder's own result. Frames this cannot confirm (a signal frame, a
//! return address not where `call` puts it, a stack pointer that does not
//! grow outwards) leave the stack uncached: it is unwound every time, as
//! before. A C function with `alloca` or a variable-length array gets an
//! `rbp` frame from its compiler, so it is pinned the same way.
//!
//! Reads stay inside the calling thread's stack: a stack is cached only when
//! the anchor and every slot lie within the thread's stack bounds (from
//! `pthread_getattr_np`, once per thread); an anchor outside them (a
//! signal's alternate stack, a coroutine's stack) always unwinds.
//!
//! Two assumptions, not checked: a realigned frame is LLVM's kind (its CFA
//! is `rbp + 16`); GCC's DRAP realignment (the CFA through `r10`, an
//! expression on `rbp - 8`) is taken for a fixed-size frame, so a false hit
//! there would need every outer slot to hold the same return addresses.
//! And code does not change under a return address: after a `dlclose` and
//! a `dlopen` that maps other code at the same address, a cached stack may
//! name the old frames (the stack ids stay valid; their frames are the
//! first unwind's).
//!
//! Nothing here allocates through the global allocator: the cache is a
//! const-initialised thread-local without destructor, the unwind buffers
//! live on the stack, and the unwinder reads only its tables and the stack.

use std::cell::{Cell, UnsafeCell};
use std::ffi::{c_int, c_void};

use super::{intern, LOOK, MAX_DEPTH};

/// Cached stacks per thread.
const WAYS: usize = 8;
/// Slots checked per cached stack at most: a return address per frame, and
/// the saved `rbp` of each frame-pointer frame. Longer stacks are not cached.
const MAX_CHECKS: usize = 64;
/// Stack words a full unwind looks through, at most, for saved `rbp`s.
const SCAN_WORDS: usize = 4096;

/// One cached stack.
#[derive(Clone, Copy)]
struct Way {
    /// Stack pointer of `capture` when the stack was unwound (0: empty).
    anchor: usize,
    /// `rbp` in `capture` then, when a frame is pinned by it.
    rbp: Option<usize>,
    /// Frames captured (`DEPTH` then).
    depth: u16,
    /// Slots to check.
    len: u16,
    /// The stack's id in the table.
    id: u32,
    /// Slot addresses minus `anchor`.
    off: [u32; MAX_CHECKS],
    /// Values the slots held.
    val: [u64; MAX_CHECKS],
}

const EMPTY: Way = Way {
    anchor: 0,
    rbp: None,
    depth: 0,
    len: 0,
    id: 0,
    off: [0; MAX_CHECKS],
    val: [0; MAX_CHECKS],
};

struct Cache {
    ways: UnsafeCell<[Way; WAYS]>,
    /// Next way to replace.
    next: Cell<u8>,
    /// Set while this thread is inside `capture` (a signal handler that
    /// allocates during a capture then bypasses the cache).
    busy: Cell<bool>,
    /// The thread's stack, `[lo, hi)`; `hi == 0`: not looked up yet;
    /// `lo >= hi`: unknown (never cache).
    lo: Cell<usize>,
    hi: Cell<usize>,
    /// This thread's cache hits and full unwinds (for the tests).
    #[cfg(test)]
    hits: Cell<u64>,
    #[cfg(test)]
    unwinds: Cell<u64>,
}

thread_local! {
    // Const-initialised and without destructor: no registration, readable
    // at any point of the thread's life.
    static CACHE: Cache = const {
        Cache {
            ways: UnsafeCell::new([EMPTY; WAYS]),
            next: Cell::new(0),
            busy: Cell::new(false),
            lo: Cell::new(0),
            hi: Cell::new(0),
            #[cfg(test)]
            hits: Cell::new(0),
            #[cfg(test)]
            unwinds: Cell::new(0),
        }
    };
}

/// `rsp` and `rbp` where [`capture`](super::capture) reads them.
pub(super) type Regs = (usize, usize);

/// The stack pointer and frame pointer registers.
#[inline(always)]
pub(super) fn registers() -> Regs {
    let (sp, bp): (usize, usize);
    // SAFETY: copies two registers; reads no memory, changes no flags.
    unsafe {
        std::arch::asm!("mov {}, rsp", "mov {}, rbp", out(reg) sp, out(reg) bp,
            options(nomem, nostack, preserves_flags))
    };
    (sp, bp)
}

/// Reads one word of the calling thread's stack.
///
/// # Safety
/// `p` is 8-aligned and inside the calling thread's mapped stack.
#[inline(always)]
unsafe fn load(p: usize) -> u64 {
    let v: u64;
    // SAFETY: the caller's guarantee; the instruction reads 8 bytes and
    // touches nothing else. An `asm` load is opaque to the compiler, so
    // reading other functions' live frames is not a Rust-level access.
    unsafe {
        std::arch::asm!("mov {v}, qword ptr [{p}]", p = in(reg) p, v = out(reg) v,
            options(nostack, preserves_flags, readonly))
    };
    v
}

/// [`capture`](super::capture)'s body: `regs` are its registers, `me` its
/// address.
#[inline(always)]
pub(super) fn capture(regs: Regs, depth: usize, me: usize) -> u32 {
    CACHE.with(|c| {
        if c.busy.replace(true) {
            // Re-entered (a signal handler allocating): unwind, no cache.
            let mut buf = [0u64; MAX_DEPTH];
            let mut walk = Walk::new(&mut buf, depth, me, regs, 0);
            walk.run();
            let n = walk.n;
            return intern(&buf[..n]);
        }
        let id = capture_in(c, regs, depth, me);
        c.busy.set(false);
        id
    })
}

fn capture_in(c: &Cache, regs: Regs, depth: usize, me: usize) -> u32 {
    // SAFETY: only this thread touches its cache, and `busy` keeps a
    // re-entered capture (a signal handler) away from it.
    let ways = unsafe { &mut *c.ways.get() };
    if let Some(id) = lookup(ways, regs, depth) {
        #[cfg(test)]
        c.hits.set(c.hits.get() + 1);
        return id;
    }
    #[cfg(test)]
    c.unwinds.set(c.unwinds.get() + 1);
    let hi = stack_top(c, regs.0);
    let mut buf = [0u64; MAX_DEPTH];
    let mut walk = Walk::new(&mut buf, depth, me, regs, hi);
    walk.run();
    let (n, cacheable) = (walk.n, walk.cacheable && walk.found);
    let way = Way {
        anchor: regs.0,
        rbp: if walk.pin_rbp { Some(regs.1) } else { None },
        depth: depth as u16,
        len: walk.len as u16,
        id: 0,
        off: walk.off,
        val: walk.val,
    };
    let id = intern(&buf[..n]);
    if id != 0 && cacheable && way.len > 0 {
        let i = c.next.get() as usize % WAYS;
        c.next.set((i + 1) as u8);
        ways[i] = Way { id, ..way };
    }
    id
}

/// The cached id of the stack at `regs`, if every slot still matches.
#[inline(always)]
fn lookup(ways: &[Way; WAYS], (anchor, rbp): Regs, depth: usize) -> Option<u32> {
    'ways: for w in ways.iter() {
        if w.anchor != anchor || w.depth as usize != depth || w.rbp.is_some_and(|r| r != rbp) {
            continue;
        }
        for i in 0..(w.len as usize).min(MAX_CHECKS) {
            // SAFETY: the way was stored only with every slot 8-aligned and
            // inside this thread's stack, above `anchor` (`Walk::peek`);
            // the same anchor on the same thread is the same stack, whose
            // part above the stack pointer is mapped.
            if unsafe { load(anchor + w.off[i] as usize) } != w.val[i] {
                continue 'ways;
            }
        }
        return Some(w.id);
    }
    None
}

/// The top of this thread's stack when `anchor` is inside it, else 0 (do
/// not cache).
fn stack_top(c: &Cache, anchor: usize) -> usize {
    if c.hi.get() == 0 {
        // Unknown bounds: an empty range that is never looked up again.
        let (lo, hi) = thread_stack().unwrap_or((usize::MAX, 1));
        c.lo.set(lo);
        c.hi.set(hi);
    }
    let (lo, hi) = (c.lo.get(), c.hi.get());
    if lo <= anchor && anchor < hi {
        hi
    } else {
        0
    }
}

/// The calling thread's stack bounds.
fn thread_stack() -> Option<(usize, usize)> {
    let mut attr = std::mem::MaybeUninit::<libc::pthread_attr_t>::uninit();
    // SAFETY: `pthread_getattr_np` initialises `attr` on success (it may
    // call glibc's malloc, never Rust's global allocator); it is destroyed
    // below.
    if unsafe { libc::pthread_getattr_np(libc::pthread_self(), attr.as_mut_ptr()) } != 0 {
        return None;
    }
    let mut addr: *mut c_void = std::ptr::null_mut();
    let mut size: libc::size_t = 0;
    // SAFETY: `attr` was initialised by `pthread_getattr_np`.
    let got = unsafe { libc::pthread_attr_getstack(attr.as_ptr(), &mut addr, &mut size) };
    // SAFETY: as above; destroyed once.
    unsafe { libc::pthread_attr_destroy(attr.as_mut_ptr()) };
    let lo = addr as usize;
    (got == 0 && size > 0).then(|| (lo, lo.saturating_add(size)))
}

type Ctx = c_void;
/// `_URC_NO_REASON`: go on.
const CONTINUE: c_int = 0;
/// `_URC_END_OF_STACK`, returned to stop the walk.
const STOP: c_int = 5;
/// DWARF register number of `rbp` on x86_64.
const RBP: c_int = 6;

// The unwinder's C interface (the Itanium ABI's `_Unwind_*`, libgcc_s or
// LLVM libunwind, which std links on Linux and the `backtrace` crate calls).
extern "C" {
    fn _Unwind_Backtrace(trace: extern "C" fn(*mut Ctx, *mut c_void) -> c_int, arg: *mut c_void) -> c_int;
    fn _Unwind_GetIP(ctx: *mut Ctx) -> usize;
    fn _Unwind_GetCFA(ctx: *mut Ctx) -> usize;
    fn _Unwind_GetGR(ctx: *mut Ctx, index: c_int) -> usize;
    fn _Unwind_FindEnclosingFunction(pc: *mut c_void) -> *mut c_void;
}

/// One full unwind: the frames, and the slots that will recognise them.
struct Walk<'a> {
    buf: &'a mut [u64; MAX_DEPTH],
    n: usize,
    depth: usize,
    me: usize,
    skipped: usize,
    found: bool,
    anchor: usize,
    /// Top of the thread's stack (0: do not cache).
    hi: usize,
    /// Stack pointer (at its call) and `rbp` of `capture` (index 0) and of
    /// each frame recorded (frame `i` at `i + 1`).
    sps: [usize; MAX_DEPTH + 1],
    rbps: [usize; MAX_DEPTH + 1],
    /// `rbp` in `capture` when the walk started.
    live_rbp: usize,
    /// A frame is pinned by `rbp` itself: a hit needs `live_rbp` again.
    pin_rbp: bool,
    /// Stack words left to scan for saved `rbp` values.
    scan: usize,
    cacheable: bool,
    len: usize,
    off: [u32; MAX_CHECKS],
    val: [u64; MAX_CHECKS],
}

impl<'a> Walk<'a> {
    fn new(buf: &'a mut [u64; MAX_DEPTH], depth: usize, me: usize, (anchor, live_rbp): Regs, hi: usize) -> Self {
        Walk {
            buf,
            n: 0,
            depth,
            me,
            skipped: 0,
            found: false,
            anchor,
            hi,
            sps: [0; MAX_DEPTH + 1],
            rbps: [0; MAX_DEPTH + 1],
            live_rbp,
            pin_rbp: false,
            scan: SCAN_WORDS,
            cacheable: hi != 0,
            len: 0,
            off: [0; MAX_CHECKS],
            val: [0; MAX_CHECKS],
        }
    }

    fn run(&mut self) {
        extern "C" fn step(ctx: *mut Ctx, arg: *mut c_void) -> c_int {
            // SAFETY: `arg` is the `Walk` that `run` passed, borrowed
            // mutably for the length of `_Unwind_Backtrace`.
            let walk = unsafe { &mut *arg.cast::<Walk<'_>>() };
            // SAFETY: `ctx` is the live context the unwinder passes.
            if unsafe { walk.frame(ctx) } {
                CONTINUE
            } else {
                STOP
            }
        }
        // SAFETY: `_Unwind_Backtrace` calls `step` once per frame with a
        // valid context and our argument, and returns before `self` goes
        // away; it is thread-safe and does not call Rust's global allocator.
        unsafe { _Unwind_Backtrace(step, (self as *mut Self).cast()) };
    }

    /// The word at `slot`, when it may be read and remembered: 8-aligned,
    /// inside this thread's stack above the anchor, at an offset the cache
    /// can hold.
    fn peek(&self, slot: usize) -> Option<u64> {
        let ok = slot.is_multiple_of(8)
            && slot >= self.anchor
            && slot.saturating_add(8) <= self.hi
            && slot - self.anchor <= u32::MAX as usize;
        // SAFETY: checked just above: 8-aligned, inside the thread's stack
        // between the current stack pointer and its top (mapped).
        ok.then(|| unsafe { load(slot) })
    }

    /// Remembers that `slot` holds `value`; when it does not (or cannot be
    /// read, or the cache has no room) the stack is not cached.
    fn check(&mut self, slot: usize, value: u64) {
        if self.cacheable && self.len < MAX_CHECKS && self.peek(slot) == Some(value) {
            self.off[self.len] = (slot - self.anchor) as u32;
            self.val[self.len] = value;
            self.len += 1;
        } else {
            self.cacheable = false;
        }
    }

    /// Pins the position of frame `i`'s caller, frame `i` having an
    /// `rbp`-based CFA (`rbps[i] + 16`): every word equal to that `rbp` in
    /// the frames inside it, out to the one that changed `rbp` (which saved
    /// it: the unwinder restored it from one of those words), is checked
    /// too; when no frame changed it, the live register is.
    fn pin(&mut self, i: usize) {
        let v = self.rbps[i];
        let mut k = i;
        let before = self.len;
        while k > 0 && self.cacheable {
            k -= 1;
            let (mut a, end) = ((self.sps[k] + 7) & !7, self.sps[k + 1]);
            while a + 8 <= end && self.cacheable {
                if self.scan == 0 {
                    self.cacheable = false;
                    return;
                }
                self.scan -= 1;
                if self.peek(a) == Some(v as u64) {
                    self.check(a, v as u64);
                }
                a += 8;
            }
            if self.rbps[k] != v {
                // Frame `k` saved it, in one of the words just checked
                // (none: it was kept some other way, not understood here).
                if self.len == before {
                    self.cacheable = false;
                }
                return;
            }
        }
        if v == self.live_rbp {
            self.pin_rbp = true;
        } else {
            self.cacheable = false;
        }
    }

    /// One frame; returns whether to go on.
    ///
    /// # Safety
    /// `ctx` is a context the unwinder passed to the trace callback.
    unsafe fn frame(&mut self, ctx: *mut Ctx) -> bool {
        // `_Unwind_GetCFA` of a frame's context is that frame's stack
        // pointer at its call (its callee's CFA): the return address into
        // the frame, `ip`, was pushed just below it. `_Unwind_GetGR` gives
        // the frame's registers as they were at that call.
        // SAFETY: the caller's guarantee on `ctx`; `rbp` is a callee-saved
        // register every x86_64 context tracks.
        let (ip, sp, rbp) = unsafe { (_Unwind_GetIP(ctx), _Unwind_GetCFA(ctx), _Unwind_GetGR(ctx, RBP)) };
        if !self.found && self.skipped < LOOK {
            self.skipped += 1;
            // SAFETY: a lookup in the unwind tables; never allocates.
            if unsafe { _Unwind_FindEnclosingFunction(ip as *mut c_void) } as usize == self.me {
                // `capture`'s own frame: what comes before it is the
                // unwinder's. Its stack pointer is at a fixed distance from
                // the anchor.
                self.found = true;
                self.n = 0;
                self.sps[0] = sp;
                self.rbps[0] = rbp;
                return true;
            }
        }
        if ip == 0 {
            return false;
        }
        self.buf[self.n] = ip as u64;
        self.n += 1;
        let i = self.n;
        if self.cacheable && self.found {
            if sp <= self.sps[i - 1] {
                self.cacheable = false;
            } else {
                // The previous frame's size decides where this one's return
                // address is: fixed for an `rsp`-based frame; an `rbp`-based
                // one is pinned by its `rbp` (see the module docs).
                // `capture`'s own frame (index 0) has a fixed size.
                if i >= 2 && self.rbps[i - 1].wrapping_add(16) == sp {
                    self.pin(i - 1);
                }
                self.check(sp - 8, ip as u64);
            }
        }
        self.sps[i] = sp;
        self.rbps[i] = rbp;
        self.n < self.depth
    }
}

#[cfg(test)]
mod tests {
    use std::hint::black_box;
    use std::sync::atomic::Ordering;

    use super::CACHE;
    use crate::log::stacks::{capture, each, DEPTH};

    const FRAMES: usize = 32;

    /// This thread's (hits, unwinds).
    fn counts() -> (u64, u64) {
        CACHE.with(|c| (c.hits.get(), c.unwinds.get()))
    }

    fn frames_of(id: u32) -> Vec<u64> {
        let mut out = Vec::new();
        each(id, id, |_, f| out.extend_from_slice(f));
        out
    }

    /// The stack below `reference`'s caller, by the `backtrace` crate (the
    /// reference unwinder): return addresses, innermost first.
    #[inline(never)]
    fn reference() -> Vec<u64> {
        let me = reference as *const () as usize;
        let mut v = Vec::new();
        let mut found = false;
        backtrace::trace(|f| {
            if !found {
                found = f.symbol_address() as usize == me;
                return true;
            }
            v.push(f.ip() as u64);
            v.len() < FRAMES
        });
        // The `backtrace` crate reports the end of the stack as a frame at 0.
        while v.last() == Some(&0) {
            v.pop();
        }
        v
    }

    /// A capture and the reference stack from the same frame: they differ
    /// only in the innermost return address (two call sites in `probe`).
    #[inline(never)]
    fn probe() -> (u32, Vec<u64>) {
        let id = capture();
        let r = reference();
        black_box((id, r))
    }

    #[inline(never)]
    fn caller_a() -> (u32, Vec<u64>) {
        black_box(probe())
    }

    #[inline(never)]
    fn caller_b() -> (u32, Vec<u64>) {
        black_box(probe())
    }

    fn assert_matches_reference(id: u32, reference: &[u64]) {
        let got = frames_of(id);
        // Both start in `probe`, at its two call sites.
        assert_eq!(got.len(), reference.len(), "{got:x?} {reference:x?}");
        assert!(got.len() > 2, "{got:x?}");
        assert_eq!(&got[1..], &reference[1..], "{got:x?} {reference:x?}");
    }

    #[test]
    fn cached_stacks_equal_the_unwinders_and_keep_their_ids() {
        DEPTH.store(FRAMES as u32, Ordering::Relaxed);
        // On a thread of its own: the cache is per thread.
        std::thread::spawn(|| {
            let (h0, u0) = counts();
            let mut ids = (Vec::new(), Vec::new());
            for _ in 0..10 {
                // Alternating callers at the same depth: the same stack
                // pointer in `capture`, different stacks.
                let (a, ra) = caller_a();
                assert_matches_reference(a, &ra);
                ids.0.push(a);
                let (b, rb) = caller_b();
                assert_matches_reference(b, &rb);
                ids.1.push(b);
            }
            assert!(ids.0.iter().all(|&i| i == ids.0[0] && i != 0), "{ids:?}");
            assert!(ids.1.iter().all(|&i| i == ids.1[0] && i != 0), "{ids:?}");
            assert_ne!(ids.0[0], ids.1[0]);
            let (h1, u1) = counts();
            // Two full unwinds, then the cache answers (a hit is only ever
            // returned after its slots matched).
            assert_eq!((h1 - h0, u1 - u0), (18, 2));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_stack_pointer_outside_the_thread_stack_is_not_cached() {
        DEPTH.store(FRAMES as u32, Ordering::Relaxed);
        std::thread::spawn(|| {
            CACHE.with(|c| {
                // Bounds that exclude every stack pointer.
                c.lo.set(2);
                c.hi.set(1);
            });
            let (h0, u0) = counts();
            for _ in 0..3 {
                let (a, ra) = caller_a();
                assert_matches_reference(a, &ra);
            }
            assert_eq!(counts(), (h0, u0 + 3));
        })
        .join()
        .unwrap();
    }
}
