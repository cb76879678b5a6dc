//! Tags: what an allocation is charged to, and the guards that set them.
//!
//! A [`Tag`] is interned to a small integer id; the allocator's hot path
//! reads only that id from a thread-local. Interning takes a mutex and may grow
//! a map (from heaptag's internal heap), so it happens when a guard is created,
//! never inside `alloc`/`dealloc`. Ids of tags that are no longer used retire
//! and are reused (see "Retirement and reuse" below), so a process that makes
//! new tags forever needs at most as many ids as it has tags in use at once.

use std::cell::UnsafeCell;
use std::fmt;
use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use allocator_api2::vec::Vec as IVec;

use hashbrown::{HashMap, HashSet};
use heaptag_format::TagCount;
use serde::{Deserialize, Deserializer, Serialize};

use crate::health::{GUARDS_OUT_OF_ORDER, TAGS_RETIRED, TAG_OVERFLOW};
use crate::internal::{leak_zeroed, ForkHeld, Internal, MixBuild};
use crate::thread;

/// What an allocation is charged to: an optional job, stage and partition.
///
/// `Tag::default()` is the "untagged" tag, used where no guard is active.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Tag {
    /// The job (one proof request, say) the work belongs to.
    pub job: Option<u64>,
    /// The pipeline stage, e.g. `"synthesize_partition"`.
    pub stage: Option<&'static str>,
    /// The partition within the job.
    pub partition: Option<u32>,
}

/// Maximum number of tags in use at once in one process (as many as a
/// thread's counter slot has counters for). Tags that are no longer used
/// retire and their ids are reused, so a process may make any number of
/// distinct tags over time; a tag that finds every id in use is charged to the
/// untagged tag, counted once per tag value in
/// [`Health::tag_overflow`](crate::Health), listed in
/// [`Snapshot::overflowed_tags`](crate::Snapshot) and logged (`tag_overflow`).
pub const MAX_TAGS: usize = thread::TAG_IDS;
const CHUNK: usize = 256;
const DIR: usize = MAX_TAGS / CHUNK;
const _: () = assert!(CHUNK * DIR == MAX_TAGS, "the tag directory covers every id");

impl Tag {
    /// The untagged tag (no job, no stage, no partition).
    pub const UNTAGGED: Tag = Tag {
        job: None,
        stage: None,
        partition: None,
    };

    /// A tag with all three dimensions given.
    pub const fn new(job: Option<u64>, stage: Option<&'static str>, partition: Option<u32>) -> Tag {
        Tag { job, stage, partition }
    }

    /// The tag of process-wide memory built in `stage`: no job, no
    /// partition. Enter it with [`shared`] around a cache that every job and
    /// partition uses (a `OnceLock`), so whoever happens to build it first
    /// is not charged for it; per-job and per-partition views show it as
    /// `shared (no job)` / `shared (no partition)`.
    pub const fn shared(stage: &'static str) -> Tag {
        Tag {
            job: None,
            stage: Some(stage),
            partition: None,
        }
    }

    /// True for the untagged tag.
    pub fn is_untagged(&self) -> bool {
        *self == Tag::UNTAGGED
    }

    /// Makes this the calling thread's tag until the guard drops.
    ///
    /// This is how a tag moves to another thread or task: capture it with
    /// [`current`] where the work is created, enter it where the work runs.
    pub fn enter(&self) -> TagGuard {
        TagGuard::set(intern_hold(self))
    }

    /// Runs `f` with this tag active on the calling thread, then restores the
    /// previous tag (also when `f` unwinds).
    pub fn scope<R>(&self, f: impl FnOnce() -> R) -> R {
        let _guard = self.enter();
        f()
    }

    /// The interned id of this tag: entering a [`TagId`] costs one CAS and
    /// a thread-local swap, no lookup (for integrations that enter the same
    /// tag many times, such as a tracing layer).
    pub fn id(&self) -> TagId {
        let mut map = lock();
        let id = map.id_of(self);
        drop(map);
        TagId {
            id,
            gen: entry(id).map_or(0, TagEntry::gen),
            tag: *self,
        }
    }
}

/// An interned [`Tag`]: its id, the id's generation, and the tag itself.
/// Cheap to copy, send and enter.
///
/// Ids are reused once their tag retires (no guard holds it and nothing of
/// it is alive). A `TagId` kept across that is *stale*: entering it enters
/// its tag by value (interning it again, under a new id if need be), so it
/// always charges the tag it was made from, never another tag that reuses
/// the id. Only entering a stale `TagId` costs a lookup.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TagId {
    id: u32,
    gen: u32,
    tag: Tag,
}

impl TagId {
    /// The untagged tag's id.
    pub const UNTAGGED: TagId = TagId {
        id: 0,
        gen: 0,
        tag: Tag::UNTAGGED,
    };

    /// The calling thread's current tag id.
    pub fn current() -> TagId {
        let id = thread::current_tag();
        TagId {
            id,
            gen: entry(id).map_or(0, TagEntry::gen),
            tag: held_key(id),
        }
    }

    /// Makes this the calling thread's tag until the guard drops (its tag
    /// by value when the id is stale, see [`TagId`]).
    pub fn enter(self) -> TagGuard {
        TagGuard::set(hold(self.id, self.gen, &self.tag))
    }

    /// Runs `f` under this tag, then restores the previous one.
    pub fn scope<R>(self, f: impl FnOnce() -> R) -> R {
        let _guard = self.enter();
        f()
    }

    /// The tag.
    pub fn tag(self) -> Tag {
        self.tag
    }

    /// The id and its generation as a number, to store in an atomic word.
    pub fn to_bits(self) -> u64 {
        (u64::from(self.gen) << GEN_SHIFT) | u64::from(self.id)
    }

    /// A `TagId` for `tag` from bits that [`to_bits`](TagId::to_bits) gave
    /// (a cache that keeps the bits in an atomic word and knows the tag).
    /// Entering it enters `tag` whatever the bits: by the id when it is
    /// still `tag`'s, else by value (as a stale `TagId`).
    pub fn from_parts(bits: u64, tag: Tag) -> TagId {
        TagId {
            id: bits as u32,
            gen: (bits >> GEN_SHIFT) as u32,
            tag,
        }
    }

    /// The id stored by [`to_bits`](TagId::to_bits), if it is still the id
    /// of the same tag (the same generation); `None` for a number that is no
    /// tag's id, or whose tag has retired since (keep the [`TagId`] itself,
    /// or its [`Tag`], to enter it later whatever happens to the id).
    pub fn from_bits(bits: u64) -> Option<TagId> {
        let (id, gen) = (bits as u32, (bits >> GEN_SHIFT) as u32);
        if id == 0 {
            return (gen == 0).then_some(TagId::UNTAGGED);
        }
        let map = lock();
        let e = entry(id)?;
        let s = e.state.load(Ordering::Acquire);
        if id >= map.next || s & FREE != 0 || (s >> GEN_SHIFT) as u32 != gen {
            return None;
        }
        // SAFETY: under the INTERN lock, for an id in use.
        let tag = unsafe { e.key() };
        Some(TagId { id, gen, tag })
    }
}

impl fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_untagged() {
            return f.write_str("untagged");
        }
        let mut sep = "";
        if let Some(j) = self.job {
            write!(f, "job={j}")?;
            sep = " ";
        }
        if let Some(s) = self.stage {
            write!(f, "{sep}stage={s}")?;
            sep = " ";
        }
        if let Some(p) = self.partition {
            write!(f, "{sep}partition={p}")?;
        }
        Ok(())
    }
}

impl<'de> Deserialize<'de> for Tag {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Tag, D::Error> {
        #[derive(Deserialize)]
        struct Owned {
            job: Option<u64>,
            stage: Option<String>,
            partition: Option<u32>,
        }
        let o = Owned::deserialize(d)?;
        Ok(Tag {
            job: o.job,
            stage: o.stage.as_deref().map(static_name),
            partition: o.partition,
        })
    }
}

/// Returns a `'static` copy of `name`, leaking each distinct name once.
///
/// Stage names are `&'static str` so the hot path never owns strings; names
/// read back from a serialized snapshot go through here. The copies live on
/// heaptag's internal heap (counted as its overhead), so the lock is never
/// held across a call into the global allocator (see "fork" in `start.rs`).
pub fn static_name(name: &str) -> &'static str {
    let mut names = NAMES.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(n) = names.get(name) {
        return n;
    }
    let mut copy: IVec<u8, Internal> = IVec::new_in(Internal);
    if copy.try_reserve_exact(name.len()).is_err() || names.try_reserve(1).is_err() {
        // No internal memory: an unshared copy from the global allocator,
        // made after the lock is released.
        drop(names);
        return Box::leak(name.to_owned().into_boxed_str());
    }
    copy.extend_from_slice(name.as_bytes());
    let bytes: &'static [u8] = copy.leak();
    // SAFETY: `bytes` is a byte-for-byte copy of the `str` `name`.
    let leaked = unsafe { std::str::from_utf8_unchecked(bytes) };
    names.insert(leaked);
    leaked
}

/// The names leaked by [`static_name`].
static NAMES: Mutex<HashSet<&'static str, MixBuild, Internal>> =
    Mutex::new(HashSet::with_hasher_in(MixBuild::new(), Internal));

/// Restores the previous tag of the calling thread when dropped.
///
/// Guards are `!Send`: a guard must drop on the thread that created it. Drop
/// nested guards in reverse order of creation (the natural order of scopes).
/// A guard holds its tag: the tag cannot retire while the guard lives. A
/// guard dropped out of order (its tag is not the thread's current one) does
/// not change the current tag and keeps its hold for good (the tag never
/// retires), counted in [`Health::guards_out_of_order`](crate::Health), so
/// the thread's tag is always one that is held.
///
/// ```compile_fail
/// let guard = heaptag_alloc::stage("x");
/// std::thread::spawn(move || drop(guard)); // error: TagGuard is not Send
/// ```
#[must_use = "the tag is active only while the guard lives"]
pub struct TagGuard {
    id: u32,
    prev: u32,
    _not_send: PhantomData<*const ()>,
}

impl TagGuard {
    /// Makes `id`, on which the caller took a hold, the thread's tag.
    fn set(id: u32) -> TagGuard {
        TagGuard {
            id,
            prev: thread::swap_tag(id),
            _not_send: PhantomData,
        }
    }
}

impl Drop for TagGuard {
    fn drop(&mut self) {
        if thread::current_tag() != self.id {
            // Out of order: an inner guard still restores to our tag, so we
            // keep it held (a leak of one hold) and leave the tag alone.
            GUARDS_OUT_OF_ORDER.fetch_add(1, Ordering::Relaxed);
            return;
        }
        // `prev` is held by the guard that set it (or is untagged).
        thread::swap_tag(self.prev);
        release_hold(self.id);
    }
}

impl fmt::Debug for TagGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TagGuard")
            .field("restores", &tag_of(self.prev))
            .finish()
    }
}

/// The calling thread's current tag.
pub fn current() -> Tag {
    held_key(thread::current_tag())
}

/// Sets the stage of the calling thread's tag until the guard drops.
pub fn stage(name: &'static str) -> TagGuard {
    Tag {
        stage: Some(name),
        ..current()
    }
    .enter()
}

/// Sets the partition of the calling thread's tag until the guard drops.
pub fn partition(id: u32) -> TagGuard {
    Tag {
        partition: Some(id),
        ..current()
    }
    .enter()
}

/// Sets the job of the calling thread's tag until the guard drops.
pub fn job(id: u64) -> TagGuard {
    Tag {
        job: Some(id),
        ..current()
    }
    .enter()
}

/// Runs `f` charged to the process-wide tag [`Tag::shared`]`(stage)` (no job,
/// no partition), whatever the calling thread's tag, then restores it (also
/// when `f` unwinds). For memory every job and partition shares, such as a
/// cache built once:
///
/// ```no_run
/// use std::sync::OnceLock;
/// static PCE: OnceLock<Vec<u64>> = OnceLock::new();
/// let _part = heaptag_alloc::partition(0);
/// // Charged to (no job, "pce_load", no partition), not to partition 0:
/// let pce = PCE.get_or_init(|| heaptag_alloc::shared("pce_load", || vec![0u64; 1 << 20]));
/// ```
///
/// A realloc is charged to the tag of the thread that makes it (the realloc
/// rule in docs/REPORTS.md): grow such memory inside `shared` too.
pub fn shared<R>(stage: &'static str, f: impl FnOnce() -> R) -> R {
    Tag::shared(stage).scope(f)
}

// ---------------------------------------------------------------------------
// The tag table: id -> (key, state, shared per-tag statistics).
//
// # Retirement and reuse
//
// A daemon makes new tags forever (a job id per proof), so ids are reused: a
// tag *retires* once it is idle, that is
//
// - no guard holds it (`holds`, counted in `state`: every [`TagGuard`]
//   whose tag it is, and every `ExternalGuard` under it),
// - no tracked block of it is alive (`tracked_live` and `zero_blocks`),
// - no sampled small block of it is alive (`sampled_live`),
// - no external bytes are recorded under it (`external_bytes`).
//
// Retiring takes the INTERN lock, sets RETIRING in `state` with a CAS that
// expects no holds (a concurrent `TagId::enter` either got its hold in first,
// and the tag stays, or sees RETIRING and interns by value under the lock),
// checks the live counts, and then bumps the generation and marks the id
// FREE. No thread can write its counters afterwards: writing needs a hold
// (allocations) or a live block (frees), and the releasing thread's last
// write comes before its Release decrement of the count we read with
// Acquire. Its final figures are added to the retired totals (so the
// process-wide sums in snapshots stay exact) and its per-thread counters are
// zeroed for the next tag that gets the id.
//
// Without a log, retirement happens when a new tag needs an id (`intern`),
// for the tags that became idle since. With a log, the writer retires at
// each sample and the id goes back to the free set only after the writer has
// written the tag's final counters and its `TagRetire` record, once every
// event queued before the retirement has been written (`release`): so in the
// log no event of the old tag can follow a new `TagDef` of the id.
//
// Free ids are reused lowest first, so ids stay as compact as the tags alive
// at once; when every id of a range of 256 is free, the range's counter pages
// are freed in every thread slot (`thread::free_range`). The entries
// themselves (256 bytes an id) stay allocated, up to the highest id in use.
//
// A [`TagId`] carries its generation and its tag: entering one whose id was
// retired (stale) enters its tag by value, which interns it again, so a kept
// `TagId` always charges the tag it was made from, never whatever tag reuses
// its id.

/// `state` bits: the generation (high 32 bits), RETIRING, FREE and the
/// number of holds (low 30 bits).
const GEN_SHIFT: u32 = 32;
const RETIRING: u64 = 1 << 31;
const FREE: u64 = 1 << 30;
const HOLDS: u64 = FREE - 1;
/// Figures of a tag the writer remembers (see `TagEntry::sent`).
const SENT: usize = 7;

/// Statistics of one tag that need one process-wide value: live bytes and
/// their peaks. They change only on tracked or sampled events; counts of
/// allocations and frees live per thread (`thread.rs`), so concurrent
/// tracked events of one tag share only `tracked_live`'s cache line.
///
/// The statistics are updated with Relaxed atomics: each is an independent
/// statistic, except the last decrement of a live count (`tracked_live`,
/// `zero_blocks`, `sampled_live`), which is Release so that a retirement that reads it
/// (Acquire) comes after everything the releasing thread wrote for the tag.
#[repr(C, align(128))]
pub(crate) struct TagEntry {
    key: UnsafeCell<MaybeUninit<Tag>>,
    /// Generation, flags and holds (see the bits above).
    state: AtomicU64,
    _pad0: [u64; 2],
    /// Live bytes of tracked blocks (exact).
    pub(crate) tracked_live: AtomicU64,
    /// Highest `tracked_live` (exact: maxima of fetch_add results).
    pub(crate) tracked_peak: AtomicU64,
    /// Tracked blocks of 0 bytes alive now (C's `malloc(0)` with a 0
    /// threshold): the only live tracked blocks `tracked_live` cannot show.
    /// A tag has a live tracked block iff `tracked_live` or this is not 0,
    /// so a tracked event needs one RMW here, not a byte and a block count.
    pub(crate) zero_blocks: AtomicU64,
    /// Keeps the sampled figures (written on sampled events) off the
    /// tracked figures' cache line.
    _pad: [u64; 5],
    /// Horvitz-Thompson estimate of live small bytes: sum of size/p.
    pub(crate) sampled_weight: AtomicU64,
    /// Estimated variance of `sampled_weight`: sum of size^2 (1-p) / p^2.
    pub(crate) sampled_var: AtomicU64,
    /// Estimated number of live small blocks, in 1/1024ths: sum of 1024/p.
    pub(crate) sampled_count_fx: AtomicU64,
    /// Number of sampled blocks alive now.
    pub(crate) sampled_live: AtomicU64,
    /// Highest tracked + sampled live seen at a tracked or sampled event.
    /// Two concurrent events may each miss the other's share, so under races
    /// it can read a little low; `tracked_peak` is exact.
    pub(crate) peak: AtomicU64,
    pub(crate) external_bytes: AtomicU64,
    /// Of `tracked_live`, bytes of blocks C/C++ allocated through the
    /// `native` malloc shim (`native.rs`; 0 without the feature).
    pub(crate) native_live: AtomicU64,
    /// Of the tracked blocks alive now, native ones.
    pub(crate) native_blocks: AtomicU64,
    /// Of `sampled_weight`, the weights of sampled native blocks.
    pub(crate) native_small: AtomicU64,
    /// The figures last sent in a `counters` record and the tracked bytes
    /// freed (the writer's, under the INTERN lock): a sample lists a tag only
    /// when they changed, and keeps the process-wide sums up to date from
    /// the differences.
    sent: [AtomicU64; SENT],
}

// SAFETY: `key` is written only under the INTERN lock while the id is FREE
// (no guard, block, thread or `TagId` fast path can reach it: see
// "Retirement and reuse"), before the id is published by a Release store of
// `state`. It is read either under the INTERN lock, or by a caller that
// holds the id (its current tag, a guard), which keeps it from being retired
// and so from being written. Every other field is atomic.
unsafe impl Sync for TagEntry {}

/// Raises `peak` to `value` if higher: a load, and a locked RMW only when a
/// new peak is set (rare once the program reaches its working size).
#[inline]
pub(crate) fn raise(peak: &AtomicU64, value: u64) {
    if value > peak.load(Ordering::Relaxed) {
        peak.fetch_max(value, Ordering::Relaxed);
    }
}

impl TagEntry {
    /// Adds a tracked block's bytes to the live figures and peaks: one
    /// locked RMW (`tracked_live`), and the peaks only read unless passed.
    #[inline]
    pub(crate) fn tracked_add(&self, bytes: u64) {
        if bytes == 0 {
            self.zero_blocks.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let live = self.tracked_live.fetch_add(bytes, Ordering::Relaxed) + bytes;
        raise(&self.tracked_peak, live);
        raise(&self.peak, live + self.sampled_weight.load(Ordering::Relaxed));
    }

    /// Removes a tracked block's bytes: the tag's last write for the block,
    /// Release (see the type's docs), to `tracked_live` or, for a 0-byte
    /// block, `zero_blocks`.
    #[inline]
    pub(crate) fn tracked_sub(&self, bytes: u64) {
        if bytes == 0 {
            self.zero_blocks.fetch_sub(1, Ordering::Release);
        } else {
            self.tracked_live.fetch_sub(bytes, Ordering::Release);
        }
    }

    /// A recorded block of this tag (`e.tag`) leaving, after its event was
    /// queued: marks the tag dirty, counts the free on the calling thread
    /// (a small one at `size` bytes) and takes the block off the tag's
    /// figures, the live count last (Release: it may let the tag retire, so
    /// the retirement comes after the event and the counts). `native`: a C
    /// block (`native.rs`), whose bytes also leave the native figures.
    pub(crate) fn release_block(&self, e: &crate::table::Entry, size: u64, native: bool) {
        mark_dirty(e.tag);
        if e.tracked {
            thread::count_pair(e.tag, Some(thread::Pair::TrackedFree), e.size);
            if native {
                self.native_live.fetch_sub(e.size, Ordering::Relaxed);
                self.native_blocks.fetch_sub(1, Ordering::Relaxed);
            }
            self.tracked_sub(e.size);
        } else {
            thread::count_small_free(size);
            let w = crate::sampling::weight(e.size as usize);
            if native {
                self.native_small.fetch_sub(w.bytes, Ordering::Relaxed);
            }
            self.sampled_sub(&w);
        }
    }

    /// Adds a sampled block's estimator weights and raises the peak.
    pub(crate) fn sampled_add(&self, w: &crate::sampling::Weight) {
        let est = self.sampled_weight.fetch_add(w.bytes, Ordering::Relaxed) + w.bytes;
        self.sampled_var.fetch_add(w.var, Ordering::Relaxed);
        self.sampled_count_fx.fetch_add(w.count_fx, Ordering::Relaxed);
        self.sampled_live.fetch_add(1, Ordering::Relaxed);
        raise(&self.peak, est + self.tracked_live.load(Ordering::Relaxed));
    }

    /// Removes a sampled block's estimator weights; the count last (Release).
    pub(crate) fn sampled_sub(&self, w: &crate::sampling::Weight) {
        self.sampled_weight.fetch_sub(w.bytes, Ordering::Relaxed);
        self.sampled_var.fetch_sub(w.var, Ordering::Relaxed);
        self.sampled_count_fx.fetch_sub(w.count_fx, Ordering::Relaxed);
        self.sampled_live.fetch_sub(1, Ordering::Release);
    }

    /// No live block and no external bytes (Acquire: see the type's docs).
    fn is_empty(&self) -> bool {
        self.tracked_live.load(Ordering::Acquire) == 0
            && self.zero_blocks.load(Ordering::Acquire) == 0
            && self.sampled_live.load(Ordering::Acquire) == 0
            && self.external_bytes.load(Ordering::Acquire) == 0
    }

    /// The key of an id the caller holds (or under the INTERN lock).
    ///
    /// # Safety
    /// The caller holds the id (a guard or its current tag) or the INTERN
    /// lock, and the id was published.
    unsafe fn key(&self) -> Tag {
        // SAFETY: the caller's guarantee (see `unsafe impl Sync`).
        unsafe { (*self.key.get()).assume_init() }
    }

    /// Takes a hold if the id is still of generation `gen` and not being
    /// retired; returns the holds before. Lock-free: one CAS.
    fn try_hold(&self, gen: u32) -> Option<u64> {
        // Acquire: pairs with the Release publication of the key.
        let mut s = self.state.load(Ordering::Acquire);
        loop {
            if (s >> GEN_SHIFT) as u32 != gen || s & (RETIRING | FREE) != 0 || s & HOLDS == HOLDS {
                return None;
            }
            match self
                .state
                .compare_exchange_weak(s, s + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Some(s & HOLDS),
                Err(now) => s = now,
            }
        }
    }

    fn gen(&self) -> u32 {
        (self.state.load(Ordering::Acquire) >> GEN_SHIFT) as u32
    }

    fn holds(&self) -> u64 {
        self.state.load(Ordering::Acquire) & HOLDS
    }

    /// The figures a `counters` record gives for this tag (id `id`), from
    /// its per-thread counts `c`.
    fn count(&self, id: u32, c: &thread::TagCounts) -> TagCount {
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let tracked_live = ld(&self.tracked_live);
        let small_live = ld(&self.sampled_weight);
        TagCount {
            tag: id,
            alloc_bytes: c.alloc_bytes,
            alloc_count: c.alloc_count,
            tracked_live,
            small_live,
            peak: ld(&self.peak).max(tracked_live + small_live),
            external: ld(&self.external_bytes),
        }
    }

    /// Stores the figures `c` (and `tracked_free` bytes) as sent, adds
    /// their differences to the writer's sums, and says whether any changed.
    fn update_sent(&self, c: &TagCount, tracked_free: u64, sums: &mut Sums) -> bool {
        let now = [
            c.alloc_bytes,
            c.alloc_count,
            c.tracked_live,
            c.small_live,
            c.peak,
            c.external,
            tracked_free,
        ];
        let mut differs = false;
        let mut old = [0u64; SENT];
        for ((a, v), o) in self.sent.iter().zip(now).zip(old.iter_mut()) {
            *o = a.load(Ordering::Relaxed);
            if *o != v {
                a.store(v, Ordering::Relaxed);
                differs = true;
            }
        }
        sums.alloc_bytes = sums.alloc_bytes.wrapping_add(now[0].wrapping_sub(old[0]));
        sums.tracked_live = sums.tracked_live.wrapping_add(now[2].wrapping_sub(old[2]));
        sums.tracked_free = sums.tracked_free.wrapping_add(now[6].wrapping_sub(old[6]));
        differs
    }

    /// Takes this tag's figures out of the writer's sums (it retired: they
    /// are in the retired totals now).
    fn forget_sent(&self, sums: &mut Sums) {
        let ld = |i: usize| self.sent[i].load(Ordering::Relaxed);
        sums.alloc_bytes = sums.alloc_bytes.wrapping_sub(ld(0));
        sums.tracked_live = sums.tracked_live.wrapping_sub(ld(2));
        sums.tracked_free = sums.tracked_free.wrapping_sub(ld(6));
        for a in &self.sent {
            a.store(0, Ordering::Relaxed);
        }
    }
}

type TagChunk = [TagEntry; CHUNK];

static TAG_DIR: [AtomicPtr<TagChunk>; DIR] = [const { AtomicPtr::new(std::ptr::null_mut()) }; DIR];

const WORDS: usize = MAX_TAGS / 64;

/// The interning state, under one lock.
pub(crate) struct Interner {
    map: HashMap<Tag, u32, MixBuild, Internal>,
    /// Ids free for reuse (retired and released).
    free: [u64; WORDS],
    /// Ids `0..next` were handed out at least once.
    next: u32,
    /// Ids in use now (handed out, not retired).
    in_use: u32,
    /// A log writer retires tags (at its samples) and sends definitions.
    by_writer: bool,
    /// Ids (re)defined since the writer last sent definitions.
    defs: [u64; WORDS],
    /// Ids found idle at their last look, kept while few tags are in use
    /// (a bit per id, and the same ids with their generation in the order
    /// they were found idle, from `idle_head` on: the oldest retire first).
    idle: [u64; WORDS],
    idle_q: IVec<(u32, u32), Internal>,
    idle_head: usize,
    /// Tag values that got no id, remembered up to `OVERFLOW_REMEMBERED`.
    overflowed: HashSet<Tag, MixBuild, Internal>,
    /// Of those, the ones the writer has not logged yet.
    overflow_new: IVec<Tag, Internal>,
    /// The writer's sums over tags in use of their figures as last looked at.
    sums: Sums,
}

/// Sums over the tags in use of the figures the writer last saw (exact as of
/// its last sample: every tag that changed since is in the dirty set).
#[derive(Clone, Copy, Default)]
struct Sums {
    alloc_bytes: u64,
    tracked_live: u64,
    tracked_free: u64,
}

/// Process-wide figures for the writer's `totals` record, from its sums.
#[derive(Clone, Copy, Default)]
pub(crate) struct WriterTotals {
    /// Bytes allocated, all tags, retired ones included.
    pub(crate) alloc_bytes: u64,
    /// Tracked bytes freed, likewise.
    pub(crate) tracked_free_bytes: u64,
    /// Tracked bytes alive now.
    pub(crate) tracked_live: u64,
}

/// Idle tags retire only while more than this many tags are in use (then
/// down to three quarters of it): a program with fewer tags keeps every
/// tag's figures in snapshots after its work ends, and a daemon keeps the
/// last few thousand tags and a bounded table.
pub const TAGS_KEPT: usize = 4096;

/// Distinct overflowing tag values remembered (and logged once each); past
/// this many, each further guard of an overflowing tag counts once more.
const OVERFLOW_REMEMBERED: usize = 4096;

static INTERN: Mutex<Interner> = Mutex::new(Interner {
    map: HashMap::with_hasher_in(MixBuild::new(), Internal),
    free: [0; WORDS],
    next: 0,
    in_use: 0,
    by_writer: false,
    defs: [0; WORDS],
    idle: [0; WORDS],
    idle_q: IVec::new_in(Internal),
    idle_head: 0,
    overflowed: HashSet::with_hasher_in(MixBuild::new(), Internal),
    overflow_new: IVec::new_in(Internal),
    sums: Sums {
        alloc_bytes: 0,
        tracked_live: 0,
        tracked_free: 0,
    },
});

/// Ids in use now, for `Health::tags` without the lock.
static IN_USE: AtomicU32 = AtomicU32::new(0);

/// Sums of the figures of retired tags, so process-wide totals stay exact.
/// Written under the INTERN lock; read by snapshots under it.
pub(crate) struct Retired {
    pub(crate) alloc_bytes: u64,
    pub(crate) alloc_count: u64,
    pub(crate) tracked_alloc_bytes: u64,
    pub(crate) tracked_alloc_count: u64,
    pub(crate) tracked_free_bytes: u64,
    pub(crate) tracked_free_count: u64,
}

static RETIRED: Mutex<Retired> = Mutex::new(Retired {
    alloc_bytes: 0,
    alloc_count: 0,
    tracked_alloc_bytes: 0,
    tracked_alloc_count: 0,
    tracked_free_bytes: 0,
    tracked_free_count: 0,
});

/// Tags whose figures may have changed since the writer's (or the
/// retirer's) last look: a bitmap of ids with a summary bit per word, set
/// lock-free (a load, and an RMW only when the bit is clear) by the first
/// hold of a tag, the free of one of its blocks and its external changes,
/// and drained under the INTERN lock. A tag held at a drain is marked again,
/// so every tag that can change is in it: a sample visits only these.
static DIRTY: [AtomicU64; WORDS] = [const { AtomicU64::new(0) }; WORDS];
static DIRTY_SUMMARY: [AtomicU64; WORDS / 64] = [const { AtomicU64::new(0) }; WORDS / 64];

/// Set when `intern` found no free id, or more than `TAGS_KEPT` and an
/// eighth in use, while a log writer retires: the writer samples (and
/// retires) at its next cycle.
static RETIRE_WANTED: AtomicBool = AtomicBool::new(false);

static FORK_INTERN: ForkHeld<MutexGuard<'static, Interner>> = ForkHeld::new();
static FORK_NAMES: ForkHeld<MutexGuard<'static, HashSet<&'static str, MixBuild, Internal>>> = ForkHeld::new();

fn lock() -> MutexGuard<'static, Interner> {
    INTERN.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Locks the stage names before a `fork()` (the prepare handler in
/// `start.rs`): a child that names a stage must not find them locked by a
/// thread that does not exist in it. Holders use only the internal heap.
pub(crate) fn fork_prepare_names() {
    // SAFETY: called only from the atfork prepare handler.
    unsafe { FORK_NAMES.hold(NAMES.lock().unwrap_or_else(PoisonError::into_inner)) };
}

/// Locks the interning map before a `fork()`, for the same reason.
pub(crate) fn fork_prepare_intern() {
    // SAFETY: called only from the atfork prepare handler.
    unsafe { FORK_INTERN.hold(lock()) };
}

/// Unlocks what [`fork_prepare_intern`] locked (parent and child handlers).
pub(crate) fn fork_release_intern() {
    // SAFETY: called only from the atfork parent and child handlers.
    unsafe { FORK_INTERN.release() };
}

/// Unlocks what [`fork_prepare_names`] locked (parent and child handlers).
pub(crate) fn fork_release_names() {
    // SAFETY: called only from the atfork parent and child handlers.
    unsafe { FORK_NAMES.release() };
}

/// The entry of an id whose chunk exists, or `None`.
#[inline]
pub(crate) fn entry(id: u32) -> Option<&'static TagEntry> {
    let id = id as usize;
    // Acquire: pairs with the Release publication of the chunk pointer.
    let chunk = TAG_DIR.get(id / CHUNK)?.load(Ordering::Acquire);
    if chunk.is_null() {
        return None;
    }
    // SAFETY: chunks are allocated zeroed (valid for atomics and
    // MaybeUninit), published once and never freed, so the reference is
    // valid for 'static; `id % CHUNK` is in bounds.
    Some(unsafe { &(*chunk)[id % CHUNK] })
}

/// Marks `id` as possibly changed since the last sample (see [`DIRTY`]).
#[inline]
pub(crate) fn mark_dirty(id: u32) {
    let id = id as usize;
    let Some(word) = DIRTY.get(id / 64) else { return };
    let bit = 1u64 << (id % 64);
    // Relaxed: the bits are hints to look; the figures are read with their
    // own orderings.
    if word.load(Ordering::Relaxed) & bit == 0 {
        word.fetch_or(bit, Ordering::Relaxed);
        DIRTY_SUMMARY[id / 4096].fetch_or(1u64 << ((id / 64) % 64), Ordering::Relaxed);
    }
}

/// Takes the dirty set (under the INTERN lock), calling `f` per id.
fn drain_dirty(mut f: impl FnMut(u32)) {
    for (si, summary) in DIRTY_SUMMARY.iter().enumerate() {
        let mut words = summary.swap(0, Ordering::Relaxed);
        while words != 0 {
            let w = si * 64 + words.trailing_zeros() as usize;
            words &= words - 1;
            let mut bits = DIRTY[w].swap(0, Ordering::Relaxed);
            while bits != 0 {
                let b = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                f((w * 64 + b) as u32);
            }
        }
    }
}

/// Tags in use now (interned and not retired).
pub(crate) fn in_use() -> u32 {
    IN_USE.load(Ordering::Relaxed)
}

/// The key of the calling thread's current tag id (held by the thread).
fn held_key(id: u32) -> Tag {
    if id == 0 {
        return Tag::UNTAGGED;
    }
    match entry(id) {
        // SAFETY: `id` is the calling thread's current tag or a guard's of
        // this thread: held (see TagGuard), so not retired meanwhile.
        Some(e) => unsafe { e.key() },
        None => Tag::UNTAGGED,
    }
}

/// The tag of id `id` now (untagged for a free or unknown id). Takes the
/// INTERN lock: for ids that may be stale (copies of table entries).
pub(crate) fn tag_of(id: u32) -> Tag {
    if id == 0 {
        return Tag::UNTAGGED;
    }
    let _map = lock();
    match entry(id) {
        Some(e) if id < _map.next && e.state.load(Ordering::Acquire) & FREE == 0 => {
            // SAFETY: under the INTERN lock, and the id is published.
            unsafe { e.key() }
        }
        _ => Tag::UNTAGGED,
    }
}

/// Makes sure id 0 (untagged) exists. Called once, by start-up (`start.rs`).
pub(crate) fn init() {
    let mut map = lock();
    let _ = map.id_of(&Tag::UNTAGGED);
}

/// Returns the id of `tag`, creating it on first use (no hold taken).
#[cfg(test)]
///
/// Never fails: when no id can be created the tag is charged as untagged and
/// counted (once per tag value).
pub(crate) fn intern(tag: &Tag) -> u32 {
    lock().id_of(tag)
}

/// [`intern`] and take a hold on the id, in one critical section (so the
/// id cannot retire in between).
pub(crate) fn intern_hold(tag: &Tag) -> u32 {
    let mut map = lock();
    let id = map.id_of(tag);
    if id != 0 {
        if let Some(e) = entry(id) {
            // Under the lock nothing is RETIRING, and the id is not FREE.
            e.state.fetch_add(1, Ordering::AcqRel);
            mark_dirty(id);
        }
    }
    id
}

/// Takes a hold on id `id` of generation `gen` (see `TagId::enter`); falls
/// back to interning `tag` (held) when the id is stale. Returns the id held.
pub(crate) fn hold(id: u32, gen: u32, tag: &Tag) -> u32 {
    if id == 0 {
        // Untagged, or a tag that found no id when the TagId was made: it
        // may get one now.
        return if tag.is_untagged() { 0 } else { intern_hold(tag) };
    }
    let Some(e) = entry(id) else { return intern_hold(tag) };
    match e.try_hold(gen) {
        // SAFETY: we hold the id, so its key is not rewritten meanwhile.
        // A `TagId` made with `from_parts` may pair an id with another
        // tag: the key decides.
        Some(before) if unsafe { e.key() } == *tag => {
            // The first hold puts the tag in the dirty set; a held tag stays
            // there (see DIRTY).
            if before == 0 {
                mark_dirty(id);
            }
            id
        }
        Some(_) => {
            release_hold(id);
            intern_hold(tag)
        }
        None => intern_hold(tag),
    }
}

/// Takes another hold on the calling thread's current tag (for an
/// `ExternalGuard`); returns its id.
pub(crate) fn hold_current() -> u32 {
    let id = thread::current_tag();
    if id == 0 {
        return 0;
    }
    match entry(id) {
        // Held by the thread already, so neither stale nor retiring: one RMW.
        Some(e) => {
            e.state.fetch_add(1, Ordering::AcqRel);
            id
        }
        None => 0,
    }
}

/// Takes a hold on `id`, which has a live block (so it is not retired):
/// keeps it from retiring while a realloc moves the block's bytes to another
/// tag and queues its event. A retirement being checked at that moment
/// (RETIRING) finds the live block and backs off, so this retries a bounded
/// number of times; false when it gave up (the hold is then not taken).
pub(crate) fn hold_live(id: u32) -> bool {
    if id == 0 {
        return false;
    }
    let Some(e) = entry(id) else { return false };
    for _ in 0..1024 {
        if e.try_hold(e.gen()).is_some() {
            return true;
        }
        std::hint::spin_loop();
    }
    false
}

/// In a forked child (the atfork child handler in `start.rs`): the child
/// has no log writer, so it retires tags itself.
pub(crate) fn after_fork_in_child() {
    lock().by_writer = false;
}

/// Gives back a hold taken by [`intern_hold`], [`hold`], [`hold_current`]
/// or [`hold_live`].
pub(crate) fn release_hold(id: u32) {
    if id == 0 {
        return;
    }
    if let Some(e) = entry(id) {
        // Release: everything this thread did under the tag comes before a
        // retirement that sees the hold gone (Acquire).
        e.state.fetch_sub(1, Ordering::Release);
    }
}

impl Interner {
    /// The id of `tag`, creating it on first use; 0 when none can be had.
    fn id_of(&mut self, tag: &Tag) -> u32 {
        if let Some(&id) = self.map.get(tag) {
            return id;
        }
        if self.next == 0 && !tag.is_untagged() {
            // Id 0 is the untagged tag, whoever interns first.
            let _ = self.id_of(&Tag::UNTAGGED);
        }
        if self.in_use as usize >= TAGS_KEPT {
            if !self.by_writer {
                // Without a log, retire what became idle, here.
                self.retire_idle(None, false);
            } else if self.in_use as usize >= TAGS_KEPT + TAGS_KEPT / 8 {
                // With one, the writer retires at its next cycle (a few ms)
                // rather than its next sample, so a burst of new tags does
                // not raise the ids (and counter pages) in use.
                RETIRE_WANTED.store(true, Ordering::Relaxed);
            }
        }
        let Some(id) = self.take_free().or_else(|| self.take_new()) else {
            self.overflow(tag);
            return 0;
        };
        let Some(e) = create_entry(id) else {
            self.give_back(id);
            self.overflow(tag);
            return 0;
        };
        if self.map.try_reserve(1).is_err() {
            self.give_back(id);
            self.overflow(tag);
            return 0;
        }
        // SAFETY: the id is FREE or never used (no reader can reach its
        // key, see `unsafe impl Sync`) and we hold the INTERN lock.
        unsafe { (*e.key.get()).write(*tag) };
        for a in &e.sent {
            a.store(0, Ordering::Relaxed);
        }
        // Release: publishes the key; clears FREE, keeps the generation.
        let gen = e.state.load(Ordering::Relaxed) & !HOLDS & !FREE & !RETIRING;
        e.state.store(gen, Ordering::Release);
        self.map.insert(*tag, id);
        self.in_use += 1;
        IN_USE.store(self.in_use, Ordering::Relaxed);
        if self.by_writer {
            self.defs[id as usize / 64] |= 1 << (id % 64);
        }
        // Looked at by the next sample (and retired from there when idle,
        // even if it is never entered).
        mark_dirty(id);
        id
    }

    /// The lowest free (released) id.
    fn take_free(&mut self) -> Option<u32> {
        let w = self.free.iter().position(|&w| w != 0)?;
        let b = self.free[w].trailing_zeros();
        self.free[w] &= !(1 << b);
        Some(w as u32 * 64 + b)
    }

    /// A never-used id, if any is left.
    fn take_new(&mut self) -> Option<u32> {
        (self.next < MAX_TAGS as u32).then(|| {
            self.next += 1;
            self.next - 1
        })
    }

    /// Undoes `take_free` / `take_new` for an id that could not be set up.
    fn give_back(&mut self, id: u32) {
        self.free[id as usize / 64] |= 1 << (id % 64);
    }

    /// Remembers and counts a tag value that got no id.
    fn overflow(&mut self, tag: &Tag) {
        if self.overflowed.contains(tag) {
            return;
        }
        TAG_OVERFLOW.fetch_add(1, Ordering::Relaxed);
        if self.by_writer {
            RETIRE_WANTED.store(true, Ordering::Relaxed);
        }
        if self.overflowed.len() < OVERFLOW_REMEMBERED && self.overflowed.try_reserve(1).is_ok() {
            self.overflowed.insert(*tag);
            if self.by_writer
                && self.overflow_new.len() < OVERFLOW_REMEMBERED
                && self.overflow_new.try_reserve(1).is_ok()
            {
                self.overflow_new.push(*tag);
            }
        }
    }

    /// Retires `id` if it is idle; returns its final figures when it did.
    /// The id is FREE afterwards but not yet reusable: see [`Interner::release`].
    fn retire(&mut self, id: u32) -> Option<TagCount> {
        if id == 0 || id >= self.next {
            return None;
        }
        let e = entry(id)?;
        let s = e.state.load(Ordering::Acquire);
        if s & (HOLDS | FREE | RETIRING) != 0 {
            return None;
        }
        // No new hold from here: `try_hold` refuses RETIRING, and
        // `intern_hold` needs this lock.
        if e.state
            .compare_exchange(s, s | RETIRING, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return None;
        }
        if !e.is_empty() {
            // Only this thread changes a RETIRING state.
            e.state.store(s, Ordering::Release);
            return None;
        }
        let c = thread::read_counts(id);
        let count = e.count(id, &c);
        {
            let mut r = RETIRED.lock().unwrap_or_else(PoisonError::into_inner);
            r.alloc_bytes = r.alloc_bytes.wrapping_add(c.alloc_bytes);
            r.alloc_count = r.alloc_count.wrapping_add(c.alloc_count);
            r.tracked_alloc_bytes = r.tracked_alloc_bytes.wrapping_add(c.tracked_alloc_bytes);
            r.tracked_alloc_count = r.tracked_alloc_count.wrapping_add(c.tracked_alloc_count);
            r.tracked_free_bytes = r.tracked_free_bytes.wrapping_add(c.tracked_free_bytes);
            r.tracked_free_count = r.tracked_free_count.wrapping_add(c.tracked_free_count);
        }
        thread::zero_counts(id);
        for a in [
            &e.tracked_live,
            &e.tracked_peak,
            &e.sampled_weight,
            &e.sampled_var,
            &e.sampled_count_fx,
            &e.peak,
        ] {
            a.store(0, Ordering::Relaxed);
        }
        // SAFETY: under the INTERN lock.
        let key = unsafe { e.key() };
        self.map.remove(&key);
        // The definition bit stays: a tag made and retired between two of
        // the writer's looks is still defined (before its events and its
        // retire record); the key stays until the id is released.
        self.idle[id as usize / 64] &= !(1 << (id % 64));
        let next_gen = ((s >> GEN_SHIFT) as u32).wrapping_add(1);
        // Release: stale `TagId`s see the new generation.
        e.state
            .store((u64::from(next_gen) << GEN_SHIFT) | FREE, Ordering::Release);
        self.in_use -= 1;
        IN_USE.store(self.in_use, Ordering::Relaxed);
        TAGS_RETIRED.fetch_add(1, Ordering::Relaxed);
        Some(count)
    }

    /// Makes retired ids reusable, and frees the counter pages of ranges
    /// that have no id in use left.
    fn release(&mut self, ids: impl IntoIterator<Item = u32>) {
        let mut ranges = [0u64; MAX_TAGS / thread::RANGE / 64];
        for id in ids {
            self.give_back(id);
            // A definition not sent by now was lost to a failed write.
            self.defs[id as usize / 64] &= !(1 << (id % 64));
            let r = id as usize / thread::RANGE;
            ranges[r / 64] |= 1 << (r % 64);
        }
        let per = thread::RANGE / 64;
        for (ri, &bits) in ranges.iter().enumerate() {
            let mut bits = bits;
            while bits != 0 {
                let r = ri * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                // Every id of the range is free or was never handed out.
                let all_free = (0..per).all(|k| {
                    let w = r * per + k;
                    let used = (self.next as usize).saturating_sub(w * 64).min(64);
                    let used_mask = if used == 64 { u64::MAX } else { (1u64 << used) - 1 };
                    self.free[w] & used_mask == used_mask
                });
                if all_free {
                    thread::free_range(r);
                }
            }
        }
    }

    /// Looks at the tags marked dirty: marks the held ones again, remembers
    /// the idle ones, and calls `each` with the figures of those that changed
    /// (when given: the writer's sample; all of them when `force`). Then,
    /// when more than [`TAGS_KEPT`] tags are in use, retires idle ones
    /// (passing their final figures to `each`, or releasing them at once
    /// without a writer). Returns how many it looked at.
    fn retire_idle(&mut self, mut each: Option<&mut dyn FnMut(TagCount, bool)>, force: bool) -> u64 {
        let mut seen = 0;
        let mut dirty: IVec<u32, Internal> = IVec::new_in(Internal);
        drain_dirty(|id| {
            if dirty.try_reserve(1).is_ok() {
                dirty.push(id);
            } else {
                // No memory: look next time.
                mark_dirty(id);
            }
        });
        let mut released: IVec<u32, Internal> = IVec::new_in(Internal);
        for &id in dirty.iter() {
            seen += 1;
            let Some(e) = entry(id) else { continue };
            if id >= self.next || e.state.load(Ordering::Acquire) & FREE != 0 {
                continue;
            }
            if let Some(f) = each.as_deref_mut() {
                let counts = thread::read_counts(id);
                let c = e.count(id, &counts);
                let mut sums = self.sums;
                if e.update_sent(&c, counts.tracked_free_bytes, &mut sums) || force {
                    f(c, false);
                }
                self.sums = sums;
            }
            if e.holds() > 0 || id == 0 {
                mark_dirty(id);
                continue;
            }
            let bit = 1u64 << (id % 64);
            if e.is_empty() && self.idle[id as usize / 64] & bit == 0 && self.idle_q.try_reserve(1).is_ok() {
                self.idle[id as usize / 64] |= bit;
                self.idle_q.push((id, e.gen()));
            }
        }
        if self.in_use as usize > TAGS_KEPT {
            // Retire idle tags, the longest idle first, down to 3/4 of
            // TAGS_KEPT.
            while self.in_use as usize > TAGS_KEPT * 3 / 4 && self.idle_head < self.idle_q.len() {
                let (id, gen) = self.idle_q[self.idle_head];
                self.idle_head += 1;
                let bit = 1u64 << (id % 64);
                let Some(e) = entry(id) else { continue };
                if self.idle[id as usize / 64] & bit == 0 || e.gen() != gen {
                    continue;
                }
                self.idle[id as usize / 64] &= !bit;
                seen += 1;
                {
                    let Some(last) = self.retire(id) else { continue };
                    match each.as_deref_mut() {
                        Some(f) => {
                            if let Some(e) = entry(id) {
                                let mut sums = self.sums;
                                e.forget_sent(&mut sums);
                                self.sums = sums;
                            }
                            f(last, true)
                        }
                        None => {
                            if released.try_reserve(1).is_ok() {
                                released.push(id);
                            }
                        }
                    }
                }
            }
            if self.idle_head > 1024 && self.idle_head * 2 > self.idle_q.len() {
                self.idle_q.drain(..self.idle_head);
                self.idle_head = 0;
            }
        }
        self.release(released.iter().copied());
        seen
    }
}

/// The entry for an id being handed out, allocating its chunk if needed.
fn create_entry(id: u32) -> Option<&'static TagEntry> {
    let slot = TAG_DIR.get(id as usize / CHUNK)?;
    if slot.load(Ordering::Acquire).is_null() {
        let chunk = leak_zeroed::<TagChunk>()?;
        // Release: the zeroed chunk is visible before its pointer. Only the
        // INTERN lock holder stores here, so a plain store cannot race.
        slot.store(chunk.as_ptr(), Ordering::Release);
    }
    entry(id)
}

// ---------------------------------------------------------------------------
// What the log writer and snapshots read (under the INTERN lock).

/// A log writer takes over retirement (`on`) or gives it back. When it
/// takes over, every tag in use is to be defined again, and its first
/// sample lists every tag.
pub(crate) fn set_writer(on: bool) {
    let mut map = lock();
    map.by_writer = on;
    map.overflow_new.clear();
    map.defs = [0; WORDS];
    if on {
        for id in 0..map.next {
            if entry(id).is_some_and(|e| e.state.load(Ordering::Acquire) & FREE == 0) {
                map.defs[id as usize / 64] |= 1 << (id % 64);
            }
        }
    }
}

/// Defines every tag again: every id in use, and every id retired but not
/// yet released (its `tag_retire` is still to come). For a log that starts
/// a new segment, which must read alone; its next sample should then list
/// every tag (the writer's `full_sample`).
pub(crate) fn redefine_all() {
    let mut map = lock();
    for id in 0..map.next {
        let free = map.free[id as usize / 64] & (1 << (id % 64)) != 0;
        if !free && entry(id).is_some() {
            map.defs[id as usize / 64] |= 1 << (id % 64);
        }
    }
}

/// Takes the ids defined since the last call, with their tags, and the
/// overflowing tags not logged yet.
pub(crate) fn take_definitions(defs: &mut IVec<(u32, Tag), Internal>, overflowed: &mut IVec<Tag, Internal>) {
    let mut map = lock();
    for w in 0..WORDS {
        let mut bits = map.defs[w];
        while bits != 0 {
            let b = bits.trailing_zeros();
            bits &= bits - 1;
            let id = w as u32 * 64 + b;
            if defs.try_reserve(1).is_err() {
                return;
            }
            map.defs[w] &= !(1 << b);
            if let Some(e) = entry(id) {
                // SAFETY: under the INTERN lock; `defs` holds only ids in use
                // or retired and not yet released (whose key stays).
                defs.push((id, unsafe { e.key() }));
            }
        }
    }
    if overflowed.try_reserve(map.overflow_new.len()).is_ok() {
        overflowed.extend(map.overflow_new.drain(..));
    }
}

/// Defines `id` again (its definition was lost to a failed write), if it
/// is still in use.
pub(crate) fn redefine(id: u32) {
    let mut map = lock();
    if id < map.next && entry(id).is_some_and(|e| e.state.load(Ordering::Acquire) & FREE == 0) {
        map.defs[id as usize / 64] |= 1 << (id % 64);
    }
}

/// The writer's sample: the figures of every tag that changed since the
/// last one (of every tag in use when `full`) go to `changed`; idle tags
/// retire and their final figures go to `retired` (their ids are reusable
/// after [`release_retired`]). Returns the tags looked at and the
/// process-wide totals.
pub(crate) fn writer_sample(
    full: bool,
    changed: &mut IVec<TagCount, Internal>,
    retired: &mut IVec<TagCount, Internal>,
) -> (u64, WriterTotals) {
    RETIRE_WANTED.store(false, Ordering::Relaxed);
    let mut map = lock();
    if full {
        // Sums from scratch: every tag in use is looked at once.
        map.sums = Sums::default();
        for id in 0..map.next {
            if let Some(e) = entry(id).filter(|e| e.state.load(Ordering::Acquire) & FREE == 0) {
                for a in &e.sent {
                    a.store(0, Ordering::Relaxed);
                }
                mark_dirty(id);
            }
        }
    }
    let mut push = |c: TagCount, last: bool| {
        let v = if last { &mut *retired } else { &mut *changed };
        if v.try_reserve(1).is_ok() {
            v.push(c);
        }
    };
    let seen = map.retire_idle(Some(&mut push), full);
    let r = RETIRED.lock().unwrap_or_else(PoisonError::into_inner);
    let totals = WriterTotals {
        alloc_bytes: r.alloc_bytes.wrapping_add(map.sums.alloc_bytes),
        tracked_free_bytes: r.tracked_free_bytes.wrapping_add(map.sums.tracked_free),
        tracked_live: map.sums.tracked_live,
    };
    (seen, totals)
}

/// Makes ids retired by [`writer_sample`] reusable (their `TagRetire`
/// records are written, or the log is gone).
pub(crate) fn release_retired(ids: impl IntoIterator<Item = u32>) {
    lock().release(ids);
}

/// Whether `intern` ran out of ids and wants the writer to retire now.
pub(crate) fn retire_wanted() -> bool {
    RETIRE_WANTED.load(Ordering::Relaxed)
}

/// What a snapshot reads of one tag in use.
pub(crate) struct Read {
    pub(crate) tag: Tag,
    pub(crate) entry: &'static TagEntry,
    pub(crate) counts: thread::TagCounts,
}

/// Calls `f` for every tag in use, in id order, then returns the retired
/// totals and the overflowed tags (copied into `overflowed`), all under the
/// INTERN lock, so no counter page is freed meanwhile. `f` must not
/// allocate through the global allocator (see "fork" in `start.rs`).
pub(crate) fn read_all(mut f: impl FnMut(Read), overflowed: &mut IVec<Tag, Internal>) -> thread::TagCounts {
    let map = lock();
    for id in 0..map.next {
        let Some(e) = entry(id) else { continue };
        if e.state.load(Ordering::Acquire) & FREE != 0 {
            continue;
        }
        f(Read {
            // SAFETY: under the INTERN lock, for an id in use.
            tag: if id == 0 { Tag::UNTAGGED } else { unsafe { e.key() } },
            entry: e,
            counts: thread::read_counts(id),
        });
    }
    if overflowed.try_reserve(map.overflowed.len()).is_ok() {
        overflowed.extend(map.overflowed.iter().copied());
    }
    let r = RETIRED.lock().unwrap_or_else(PoisonError::into_inner);
    thread::TagCounts {
        alloc_bytes: r.alloc_bytes,
        alloc_count: r.alloc_count,
        tracked_alloc_bytes: r.tracked_alloc_bytes,
        tracked_alloc_count: r.tracked_alloc_count,
        tracked_free_bytes: r.tracked_free_bytes,
        tracked_free_count: r.tracked_free_count,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_tracked_blocks_keep_a_tag_from_being_empty_zero_bytes_too() {
        // SAFETY: all zeroes is the state entries start in (chunks are
        // allocated zeroed, see `entry`): atomics at 0, the key uninit.
        let e: TagEntry = unsafe { std::mem::zeroed() };
        assert!(e.is_empty());
        e.tracked_add(0);
        assert!(!e.is_empty(), "a 0-byte tracked block is alive");
        assert_eq!(e.tracked_live.load(Ordering::Relaxed), 0);
        e.tracked_add(100);
        e.tracked_add(28);
        e.tracked_sub(0);
        assert!(!e.is_empty());
        e.tracked_sub(100);
        assert!(!e.is_empty());
        assert_eq!(e.tracked_live.load(Ordering::Relaxed), 28);
        assert_eq!(e.tracked_peak.load(Ordering::Relaxed), 128);
        assert_eq!(e.peak.load(Ordering::Relaxed), 128);
        e.tracked_sub(28);
        assert!(e.is_empty());
        assert_eq!(e.tracked_peak.load(Ordering::Relaxed), 128);
    }

    #[test]
    fn interning_is_stable_and_distinguishes_dimensions() {
        let a = Tag::new(Some(1), Some("s"), Some(2));
        let b = Tag::new(Some(1), Some("s"), Some(3));
        let ia = intern(&a);
        assert_eq!(ia, intern(&a));
        assert_ne!(ia, intern(&b));
        assert_eq!(tag_of(ia), a);
        // Same name, different pointer: same tag.
        let owned = String::from("s");
        let c = Tag::new(Some(1), Some(static_name(&owned)), Some(2));
        assert_eq!(intern(&c), ia);
    }

    #[test]
    fn display_lists_set_dimensions() {
        assert_eq!(Tag::UNTAGGED.to_string(), "untagged");
        assert_eq!(
            Tag::new(Some(7), Some("gpu_prove"), None).to_string(),
            "job=7 stage=gpu_prove"
        );
        assert_eq!(Tag::new(None, None, Some(3)).to_string(), "partition=3");
    }
}
