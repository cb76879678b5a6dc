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
//!   lines to the report's *peak attributed* at [`LiveAt::Peak`].
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
//! model keeps totals per tag and per stack, not per pair); tags are
//! resolved when a block is allocated, so an id the log reuses for another
//! tag never merges two tags. Names come from the model's symbols (run
//! [`crate::symbolize::symbolize`] first for a log without them).

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::Path;
use std::str::FromStr;

use heaptag_format::hash::MixMap;
use heaptag_format::{LogReader, Record};

use crate::model::{Model, TagKey};
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

/// A tag definition's generation: the id and how many times it was
/// defined before, so a reused id is another tag.
pub(crate) type Gen = (u32, u32);

/// A replay of a log's allocation records that keeps bytes per (tag
/// generation, stack): what folded stacks and the Perfetto counters need.
#[derive(Default)]
pub(crate) struct Replay {
    /// Current generation of each id.
    generation: MixMap<u32, u32>,
    /// Tag of each generation.
    keys: MixMap<Gen, TagKey>,
    /// Live tracked blocks: address -> (tag, stack, size).
    live: MixMap<u64, (Gen, u32, u64)>,
    /// Blocks between `realloc_begin` and `realloc`: (thread, address).
    moving: MixMap<(u32, u64), (Gen, u32, u64)>,
    /// Live sampled blocks: address -> (tag, stack, weight).
    samples: MixMap<u64, (Gen, u32, u64)>,
    /// Live bytes per (tag, stack).
    live_bytes: MixMap<(Gen, u32), u64>,
    /// Allocated tracked bytes per (tag, stack).
    tracked_alloc: MixMap<(Gen, u32), u64>,
    /// Allocated sampled weight per (tag, stack).
    sampled_alloc: MixMap<(Gen, u32), u64>,
    /// Latest counters per tag (all sizes, exact).
    counters: MixMap<Gen, u64>,
    /// With `track_tags`: live bytes per tag, and the tags whose live
    /// bytes changed since the caller last took the list.
    pub(crate) track_tags: bool,
    pub(crate) tag_live: MixMap<Gen, u64>,
    pub(crate) changed: Vec<Gen>,
}

impl Replay {
    fn gen(&self, id: u32) -> Gen {
        (id, self.generation.get(&id).copied().unwrap_or(0))
    }

    fn add_live(&mut self, k: (Gen, u32), v: u64) {
        let e = self.live_bytes.entry(k).or_default();
        *e = e.saturating_add(v);
        if self.track_tags {
            let t = self.tag_live.entry(k.0).or_default();
            *t = t.saturating_add(v);
            self.changed.push(k.0);
        }
    }

    fn sub_live(&mut self, k: (Gen, u32), v: u64) {
        if let Some(e) = self.live_bytes.get_mut(&k) {
            let v = v.min(*e);
            *e -= v;
            if *e == 0 {
                self.live_bytes.remove(&k);
            }
            if self.track_tags {
                if let Some(t) = self.tag_live.get_mut(&k.0) {
                    *t = t.saturating_sub(v);
                }
                self.changed.push(k.0);
            }
        }
    }

    fn alloc_tracked(&mut self, k: (Gen, u32), v: u64) {
        let e = self.tracked_alloc.entry(k).or_default();
        *e = e.saturating_add(v);
    }

    pub(crate) fn apply(&mut self, rec: Record) {
        match rec {
            Record::TagDef {
                id,
                job,
                stage,
                partition,
            } => {
                // The first definition is generation 0; each later one of
                // the same id (after a tag_retire) is another tag.
                let g = match self.generation.get_mut(&id) {
                    Some(g) => {
                        *g += 1;
                        *g
                    }
                    None => {
                        self.generation.insert(id, 0);
                        0
                    }
                };
                self.keys.insert(
                    (id, g),
                    TagKey {
                        job,
                        stage: stage.map(printable),
                        partition,
                        undefined: None,
                    },
                );
            }
            Record::Alloc {
                tag, stack, addr, size, ..
            }
            | Record::Carried {
                tag, stack, addr, size, ..
            } => {
                let is_alloc = matches!(rec, Record::Alloc { .. });
                let g = self.gen(tag);
                if is_alloc {
                    self.alloc_tracked((g, stack), size);
                }
                self.add_live((g, stack), size);
                if let Some((og, os, osz)) = self.live.insert(addr, (g, stack, size)) {
                    // An allocation at a live address: its free was dropped.
                    self.sub_live((og, os), osz);
                }
            }
            Record::Free { addr, .. } => {
                if let Some((g, s, sz)) = self.live.remove(&addr) {
                    self.sub_live((g, s), sz);
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
                let (stack, allocated) = match old {
                    Some((og, os, osz)) => {
                        self.sub_live((og, os), osz);
                        // The realloc rule (docs/REPORTS.md), as the model
                        // applies it: under the same tag a resize
                        // allocates its growth, under another the whole.
                        let moved = og != g;
                        (os, if moved { size } else { size.saturating_sub(osz) })
                    }
                    None => (0, size),
                };
                self.alloc_tracked((g, stack), allocated);
                self.add_live((g, stack), size);
                if let Some((og, os, osz)) = self.live.insert(addr, (g, stack, size)) {
                    self.sub_live((og, os), osz);
                }
            }
            Record::SampleAlloc {
                tag,
                stack,
                addr,
                weight,
                ..
            }
            | Record::CarriedSample {
                tag,
                stack,
                addr,
                weight,
                ..
            } => {
                let is_alloc = matches!(rec, Record::SampleAlloc { .. });
                let g = self.gen(tag);
                if is_alloc {
                    let e = self.sampled_alloc.entry((g, stack)).or_default();
                    *e = e.saturating_add(weight);
                }
                self.add_live((g, stack), weight);
                if let Some((og, os, w)) = self.samples.insert(addr, (g, stack, weight)) {
                    self.sub_live((og, os), w);
                }
            }
            Record::SampleFree { addr, .. } => {
                if let Some((g, s, w)) = self.samples.remove(&addr) {
                    self.sub_live((g, s), w);
                }
            }
            Record::Counters { tags, .. } => {
                for c in tags {
                    let g = self.gen(c.tag);
                    self.counters.insert(g, c.alloc_bytes);
                }
            }
            _ => {}
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
    let mut shares: Vec<(u32, u64, u128)> = parts
        .iter()
        .map(|&(s, w)| {
            let num = total as u128 * w as u128;
            (s, (num / sum) as u64, num % sum)
        })
        .collect();
    let given: u64 = shares.iter().map(|s| s.1).sum();
    let mut left = total - given;
    let mut order: Vec<usize> = (0..shares.len()).collect();
    order.sort_by(|&a, &b| shares[b].2.cmp(&shares[a].2).then(shares[a].0.cmp(&shares[b].0)));
    for i in order {
        if left == 0 {
            break;
        }
        shares[i].1 += 1;
        left -= 1;
    }
    shares.into_iter().map(|(s, v, _)| (s, v)).collect()
}

/// Bytes per (tag, stack) of the log `m` was loaded from, weighed as
/// `weight` says (the log is read again; memory bounded by what is alive
/// and by the (tag, stack) pairs). heaptag's own writer tag is left out,
/// as in every report.
pub fn stack_weights(m: &Model, weight: Weight) -> Result<StackWeights, Error> {
    stack_weights_of(&m.path, m.attributed_peak.1, weight)
}

/// As [`stack_weights`], for the log at `path`; `peak_record` is the
/// number (from 1) of the record that reached the attributed peak
/// ([`Model::attributed_peak`]'s second figure; 0: nothing was allocated).
pub fn stack_weights_of(path: &Path, peak_record: u64, weight: Weight) -> Result<StackWeights, Error> {
    let r = LogReader::open(path).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let mut replay = Replay::default();
    let mut records = 0u64;
    let mut last_t = 0u64;
    let stop_at = match weight {
        Weight::Live(LiveAt::Peak) => Some(peak_record),
        _ => None,
    };
    if stop_at != Some(0) {
        for rec in r {
            records += 1;
            let t = record_time(&rec);
            if let (Weight::Live(LiveAt::Time(at)), Some(t)) = (weight, t) {
                if t > at {
                    break;
                }
            }
            if let Some(t) = t {
                last_t = last_t.max(t);
            }
            replay.apply(rec);
            if stop_at == Some(records) {
                break;
            }
        }
    }
    let mut by: BTreeMap<(TagKey, Option<u32>, bool), u64> = BTreeMap::new();
    let mut put = |k: (TagKey, Option<u32>, bool), v: u64| {
        if v > 0 && !k.0.is_heaptag_own() {
            let e = by.entry(k).or_default();
            *e = e.saturating_add(v);
        }
    };
    let time_ns = match weight {
        Weight::Live(at) => {
            for (&(g, stack), &v) in &replay.live_bytes {
                put((replay.key(g), (stack != 0).then_some(stack), false), v);
            }
            Some(match at {
                LiveAt::Time(t) => t.min(last_t),
                _ => last_t,
            })
        }
        Weight::Allocated => {
            // Per tag generation: tracked exactly; small from the exact
            // counters, split by the sampled weights.
            let mut gens: BTreeMap<Gen, (Vec<(u32, u64)>, u64)> = BTreeMap::new();
            for (&(g, stack), &v) in &replay.tracked_alloc {
                let e = gens.entry(g).or_default();
                e.1 = e.1.saturating_add(v);
                put((replay.key(g), (stack != 0).then_some(stack), false), v);
            }
            for (&(g, stack), &v) in &replay.sampled_alloc {
                gens.entry(g).or_default().0.push((stack, v));
            }
            for &g in replay.counters.keys() {
                gens.entry(g).or_default();
            }
            for (g, (mut sampled, tracked)) in gens {
                // Without counters (a log cut before its first memory
                // sample) the report counts tracked bytes only: so do we.
                let small = replay.counters.get(&g).map_or(0, |&all| all.saturating_sub(tracked));
                sampled.sort_unstable();
                let k = replay.key(g);
                if sampled.is_empty() {
                    put((k, None, true), small);
                } else {
                    for (stack, v) in split_exact(small, &sampled) {
                        put((k.clone(), (stack != 0).then_some(stack), false), v);
                    }
                }
            }
            None
        }
    };
    let entries: Vec<StackWeight> = by
        .into_iter()
        .map(|((tag, stack, unsampled), bytes)| StackWeight {
            tag,
            stack,
            bytes,
            unsampled,
        })
        .collect();
    let total = entries.iter().fold(0u64, |a, e| a.saturating_add(e.bytes));
    Ok(StackWeights {
        time_ns,
        entries,
        total,
    })
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
            undefined: None,
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
