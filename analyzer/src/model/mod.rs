//! The model of one run: what the reports need, as replay leaves it.
//!
//! [`load`](Model::load) reads a log, or the segments of one rotated log
//! ([`load_set`](Model::load_set), `segments.rs`), and replays it
//! (`replay.rs`) into a [`Model`], in memory bounded by what is alive plus
//! fixed budgets: the timeline is downsampled to at most
//! [`TIMELINE_BUCKETS`] buckets of per-bucket maxima (`timeline.rs`), and
//! block lifetimes are kept only for `dups`/`check`, only while they can
//! still take part in a duplicate; retired tags past [`TAG_BUDGET`] are
//! folded into one aggregate per stage and partition (`fold.rs`). Loading
//! reads only the log: names for
//! call sites come later, from [`crate::symbolize`], and only for the
//! reports that show them.
//!
//! **Tag numbers.** Every `tag: u32` in the model (in [`TagAcc`] by index,
//! [`Block`], [`Interval`], [`SiteAcc::tags`], [`Composition::per_tag`], the
//! timeline) is a *tag number*: the model's key for one tag value (job,
//! partition, stage), given in the order the values first appear, 0 being
//! untagged. It is not the log's tag id: a writer retires ids
//! (`tag_retire`) and reuses them for other tags, and the same value may
//! come back under another id. [`Model::tag`] names a tag number. Past
//! the tag budget, retired tags are folded into per-(stage, partition)
//! aggregates (`fold.rs`) and their numbers given out again: every
//! reference the model holds is renamed to the aggregate's when it folds.

mod fold;
mod ids;
mod load;
mod modules;
mod replay;
mod segments;
mod timeline;

pub use fold::TAG_BUDGET;
pub use ids::IdTable;
pub use modules::ModuleIndex;
pub use segments::{expand_inputs, plan_runs, RunPlan, SegmentInfo};
pub use timeline::{Bucket, Change, KeyedSums, Timeline, TIMELINE_BUCKETS};

use std::collections::BTreeSet;
use std::fmt;
use std::path::PathBuf;

use heaptag_format::hash::MixMap;
use heaptag_format::{Fill, FpWhen, Header, Problem};

/// A tag as the log defines it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct TagKey {
    /// Job.
    pub job: Option<u64>,
    /// Stage.
    pub stage: Option<String>,
    /// Partition.
    pub partition: Option<u32>,
    /// Set for an id the log used but never defined (damage, or a
    /// definition lost): shown as "tag ID (undefined)", never as untagged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub undefined: Option<u32>,
    /// Set for the aggregate that retired tags past the tag budget were
    /// folded into (`fold.rs`): one per stage and partition, job dropped,
    /// shown as "others stage=S partition=P".
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub folded: bool,
}

impl TagKey {
    /// The tag of heaptag's own log writer (left out of per-tag reports).
    pub fn is_heaptag_own(&self) -> bool {
        self.stage.as_deref() == Some(heaptag_format::WRITER_STAGE)
    }
}

impl fmt::Display for TagKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(id) = self.undefined {
            return write!(f, "tag {id} (undefined)");
        }
        let mut parts = Vec::new();
        if self.folded {
            parts.push("others".to_string());
        }
        if let Some(j) = self.job {
            parts.push(format!("job={j}"));
        }
        if let Some(s) = &self.stage {
            parts.push(format!("stage={s}"));
        }
        if let Some(p) = self.partition {
            parts.push(format!("partition={p}"));
        }
        if parts.is_empty() {
            f.write_str("untagged")
        } else {
            f.write_str(&parts.join(" "))
        }
    }
}

/// A content fingerprint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fp {
    /// Hash of length and content.
    pub hash: u64,
    /// Fill kind.
    pub fill: Fill,
    /// Whole content hashed.
    pub full: bool,
}

/// What was known of a block's content at one moment: a fingerprint, or
/// (`when: None`) a point after which the earlier content no longer holds
/// (a resize). 24 bytes: one per fingerprint of a large block is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Obs {
    /// When, ns.
    pub t: u64,
    /// Hash of length and content.
    pub hash: u64,
    /// Fill kind.
    pub fill: Fill,
    /// Whole content hashed.
    pub full: bool,
    /// When in the block's life it was taken (`None`: not a fingerprint
    /// but the end of what was known).
    pub when: Option<FpWhen>,
}

impl Obs {
    /// A fingerprint taken at `t`.
    pub fn fingerprint(t: u64, fp: Fp, when: FpWhen) -> Obs {
        Obs {
            t,
            hash: fp.hash,
            fill: fp.fill,
            full: fp.full,
            when: Some(when),
        }
    }

    /// The end, at `t`, of what was known (a resize).
    pub fn boundary(t: u64) -> Obs {
        Obs {
            t,
            hash: 0,
            fill: Fill::Mixed,
            full: false,
            when: None,
        }
    }

    /// The fingerprint, if this is one.
    pub fn fp(&self) -> Option<Fp> {
        self.when.map(|_| Fp {
            hash: self.hash,
            fill: self.fill,
            full: self.full,
        })
    }
}

/// A live tracked block.
#[derive(Clone, Debug)]
pub struct Block {
    /// Tag number (see the module docs).
    pub tag: u32,
    /// Stack id.
    pub stack: u32,
    /// Requested size.
    pub size: u64,
    /// Allocation time, ns.
    pub start: u64,
    /// Its content's observations, oldest first (`None`: never observed,
    /// as every block is when no lifetimes are kept). Boxed, so a live
    /// block stays small: the live map, the replay's hottest structure,
    /// moves one of these per insert and remove.
    #[allow(clippy::box_collection)] // 8 bytes in the block where a `Vec` is 24: the point
    obs: Option<Box<Vec<Obs>>>,
    /// Allocated by C/C++ through the `native` malloc (a `native` record).
    pub native: bool,
}

impl Block {
    /// A block allocated at `start`, content not yet observed.
    pub fn new(tag: u32, stack: u32, size: u64, start: u64) -> Block {
        Block {
            tag,
            stack,
            size,
            start,
            native: false,
            obs: None,
        }
    }

    /// Records an observation of its content.
    pub fn observe(&mut self, o: Obs) {
        // (most observed blocks are observed once: at their free)
        self.obs.get_or_insert_with(|| Box::new(Vec::with_capacity(1))).push(o);
    }

    /// Whether its content was observed.
    pub fn observed(&self) -> bool {
        self.obs.is_some()
    }

    /// Its observations, oldest first, taken out of the block.
    pub fn take_observations(&mut self) -> Vec<Obs> {
        self.obs.take().map(|b| *b).unwrap_or_default()
    }
}

/// The lifetime of a tracked block (for duplicate detection).
#[derive(Clone, Copy, Debug)]
pub struct Interval {
    /// Tag number.
    pub tag: u32,
    /// Stack id.
    pub stack: u32,
    /// Size.
    pub size: u64,
    /// Allocated at, ns.
    pub start: u64,
    /// Freed at, ns (`None`: alive at the end of the log).
    pub end: Option<u64>,
    /// Its observations: `Model::observations[first_obs..first_obs + n_obs]`,
    /// oldest first.
    pub first_obs: u32,
    /// How many.
    pub n_obs: u32,
}

#[derive(Clone, Copy, Debug)]
struct Sample {
    tag: u32,
    stack: u32,
    size: u64,
    weight: u64,
    /// A native (C/C++) block (a `native` record named it).
    native: bool,
}

impl Sample {
    /// This sample's share of the estimator's variance: w^2 (1 - p), p = size / w.
    fn var(&self) -> f64 {
        let w = self.weight as f64;
        (w * w - w * self.size as f64).max(0.0)
    }
}

/// Running figures of one tag.
#[derive(Clone, Debug, Default)]
pub struct TagAcc {
    /// Tracked bytes alive (exact).
    pub tracked: u64,
    /// Estimated small bytes alive.
    pub small: u64,
    /// Variance of `small`.
    pub small_var: f64,
    /// Highest tracked + small, and when.
    pub peak: u64,
    /// Time of `peak`, ns.
    pub peak_t: u64,
    /// Highest tracked alone (exact).
    pub tracked_peak: u64,
    /// When `tracked_peak` was reached, ns.
    pub tracked_peak_t: u64,
    /// The small-block estimate at that moment, and its variance.
    pub small_at_tracked_peak: (u64, f64),
    /// Sampled small blocks alive now (their weights make `small`).
    pub small_samples: u64,
    /// Tracked bytes allocated.
    pub tracked_alloc: u64,
    /// Tracked blocks allocated.
    pub tracked_count: u64,
    /// Latest counters written by the process (all sizes, exact).
    pub alloc_bytes: Option<u64>,
    /// Latest allocation count written by the process.
    pub alloc_count: Option<u64>,
    /// External memory held.
    pub external: i64,
    /// Of `tracked`, native (C/C++) bytes alive (exact).
    pub native_tracked: u64,
    /// Of `small`, native bytes alive (estimate).
    pub native_small: u64,
    /// Highest `native_tracked` (exact).
    pub native_peak: u64,
    /// Of `tracked_alloc`, native bytes.
    pub native_alloc: u64,
    /// Changed since the last memory sample (1) / the last RSS peak (2).
    pub(crate) dirty: u8,
    /// For a folded aggregate ([`TagKey::folded`]): how many tags were
    /// folded into it (0 for a tag of its own).
    pub folded: u64,
    /// For a folded aggregate: the folded tags' peaks (as their report rows
    /// give them) summed.
    pub folded_peaks: u64,
    /// Record index when the tag number was given out, and of the last
    /// change of its live bytes (`fold.rs`: whether it can have held
    /// memory at the attributed peak).
    pub(crate) born_rec: u64,
    pub(crate) last_rec: u64,
    /// Log ids that stand for the tag now.
    pub(crate) id_refs: u32,
    /// Listed in the fold candidates.
    pub(crate) candidate: bool,
}

/// Running figures of one call stack.
#[derive(Clone, Debug, Default)]
pub struct SiteAcc {
    /// Bytes alive (tracked exact + sampled estimate).
    pub live: u64,
    /// Highest `live`, and when.
    pub peak: u64,
    /// Time of `peak`.
    pub peak_t: u64,
    /// Bytes allocated (tracked exact + sampled estimate).
    pub alloc_bytes: u64,
    /// Blocks allocated (tracked) or sampled.
    pub alloc_count: u64,
    /// Tag numbers that allocated here (at most 32 kept).
    pub tags: BTreeSet<u32>,
    /// Changed since the last RSS peak.
    pub(crate) dirty: bool,
}

/// What held memory at one moment.
#[derive(Clone, Debug, Default)]
pub struct Composition {
    /// When, ns.
    pub time_ns: u64,
    /// VmRSS then (if sampled).
    pub rss: Option<u64>,
    /// jemalloc (allocated, resident) then.
    pub jemalloc: Option<(u64, u64)>,
    /// Exact process totals (live, tracked, heaptag overhead) then.
    pub totals: Option<(u64, u64, u64)>,
    /// Tracked bytes alive (exact).
    pub tracked: u64,
    /// Small bytes alive, estimated, and its standard error.
    pub small: (u64, f64),
    /// External (annotated) bytes.
    pub external: u64,
    /// Native (C/C++) bytes alive, tracked exact plus small estimate: part
    /// of `tracked` and `small`, inside jemalloc with the `native` feature.
    pub native: u64,
    /// Per tag: (tag number, tracked, small estimate, external).
    pub per_tag: Vec<(u32, u64, u64, i64)>,
    /// Per stack: (stack id, bytes).
    pub per_site: Vec<(u32, u64)>,
}

/// A resolved frame.
#[derive(Clone, Debug, Default)]
pub struct Sym {
    /// Function.
    pub function: String,
    /// File.
    pub file: String,
    /// Line.
    pub line: u32,
}

/// A process sampled by `heaptag run` / `heaptag watch`.
#[derive(Clone, Debug, Default)]
pub struct ProcAcc {
    /// Its pid.
    pub pid: u32,
    /// Its parent.
    pub ppid: u32,
    /// Its command line.
    pub cmdline: String,
    /// (time ns, VmRSS) at each sample.
    pub samples: Vec<(u64, u64)>,
    /// Highest VmRSS sampled, and when.
    pub peak: (u64, u64),
    /// Highest Pss sampled.
    pub pss_peak: u64,
    /// Exit code when it ended (-1: unknown).
    pub exit: Option<i32>,
}

/// The log id a tag currently has, and the latest counters of this id
/// lifetime (a retired id's counters restart at 0 for its next tag).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct IdSlot {
    /// Tag number the id stands for now (`None`: undefined or retired).
    pub(crate) tag: Option<u32>,
    /// Latest cumulative `alloc_bytes` of this lifetime.
    pub(crate) bytes: u64,
    /// Latest cumulative `alloc_count` of this lifetime.
    pub(crate) count: u64,
}

/// Most distinct tags without an id that are remembered by value.
pub const TAG_OVERFLOW_KEPT: usize = 1000;

/// Everything the reports need from one run (one log, or the segments of
/// one rotated log).
#[derive(Debug, Default)]
pub struct Model {
    /// The log's path (the first segment's, for a set of segments).
    pub path: PathBuf,
    /// The segments read, in order (empty for a log that is not segmented).
    pub segments: Vec<PathBuf>,
    /// Its header (the first segment's).
    pub header: Header,
    /// The header's module map by address, built at first use.
    module_index: std::sync::OnceLock<ModuleIndex>,
    /// Tag values by tag number (0: untagged). One entry per distinct
    /// value, however many ids it had over the run.
    pub tags: MixMap<u32, TagKey>,
    /// Tags the writer could give no id (every id in use; `tag_overflow`
    /// records): their allocations were charged as untagged. At most
    /// [`TAG_OVERFLOW_KEPT`] kept, the first ones seen.
    pub tags_without_id: Vec<TagKey>,
    /// How many distinct tags got no id (kept or not; past 64,000 distinct
    /// ones, a tag named again in a later segment counts again).
    pub tags_without_id_count: u64,
    /// Stack definitions.
    pub stacks: MixMap<u32, Vec<u64>>,
    /// Resolved frames (the innermost frame at each address).
    pub symbols: MixMap<u64, Sym>,
    /// The frames each address's code was inlined into, innermost first.
    pub inlined: MixMap<u64, Vec<Sym>>,
    /// Per tag number (memory bounded by the values seen, see [`IdTable`]).
    pub tag_acc: IdTable<TagAcc>,
    /// Per stack id.
    pub site_acc: IdTable<SiteAcc>,
    /// Lifetimes of blocks of at least the fingerprint size (or
    /// fingerprinted), for `dups`/`check` only: those that may take part in
    /// a duplicate (see `Model::load`'s `intervals`).
    pub intervals: Vec<Interval>,
    /// Lifetimes left out because they could not be part of a duplicate
    /// (no other kept lifetime of the same content or site and size
    /// overlapped them), once more than [`INTERVALS_KEPT`] were held.
    pub intervals_pruned: u64,
    /// Blocks of at least the fingerprint size freed before they could have
    /// been filled ([`heaptag_format::freed_unfilled`]) with no fingerprint:
    /// they held no content, and no lifetime of theirs is kept.
    pub unfilled_frees: u64,
    /// What the pruned lifetimes held, per tag number (for `dups`' counts).
    pub pruned: MixMap<u32, Pruned>,
    /// Observations of the intervals' contents, each interval's together.
    pub observations: Vec<Obs>,
    /// Fingerprints that found their block.
    pub fingerprints: u64,
    /// Highest attributed (tracked + small estimate) and the record index, time.
    pub attributed_peak: (u64, u64, u64),
    /// Composition at the highest RSS sample.
    pub rss_peak: Option<Composition>,
    /// Composition at the attributed peak (filled by a second pass).
    pub attributed_composition: Option<Composition>,
    /// Live bytes per tag number (or per group, see [`Timeline`]) at the RSS
    /// samples, downsampled to at most [`TIMELINE_BUCKETS`] buckets of
    /// per-bucket maxima (one sample per bucket while they fit), with VmRSS.
    pub timeline: Timeline,
    /// Highest sum of each group of tags asked for at loading
    /// ([`LoadOptions::groups`]) at one RSS sample, and when: exact, not
    /// downsampled.
    pub group_peaks: Vec<(u64, u64)>,
    /// Marks.
    pub marks: Vec<(u64, String)>,
    /// Processes sampled from outside (`heaptag run` / `watch` logs).
    pub procs: Vec<ProcAcc>,
    /// Modules whose frames could not be symbolized offline, and why.
    pub symbol_notes: Vec<String>,
    /// Events dropped by the writer (largest count seen).
    pub dropped: u64,
    /// Latest time seen, ns.
    pub end_ns: u64,
    /// Whether the log has its end record.
    pub ended: bool,
    /// Damage found while reading.
    pub problems: Vec<Problem>,
    /// The file of each of `problems` (a run may be several segments).
    pub problem_sources: Vec<PathBuf>,
    /// Damage found in the values (overflowing figures, undefined ids),
    /// one line each.
    pub damage: Vec<String>,
    /// Byte offset of the first record whose values overflowed a figure
    /// (set by loading when `overflowed` is first raised).
    pub overflow_at: Option<u64>,
    /// A figure overflowed and was saturated.
    pub(crate) overflowed: bool,
    /// Frees with no allocation in the log (allocated before logging began, or dropped).
    pub unmatched_frees: u64,
    /// Latest exact totals (live, tracked, heaptag overhead).
    pub last_totals: Option<(u64, u64, u64)>,
    /// Highest heaptag overhead seen.
    pub max_overhead: u64,
    /// Records read.
    pub records: u64,
    /// Allocator events read.
    pub events: u64,
    /// Tracked bytes alive now.
    pub tracked: u64,
    small: u64,
    small_var: f64,
    external: i64,
    /// Native (C/C++) bytes alive: tracked exact plus small estimate.
    native: u64,
    live: MixMap<u64, Block>,
    moving: MixMap<(u32, u64), Block>,
    samples: MixMap<u64, Sample>,
    last_rss: Option<u64>,
    /// Time of the latest Rss sample.
    last_rss_t: Option<u64>,
    /// Highest VmHWM seen: (bytes, time of the first sample that showed
    /// it, time of the sample before it: the peak happened in between).
    pub hwm: Option<(u64, u64, Option<u64>)>,
    last_je: Option<(u64, u64)>,
    peak_pending: bool,
    /// Tags changed since the last memory sample / the last RSS peak.
    tl_dirty: Vec<u32>,
    pk_tags_dirty: Vec<u32>,
    pk_sites_dirty: Vec<u32>,
    /// Tags and sites holding memory at the RSS peak: (tracked, small,
    /// external) and bytes; kept up to date from the dirty lists.
    pk_tags: MixMap<u32, (u64, u64, i64)>,
    pk_sites: MixMap<u32, u64>,
    /// Index in `procs` by pid.
    proc_index: MixMap<u32, usize>,
    /// Keep block lifetimes (only `heaptag dups` and `check` need them).
    want_intervals: bool,
    /// Lifetimes held before pruning ([`LoadOptions::intervals_kept`]).
    intervals_kept: usize,
    /// Log id -> tag number now, with the id lifetime's counters.
    ids: IdTable<IdSlot>,
    /// Tag value -> tag number.
    tag_number: std::collections::HashMap<TagKey, u32>,
    /// Distinct tags without an id seen (capped like `tags_without_id`).
    overflow_seen: std::collections::HashSet<TagKey>,
    /// Per tag number: the groups ([`LoadOptions::groups`]) it belongs to
    /// (`None`: not yet worked out).
    group_of: Vec<Option<Vec<u32>>>,
    /// Group predicates and the timeline's key.
    hooks: Hooks,
    /// Each group's sum now.
    group_sums: Vec<u128>,
    /// Per tag number: live bytes at the previous RSS sample.
    tl_prev: IdTable<u64>,
    /// Per tag number: its timeline series + 2 (0: not yet worked out, 1:
    /// left out).
    series_of: IdTable<u32>,
    /// Each named series' sum now.
    series_sums: Vec<u128>,
    /// Named series' index by name.
    series_index: std::collections::HashMap<String, u32>,
    /// Segment state (`segments.rs`).
    pub(crate) seg: segments::SegState,
    /// Interval pruning state (`replay.rs`).
    pub(crate) prune: replay::PruneState,
    /// Tags folded into per-(stage, partition) aggregates past the tag
    /// budget (`fold.rs`); 0 on a run with fewer retired tags than twice
    /// the budget.
    pub tags_folded: u64,
    /// Tag folding state (`fold.rs`).
    pub(crate) fold: fold::FoldState,
}

/// What `dups` counts of the lifetimes of one tag that were left out.
#[derive(Clone, Copy, Debug, Default)]
pub struct Pruned {
    /// Lifetimes with a distinct-bytes content (or, without a fingerprint,
    /// a site and size): each counted as one content of its stage.
    pub contents: u64,
    /// Lifetimes only ever seen zero- or constant-filled.
    pub filled: u64,
    /// Any of them was fingerprinted (the stage speaks by fingerprint).
    pub fingerprinted: bool,
}

/// Most block lifetimes held before those that cannot be part of a
/// duplicate are left out (`Model::intervals_pruned`).
pub const INTERVALS_KEPT: usize = 1 << 18;

/// A predicate on tag values: one group of [`LoadOptions::groups`].
pub type GroupFn = std::sync::Arc<dyn Fn(&TagKey) -> bool + Send + Sync>;

/// A tag value's timeline series name (`None`: left out).
pub type KeyFn = std::sync::Arc<dyn Fn(&TagKey) -> Option<String> + Send + Sync>;

/// What a command needs from loading besides the replay itself.
#[derive(Clone, Default)]
pub struct LoadOptions {
    /// A second pass to the attributed peak (`heaptag peak`).
    pub peak: bool,
    /// Keep block lifetimes (`heaptag dups`, `heaptag check`).
    pub intervals: bool,
    /// Groups of tags whose summed live bytes' highest value at an RSS
    /// sample is wanted exactly (`check`'s `per = "group"`): one predicate
    /// each, results in [`Model::group_peaks`].
    pub groups: Vec<GroupFn>,
    /// Lifetimes held before those that can be part of no duplicate are
    /// left out (default [`INTERVALS_KEPT`]; a test lowers it).
    pub intervals_kept: Option<usize>,
    /// Group the timeline by this key (`heaptag timeline --by`) instead of
    /// by tag number, so each bucket holds the maximum of each key's sum
    /// (exact), not of each tag.
    pub timeline_key: Option<KeyFn>,
    /// Retired tags kept in full before the smaller ones are folded
    /// (default [`TAG_BUDGET`], or `HEAPTAG_TAG_BUDGET`; a test lowers it).
    pub tag_budget: Option<usize>,
}

/// The predicates a model was loaded with.
#[derive(Clone, Default)]
struct Hooks {
    groups: Vec<GroupFn>,
    timeline_key: Option<KeyFn>,
}

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hooks")
            .field("groups", &self.groups.len())
            .field("timeline_key", &self.timeline_key.is_some())
            .finish()
    }
}

impl std::fmt::Debug for LoadOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadOptions")
            .field("peak", &self.peak)
            .field("intervals", &self.intervals)
            .field("intervals_kept", &self.intervals_kept)
            .field("groups", &self.groups.len())
            .field("timeline_key", &self.timeline_key.is_some())
            .field("tag_budget", &self.tag_budget)
            .finish()
    }
}

impl Model {
    /// Whether `path` names one of the files this run was read from (so an
    /// output written there would destroy its input).
    pub fn reads_file(&self, path: &std::path::Path) -> bool {
        let Ok(out) = std::fs::canonicalize(path) else {
            return false;
        };
        let files = if self.segments.is_empty() {
            std::slice::from_ref(&self.path)
        } else {
            &self.segments[..]
        };
        files.iter().any(|f| std::fs::canonicalize(f).is_ok_and(|f| f == out))
    }

    /// The module of the header's map that holds `addr` (binary search).
    pub fn module_of(&self, addr: u64) -> Option<&heaptag_format::Module> {
        let idx = self.module_index.get_or_init(|| ModuleIndex::new(&self.header.modules));
        idx.find(addr).and_then(|i| self.header.modules.get(i))
    }

    /// The value of tag number `tag`: untagged for 0; a number the model
    /// did not give out reads as an undefined tag.
    pub fn tag(&self, tag: u32) -> TagKey {
        self.tags.get(&tag).cloned().unwrap_or_else(|| TagKey {
            undefined: (tag != 0).then_some(tag),
            ..TagKey::default()
        })
    }

    /// VmRSS at each timeline point (the highest of its samples): what
    /// `rss_series` held before the timeline was downsampled.
    pub fn rss_series(&self) -> Vec<u64> {
        self.timeline.buckets.iter().map(|b| b.rss).collect()
    }

    /// The tag number of a tag value, if the run has it.
    pub fn tag_number(&self, k: &TagKey) -> Option<u32> {
        self.tag_number.get(k).copied()
    }

    /// Tags that ever held or allocated anything, with their figures.
    pub fn tags_used(&self) -> impl Iterator<Item = (u32, &TagAcc)> {
        self.tag_acc
            .iter()
            .filter(|(_, a)| a.peak > 0 || a.alloc_count.unwrap_or(0) > 0 || a.external != 0 || a.tracked_count > 0)
    }

    /// Stacks that allocated, with their figures.
    pub fn sites_used(&self) -> impl Iterator<Item = (u32, &SiteAcc)> {
        self.site_acc.iter().filter(|(_, s)| s.alloc_count > 0)
    }

    /// Highest RSS and when: the process's VmHWM (its true peak, even one
    /// shorter than the sampling interval; the time is the first sample
    /// that showed it), else the highest VmRSS sample, or for a `run` /
    /// `watch` log the highest sampled process.
    pub fn peak_rss(&self) -> Option<(u64, u64)> {
        let sampled = self.rss_peak.as_ref().and_then(|c| c.rss.map(|r| (r, c.time_ns)));
        match (self.hwm, sampled) {
            (Some((h, t, _)), Some((r, rt))) => Some(if r >= h { (r, rt) } else { (h, t) }),
            (Some((h, t, _)), None) => Some((h, t)),
            (None, s) => s,
        }
        .or_else(|| self.procs.iter().map(|p| p.peak).max())
    }

    /// Whether the log holds any fingerprints.
    pub fn has_fingerprints(&self) -> bool {
        self.fingerprints > 0
    }

    /// The observations of an interval, oldest first.
    pub fn observations_of(&self, i: &Interval) -> &[Obs] {
        let first = i.first_obs as usize;
        self.observations
            .get(first..first + i.n_obs as usize)
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod size_tests {
    /// The live map holds one of these per tracked block: keep it small.
    #[test]
    fn a_live_block_is_small() {
        assert!(std::mem::size_of::<super::Obs>() <= 24);
        // 24 bytes of figures, the observations' box and the `native`
        // flag: 40 bytes, 48 with its key in the live map.
        assert!(
            std::mem::size_of::<super::Block>() <= 40,
            "{}",
            std::mem::size_of::<super::Block>()
        );
    }
}
