//! Point-in-time views of the counters, for in-process queries and tests.

use std::sync::atomic::Ordering;

use serde::{Deserialize, Serialize};

use crate::health::{self, Health};
use crate::held::{self, ExternalStats};
use crate::internal::OVERHEAD_BYTES;
use allocator_api2::vec::Vec as IVec;

use crate::internal::Internal;
use crate::tag::{self, Tag, TagEntry};
use crate::thread::TagCounts;
use crate::{clock, config, table, thread};

/// Counters of every tag at one moment, plus totals and heaptag's health.
///
/// Taken without stopping the program: each counter is read atomically, but
/// counters updated concurrently may be a moment apart. Totals are exact sums;
/// per-tag small-block live bytes are estimates (see [`SmallStats`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Whether tracking is on (`false`: `HEAPTAG=off`, all counters zero).
    pub enabled: bool,
    /// Blocks of at least this many bytes are tracked exactly.
    pub threshold: u64,
    /// Mean bytes between sampled small blocks (0: no sampling).
    pub sample_rate: u64,
    /// Nanoseconds since heaptag initialised.
    pub time_ns: u64,
    /// One entry per tag in use (entered or used by a realloc, and not
    /// retired since), in id order. A retired tag (no guard, nothing alive)
    /// is no longer listed; its figures stay in `totals`.
    pub tags: Vec<TagStats>,
    /// Tags that got no id because every id was in use (charged to the
    /// untagged tag meanwhile); see [`Health::tag_overflow`].
    #[serde(default)]
    pub overflowed_tags: Vec<Tag>,
    /// Process-wide sums (exact).
    pub totals: Totals,
    /// Bytes heaptag holds for its own bookkeeping (charged to no tag).
    pub overhead_bytes: u64,
    /// Memory recorded with [`external_alloc`](crate::external_alloc), by tag and kind.
    pub external: Vec<ExternalStats>,
    /// Counts of what went wrong or was degraded, and sizes of heaptag's state.
    pub health: Health,
}

/// The counters of one tag.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TagStats {
    /// The tag.
    pub tag: Tag,
    /// Live bytes: tracked (exact) plus small (estimated unless `small.exact`).
    pub live_bytes: u64,
    /// Highest `live_bytes` seen, updated at every tracked or sampled event.
    pub peak_live_bytes: u64,
    /// Bytes allocated under this tag, all sizes (exact). A realloc counts as
    /// a free of the old size and an allocation of the new one.
    pub alloc_bytes: u64,
    /// Blocks allocated under this tag (exact).
    pub alloc_count: u64,
    /// Bytes of this tag's blocks freed so far, whichever thread freed them:
    /// `alloc_bytes - live_bytes` (exact when `small.exact`).
    pub free_bytes: u64,
    /// Blocks of this tag freed so far (exact when `small.exact`).
    pub free_count: u64,
    /// Blocks of at least the threshold: every figure exact.
    pub tracked: TrackedStats,
    /// Blocks below the threshold.
    pub small: SmallStats,
    /// External (annotated) bytes held under this tag now.
    pub external_bytes: u64,
    /// Of the live figures above, what C and C++ code allocated through
    /// `malloc` and its family (the `native` feature; zeros without it).
    pub native: NativeStats,
}

/// The part of a tag's live memory that C/C++ allocated (`native` feature):
/// included in [`TagStats::tracked`] and [`TagStats::small`], not beside them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NativeStats {
    /// Bytes of tracked native blocks alive now (exact, requested sizes).
    pub tracked_live_bytes: u64,
    /// Tracked native blocks alive now.
    pub tracked_live_count: u64,
    /// Estimated bytes of small native blocks alive now (sampled, by
    /// jemalloc's usable size, the only size a `free` knows).
    pub small_live_bytes: u64,
}

/// Exact figures for blocks of at least the threshold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrackedStats {
    /// Bytes alive now.
    pub live_bytes: u64,
    /// Blocks alive now.
    pub live_count: u64,
    /// Highest `live_bytes` so far.
    pub peak_live_bytes: u64,
    /// Bytes allocated so far.
    pub alloc_bytes: u64,
    /// Blocks allocated so far.
    pub alloc_count: u64,
    /// Bytes freed so far (charged here whichever thread freed them).
    pub free_bytes: u64,
    /// Blocks freed so far.
    pub free_count: u64,
}

/// Figures for blocks below the threshold.
///
/// Allocated bytes and counts are exact. A small free carries no tag, so the
/// live bytes per tag come from the sampled blocks (Horvitz-Thompson
/// estimator, unbiased) with their standard error; the process-wide small live
/// total in [`Totals`] is exact. The estimate is not clamped (clamping to
/// `alloc_bytes` would bias it low), so a tag with few small bytes can show an
/// estimate above what it allocated; read it with its standard error.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SmallStats {
    /// Bytes allocated so far (exact).
    pub alloc_bytes: u64,
    /// Blocks allocated so far (exact).
    pub alloc_count: u64,
    /// Estimated live bytes (exact, zero, when `exact`).
    pub live_bytes: u64,
    /// Standard error of `live_bytes` (0 when `exact`).
    pub live_bytes_stderr: f64,
    /// Estimated live blocks.
    pub live_count: u64,
    /// Sampled blocks alive now (what the estimate rests on).
    pub sampled_live: u64,
    /// True when the figures are exact: no small block was ever allocated
    /// under this tag (e.g. threshold 0, where every block is tracked).
    pub exact: bool,
}

/// Process-wide sums, exact.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    /// Requested bytes alive now, all tags (not jemalloc's rounded sizes).
    pub live_bytes: u64,
    /// Blocks alive now.
    pub live_count: u64,
    /// Bytes allocated so far.
    pub alloc_bytes: u64,
    /// Blocks allocated so far.
    pub alloc_count: u64,
    /// Bytes freed so far.
    pub free_bytes: u64,
    /// Blocks freed so far.
    pub free_count: u64,
    /// Tracked bytes alive now.
    pub tracked_live_bytes: u64,
    /// Small bytes alive now (exact in total, estimated per tag).
    pub small_live_bytes: u64,
    /// External (annotated) bytes held now.
    pub external_bytes: u64,
}

impl Snapshot {
    /// The counters of `tag`, if it ever allocated.
    pub fn tag(&self, tag: &Tag) -> Option<&TagStats> {
        self.tags.iter().find(|s| s.tag == *tag)
    }

    /// Tags matching `pred`, e.g. every partition of one stage.
    pub fn tags_where<'a>(&'a self, pred: impl Fn(&Tag) -> bool + 'a) -> impl Iterator<Item = &'a TagStats> + 'a {
        self.tags.iter().filter(move |s| pred(&s.tag))
    }
}

/// Takes a snapshot of every tag's counters.
pub fn snapshot() -> Snapshot {
    let settings = config::settings();
    let mut snap = Snapshot {
        enabled: settings.enabled,
        threshold: settings.threshold as u64,
        sample_rate: settings.sample_rate,
        time_ns: clock::now_ns(),
        ..Snapshot::default()
    };
    // Read under the tag table's lock into internal memory (its holders
    // never call the global allocator), then turned into the snapshot.
    let mut read: IVec<TagStats, Internal> = IVec::new_in(Internal);
    let mut overflowed: IVec<Tag, Internal> = IVec::new_in(Internal);
    let mut short = false;
    let retired = tag::read_all(
        |r| {
            if read.try_reserve(1).is_ok() {
                read.push(tag_stats(r.tag, r.entry, &r.counts));
            } else {
                short = true;
            }
        },
        &mut overflowed,
    );
    if short {
        crate::health::SNAPSHOT_SHORT.fetch_add(1, Ordering::Relaxed);
    }
    let mut totals = Totals {
        alloc_bytes: retired.alloc_bytes,
        alloc_count: retired.alloc_count,
        free_bytes: retired.tracked_free_bytes,
        free_count: retired.tracked_free_count,
        ..Totals::default()
    };
    snap.tags.reserve(read.len());
    snap.overflowed_tags.extend(overflowed.iter().copied());
    for stats in read.drain(..) {
        totals.alloc_bytes += stats.alloc_bytes;
        totals.alloc_count += stats.alloc_count;
        totals.tracked_live_bytes += stats.tracked.live_bytes;
        totals.free_bytes += stats.tracked.free_bytes;
        totals.free_count += stats.tracked.free_count;
        totals.external_bytes += stats.external_bytes;
        snap.tags.push(stats);
    }
    for s in thread::all_slots() {
        totals.free_bytes += s.small_free_bytes.load(Ordering::Relaxed);
        totals.free_count += s.small_free_count.load(Ordering::Relaxed);
    }
    totals.live_bytes = totals.alloc_bytes.saturating_sub(totals.free_bytes);
    totals.live_count = totals.alloc_count.saturating_sub(totals.free_count);
    totals.small_live_bytes = totals.live_bytes.saturating_sub(totals.tracked_live_bytes);
    snap.totals = totals;
    snap.external = held::list();
    snap.overhead_bytes = OVERHEAD_BYTES.load(Ordering::Relaxed);
    snap.health = health::read(health::Sizes {
        thread_slots_in_use: thread::slots_in_use() as u64,
        tags: u64::from(tag::in_use()),
        table_entries: table::len() as u64,
    });
    snap
}

fn tag_stats(tag: Tag, e: &TagEntry, c: &TagCounts) -> TagStats {
    let ld = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let (alloc_bytes, alloc_count) = (c.alloc_bytes, c.alloc_count);
    let tracked = TrackedStats {
        live_bytes: ld(&e.tracked_live),
        live_count: c.tracked_alloc_count.saturating_sub(c.tracked_free_count),
        peak_live_bytes: ld(&e.tracked_peak),
        alloc_bytes: c.tracked_alloc_bytes,
        alloc_count: c.tracked_alloc_count,
        free_bytes: c.tracked_free_bytes,
        free_count: c.tracked_free_count,
    };
    let small_alloc_bytes = alloc_bytes.saturating_sub(tracked.alloc_bytes);
    let small_alloc_count = alloc_count.saturating_sub(tracked.alloc_count);
    let exact = small_alloc_count == 0;
    let small = SmallStats {
        alloc_bytes: small_alloc_bytes,
        alloc_count: small_alloc_count,
        live_bytes: ld(&e.sampled_weight),
        live_bytes_stderr: (ld(&e.sampled_var) as f64).sqrt(),
        live_count: ld(&e.sampled_count_fx) / 1024,
        sampled_live: ld(&e.sampled_live),
        exact,
    };
    let live_bytes = tracked.live_bytes + small.live_bytes;
    let live_count = tracked.live_count + small.live_count;
    TagStats {
        tag,
        live_bytes,
        peak_live_bytes: ld(&e.peak).max(live_bytes),
        alloc_bytes,
        alloc_count,
        free_bytes: alloc_bytes.saturating_sub(live_bytes),
        free_count: alloc_count.saturating_sub(live_count),
        tracked,
        small,
        external_bytes: ld(&e.external_bytes),
        native: NativeStats {
            tracked_live_bytes: ld(&e.native_live),
            tracked_live_count: ld(&e.native_blocks),
            small_live_bytes: ld(&e.native_small),
        },
    }
}

/// One tracked (>= threshold) block alive now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Block {
    /// Address of the block.
    pub addr: usize,
    /// Requested size in bytes.
    pub size: u64,
    /// The tag it is charged to.
    pub tag: Tag,
    /// Nanoseconds since start when it was allocated: to the nanosecond
    /// while the event log runs; without it, from the kernel's coarse clock
    /// (the last timer tick before the allocation, a few ms early at most),
    /// which costs a tracked allocation a sixth of a precise read.
    pub time_ns: u64,
    /// Number of the allocating thread (1 = first thread that allocated).
    pub thread: u32,
}

/// Every tracked block alive now, largest first: what holds the memory.
///
/// Walks the side table shard by shard; blocks allocated or freed meanwhile
/// may or may not appear.
pub fn tracked_blocks() -> Vec<Block> {
    let mut out = Vec::new();
    table::for_each(|addr, e| {
        if e.tracked {
            out.push(Block {
                addr,
                size: e.size,
                tag: tag::tag_of(e.tag),
                time_ns: e.time_ns,
                thread: e.thread,
            });
        }
    });
    out.sort_by(|a, b| b.size.cmp(&a.size).then(a.addr.cmp(&b.addr)));
    out
}
