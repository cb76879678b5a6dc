//! `heaptag export pprof LOG`: the log as a pprof heap profile.
//!
//! One sample per (call stack, tag), with the four values of Go's heap
//! profiles ([`heaptag_pprof::SAMPLE_TYPES`]) and the tag as string labels
//! `job`, `stage`, `partition`, so `go tool pprof -tagfocus
//! stage=synthesize_partition` keeps one stage. Frames are the log's symbols
//! (or, for a log cut short, the binaries' debug info on this machine, as
//! `heaptag sites` names them), each address a `Location` with one `Line` per
//! function inlined there and its `Mapping` from the log's module map.
//!
//! The figures, from a replay of the log's allocation records (the model
//! keeps totals per tag and per stack, not per pair):
//!
//! - **in use** ([`At`]: the attributed peak, the end of the log, or a time):
//!   tracked blocks exactly, sampled small blocks at their estimator weight
//!   (bytes / p; blocks: weight / size) — the estimate every report uses, so
//!   a tag's samples sum to its live bytes in `heaptag report`, and all
//!   samples at `--at peak` to its *peak attributed*.
//! - **allocated**, up to that moment (Go's heap profiles count allocations
//!   since the start too): tracked blocks exactly (a resize under the same
//!   tag allocates its growth, under another tag its whole size, as `heaptag
//!   report` counts); small blocks from the process's exact per-tag counters
//!   (at the latest counter sample up to the moment, less the tracked bytes
//!   allocated by then; none where the log has no counter sample, as
//!   `heaptag report` counts), split over stacks in
//!   proportion to the sampled weights. A tag whose small allocations were
//!   never sampled gets one frame [`UNSAMPLED`]. At `--at end` a tag's
//!   samples sum to its *allocated* and *allocations* in `heaptag report`.
//!
//! heaptag's own writer tag is left out, as in every report.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use heaptag_format::hash::MixMap;
use heaptag_format::{LogReader, Record};
use heaptag_pprof::{Frame, HeapProfile, Labels, Mapping, Values};

use crate::model::{Model, TagKey};
use crate::text::printable;
use crate::Error;

/// The frame of a tag's small allocations when none of them was sampled:
/// their bytes and count are exact, their stacks unknown.
pub const UNSAMPLED: &str = "[small blocks, none sampled]";

/// The moment the in-use values are taken at (the same moments as
/// `export folded --at`).
pub use crate::folded::LiveAt as At;

/// A tag definition's generation: the id and how many times it was retired
/// before, so an id the log reuses (after a `tag_retire`) is another tag.
type Gen = (u32, u32);

/// Figures of one (tag, stack).
#[derive(Clone, Copy, Debug, Default)]
struct Acc {
    live_bytes: u64,
    live_objects: f64,
    tracked_alloc_bytes: u64,
    tracked_alloc_count: u64,
    sampled_alloc_weight: u64,
    sampled_alloc_objects: f64,
}

/// A live block: (tag, stack, bytes it counts for, objects it counts for).
type Live = (Gen, u32, u64, f64);

#[derive(Default)]
struct Replay {
    generation: MixMap<u32, u32>,
    /// Ids retired and not defined again yet.
    retired: MixMap<u32, ()>,
    keys: MixMap<Gen, TagKey>,
    live: MixMap<u64, Live>,
    moving: MixMap<(u32, u64), Live>,
    samples: MixMap<u64, Live>,
    acc: BTreeMap<(Gen, u32), Acc>,
    /// Tracked (bytes, blocks) allocated so far per tag.
    tracked: MixMap<Gen, (u64, u64)>,
    /// Small (bytes, blocks) allocated per tag at its latest counter
    /// sample: the counters (all sizes, exact) less the tracked part then.
    counters: MixMap<Gen, (u64, u64)>,
}

impl Replay {
    fn gen(&self, id: u32) -> Gen {
        (id, self.generation.get(&id).copied().unwrap_or(0))
    }

    fn acc(&mut self, k: (Gen, u32)) -> &mut Acc {
        self.acc.entry(k).or_default()
    }

    fn tracked_alloc(&mut self, g: Gen, stack: u32, bytes: u64, count: u64) {
        let a = self.acc((g, stack));
        a.tracked_alloc_bytes = a.tracked_alloc_bytes.saturating_add(bytes);
        a.tracked_alloc_count += count;
        let t = self.tracked.entry(g).or_default();
        t.0 = t.0.saturating_add(bytes);
        t.1 = t.1.saturating_add(count);
    }

    fn enter(&mut self, b: Live) {
        let a = self.acc((b.0, b.1));
        a.live_bytes = a.live_bytes.saturating_add(b.2);
        a.live_objects += b.3;
    }

    fn leave(&mut self, b: Live) {
        let a = self.acc((b.0, b.1));
        a.live_bytes = a.live_bytes.saturating_sub(b.2);
        a.live_objects = (a.live_objects - b.3).max(0.0);
    }

    fn apply(&mut self, rec: Record) {
        match rec {
            Record::TagDef {
                id,
                job,
                stage,
                partition,
            } => {
                // A definition after a `tag_retire` of its id starts a new
                // tag; one repeated without (the writer sends definitions
                // again after a failed write) is the same tag.
                let retired = self.retired.remove(&id).is_some();
                let g = match self.generation.get_mut(&id) {
                    Some(g) if retired => {
                        *g += 1;
                        *g
                    }
                    Some(g) => *g,
                    None => {
                        self.generation.insert(id, 0);
                        0
                    }
                };
                let key = TagKey {
                    job,
                    stage: stage.map(printable),
                    partition,
                    undefined: None,
                };
                self.keys.insert((id, g), key);
            }
            Record::Alloc {
                tag, stack, addr, size, ..
            } => {
                let g = self.gen(tag);
                self.tracked_alloc(g, stack, size, 1);
                let b = (g, stack, size, 1.0);
                self.enter(b);
                if let Some(old) = self.live.insert(addr, b) {
                    // An allocation at a live address: its free was dropped.
                    self.leave(old);
                }
            }
            // A block alive when a log segment opened: carried into this
            // segment's state, allocated in an earlier one.
            Record::Carried {
                tag, stack, addr, size, ..
            } => {
                let b = (self.gen(tag), stack, size, 1.0);
                self.enter(b);
                if let Some(old) = self.live.insert(addr, b) {
                    self.leave(old);
                }
            }
            Record::CarriedSample {
                tag,
                stack,
                addr,
                size,
                weight,
                ..
            } => {
                let objects = if size == 0 { 1.0 } else { weight as f64 / size as f64 };
                let b = (self.gen(tag), stack, weight, objects);
                self.enter(b);
                if let Some(old) = self.samples.insert(addr, b) {
                    self.leave(old);
                }
            }
            Record::Free { addr, .. } => {
                if let Some(b) = self.live.remove(&addr) {
                    self.leave(b);
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
                // The realloc rule (docs/REPORTS.md), as the model applies
                // it: under the same tag a resize allocates its growth (and
                // no block), under another tag the whole block.
                let (stack, bytes, count) = match old {
                    Some(o) => {
                        self.leave(o);
                        if o.0 != g {
                            (o.1, size, 1)
                        } else {
                            (o.1, size.saturating_sub(o.2), 0)
                        }
                    }
                    None => (0, size, 1),
                };
                self.tracked_alloc(g, stack, bytes, count);
                let b = (g, stack, size, 1.0);
                self.enter(b);
                if let Some(old) = self.live.insert(addr, b) {
                    self.leave(old);
                }
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
                // A sample of p = size / weight stands for 1 / p blocks.
                let objects = if size == 0 { 1.0 } else { weight as f64 / size as f64 };
                let a = self.acc((g, stack));
                a.sampled_alloc_weight = a.sampled_alloc_weight.saturating_add(weight);
                a.sampled_alloc_objects += objects;
                let b = (g, stack, weight, objects);
                self.enter(b);
                if let Some(old) = self.samples.insert(addr, b) {
                    self.leave(old);
                }
            }
            Record::SampleFree { addr, .. } => {
                if let Some(b) = self.samples.remove(&addr) {
                    self.leave(b);
                }
            }
            Record::TagRetire { id, .. } => {
                self.retired.insert(id, ());
            }
            Record::Counters { tags, .. } => {
                for c in tags {
                    let g = self.gen(c.tag);
                    let (tb, tc) = self.tracked.get(&g).copied().unwrap_or_default();
                    let small = (c.alloc_bytes.saturating_sub(tb), c.alloc_count.saturating_sub(tc));
                    self.counters.insert(g, small);
                }
            }
            _ => {}
        }
    }

    fn key(&self, g: Gen) -> TagKey {
        self.keys.get(&g).cloned().unwrap_or_else(|| TagKey {
            undefined: (g.0 != 0).then_some(g.0),
            ..TagKey::default()
        })
    }
}

/// The time of a record, for the kinds that carry one.
fn record_time(r: &Record) -> Option<u64> {
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
        | Record::CarriedExternal { time_ns, .. }
        | Record::Carried { time_ns, .. }
        | Record::CarriedSample { time_ns, .. } => Some(*time_ns),
        Record::TagDef { .. } | Record::StackDef { .. } | Record::Symbol { .. } | Record::Pad { .. } => None,
    }
}

/// The pprof labels of a tag.
pub fn labels(tag: &TagKey) -> Labels {
    Labels {
        job: tag.job,
        stage: tag.stage.clone(),
        partition: tag.partition,
        other: tag.undefined.map(|_| tag.to_string()),
    }
}

/// Splits `total` over `parts` in proportion to their weights, exactly
/// (largest remainders), so the shares sum to `total`.
fn split_exact(total: u64, parts: &[(u32, f64)]) -> Vec<(u32, u64)> {
    let sum: f64 = parts.iter().map(|p| p.1).sum();
    if sum.is_nan() || sum <= 0.0 {
        return Vec::new();
    }
    let mut shares: Vec<(u32, u64, f64)> = parts
        .iter()
        .map(|&(s, w)| {
            let exact = total as f64 * (w / sum);
            (s, exact.floor() as u64, exact - exact.floor())
        })
        .collect();
    let given: u64 = shares.iter().map(|s| s.1).sum();
    let mut left = total.saturating_sub(given);
    let mut order: Vec<usize> = (0..shares.len()).collect();
    order.sort_by(|&a, &b| shares[b].2.total_cmp(&shares[a].2).then(shares[a].0.cmp(&shares[b].0)));
    for i in order.into_iter().cycle().take(shares.len() * 2) {
        if left == 0 {
            break;
        }
        shares[i].1 += 1;
        left -= 1;
    }
    shares.into_iter().map(|(s, v, _)| (s, v)).collect()
}

/// What [`export`] made, besides the bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    /// The moment of the in-use values, ns since the log's start.
    pub time_ns: u64,
    /// Distinct (stack, tag) samples.
    pub samples: usize,
    /// Sum of the samples' in-use bytes.
    pub inuse_bytes: u64,
    /// Sum of the samples' allocated bytes.
    pub alloc_bytes: u64,
}

/// The heap profile of the log `m` was loaded from (loaded, and symbolized
/// when names are wanted, by the caller), at `at`. The log is read again:
/// memory bounded by what is alive and by the (tag, stack) pairs.
pub fn profile(m: &Model, at: At) -> Result<(HeapProfile, Summary), Error> {
    let path = &m.path;
    let mut r = LogReader::open(path).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let stop_at = match at {
        At::Peak => Some(m.attributed_peak.1),
        _ => None,
    };
    let mut replay = Replay::default();
    let (mut records, mut last_t) = (0u64, 0u64);
    if stop_at != Some(0) {
        for rec in r.by_ref() {
            records += 1;
            let t = record_time(&rec);
            if let (At::Time(limit), Some(t)) = (at, t) {
                if t > limit {
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
    let time_ns = match at {
        At::Time(t) => t.min(last_t),
        _ => last_t,
    };
    let h = &m.header;
    let mut p = HeapProfile::new(h.settings.sample_rate, h.start_wall_ns.saturating_add(time_ns), time_ns);
    for md in &h.modules {
        p.mapping(Mapping {
            start: md.start,
            end: md.end,
            file_offset: md.file_offset,
            path: md.path.clone(),
            build_id: md.build_id.clone(),
        });
    }
    let moment = match at {
        At::Peak => format!("in use at the attributed peak, {:.3} s", time_ns as f64 / 1e9),
        At::End => format!("in use at the end of the log, {:.3} s", time_ns as f64 / 1e9),
        At::Time(_) => format!("in use at {:.3} s", time_ns as f64 / 1e9),
    };
    p.comment(format!("heaptag export pprof {}: {moment}", path.display()));
    p.comment(format!(
        "tracked blocks (>= {} B) exact; small blocks estimated from a sample (one per {} B on average)",
        h.settings.threshold, h.settings.sample_rate
    ));

    // Small allocations per tag, from the counters: split over the sampled stacks.
    // Per tag: the sampled (stack, weight) and (stack, blocks) to split by.
    type Split = Vec<(u32, f64)>;
    let mut per_gen: BTreeMap<Gen, (Split, Split)> = BTreeMap::new();
    for (&(g, stack), a) in &replay.acc {
        let e = per_gen.entry(g).or_default();
        if a.sampled_alloc_weight > 0 {
            e.0.push((stack, a.sampled_alloc_weight as f64));
            e.1.push((stack, a.sampled_alloc_objects));
        }
    }
    for &g in replay.counters.keys() {
        per_gen.entry(g).or_default();
    }
    let mut values: BTreeMap<(Gen, u32), Values> = BTreeMap::new();
    let mut unsampled: BTreeMap<Gen, Values> = BTreeMap::new();
    for (&(g, stack), a) in &replay.acc {
        let v = values.entry((g, stack)).or_default();
        v.inuse_space = clamp(a.live_bytes);
        v.inuse_objects = a.live_objects.round() as i64;
        v.alloc_space = clamp(a.tracked_alloc_bytes);
        v.alloc_objects = clamp(a.tracked_alloc_count);
    }
    for (g, (by_weight, by_objects)) in per_gen {
        // No counter sample: the small allocations are not known (as in
        // `heaptag report`, which then counts tracked bytes only).
        let Some(&(small_bytes, small_count)) = replay.counters.get(&g) else {
            continue;
        };
        if by_weight.is_empty() {
            if small_bytes > 0 || small_count > 0 {
                unsampled.insert(
                    g,
                    Values {
                        alloc_space: clamp(small_bytes),
                        alloc_objects: clamp(small_count),
                        ..Values::default()
                    },
                );
            }
            continue;
        }
        for (stack, b) in split_exact(small_bytes, &by_weight) {
            let v = values.entry((g, stack)).or_default();
            v.alloc_space = v.alloc_space.saturating_add(clamp(b));
        }
        for (stack, c) in split_exact(small_count, &by_objects) {
            let v = values.entry((g, stack)).or_default();
            v.alloc_objects = v.alloc_objects.saturating_add(clamp(c));
        }
    }
    let mut summary = Summary {
        time_ns,
        samples: 0,
        inuse_bytes: 0,
        alloc_bytes: 0,
    };
    let mut tally = |v: &Values| {
        summary.inuse_bytes = summary.inuse_bytes.saturating_add(v.inuse_space as u64);
        summary.alloc_bytes = summary.alloc_bytes.saturating_add(v.alloc_space as u64);
    };
    for ((g, stack), v) in &values {
        let key = replay.key(*g);
        if key.is_heaptag_own() {
            continue;
        }
        let frames = m.stacks.get(stack).map_or(&[][..], |f| f.as_slice());
        p.add(frames, &labels(&key), *v);
        tally(v);
    }
    for (g, v) in &unsampled {
        let key = replay.key(*g);
        if key.is_heaptag_own() {
            continue;
        }
        p.add_named(UNSAMPLED, &labels(&key), *v);
        tally(v);
    }
    for addr in p.addresses() {
        let Some(sym) = m.symbols.get(&addr) else { continue };
        let mut frames = vec![frame(sym)];
        if let Some(callers) = m.inlined.get(&addr) {
            frames.extend(callers.iter().map(frame));
        }
        p.symbol(addr, frames);
    }
    summary.samples = p.len();
    Ok((p, summary))
}

fn frame(s: &crate::model::Sym) -> Frame {
    Frame {
        function: if s.function.is_empty() {
            "?".into()
        } else {
            s.function.clone()
        },
        file: s.file.clone(),
        line: s.line,
    }
}

fn clamp(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// `heaptag export pprof`: loads and symbolizes `log`, builds its profile
/// at `at` and writes it gzipped to `file`, or to `out` when `file` is
/// `None`. Returns what it wrote.
pub fn export(log: &Path, at: At, file: Option<&PathBuf>, out: &mut dyn Write) -> Result<(Summary, Model), Error> {
    let m = super::load_one(log, false)?;
    if m.segments.len() > 1 {
        return Err(super::ExportError::Usage(format!(
            "{}: export pprof reads one log file, not the {} segments of a rotated log",
            log.display(),
            m.segments.len()
        ))
        .into());
    }
    let (p, summary) = profile(&m, at)?;
    let bytes = p.encode();
    match file {
        Some(f) => super::refuse_input(&m, f)
            .and_then(|()| std::fs::write(f, &bytes).map_err(|e| Error::WriteOutput(f.clone(), e)))?,
        None => out.write_all(&bytes)?,
    }
    Ok((summary, m))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_sums_to_the_total() {
        let s = split_exact(10, &[(1, 1.0), (2, 1.0), (3, 1.0)]);
        assert_eq!(s.iter().map(|x| x.1).sum::<u64>(), 10);
        assert_eq!(s, vec![(1, 4), (2, 3), (3, 3)]);
        assert!(split_exact(5, &[]).is_empty());
    }
}
