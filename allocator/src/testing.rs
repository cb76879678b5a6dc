//! Memory assertions inside `cargo test`, without a log file.
//!
//! [`measure`] runs a closure under a job id of its own, so its tags are its
//! own even when the test harness runs other tests on other threads at the
//! same time, and reports what the closure's tags did:
//!
//! ```no_run
//! use heaptag_alloc::testing;
//!
//! let (_, m) = testing::measure(|probe| {
//!     let _s = heaptag_alloc::stage("pce");
//!     let pce = vec![7u8; 4 << 20];
//!     probe.checkpoint(); // fingerprints every live block of this measurement
//!     drop(pce);
//! });
//! m.assert_max_copies("pce", 1);
//! m.assert_peak_at_most("pce", None, 5 << 20);
//! m.assert_nothing_alive("pce");
//! ```
//!
//! Work the closure sends to other threads must carry its tag there
//! (`heaptag::current()` + `Tag::scope`), as everywhere with heaptag. Copies
//! are counted among blocks of at least the tracking threshold (64 KiB by
//! default), at each [`Probe::checkpoint`] and once more right after the
//! closure returns (its return value still alive). Zero- and constant-filled
//! blocks are never counted as copies.

// Not allocator code: this runs in the test, around the allocator, so the
// crate's ban on collections that allocate through the global allocator
// (meant for the hot path) does not apply.
#![allow(clippy::disallowed_types)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use heaptag_format::Fill;

use crate::snapshot::{snapshot, TagStats};
use crate::table;
use crate::tag::{self, Tag};

/// Job ids handed to measurements: high, so they do not meet a program's own.
static NEXT_JOB: AtomicU64 = AtomicU64::new(0xfff0_0000_0000_0000);

/// One live block seen at a checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seen {
    /// Its tag.
    pub tag: Tag,
    /// Its size.
    pub size: u64,
    /// Content hash (sampled fingerprint).
    pub hash: u64,
    /// How it is filled.
    pub fill: Fill,
}

/// Handed to the measured closure.
#[derive(Debug)]
pub struct Probe {
    job: u64,
    checkpoints: std::cell::RefCell<Vec<Vec<Seen>>>,
}

impl Probe {
    /// The job id of this measurement (every tag of the closure carries it).
    pub fn job(&self) -> u64 {
        self.job
    }

    /// A tag of this measurement.
    pub fn tag(&self, stage: &'static str, partition: Option<u32>) -> Tag {
        Tag::new(Some(self.job), Some(stage), partition)
    }

    /// Fingerprints every live tracked block of this measurement now.
    pub fn checkpoint(&self) {
        let seen = live_blocks_of_job(self.job);
        self.checkpoints.borrow_mut().push(seen);
    }
}

/// What a measured closure did.
#[derive(Clone, Debug)]
pub struct Measured {
    /// The measurement's job id.
    pub job: u64,
    /// Counters of each tag of the measurement, after the closure.
    pub tags: Vec<TagStats>,
    /// Blocks seen at each checkpoint (the last one: right after the closure).
    pub checkpoints: Vec<Vec<Seen>>,
}

/// Runs `f` under a fresh job id and reports what its tags did.
pub fn measure<R>(f: impl FnOnce(&Probe) -> R) -> (R, Measured) {
    let job = NEXT_JOB.fetch_add(1, Ordering::Relaxed);
    let probe = Probe {
        job,
        checkpoints: std::cell::RefCell::new(Vec::new()),
    };
    let r = {
        let _g = crate::job(job);
        f(&probe)
    };
    probe.checkpoint();
    let tags = snapshot().tags.into_iter().filter(|t| t.tag.job == Some(job)).collect();
    (
        r,
        Measured {
            job,
            tags,
            checkpoints: probe.checkpoints.into_inner(),
        },
    )
}

fn live_blocks_of_job(job: u64) -> Vec<Seen> {
    // Fingerprint under each shard's lock (the block cannot be freed while
    // we read it), collecting into internal memory: an allocation through
    // the global allocator here could need the held shard. Tags are named
    // only after the walk: `tag_of` takes the tag table's lock, which a
    // `fork()` takes before the shards (start.rs), so taking it under a
    // shard could deadlock against a forking thread.
    let mut found: allocator_api2::vec::Vec<(u32, u64, u64, Fill), crate::internal::Internal> =
        allocator_api2::vec::Vec::new_in(crate::internal::Internal);
    table::for_each_locked(|addr, e| {
        if !e.tracked || found.try_reserve(1).is_err() {
            return;
        }
        // SAFETY: the entry is in the table and its shard is locked, so the
        // block is live and its free waits (a free removes the entry first).
        let fp = unsafe { crate::log::fingerprint_block(addr, e.size) };
        found.push((e.tag, e.size, fp.hash, fp.fill));
    });
    found
        .iter()
        .map(|&(id, size, hash, fill)| Seen {
            tag: tag::tag_of(id),
            size,
            hash,
            fill,
        })
        .filter(|s| s.tag.job == Some(job))
        .collect()
}

impl Measured {
    /// The counters of (stage, partition) in this measurement.
    pub fn tag(&self, stage: &str, partition: Option<u32>) -> Option<&TagStats> {
        self.tags
            .iter()
            .find(|t| t.tag.stage == Some(stage) && t.tag.partition == partition)
    }

    /// Tags of `stage`, any partition.
    fn stage<'a>(&'a self, stage: &'a str) -> impl Iterator<Item = &'a TagStats> + 'a {
        self.tags.iter().filter(move |t| t.tag.stage == Some(stage))
    }

    /// Highest tracked (exact) live bytes of (stage, partition): small
    /// blocks are only sampled, and an assertion on a sampled figure would
    /// pass or fail from run to run.
    pub fn peak(&self, stage: &str, partition: Option<u32>) -> u64 {
        self.tag(stage, partition).map_or(0, |t| t.tracked.peak_live_bytes)
    }

    /// Tracked bytes `stage` still holds after the closure (all partitions).
    pub fn tracked_live(&self, stage: &str) -> u64 {
        self.stage(stage).map(|t| t.tracked.live_bytes).sum()
    }

    /// Most identical copies of one content held by `stage` at a checkpoint
    /// (0 when the stage held no tracked block at any checkpoint).
    pub fn max_copies(&self, stage: &str) -> u64 {
        self.copies(stage).into_values().max().unwrap_or(0)
    }

    /// Per content (size, hash): the most copies at one checkpoint.
    fn copies(&self, stage: &str) -> BTreeMap<(u64, u64), u64> {
        let mut best: BTreeMap<(u64, u64), u64> = BTreeMap::new();
        for cp in &self.checkpoints {
            let mut n: BTreeMap<(u64, u64), u64> = BTreeMap::new();
            for s in cp.iter().filter(|s| s.tag.stage == Some(stage)) {
                let key = (s.size, s.hash);
                let c = n.entry(key).or_default();
                // Filled blocks count once: never duplicates of each other.
                *c = if s.fill == Fill::Mixed { *c + 1 } else { 1 };
            }
            for (k, c) in n {
                let b = best.entry(k).or_default();
                *b = (*b).max(c);
            }
        }
        best
    }

    /// Panics unless `stage` held at most `n` identical copies of any content.
    #[track_caller]
    pub fn assert_max_copies(&self, stage: &str, n: u64) {
        let worst: Vec<String> = self
            .copies(stage)
            .into_iter()
            .filter(|(_, c)| *c > n)
            .map(|((size, hash), c)| format!("{c} copies of {hash:016x} ({size} bytes)"))
            .collect();
        assert!(
            worst.is_empty(),
            "heaptag: stage {stage:?} held more than {n} identical copies: {}",
            worst.join(", ")
        );
    }

    /// Panics if (stage, partition) ever held more than `bytes`.
    #[track_caller]
    pub fn assert_peak_at_most(&self, stage: &str, partition: Option<u32>, bytes: u64) {
        let peak = self.peak(stage, partition);
        assert!(
            peak <= bytes,
            "heaptag: stage {stage:?} partition {partition:?} peaked at {peak} bytes, more than {bytes}"
        );
    }

    /// Panics if `stage` still holds tracked blocks after the closure.
    #[track_caller]
    pub fn assert_nothing_alive(&self, stage: &str) {
        let left: Vec<String> = self
            .stage(stage)
            .filter(|t| t.tracked.live_bytes > 0)
            .map(|t| {
                format!(
                    "{}: {} bytes in {} blocks",
                    t.tag, t.tracked.live_bytes, t.tracked.live_count
                )
            })
            .collect();
        assert!(
            left.is_empty(),
            "heaptag: stage {stage:?} still holds memory: {}",
            left.join(", ")
        );
    }
}
