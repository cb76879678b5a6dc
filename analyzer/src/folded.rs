//! Folded (collapsed) stacks weighted by bytes, for flame graphs: inferno,
//! `flamegraph.pl`, speedscope, and `heaptag html`.
//!
//! Each output line is `frame;frame;...;frame weight`: the tag first (the
//! root: `job=1 stage=synthesize_partition partition=0`, as every report
//! names it), then the call stack from its outermost frame (`main`) to the
//! innermost (the function that allocated), and the weight, a positive
//! integer of bytes. Frames never are empty and never hold `;` (a `;` in a
//! name, as in `[u8; 32]`, is written `,`).
//!
//! Two weights ([`Weight`]):
//!
//! - **live** at a moment ([`LiveAt`]): the attributed peak, the end of the
//!   log, or a time. Tracked blocks count their exact size; sampled small
//!   blocks their weight (the estimate every report uses), so the lines of
//!   one tag sum to its tracked + small estimate at that moment, and all
//!   lines to the report's *peak attributed* at [`LiveAt::Peak`] (less
//!   what heaptag's own log writer held then, which no per-tag output
//!   shows).
//! - **allocated** over the run: tracked blocks exactly (a resize under the
//!   same tag allocates its growth, under another tag its whole size, as
//!   `heaptag report` counts), small blocks from the process's exact per-tag
//!   counters, split over stacks in proportion to the sampled weights; a tag
//!   whose small allocations were never sampled gets one frame
//!   [`UNSAMPLED_FRAME`] under its root. Each tag's lines sum to its
//!   *allocated* in `heaptag report` (a tag without counters, in a log cut
//!   before its first memory sample, counts its tracked bytes only, as the
//!   report does).
//!
//! The figures come from a replay of the log's allocation records (the
//! model keeps totals per tag and per stack, not per pair), a rotated
//! log's segments read as one run; the same replay, with object counts
//! besides bytes ([`stack_figures`]), makes `export pprof`'s profile. Tags are
//! resolved when a block is allocated, so an id the log reuses for another
//! tag never merges two tags. Names come from the model's symbols (run
//! [`crate::symbolize::symbolize`] first for a log without them).

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use heaptag_format::hash::MixMap;
use heaptag_format::{LogReader, Record};

use crate::model::{Model, TagKey};
use crate::progress::{Progress, RECORDS_PER_TICK};
use crate::sites::{crate_of_function, frames};
use crate::text::printable;
use crate::Error;

/// The frame under a tag's root for its small allocations when none was
/// sampled (allocated weight only): their bytes are exact, their stacks
/// unknown.
pub const UNSAMPLED_FRAME: &str = "[small blocks, none sampled]";

/// The frame for a stack the log never defined (or a resize of a block
/// whose allocation the log does not hold).
pub const NO_STACK_FRAME: &str = "[no stack]";

/// A moment to weigh live bytes at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LiveAt {
    /// The attributed peak (highest tracked + small estimate): the moment
    /// `heaptag report` calls *peak attributed*.
    Peak,
    /// The end of the log: what was never freed.
    End,
    /// A time, nanoseconds since the log's start: the state after every
    /// record up to the first one later than it (the end, for a time past
    /// the end).
    Time(u64),
}

impl FromStr for LiveAt {
    type Err = String;

    /// `peak`, `end`, or a time since the log's start: `1.5s`, `250ms`,
    /// `40us`, `100ns`, or a number of seconds (`0.128`, as reports print).
    fn from_str(s: &str) -> Result<LiveAt, String> {
        match s.trim() {
            "peak" => Ok(LiveAt::Peak),
            "end" => Ok(LiveAt::End),
            t => parse_time(t).map(LiveAt::Time).ok_or_else(|| {
                format!("{s:?}: expected peak, end or a time since the log's start (0.128, 1.5s, 250ms, 40us)")
            }),
        }
    }
}

/// Seconds (with a fraction) or a number with a unit, as nanoseconds.
fn parse_time(t: &str) -> Option<u64> {
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = (&t[..split], t[split..].trim());
    let scale = match unit {
        "" | "s" => 1e9,
        "ms" => 1e6,
        "us" => 1e3,
        "ns" => 1.0,
        _ => return None,
    };
    if num.is_empty() || num.matches('.').count() > 1 {
        return None;
    }
    let v: f64 = num.parse().ok()?;
    let ns = (v * scale).round();
    (ns.is_finite() && ns >= 0.0 && ns < u64::MAX as f64).then_some(ns as u64)
}

/// What the lines weigh.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Weight {
    /// Bytes alive at a moment.
    Live(LiveAt),
    /// Bytes allocated over the run.
    Allocated,
}

/// How frames are written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoldOptions {
    /// Write `function (file:line)` (default) rather than the function alone.
    pub lines: bool,
    /// Keep the innermost frames of heaptag's own recording, the unwinder
    /// and the allocator shims (`__rust_alloc`), which every stack shares
    /// (default: left out).
    pub allocator_frames: bool,
}

impl Default for FoldOptions {
    fn default() -> Self {
        FoldOptions {
            lines: true,
            allocator_frames: false,
        }
    }
}

/// One tag's bytes at one call stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StackWeight {
    /// The tag.
    pub tag: TagKey,
    /// The stack's id in the log (`None`: no stack, or the tag's small
    /// allocations that no sample placed: see [`UNSAMPLED_FRAME`]).
    pub stack: Option<u32>,
    /// Bytes (positive).
    pub bytes: u64,
    /// Whether `stack: None` stands for unsampled small allocations
    /// rather than a missing stack.
    pub unsampled: bool,
}

/// Bytes per (tag, stack) of one log, before naming.
#[derive(Clone, Debug, Default)]
pub struct StackWeights {
    /// The moment weighed, ns since the log's start (`None` for allocated).
    pub time_ns: Option<u64>,
    /// Per (tag, stack), sorted by tag then stack; no zero entries.
    pub entries: Vec<StackWeight>,
    /// Sum of `entries`.
    pub total: u64,
}

/// Folded stacks of one log: what [`folded`] returns.
#[derive(Clone, Debug, Default)]
pub struct Folded {
    /// The moment weighed, ns since the log's start (`None` for allocated).
    pub time_ns: Option<u64>,
    /// `(frames joined by ';', bytes)`, sorted by frames, each frame list
    /// once (stacks that name the same frames are merged).
    pub lines: Vec<(String, u64)>,
    /// Sum of the weights.
    pub total: u64,
}

impl Folded {
    /// The lines as `frames weight`, sorted.
    pub fn to_lines(&self) -> Vec<String> {
        self.lines.iter().map(|(f, w)| format!("{f} {w}")).collect()
    }

    /// Writes the lines, one `frames weight` per line.
    pub fn write(&self, out: &mut dyn Write) -> io::Result<()> {
        for (f, w) in &self.lines {
            writeln!(out, "{f} {w}")?;
        }
        Ok(())
    }
}

/// A frame as folded output can hold it: no `;` (written `,`), no empty
/// frame (`?`), no leading or trailing blanks.
pub fn clean_frame(s: &str) -> String {
    let s = printable(s.replace(';', ",")).trim().to_string();
    if s.is_empty() {
        "?".into()
    } else {
        s
    }
}

/// The root frame of a tag: the tag as reports name it.
pub fn tag_frame(tag: &TagKey) -> String {
    clean_frame(&tag.to_string())
}

/// Whether a frame belongs to the allocation machinery every stack starts
/// with: heaptag's own recording, the unwinder, the allocator shims.
fn is_machinery(function: &str) -> bool {
    if ["__rust_", "__rg_", "__rdl_", "__rustc::"]
        .iter()
        .any(|p| function.contains(p))
        || function.starts_with("_Unwind_")
    {
        return true;
    }
    crate_of_function(function).is_some_and(|k| {
        k == "backtrace"
            || k == "libunwind"
            || k == "heaptag"
            || k.starts_with("heaptag_")
            || k.starts_with("tikv_jemalloc")
    })
}

/// The frames of `stack`, outermost first, inlined frames expanded, named
/// as `options` says; `[no stack]` when the log does not define it.
pub fn stack_frames(m: &Model, stack: u32, options: &FoldOptions) -> Vec<String> {
    let all = frames(m, stack);
    if all.is_empty() {
        return vec![NO_STACK_FRAME.into()];
    }
    let skip = if options.allocator_frames {
        0
    } else {
        let n = all
            .iter()
            .take_while(|f| f.sym.as_ref().is_some_and(|s| is_machinery(&s.function)))
            .count();
        // A stack of nothing but machinery keeps its frames.
        if n == all.len() {
            0
        } else {
            n
        }
    };
    all[skip..]
        .iter()
        .rev()
        // A null return address ends the unwinding (the thread's entry).
        .skip_while(|f| f.addr == 0 && f.sym.is_none())
        .map(|f| match (&f.sym, options.lines) {
            (Some(s), false) if !s.function.is_empty() => clean_frame(&s.function),
            _ => clean_frame(&f.text(m)),
        })
        .collect()
}

/// How a segment's carried records are read, as the model reads them:
/// skipped when the segment before was read whole (its state is known),
/// else the live state they describe replaces what was known.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum SegMode {
    /// Not among carried records.
    #[default]
    Off,
    /// Carried records say what is already known.
    Skip,
    /// The first carried record drops the known live state.
    Resync,
    /// Carried records add to the live state.
    Carrying,
}

/// A tag definition's generation: the id and its lifetime (a retired id
/// defined again, or an id defined for another value, is another tag).
pub(crate) type Gen = (u32, u32);

/// A live tracked block: (tag, stack, size). It counts one object.
type Block = (Gen, u32, u64);

/// A live sampled small block: (tag, stack, weight, objects). Its weight is
/// the bytes it stands for, `objects` the blocks (weight / size: a sample
/// taken with probability p = size / weight stands for 1 / p blocks).
type Sample = (Gen, u32, u64, f64);

/// The objects a sample of `size` bytes and `weight` stands for.
fn sample_objects(size: u64, weight: u64) -> f64 {
    if size == 0 {
        1.0
    } else {
        weight as f64 / size as f64
    }
}

/// What one (tag generation, stack) holds and has allocated so far.
#[derive(Clone, Copy, Debug, Default)]
struct Acc {
    /// Live bytes: tracked sizes plus sample weights.
    live_bytes: u64,
    /// Live tracked blocks.
    live_blocks: u64,
    /// Live sampled blocks, as the blocks they stand for.
    live_sampled: f64,
    /// Tracked bytes allocated (the realloc rule applied).
    tracked_bytes: u64,
    /// Tracked blocks allocated (a resize under the same tag is none).
    tracked_blocks: u64,
    /// Sampled weight allocated: what the tag's small allocations are
    /// split over stacks by.
    sampled_weight: u64,
    /// Sampled blocks allocated, as the blocks they stand for: what the
    /// tag's small allocation count is split by.
    sampled_objects: f64,
}

/// A replay of a log's allocation records that keeps figures per (tag
/// generation, stack): what folded stacks, the pprof profile, the Perfetto
/// counters and `report --by` need.
#[derive(Default)]
pub(crate) struct Replay {
    /// Current generation of each id.
    generation: MixMap<u32, u32>,
    /// Tag of each generation.
    keys: MixMap<Gen, TagKey>,
    /// Live tracked blocks by address.
    live: MixMap<u64, Block>,
    /// Blocks between `realloc_begin` and `realloc`: (thread, address).
    moving: MixMap<(u32, u64), Block>,
    /// Live sampled blocks by address.
    samples: MixMap<u64, Sample>,
    /// Figures per (tag, stack).
    acc: MixMap<(Gen, u32), Acc>,
    /// Latest counters per tag (all sizes, exact): (bytes, blocks)
    /// allocated in the generation's lifetime.
    counters: MixMap<Gen, (u64, u64)>,
    /// Ids retired (`tag_retire`): their next definition starts another
    /// lifetime even for the same value.
    retired: std::collections::HashSet<u32>,
    /// How carried records (a rotated log's segment start) are taken.
    seg: SegMode,
    /// The latest record time seen, ns.
    pub(crate) now: u64,
    /// Set by the caller before each file of a set: the file before was the
    /// previous segment and was read whole, so its state is known.
    pub(crate) predecessor_read: bool,
    /// With `track_tags`: live bytes per tag, and the tags whose live
    /// bytes changed since the caller last took the list.
    pub(crate) track_tags: bool,
    pub(crate) tag_live: MixMap<Gen, u64>,
    pub(crate) changed: Vec<Gen>,
    /// With `track_tags`: generations retired and settled since the caller
    /// last took the list (they hold nothing and change no more).
    pub(crate) settled_gens: Vec<Gen>,
    /// The stacks of each generation's entries in `acc`.
    stacks_of: MixMap<Gen, Vec<u32>>,
    /// Figures of retired generations, settled when they retired (their
    /// final counters split over their stacks, as [`stack_figures`] does
    /// at the end), per (tag, stack, unsampled): memory bounded by the
    /// tags kept, not the tags ever seen.
    settled: BTreeMap<SumKey, Sum>,
    /// The tags the model kept in full when it folded some
    /// (`Model::tags_folded`): a retired generation of any other tag is
    /// settled into its stage and partition's "others" tag, as the model's
    /// rows are. `None`: every tag its own.
    pub(crate) kept: Option<std::collections::HashSet<TagKey>>,
}

/// One (tag, stack)'s sums over the generations of its tag.
#[derive(Clone, Copy, Debug, Default)]
struct Sum {
    live_bytes: u64,
    live_objects: f64,
    alloc_bytes: u64,
    alloc_objects: u64,
}

/// (tag, stack, unsampled small allocations).
type SumKey = (TagKey, Option<u32>, bool);

/// Adds one generation's figures, `accs` per stack, to `by` under tag
/// `k`: its tracked blocks, and its small allocations (`counters` less its
/// tracked allocations) split over its sampled stacks, or unsampled.
fn settle(by: &mut BTreeMap<SumKey, Sum>, k: &TagKey, accs: &[(u32, Acc)], counters: Option<(u64, u64)>) {
    let (mut tracked_bytes, mut tracked_blocks) = (0u64, 0u64);
    let mut by_weight: Vec<(u32, u64)> = Vec::new();
    let mut by_objects: Vec<(u32, f64)> = Vec::new();
    for &(stack, a) in accs {
        let s = by.entry((k.clone(), (stack != 0).then_some(stack), false)).or_default();
        s.live_bytes = s.live_bytes.saturating_add(a.live_bytes);
        s.live_objects += a.live_blocks as f64 + a.live_sampled;
        s.alloc_bytes = s.alloc_bytes.saturating_add(a.tracked_bytes);
        s.alloc_objects = s.alloc_objects.saturating_add(a.tracked_blocks);
        tracked_bytes = tracked_bytes.saturating_add(a.tracked_bytes);
        tracked_blocks = tracked_blocks.saturating_add(a.tracked_blocks);
        if a.sampled_weight > 0 {
            by_weight.push((stack, a.sampled_weight));
            by_objects.push((stack, a.sampled_objects));
        }
    }
    // Without counters (a log cut before its first memory sample) the
    // report counts tracked blocks only: so do we.
    let Some((bytes, blocks)) = counters else {
        return;
    };
    let (small_bytes, small_blocks) = (
        bytes.saturating_sub(tracked_bytes),
        blocks.saturating_sub(tracked_blocks),
    );
    if by_weight.is_empty() {
        let s = by.entry((k.clone(), None, true)).or_default();
        s.alloc_bytes = s.alloc_bytes.saturating_add(small_bytes);
        s.alloc_objects = s.alloc_objects.saturating_add(small_blocks);
        return;
    }
    by_weight.sort_unstable();
    by_objects.sort_by_key(|p| p.0);
    for (stack, v) in split_exact(small_bytes, &by_weight) {
        let s = by.entry((k.clone(), (stack != 0).then_some(stack), false)).or_default();
        s.alloc_bytes = s.alloc_bytes.saturating_add(v);
    }
    for (stack, v) in split_fractional(small_blocks, &by_objects) {
        let s = by.entry((k.clone(), (stack != 0).then_some(stack), false)).or_default();
        s.alloc_objects = s.alloc_objects.saturating_add(v);
    }
}

impl Replay {
    fn gen(&self, id: u32) -> Gen {
        (id, self.generation.get(&id).copied().unwrap_or(0))
    }

    /// The figures of (generation, stack) `k`, made when missing.
    fn acc_at(&mut self, k: (Gen, u32)) -> &mut Acc {
        match self.acc.entry(k) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                self.stacks_of.entry(k.0).or_default().push(k.1);
                v.insert(Acc::default())
            }
        }
    }

    /// A retired generation that holds nothing: its figures settled (under
    /// its tag, or its "others" tag when the model folded it) and its
    /// entries dropped. One still holding memory stays as it is.
    fn settle_retired(&mut self, g: Gen) {
        let stacks = self.stacks_of.get(&g).map_or(&[][..], |v| &v[..]);
        let holds = stacks.iter().any(|&s| {
            self.acc
                .get(&(g, s))
                .is_some_and(|a| a.live_bytes > 0 || a.live_blocks > 0)
        });
        if holds {
            return;
        }
        let stacks = self.stacks_of.remove(&g).unwrap_or_default();
        let accs: Vec<(u32, Acc)> = stacks
            .iter()
            .filter_map(|&s| self.acc.remove(&(g, s)).map(|a| (s, a)))
            .collect();
        let counters = self.counters.remove(&g);
        let k = self.key(g);
        self.keys.remove(&g);
        let k = match &self.kept {
            Some(kept) if g.0 != 0 && k.undefined.is_none() && !k.is_heaptag_own() && !kept.contains(&k) => TagKey {
                stage: k.stage,
                partition: k.partition,
                folded: true,
                ..TagKey::default()
            },
            _ => k,
        };
        // A replay tracking tags' live bytes (`report --by`, Perfetto)
        // needs no per-stack figures.
        if !self.track_tags {
            settle(&mut self.settled, &k, &accs, counters);
        }
        if self.track_tags {
            self.tag_live.remove(&g);
            self.settled_gens.push(g);
        }
    }

    /// `bytes` (and `blocks` tracked or `sampled` blocks) come alive at `k`.
    fn add_live(&mut self, k: (Gen, u32), bytes: u64, blocks: u64, sampled: f64) {
        let a = self.acc_at(k);
        a.live_bytes = a.live_bytes.saturating_add(bytes);
        a.live_blocks = a.live_blocks.saturating_add(blocks);
        a.live_sampled += sampled;
        if self.track_tags {
            let t = self.tag_live.entry(k.0).or_default();
            *t = t.saturating_add(bytes);
            self.changed.push(k.0);
        }
    }

    /// `bytes` (and `blocks`, `sampled`) at `k` are freed.
    fn sub_live(&mut self, k: (Gen, u32), bytes: u64, blocks: u64, sampled: f64) {
        if let Some(a) = self.acc.get_mut(&k) {
            let bytes = bytes.min(a.live_bytes);
            a.live_bytes -= bytes;
            a.live_blocks = a.live_blocks.saturating_sub(blocks);
            a.live_sampled = (a.live_sampled - sampled).max(0.0);
            if self.track_tags {
                if let Some(t) = self.tag_live.get_mut(&k.0) {
                    *t = t.saturating_sub(bytes);
                }
                self.changed.push(k.0);
            }
        }
    }

    fn enter_block(&mut self, addr: u64, b: Block) {
        self.add_live((b.0, b.1), b.2, 1, 0.0);
        if let Some(old) = self.live.insert(addr, b) {
            // An allocation at a live address: its free was dropped.
            self.leave_block(old);
        }
    }

    fn leave_block(&mut self, b: Block) {
        self.sub_live((b.0, b.1), b.2, 1, 0.0);
    }

    fn enter_sample(&mut self, addr: u64, s: Sample) {
        self.add_live((s.0, s.1), s.2, 0, s.3);
        if let Some(old) = self.samples.insert(addr, s) {
            self.leave_sample(old);
        }
    }

    fn leave_sample(&mut self, s: Sample) {
        self.sub_live((s.0, s.1), s.2, 0, s.3);
    }

    fn alloc_tracked(&mut self, k: (Gen, u32), bytes: u64, blocks: u64) {
        let a = self.acc_at(k);
        a.tracked_bytes = a.tracked_bytes.saturating_add(bytes);
        a.tracked_blocks = a.tracked_blocks.saturating_add(blocks);
    }

    pub(crate) fn apply(&mut self, rec: Record) {
        if let Some(t) = record_time(&rec) {
            // Threads' records interleave a little: time never goes back.
            self.now = self.now.max(t);
        }
        match &rec {
            Record::Segment { .. } => {
                self.seg = if self.predecessor_read {
                    SegMode::Skip
                } else {
                    SegMode::Resync
                };
                return;
            }
            Record::Carried { .. } | Record::CarriedSample { .. } | Record::CarriedExternal { .. } => match self.seg {
                SegMode::Skip => return,
                SegMode::Resync => {
                    self.drop_live_state();
                    self.seg = SegMode::Carrying;
                }
                SegMode::Off | SegMode::Carrying => {}
            },
            Record::TagDef { .. } | Record::StackDef { .. } | Record::Symbol { .. } | Record::Pad { .. } => {}
            _ => self.seg = SegMode::Off,
        }
        match rec {
            Record::TagRetire { id, .. } => {
                self.retired.insert(id);
                let g = self.gen(id);
                self.settle_retired(g);
            }
            Record::TagDef {
                id,
                job,
                stage,
                partition,
            } => {
                let key = TagKey {
                    job,
                    stage: stage.map(printable),
                    partition,
                    ..TagKey::default()
                };
                // The first definition is lifetime 0. The same id for the
                // same value again (a segment repeats the definitions it
                // uses, the writer repeats them after a failed write) goes
                // on; after a tag_retire, or for another value, it is
                // another lifetime (as the model counts them).
                let retired = self.retired.remove(&id);
                let g = match self.generation.get(&id).copied() {
                    Some(g) if !retired && self.keys.get(&(id, g)) == Some(&key) => return,
                    Some(g) => g + 1,
                    None => 0,
                };
                self.generation.insert(id, g);
                self.keys.insert((id, g), key);
            }
            Record::Alloc {
                tag, stack, addr, size, ..
            } => {
                let g = self.gen(tag);
                self.alloc_tracked((g, stack), size, 1);
                self.enter_block(addr, (g, stack, size));
            }
            // A block alive when a log segment opened: carried into this
            // segment's state, allocated in an earlier one.
            Record::Carried {
                tag, stack, addr, size, ..
            } => {
                let g = self.gen(tag);
                self.enter_block(addr, (g, stack, size));
            }
            Record::Free { addr, .. } => {
                if let Some(b) = self.live.remove(&addr) {
                    self.leave_block(b);
                }
            }
            Record::ReallocBegin { thread, addr, .. } => {
                if let Some(b) = self.live.remove(&addr) {
                    self.moving.insert((thread, addr), b);
                }
            }
            Record::Realloc {
                thread,
                tag,
                old_addr,
                addr,
                size,
                ..
            } => {
                let old = self
                    .moving
                    .remove(&(thread, old_addr))
                    .or_else(|| self.live.remove(&old_addr));
                let g = self.gen(tag);
                let (stack, bytes, blocks) = match old {
                    Some(o) => {
                        self.leave_block(o);
                        // The realloc rule (docs/REPORTS.md), as the model
                        // applies it: under the same tag a resize allocates
                        // its growth (and no block), under another tag the
                        // whole block.
                        if o.0 != g {
                            (o.1, size, 1)
                        } else {
                            (o.1, size.saturating_sub(o.2), 0)
                        }
                    }
                    None => (0, size, 1),
                };
                self.alloc_tracked((g, stack), bytes, blocks);
                self.enter_block(addr, (g, stack, size));
            }
            Record::SampleAlloc {
                tag,
                stack,
                addr,
                size,
                weight,
                ..
            } => {
                let g = self.gen(tag);
                let objects = sample_objects(size, weight);
                let a = self.acc_at((g, stack));
                a.sampled_weight = a.sampled_weight.saturating_add(weight);
                a.sampled_objects += objects;
                self.enter_sample(addr, (g, stack, weight, objects));
            }
            Record::CarriedSample {
                tag,
                stack,
                addr,
                size,
                weight,
                ..
            } => {
                let g = self.gen(tag);
                self.enter_sample(addr, (g, stack, weight, sample_objects(size, weight)));
            }
            Record::SampleFree { addr, .. } => {
                if let Some(s) = self.samples.remove(&addr) {
                    self.leave_sample(s);
                }
            }
            Record::Counters { tags, .. } => {
                for c in tags {
                    let g = self.gen(c.tag);
                    self.counters.insert(g, (c.alloc_bytes, c.alloc_count));
                }
            }
            _ => {}
        }
    }

    /// Forgets every live block and sample (a segment whose predecessor
    /// was not read whole: its carried records are the live state).
    fn drop_live_state(&mut self) {
        let mut blocks: Vec<Block> = self.live.drain().map(|(_, b)| b).collect();
        // A block mid-resize is alive too (its `realloc` is not in this
        // segment).
        blocks.extend(self.moving.drain().map(|(_, b)| b));
        let samples: Vec<Sample> = self.samples.drain().map(|(_, s)| s).collect();
        for b in blocks {
            self.leave_block(b);
        }
        for s in samples {
            self.leave_sample(s);
        }
    }

    /// The tag of a generation: untagged for id 0, undefined for an id
    /// never defined.
    pub(crate) fn key(&self, g: Gen) -> TagKey {
        self.keys.get(&g).cloned().unwrap_or_else(|| TagKey {
            undefined: (g.0 != 0).then_some(g.0),
            ..TagKey::default()
        })
    }
}

/// The time of a record, for the ones that carry one (definitions and
/// symbols do not).
pub(crate) fn record_time(r: &Record) -> Option<u64> {
    match r {
        Record::Alloc { time_ns, .. }
        | Record::Free { time_ns, .. }
        | Record::ReallocBegin { time_ns, .. }
        | Record::Realloc { time_ns, .. }
        | Record::SampleAlloc { time_ns, .. }
        | Record::SampleFree { time_ns, .. }
        | Record::Fingerprint { time_ns, .. }
        | Record::Mark { time_ns, .. }
        | Record::Counters { time_ns, .. }
        | Record::Rss { time_ns, .. }
        | Record::Jemalloc { time_ns, .. }
        | Record::External { time_ns, .. }
        | Record::Dropped { time_ns, .. }
        | Record::End { time_ns, .. }
        | Record::Totals { time_ns, .. }
        | Record::ProcStart { time_ns, .. }
        | Record::ProcRss { time_ns, .. }
        | Record::ProcExit { time_ns, .. }
        | Record::TagRetire { time_ns, .. }
        | Record::TagOverflow { time_ns, .. }
        | Record::Segment { time_ns, .. }
        | Record::CarriedExternal { time_ns, .. } => Some(*time_ns),
        Record::Carried { .. }
        | Record::CarriedSample { .. }
        | Record::TagDef { .. }
        | Record::StackDef { .. }
        | Record::Symbol { .. }
        | Record::Native { .. }
        | Record::Pad { .. } => None,
    }
}

/// Splits `total` over `parts` in proportion to their values, exactly
/// (largest remainders), so the shares sum to `total`.
fn split_exact(total: u64, parts: &[(u32, u64)]) -> Vec<(u32, u64)> {
    let sum: u128 = parts.iter().map(|p| p.1 as u128).sum();
    if sum == 0 {
        return Vec::new();
    }
    let shares: Vec<(u32, u64, u128)> = parts
        .iter()
        .map(|&(s, w)| {
            let num = total as u128 * w as u128;
            (s, (num / sum) as u64, num % sum)
        })
        .collect();
    hand_out(total, shares, |a, b| a.cmp(b))
}

/// As [`split_exact`], for weights that are not whole numbers (the blocks
/// sampled small blocks stand for).
fn split_fractional(total: u64, parts: &[(u32, f64)]) -> Vec<(u32, u64)> {
    let sum: f64 = parts.iter().map(|p| p.1).sum();
    if !sum.is_finite() || sum <= 0.0 {
        return Vec::new();
    }
    let shares: Vec<(u32, u64, f64)> = parts
        .iter()
        .map(|&(s, w)| {
            let exact = total as f64 * (w / sum);
            (s, exact.floor() as u64, exact - exact.floor())
        })
        .collect();
    hand_out(total, shares, f64::total_cmp)
}

/// Completes floor shares `(part, floor, remainder)` to sum to `total`:
/// what is left goes one each to the largest remainders (ties to the lower
/// part), after an even share each when more is left than there are parts
/// (a fractional split's rounding).
fn hand_out<R>(
    total: u64,
    mut shares: Vec<(u32, u64, R)>,
    cmp: impl Fn(&R, &R) -> std::cmp::Ordering,
) -> Vec<(u32, u64)> {
    let given = shares.iter().fold(0u64, |a, s| a.saturating_add(s.1));
    let mut left = total.saturating_sub(given);
    let n = shares.len() as u64;
    if n > 0 && left >= n {
        for s in &mut shares {
            s.1 += left / n;
        }
        left %= n;
    }
    let mut order: Vec<usize> = (0..shares.len()).collect();
    order.sort_by(|&a, &b| cmp(&shares[b].2, &shares[a].2).then(shares[a].0.cmp(&shares[b].0)));
    for i in order.into_iter().take(left as usize) {
        shares[i].1 += 1;
    }
    shares.into_iter().map(|(s, v, _)| (s, v)).collect()
}

/// The files of the run `m` was loaded from, in order: its segments, or
/// its one log.
pub fn run_files(m: &Model) -> Vec<PathBuf> {
    if m.segments.is_empty() {
        vec![m.path.clone()]
    } else {
        m.segments.clone()
    }
}

/// Reads every record of `files` (one run) into `replay` in order, with
/// progress: `before` sees each record before it is applied and says
/// whether to go on, `after` sees the replay after each record applied.
/// Tells the replay, before each file, whether the one before was read
/// whole (then a segment's carried records are known already).
pub(crate) fn replay_files(
    files: &[PathBuf],
    pass: &str,
    replay: &mut Replay,
    mut before: impl FnMut(&Record, &Replay) -> Flow,
    mut after: impl FnMut(&mut Replay),
) -> Result<(), Error> {
    let mut prev_clean = false;
    for path in files {
        let mut r = LogReader::open(path).map_err(|source| Error::Read {
            path: path.to_path_buf(),
            source,
        })?;
        replay.predecessor_read = prev_clean;
        let mut progress = Progress::new(path, pass);
        let mut records = 0u64;
        let mut stop = false;
        while let Some(rec) = r.next() {
            records += 1;
            if records.is_multiple_of(RECORDS_PER_TICK) {
                progress.tick(r.offset());
            }
            let flow = before(&rec, replay);
            if flow == Flow::Before {
                stop = true;
                break;
            }
            replay.apply(rec);
            after(replay);
            if flow == Flow::After {
                stop = true;
                break;
            }
        }
        progress.done();
        prev_clean = r.problems().is_empty() && r.ended();
        if stop {
            break;
        }
    }
    Ok(())
}

/// What a pass over a run does with a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flow {
    /// Apply it and go on.
    Go,
    /// Stop before it.
    Before,
    /// Apply it, then stop.
    After,
}

/// One tag's figures at one call stack, up to a moment ([`LiveAt`]): what
/// is in use then and what was allocated from the start to then (the four
/// values of a pprof heap profile).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StackFigure {
    /// The tag.
    pub tag: TagKey,
    /// The stack's id in the log (`None`: no stack, or the tag's small
    /// allocations that no sample placed: see [`UNSAMPLED_FRAME`]).
    pub stack: Option<u32>,
    /// Whether `stack: None` stands for unsampled small allocations
    /// rather than a missing stack.
    pub unsampled: bool,
    /// Bytes in use: tracked blocks exactly, sampled small blocks at their
    /// weight (the estimate every report uses).
    pub live_bytes: u64,
    /// Blocks in use: a tracked block counts one, a sampled small block the
    /// blocks it stands for (weight / size), rounded.
    pub live_objects: u64,
    /// Bytes allocated: tracked blocks exactly (the realloc rule), small
    /// blocks from the tag's exact counters split by sampled weight.
    pub alloc_bytes: u64,
    /// Blocks allocated: tracked blocks exactly (a resize under the same
    /// tag is none), small blocks from the counters split by the blocks
    /// the samples stand for.
    pub alloc_objects: u64,
}

/// Figures per (tag, stack) of one log at one moment: what
/// [`stack_figures`] returns.
#[derive(Clone, Debug, Default)]
pub struct StackFigures {
    /// The moment, ns since the log's start.
    pub time_ns: u64,
    /// Per (tag, stack), sorted by tag then stack; none all zero.
    pub entries: Vec<StackFigure>,
}

/// Figures per (tag, stack) of the run `m` was loaded from (its log, or
/// its segments in order), up to the moment `at`. In use: as
/// [`Weight::Live`] weighs. Allocated up to then: tracked blocks as
/// [`Weight::Allocated`] counts them; small blocks from the latest counter
/// sample up to then less the tracked allocated by then (the rule of
/// `heaptag report`'s *allocated*; nothing where the log holds no counter
/// sample yet), split over the sampled stacks. At [`LiveAt::End`] the
/// allocated bytes are [`Weight::Allocated`]'s, and a tag's figures sum to
/// its *allocated* and *allocations* in `heaptag report`. heaptag's own
/// writer tag is left out.
pub fn stack_figures(m: &Model, at: LiveAt) -> Result<StackFigures, Error> {
    stack_figures_files(&run_files(m), m.attributed_peak.1, at, kept_tags(m))
}

/// The tags `m` kept in full, when it folded some (see [`Replay::kept`]).
fn kept_tags(m: &Model) -> Option<std::collections::HashSet<TagKey>> {
    (m.tags_folded > 0).then(|| m.tags.values().filter(|k| !k.folded).cloned().collect())
}

/// Bytes per (tag, stack) of the run `m` was loaded from (its log, or its
/// segments in order), weighed as `weight` says (the log is read again;
/// memory bounded by what is alive and by the (tag, stack) pairs).
/// heaptag's own writer tag is left out, as in every report.
pub fn stack_weights(m: &Model, weight: Weight) -> Result<StackWeights, Error> {
    stack_weights_files(&run_files(m), m.attributed_peak.1, weight, kept_tags(m))
}

/// As [`stack_weights`], for the log at `path`; `peak_record` is the
/// number (from 1) of the record that reached the attributed peak
/// ([`Model::attributed_peak`]'s second figure; 0: nothing was allocated).
pub fn stack_weights_of(path: &Path, peak_record: u64, weight: Weight) -> Result<StackWeights, Error> {
    stack_weights_files(&[path.to_path_buf()], peak_record, weight, None)
}

fn stack_weights_files(
    files: &[PathBuf],
    peak_record: u64,
    weight: Weight,
    kept: Option<std::collections::HashSet<TagKey>>,
) -> Result<StackWeights, Error> {
    // Allocated covers the whole run: the figures at its end.
    let (at, live) = match weight {
        Weight::Live(at) => (at, true),
        Weight::Allocated => (LiveAt::End, false),
    };
    let f = stack_figures_files(files, peak_record, at, kept)?;
    let entries: Vec<StackWeight> = f
        .entries
        .into_iter()
        .filter_map(|e| {
            let bytes = if live { e.live_bytes } else { e.alloc_bytes };
            (bytes > 0).then_some(StackWeight {
                tag: e.tag,
                stack: e.stack,
                bytes,
                unsampled: e.unsampled,
            })
        })
        .collect();
    let total = entries.iter().fold(0u64, |a, e| a.saturating_add(e.bytes));
    Ok(StackWeights {
        time_ns: live.then_some(f.time_ns),
        entries,
        total,
    })
}

/// Replays `files` up to the moment `at` (`peak_record` as for
/// [`stack_weights_of`]): the replay, and the moment's time.
fn replay_to(
    files: &[PathBuf],
    peak_record: u64,
    at: LiveAt,
    kept: Option<std::collections::HashSet<TagKey>>,
) -> Result<(Replay, u64), Error> {
    let mut replay = Replay {
        kept,
        ..Replay::default()
    };
    let mut records = 0u64;
    let mut last_t = 0u64;
    let stop_at = match at {
        LiveAt::Peak => Some(peak_record),
        _ => None,
    };
    if stop_at != Some(0) {
        replay_files(
            files,
            "stacks",
            &mut replay,
            |rec, _| {
                records += 1;
                let t = record_time(rec);
                if let (LiveAt::Time(at), Some(t)) = (at, t) {
                    if t > at {
                        return Flow::Before;
                    }
                }
                if let Some(t) = t {
                    last_t = last_t.max(t);
                }
                if stop_at == Some(records) {
                    Flow::After
                } else {
                    Flow::Go
                }
            },
            |_| {},
        )?;
    }
    let time_ns = match at {
        LiveAt::Time(t) => t.min(last_t),
        _ => last_t,
    };
    Ok((replay, time_ns))
}

fn stack_figures_files(
    files: &[PathBuf],
    peak_record: u64,
    at: LiveAt,
    kept: Option<std::collections::HashSet<TagKey>>,
) -> Result<StackFigures, Error> {
    let (mut replay, time_ns) = replay_to(files, peak_record, at, kept)?;
    // Generations retired during the replay were settled then; the others
    // now, each the same way.
    let mut by = std::mem::take(&mut replay.settled);
    let mut gens: BTreeMap<Gen, Vec<(u32, Acc)>> = BTreeMap::new();
    for (&(g, stack), a) in &replay.acc {
        gens.entry(g).or_default().push((stack, *a));
    }
    // A tag with counters but no block tracked or sampled: all its
    // allocations are small and unsampled.
    for &g in replay.counters.keys() {
        gens.entry(g).or_default();
    }
    for (g, accs) in gens {
        settle(&mut by, &replay.key(g), &accs, replay.counters.get(&g).copied());
    }
    let entries = by
        .into_iter()
        .filter(|((tag, ..), _)| !tag.is_heaptag_own())
        .map(|((tag, stack, unsampled), s)| StackFigure {
            tag,
            stack,
            unsampled,
            live_bytes: s.live_bytes,
            // A float to a whole number: saturates, and NaN (never made) is 0.
            live_objects: s.live_objects.round() as u64,
            alloc_bytes: s.alloc_bytes,
            alloc_objects: s.alloc_objects,
        })
        .filter(|e| e.live_bytes > 0 || e.live_objects > 0 || e.alloc_bytes > 0 || e.alloc_objects > 0)
        .collect();
    Ok(StackFigures { time_ns, entries })
}

/// Folded stacks of the log `m` was loaded from: one line per distinct
/// (tag, frames), weighed as `weight` says. `m` names the frames: load it
/// with [`Model::load`] and [`crate::symbolize::symbolize`] it first.
pub fn folded(m: &Model, weight: Weight, options: &FoldOptions) -> Result<Folded, Error> {
    let w = stack_weights(m, weight)?;
    Ok(fold(m, &w, options))
}

/// Names the entries of `w` with `m`'s frames and folds them into lines.
pub fn fold(m: &Model, w: &StackWeights, options: &FoldOptions) -> Folded {
    let mut names: MixMap<u32, String> = MixMap::default();
    let mut lines: BTreeMap<String, u64> = BTreeMap::new();
    for e in &w.entries {
        let mut line = tag_frame(&e.tag);
        line.push(';');
        match e.stack {
            Some(s) => {
                let frames = names.entry(s).or_insert_with(|| stack_frames(m, s, options).join(";"));
                line.push_str(frames);
            }
            None if e.unsampled => line.push_str(UNSAMPLED_FRAME),
            None => line.push_str(NO_STACK_FRAME),
        }
        let v = lines.entry(line).or_default();
        *v = v.saturating_add(e.bytes);
    }
    Folded {
        time_ns: w.time_ns,
        lines: lines.into_iter().collect(),
        total: w.total,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moments_parse() {
        assert_eq!("peak".parse::<LiveAt>(), Ok(LiveAt::Peak));
        assert_eq!("end".parse::<LiveAt>(), Ok(LiveAt::End));
        assert_eq!("0.128".parse::<LiveAt>(), Ok(LiveAt::Time(128_000_000)));
        assert_eq!("1.5s".parse::<LiveAt>(), Ok(LiveAt::Time(1_500_000_000)));
        assert_eq!("250ms".parse::<LiveAt>(), Ok(LiveAt::Time(250_000_000)));
        assert_eq!("40us".parse::<LiveAt>(), Ok(LiveAt::Time(40_000)));
        assert_eq!("7ns".parse::<LiveAt>(), Ok(LiveAt::Time(7)));
        for bad in ["", "soon", "1.2.3", "-1", "5 parsecs", "1e400", ".", "ms"] {
            assert!(bad.parse::<LiveAt>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_repeated_definition_goes_on_and_a_retired_or_changed_id_is_another_tag() {
        let def = |stage: &str| Record::TagDef {
            id: 7,
            job: Some(1),
            stage: Some(stage.into()),
            partition: None,
        };
        let mut r = Replay::default();
        r.apply(def("load"));
        assert_eq!(r.gen(7), (7, 0));
        // Again for the same value (after a failed write, or at a segment's
        // start): the same lifetime, however often.
        r.apply(def("load"));
        r.apply(def("load"));
        assert_eq!(r.gen(7), (7, 0));
        // Retired, then defined for the same value: another lifetime.
        r.apply(Record::TagRetire { time_ns: 5, id: 7 });
        r.apply(def("load"));
        assert_eq!(r.gen(7), (7, 1));
        r.apply(def("load"));
        assert_eq!(r.gen(7), (7, 1));
        // Another value without a retire: another lifetime, another tag.
        r.apply(def("prove"));
        assert_eq!(r.gen(7), (7, 2));
        assert_eq!(r.key((7, 1)).stage.as_deref(), Some("load"));
        assert_eq!(r.key((7, 2)).stage.as_deref(), Some("prove"));
        // An id never defined is undefined, id 0 untagged.
        assert_eq!(r.key((9, 0)).undefined, Some(9));
        assert_eq!(r.key((0, 0)), TagKey::default());
    }

    #[test]
    fn fractional_split_sums_to_the_total() {
        let s = split_fractional(10, &[(1, 1.0), (2, 1.0), (3, 1.0)]);
        assert_eq!(s, vec![(1, 4), (2, 3), (3, 3)]);
        assert!(split_fractional(5, &[]).is_empty());
        assert!(split_fractional(5, &[(1, 0.0)]).is_empty());
        // 8192.5 and 0.5 blocks: 8193 of 8194 to the first.
        assert_eq!(
            split_fractional(8194, &[(4, 8192.5), (5, 0.5)]),
            vec![(4, 8193), (5, 1)]
        );
        // Totals beyond a float's precision still sum exactly.
        let big = split_fractional(u64::MAX - 1, &[(1, 1.0), (2, 3.0), (3, 1e-9)]);
        assert_eq!(big.iter().map(|x| x.1 as u128).sum::<u128>(), (u64::MAX - 1) as u128);
    }

    #[test]
    fn exact_split_sums_to_the_total() {
        let parts = [(1, 1), (2, 1), (3, 1)];
        let s = split_exact(100, &parts);
        assert_eq!(s.iter().map(|x| x.1).sum::<u64>(), 100);
        assert_eq!(s, vec![(1, 34), (2, 33), (3, 33)]);
        assert_eq!(split_exact(0, &parts).iter().map(|x| x.1).sum::<u64>(), 0);
        assert!(split_exact(5, &[(1, 0)]).is_empty());
        let big = split_exact(u64::MAX, &[(1, u64::MAX), (2, u64::MAX)]);
        assert_eq!(big.iter().map(|x| x.1 as u128).sum::<u128>(), u64::MAX as u128);
    }

    #[test]
    fn frames_never_hold_separators_or_nothing() {
        assert_eq!(clean_frame("<[u8; 32] as Clone>::clone"), "<[u8, 32] as Clone>::clone");
        assert_eq!(clean_frame("  "), "?");
        assert_eq!(clean_frame("a\nb"), "a\\u{a}b");
        let k = TagKey {
            job: Some(1),
            stage: Some("a;b".into()),
            partition: Some(2),
            ..TagKey::default()
        };
        assert_eq!(tag_frame(&k), "job=1 stage=a,b partition=2");
    }

    #[test]
    fn machinery_frames_are_known() {
        assert!(is_machinery("heaptag_alloc::global::record"));
        assert!(is_machinery("__rustc::__rust_alloc"));
        assert!(is_machinery("backtrace::backtrace::libunwind::trace"));
        assert!(is_machinery("_Unwind_Backtrace"));
        assert!(!is_machinery("alloc::raw_vec::RawVec<T,A>::grow_one"));
        assert!(!is_machinery("pce_pipeline::build_pce"));
    }
}
