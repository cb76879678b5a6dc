//! Tags: what an allocation is charged to, and the guards that set them.
//!
//! A [`Tag`] is interned once to a small integer id; the allocator's hot path
//! reads only that id from a thread-local. Interning takes a mutex and may grow
//! a map (from heaptag's internal heap), so it happens when a guard is created,
//! never inside `alloc`/`dealloc`.

use std::cell::UnsafeCell;
use std::fmt;
use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use allocator_api2::vec::Vec as IVec;

use hashbrown::{HashMap, HashSet};
use serde::{Deserialize, Deserializer, Serialize};

use crate::health::TAG_OVERFLOW;
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

/// Maximum number of distinct tags in one process (as many as a thread's
/// counter slot has counters for); later tags are charged to the untagged tag
/// and counted in [`Health::tag_overflow`](crate::Health).
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
        TagGuard::set(intern(self))
    }

    /// Runs `f` with this tag active on the calling thread, then restores the
    /// previous tag (also when `f` unwinds).
    pub fn scope<R>(&self, f: impl FnOnce() -> R) -> R {
        let _guard = self.enter();
        f()
    }

    /// The interned id of this tag: entering a [`TagId`] costs a
    /// thread-local swap and no lookup (for integrations that enter the same
    /// tag many times, such as a tracing layer).
    pub fn id(&self) -> TagId {
        TagId(intern(self))
    }
}

/// An interned [`Tag`]. Cheap to copy, send and enter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TagId(u32);

impl TagId {
    /// The untagged tag's id.
    pub const UNTAGGED: TagId = TagId(0);

    /// The calling thread's current tag id.
    pub fn current() -> TagId {
        TagId(thread::current_tag())
    }

    /// Makes this the calling thread's tag until the guard drops.
    pub fn enter(self) -> TagGuard {
        TagGuard::set(self.0)
    }

    /// Runs `f` under this tag, then restores the previous one.
    pub fn scope<R>(self, f: impl FnOnce() -> R) -> R {
        let _guard = self.enter();
        f()
    }

    /// The tag.
    pub fn tag(self) -> Tag {
        tag_of(self.0)
    }

    /// The id as a number, to store in an atomic word.
    pub fn to_bits(self) -> u32 {
        self.0
    }

    /// The id stored by [`to_bits`](TagId::to_bits); `None` for a number
    /// that is no tag's id.
    pub fn from_bits(bits: u32) -> Option<TagId> {
        (bits < count()).then_some(TagId(bits))
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
///
/// ```compile_fail
/// let guard = heaptag_alloc::stage("x");
/// std::thread::spawn(move || drop(guard)); // error: TagGuard is not Send
/// ```
#[must_use = "the tag is active only while the guard lives"]
pub struct TagGuard {
    prev: u32,
    _not_send: PhantomData<*const ()>,
}

impl TagGuard {
    fn set(id: u32) -> TagGuard {
        TagGuard {
            prev: thread::swap_tag(id),
            _not_send: PhantomData,
        }
    }
}

impl Drop for TagGuard {
    fn drop(&mut self) {
        thread::swap_tag(self.prev);
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
    tag_of(thread::current_tag())
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
// The tag table: id -> (key, shared per-tag statistics).

/// Statistics of one tag that need one process-wide value: live bytes and
/// their peaks. They change only on tracked or sampled events; counts of
/// allocations and frees live per thread (`thread.rs`), so concurrent
/// tracked events of one tag share only `tracked_live`'s cache line.
///
/// All fields are updated with Relaxed atomics: each is an independent
/// statistic; no other memory is published through them.
#[repr(C, align(128))]
pub(crate) struct TagEntry {
    key: UnsafeCell<MaybeUninit<Tag>>,
    /// Live bytes of tracked blocks (exact).
    pub(crate) tracked_live: AtomicU64,
    /// Highest `tracked_live` (exact: maxima of fetch_add results).
    pub(crate) tracked_peak: AtomicU64,
    /// Keeps the sampled figures (written on sampled events) off the
    /// tracked figures' cache line.
    _pad: [u64; 4],
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
}

// SAFETY: `key` is written once, by the interning thread under the INTERN
// lock, before the id is published (Release store of TAG_COUNT); it is only
// read for ids below an Acquire load of TAG_COUNT and never written again.
// Every other field is atomic.
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
    /// Adds a tracked block's bytes to the live figures and peaks.
    pub(crate) fn tracked_add(&self, bytes: u64) {
        let live = self.tracked_live.fetch_add(bytes, Ordering::Relaxed) + bytes;
        raise(&self.tracked_peak, live);
        raise(&self.peak, live + self.sampled_weight.load(Ordering::Relaxed));
    }

    /// Adds a sampled block's estimator weights and raises the peak.
    pub(crate) fn sampled_add(&self, w: &crate::sampling::Weight) {
        let est = self.sampled_weight.fetch_add(w.bytes, Ordering::Relaxed) + w.bytes;
        self.sampled_var.fetch_add(w.var, Ordering::Relaxed);
        self.sampled_count_fx.fetch_add(w.count_fx, Ordering::Relaxed);
        self.sampled_live.fetch_add(1, Ordering::Relaxed);
        raise(&self.peak, est + self.tracked_live.load(Ordering::Relaxed));
    }

    /// Removes a sampled block's estimator weights.
    pub(crate) fn sampled_sub(&self, w: &crate::sampling::Weight) {
        self.sampled_weight.fetch_sub(w.bytes, Ordering::Relaxed);
        self.sampled_var.fetch_sub(w.var, Ordering::Relaxed);
        self.sampled_count_fx.fetch_sub(w.count_fx, Ordering::Relaxed);
        self.sampled_live.fetch_sub(1, Ordering::Relaxed);
    }
}

type TagChunk = [TagEntry; CHUNK];

static TAG_DIR: [AtomicPtr<TagChunk>; DIR] = [const { AtomicPtr::new(std::ptr::null_mut()) }; DIR];
/// Number of published tag ids. Release on publish, Acquire on read: an id
/// below it has its key written and its chunk pointer visible.
static TAG_COUNT: AtomicU32 = AtomicU32::new(0);

static INTERN: Mutex<HashMap<Tag, u32, MixBuild, Internal>> =
    Mutex::new(HashMap::with_hasher_in(MixBuild::new(), Internal));

static FORK_INTERN: ForkHeld<MutexGuard<'static, HashMap<Tag, u32, MixBuild, Internal>>> = ForkHeld::new();
static FORK_NAMES: ForkHeld<MutexGuard<'static, HashSet<&'static str, MixBuild, Internal>>> = ForkHeld::new();

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
    unsafe { FORK_INTERN.hold(INTERN.lock().unwrap_or_else(PoisonError::into_inner)) };
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

/// The entry of a published id, or `None` when the id is unknown.
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

/// Number of ids handed out so far (ids are `0..count`).
pub(crate) fn count() -> u32 {
    TAG_COUNT.load(Ordering::Acquire)
}

/// The tag of a published id; unknown ids read as untagged.
pub(crate) fn tag_of(id: u32) -> Tag {
    if id == 0 || id >= count() {
        return Tag::UNTAGGED;
    }
    match entry(id) {
        // SAFETY: `id < TAG_COUNT` (Acquire), so its key was written before
        // publication and is never written again (see `unsafe impl Sync`).
        Some(e) => unsafe { (*e.key.get()).assume_init() },
        None => Tag::UNTAGGED,
    }
}

/// Makes sure id 0 (untagged) exists. Called once, by start-up (`start.rs`).
pub(crate) fn init() {
    intern(&Tag::UNTAGGED);
}

/// Returns the id of `tag`, creating it on first use.
///
/// Never fails: when no id can be created the tag is charged as untagged and
/// the event counted.
pub(crate) fn intern(tag: &Tag) -> u32 {
    // Never reached from the allocator hot path; the map and chunks come from
    // the internal heap, so holding this lock cannot recurse into it.
    let mut map = INTERN.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(&id) = map.get(tag) {
        return id;
    }
    let id = TAG_COUNT.load(Ordering::Relaxed);
    if id == 0 && !tag.is_untagged() {
        // Id 0 is the untagged tag, whoever interns first.
        drop(map);
        intern(&Tag::UNTAGGED);
        return intern(tag);
    }
    let Some(e) = create_entry(id) else {
        TAG_OVERFLOW.fetch_add(1, Ordering::Relaxed);
        return 0;
    };
    if map.try_reserve(1).is_err() {
        TAG_OVERFLOW.fetch_add(1, Ordering::Relaxed);
        return 0;
    }
    // SAFETY: `id` is not yet published (it equals TAG_COUNT and we hold the
    // INTERN lock, the only writer), so no reader can access this key.
    unsafe { (*e.key.get()).write(*tag) };
    map.insert(*tag, id);
    // Release: publishes the key written above.
    TAG_COUNT.store(id + 1, Ordering::Release);
    id
}

/// The entry for a not-yet-published id, allocating its chunk if needed.
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

#[cfg(test)]
mod tests {
    use super::*;

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
