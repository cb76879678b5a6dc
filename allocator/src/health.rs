//! What heaptag had to degrade: every counter [`Health`] reports, in one
//! place.
//!
//! A leaf module: it depends on nothing else in the crate, so any module
//! (the hot path, start-up, the writer) can count here without an import
//! cycle, and a reader finds every way heaptag degrades in one list.
//!
//! Every counter is an independent statistic: it is updated with Relaxed
//! RMWs (an increment is never lost, and no other memory is published
//! through it) and read Relaxed by [`read`], so a snapshot may see one
//! counter a moment before another. They are incremented only where
//! something went wrong or a thread starts, never on the common alloc/free
//! path, so they need no padding.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// Allocations the inner allocator refused (null returns), passed through.
// Relaxed: an independent statistic (see the module docs), as for every
// counter below.
pub(crate) static ALLOC_FAILURES: AtomicU64 = AtomicU64::new(0);
/// Frees of blocks of tracked size that heaptag has no record of (allocated
/// while it initialised, or when the table could not grow). Counted, never fatal.
// Relaxed: an independent statistic.
pub(crate) static UNTRACKED_FREES: AtomicU64 = AtomicU64::new(0);
/// Side-table inserts that failed because the internal heap could not grow a shard.
// Relaxed: an independent statistic.
pub(crate) static TABLE_INSERT_FAILURES: AtomicU64 = AtomicU64::new(0);
/// Side-table inserts that found a stale entry at the same address (a free
/// heaptag never saw, e.g. one made while tracking was initialising).
// Relaxed: an independent statistic.
pub(crate) static STALE_ENTRIES: AtomicU64 = AtomicU64::new(0);
/// Tag values that could not get an id (every id in use, or out of memory),
/// counted once per value; charged as untagged.
// Relaxed: an independent statistic.
pub(crate) static TAG_OVERFLOW: AtomicU64 = AtomicU64::new(0);
/// Tags retired so far (their ids were reused or can be).
// Relaxed: an independent statistic.
pub(crate) static TAGS_RETIRED: AtomicU64 = AtomicU64::new(0);
/// Tag guards dropped out of order (their tag then never retires).
// Relaxed: an independent statistic.
pub(crate) static GUARDS_OUT_OF_ORDER: AtomicU64 = AtomicU64::new(0);
/// Snapshots that left tags out (no internal memory to read them into).
// Relaxed: an independent statistic.
pub(crate) static SNAPSHOT_SHORT: AtomicU64 = AtomicU64::new(0);
/// Periodic samples the log writer took.
// Relaxed: an independent statistic.
pub(crate) static SAMPLES: AtomicU64 = AtomicU64::new(0);
/// Tags those samples looked at, summed: the writer's work per sample is
/// this over `SAMPLES` (tags that changed, not every tag ever seen).
// Relaxed: an independent statistic.
pub(crate) static SAMPLE_TAGS_VISITED: AtomicU64 = AtomicU64::new(0);
/// Nanoseconds the writer spent in samples, summed.
// Relaxed: an independent statistic.
pub(crate) static SAMPLE_NS: AtomicU64 = AtomicU64::new(0);
/// `HEAPTAG*` environment values that did not parse (ignored).
// Relaxed: an independent statistic.
pub(crate) static CONFIG_ERRORS: AtomicU64 = AtomicU64::new(0);
/// Events the log dropped because its ring was full.
// Relaxed: an independent statistic.
pub(crate) static LOG_RING_FULL: AtomicU64 = AtomicU64::new(0);
/// Events the log lost because the file could not be written.
// Relaxed: an independent statistic.
pub(crate) static LOG_EVENTS_LOST: AtomicU64 = AtomicU64::new(0);
/// Side records (marks, external memory changes) the log dropped because
/// its bounded side queue was full.
// Relaxed: an independent statistic.
pub(crate) static SIDE_DROPPED: AtomicU64 = AtomicU64::new(0);
/// `write(2)` calls to the log file that failed.
// Relaxed: an independent statistic.
pub(crate) static LOG_WRITE_ERRORS: AtomicU64 = AtomicU64::new(0);
/// Call stacks that could not be stored (internal heap exhausted).
// Relaxed: an independent statistic.
pub(crate) static STACKS_NOT_STORED: AtomicU64 = AtomicU64::new(0);
/// Call stacks stored cut to their innermost frames (the stack table full).
// Relaxed: an independent statistic.
pub(crate) static STACKS_TRUNCATED: AtomicU64 = AtomicU64::new(0);
/// Thread numbers handed out: also the number of threads that allocated.
// Relaxed: the RMW alone makes each number unique; nothing is published
// through it.
pub(crate) static THREADS_SEEN: AtomicU32 = AtomicU32::new(0);

/// Events the log dropped so far: its ring or its side queue was full, or
/// they were lost to write failures (or not written by `finish()`'s
/// deadline).
pub(crate) fn dropped_events() -> u64 {
    LOG_RING_FULL.load(Ordering::Relaxed)
        + LOG_EVENTS_LOST.load(Ordering::Relaxed)
        + SIDE_DROPPED.load(Ordering::Relaxed)
}

/// What heaptag had to degrade, and the size of its own state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
// Figures added later read as 0 from JSON written before them.
#[serde(default)]
pub struct Health {
    /// Allocations the inner allocator refused (passed through as null).
    pub alloc_failures: u64,
    /// Frees of tracked-size blocks heaptag had no record of.
    pub untracked_frees: u64,
    /// Blocks that could not be recorded (internal heap exhausted).
    pub table_insert_failures: u64,
    /// Records found stale at insert (a free heaptag never saw).
    pub stale_entries: u64,
    /// Tag values that got no id (more than `MAX_TAGS` tags in use at
    /// once), counted once per value (up to 4,096 values; past that, once
    /// per guard); charged as untagged. The values are in
    /// `Snapshot::overflowed_tags`.
    pub tag_overflow: u64,
    /// Tags retired so far: idle tags whose ids were given back for reuse.
    pub tags_retired: u64,
    /// Tag guards dropped out of order; each keeps its tag from retiring.
    pub guards_out_of_order: u64,
    /// Snapshots that left tags out (heaptag's internal heap was exhausted).
    pub snapshots_short: u64,
    /// Periodic samples the log writer took (0 without a log).
    pub samples: u64,
    /// Tags those samples looked at, summed (the writer's work: tags that
    /// may have changed, not every tag).
    pub sample_tags_visited: u64,
    /// Nanoseconds the writer spent taking those samples, summed.
    pub sample_ns: u64,
    /// `HEAPTAG*` environment values that did not parse (ignored).
    pub config_errors: u64,
    /// Events the log dropped: its buffer was full, the file could not be
    /// written (see `log_write_errors`), or `finish()` gave up at its
    /// deadline; includes `side_dropped`.
    pub dropped_events: u64,
    /// Of `dropped_events`, marks and external-memory changes dropped
    /// because the log's bounded side queue was full.
    pub side_dropped: u64,
    /// Writes to the log file that failed (disk full, I/O error).
    pub log_write_errors: u64,
    /// Call stacks that could not be stored (internal heap exhausted, or
    /// the stack table at its hard bound); their events carry no stack.
    pub stacks_not_stored: u64,
    /// New call stacks stored cut to their innermost
    /// 8 frames (the allocating call site and its callers) because the
    /// stack table reached its bound (16 MiB of frames): a long run's
    /// heaptag memory stays bounded while new stacks keep appearing (rayon's
    /// work stealing makes new ones for as long as the run goes).
    pub stacks_truncated: u64,
    /// Threads that allocated so far.
    pub threads_seen: u64,
    /// Per-thread counter slots owned by live threads now.
    pub thread_slots_in_use: u64,
    /// Tags in use now (interned and not retired).
    pub tags: u64,
    /// Tracked and sampled blocks recorded in the side table now.
    pub table_entries: u64,
}

/// The sizes of heaptag's state that [`Health`] reports: not counters, but
/// measured by the modules that own the state (thread slots, tag table, side
/// table) when a snapshot is taken.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Sizes {
    /// Per-thread counter slots owned by live threads now.
    pub(crate) thread_slots_in_use: u64,
    /// Tags in use now.
    pub(crate) tags: u64,
    /// Entries of the side table now.
    pub(crate) table_entries: u64,
}

/// Every counter now, with the state `sizes` measured by the caller.
pub(crate) fn read(sizes: Sizes) -> Health {
    let ld = |c: &AtomicU64| c.load(Ordering::Relaxed);
    Health {
        alloc_failures: ld(&ALLOC_FAILURES),
        untracked_frees: ld(&UNTRACKED_FREES),
        table_insert_failures: ld(&TABLE_INSERT_FAILURES),
        stale_entries: ld(&STALE_ENTRIES),
        tag_overflow: ld(&TAG_OVERFLOW),
        tags_retired: ld(&TAGS_RETIRED),
        guards_out_of_order: ld(&GUARDS_OUT_OF_ORDER),
        snapshots_short: ld(&SNAPSHOT_SHORT),
        samples: ld(&SAMPLES),
        sample_tags_visited: ld(&SAMPLE_TAGS_VISITED),
        sample_ns: ld(&SAMPLE_NS),
        config_errors: ld(&CONFIG_ERRORS),
        dropped_events: dropped_events(),
        side_dropped: ld(&SIDE_DROPPED),
        log_write_errors: ld(&LOG_WRITE_ERRORS),
        stacks_not_stored: ld(&STACKS_NOT_STORED),
        stacks_truncated: ld(&STACKS_TRUNCATED),
        threads_seen: u64::from(THREADS_SEEN.load(Ordering::Relaxed)),
        thread_slots_in_use: sizes.thread_slots_in_use,
        tags: sizes.tags,
        table_entries: sizes.table_entries,
    }
}
