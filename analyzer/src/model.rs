//! Replaying a log: the state of the process at every moment, kept in memory
//! bounded by what is alive (plus one small record per fingerprinted block).

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Instant;

use heaptag_format::{Fill, Header, LogReader, Problem, Record};

use crate::Error;

/// A fast hasher for integer keys (addresses, ids): one multiply and a fold.
/// The std SipHash made map lookups a third of the replay time.
#[derive(Default, Clone, Copy)]
pub struct FastHasher(u64);

impl std::hash::Hasher for FastHasher {
    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 29)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }
}

/// Ids beyond this share one overflow slot (a damaged but checksummed log
/// must not make the analyzer allocate gigabytes).
const MAX_DENSE_ID: usize = 1 << 22;

/// The entry for `id` in a dense per-id vector, growing it as needed.
fn slot<T: Default>(v: &mut Vec<T>, id: u32) -> &mut T {
    let i = (id as usize).min(MAX_DENSE_ID);
    if i >= v.len() {
        v.resize_with(i + 1, T::default);
    }
    &mut v[i]
}

/// A `HashMap` with [`FastHasher`].
pub type FastMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<FastHasher>>;

/// A tag as the log defines it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct TagKey {
    /// Job.
    pub job: Option<u64>,
    /// Stage.
    pub stage: Option<String>,
    /// Partition.
    pub partition: Option<u32>,
}

impl TagKey {
    /// The tag of heaptag's own log writer (left out of per-tag reports).
    pub fn is_heaptag_own(&self) -> bool {
        self.stage.as_deref() == Some(heaptag_format::WRITER_STAGE)
    }
}

impl fmt::Display for TagKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
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

/// A live tracked block.
#[derive(Clone, Copy, Debug)]
pub struct Block {
    /// Tag id.
    pub tag: u32,
    /// Stack id.
    pub stack: u32,
    /// Requested size.
    pub size: u64,
    /// Allocation time, ns.
    pub start: u64,
    /// Latest fingerprint.
    pub fp: Option<Fp>,
}

/// The lifetime of a tracked block (for duplicate detection).
#[derive(Clone, Copy, Debug)]
pub struct Interval {
    /// Tag id.
    pub tag: u32,
    /// Stack id.
    pub stack: u32,
    /// Size.
    pub size: u64,
    /// Allocated at, ns.
    pub start: u64,
    /// Freed at, ns (`None`: alive at the end of the log).
    pub end: Option<u64>,
    /// Fingerprint, if one was taken.
    pub fp: Option<Fp>,
}

#[derive(Clone, Copy, Debug)]
struct Sample {
    tag: u32,
    stack: u32,
    size: u64,
    weight: u64,
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
    /// Tags that allocated here (at most 32 kept).
    pub tags: BTreeSet<u32>,
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
    /// Per tag: (tag id, tracked, small estimate, external).
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

/// Everything the reports need from one log.
#[derive(Debug, Default)]
pub struct Model {
    /// The log's path.
    pub path: PathBuf,
    /// Its header.
    pub header: Header,
    /// Tag definitions by id.
    pub tags: FastMap<u32, TagKey>,
    /// Stack definitions.
    pub stacks: FastMap<u32, Vec<u64>>,
    /// Resolved frames.
    pub symbols: FastMap<u64, Sym>,
    /// Per tag id (ids are dense: a vector, not a map; see `slot`).
    pub tag_acc: Vec<TagAcc>,
    /// Per stack id.
    pub site_acc: Vec<SiteAcc>,
    /// Lifetimes of blocks of at least the fingerprint size (or fingerprinted).
    pub intervals: Vec<Interval>,
    /// Highest attributed (tracked + small estimate) and the record index, time.
    pub attributed_peak: (u64, u64, u64),
    /// Composition at the highest RSS sample.
    pub rss_peak: Option<Composition>,
    /// Composition at the attributed peak (filled by a second pass).
    pub attributed_composition: Option<Composition>,
    /// Per-tag live bytes at each RSS sample: (time, [(tag, bytes)]).
    pub timeline: Vec<(u64, Vec<(u32, u64)>)>,
    /// VmRSS at each RSS sample (same times as `timeline`).
    pub rss_series: Vec<u64>,
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
    live: FastMap<u64, Block>,
    moving: FastMap<(u32, u64), Block>,
    samples: FastMap<u64, Sample>,
    last_rss: Option<u64>,
    last_je: Option<(u64, u64)>,
    peak_pending: bool,
    /// Keep block lifetimes (only `heaptag dups` needs them).
    want_intervals: bool,
}

/// Shows reading progress on stderr when it is a terminal.
struct Progress {
    on: bool,
    total: u64,
    last: Instant,
    label: String,
}

impl Progress {
    fn new(path: &Path, pass: &str) -> Progress {
        Progress {
            on: std::io::stderr().is_terminal(),
            total: std::fs::metadata(path).map_or(0, |m| m.len()),
            last: Instant::now(),
            label: format!("{} ({pass})", path.display()),
        }
    }

    fn tick(&mut self, at: u64) {
        if self.on && self.last.elapsed().as_millis() >= 250 && self.total > 0 {
            self.last = Instant::now();
            eprint!("\rreading {}: {:>3}%", self.label, at * 100 / self.total);
        }
    }

    fn done(&self) {
        if self.on && self.last.elapsed().as_millis() > 0 {
            eprint!("\r\x1b[K");
        }
    }
}

impl Model {
    /// Reads the log at `path` in one pass; with `peak`, a second pass stops
    /// at the attributed peak to record what held it (`heaptag peak`); with
    /// `intervals`, keeps the lifetime of every large block (`heaptag dups`).
    pub fn load(path: &Path, peak: bool, intervals: bool) -> Result<Model, Error> {
        let mut m = Model::pass(path, None, intervals)?;
        let (_, at, _) = m.attributed_peak;
        if peak && at > 0 {
            let again = Model::pass(path, Some(at), false)?;
            m.attributed_composition = again.attributed_composition;
        }
        Ok(m)
    }

    fn pass(path: &Path, stop_at: Option<u64>, want_intervals: bool) -> Result<Model, Error> {
        let mut r = LogReader::open(path).map_err(|source| Error::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let mut m = Model {
            path: path.to_path_buf(),
            header: r.header().clone(),
            want_intervals,
            ..Model::default()
        };
        let mut progress = Progress::new(path, if stop_at.is_some() { "peak" } else { "replay" });
        while let Some(rec) = r.next() {
            m.records += 1;
            m.apply(rec);
            if stop_at == Some(m.records) {
                m.attributed_composition = Some(m.compose());
                break;
            }
            if m.records % 65536 == 0 {
                progress.tick(r.offset());
            }
        }
        progress.done();
        m.problems = r.problems().to_vec();
        m.ended = r.ended();
        if stop_at.is_none() {
            m.close();
            // A log cut short has no symbols: resolve its frames here.
            if m.symbols.is_empty() && !m.stacks.is_empty() {
                let (_, skipped) = crate::symbolize::fill_missing(&mut m);
                m.symbol_notes = skipped;
            }
        }
        Ok(m)
    }

    /// The tag's definition (untagged for unknown ids).
    pub fn tag(&self, id: u32) -> TagKey {
        self.tags.get(&id).cloned().unwrap_or_default()
    }

    fn acc(&mut self, tag: u32) -> &mut TagAcc {
        slot(&mut self.tag_acc, tag)
    }

    fn site(&mut self, stack: u32) -> &mut SiteAcc {
        slot(&mut self.site_acc, stack)
    }

    /// Tags that ever held or allocated anything, with their figures.
    pub fn tags_used(&self) -> impl Iterator<Item = (u32, &TagAcc)> {
        self.tag_acc
            .iter()
            .enumerate()
            .filter(|(_, a)| a.peak > 0 || a.alloc_count.unwrap_or(0) > 0 || a.external != 0 || a.tracked_count > 0)
            .map(|(id, a)| (id as u32, a))
    }

    /// Stacks that allocated, with their figures.
    pub fn sites_used(&self) -> impl Iterator<Item = (u32, &SiteAcc)> {
        self.site_acc
            .iter()
            .enumerate()
            .filter(|(_, s)| s.alloc_count > 0)
            .map(|(id, s)| (id as u32, s))
    }

    fn time(&mut self, t: u64) -> u64 {
        self.end_ns = self.end_ns.max(t);
        t
    }

    /// Adds `bytes` (tracked when `tracked`) to tag and site; raises peaks.
    fn grow(&mut self, tag: u32, stack: u32, bytes: u64, tracked: bool, t: u64) {
        let a = self.acc(tag);
        if tracked {
            a.tracked += bytes;
            a.tracked_peak = a.tracked_peak.max(a.tracked);
        } else {
            a.small += bytes;
        }
        if a.tracked + a.small > a.peak {
            a.peak = a.tracked + a.small;
            a.peak_t = t;
        }
        let s = self.site(stack);
        s.live += bytes;
        s.alloc_bytes += bytes;
        s.alloc_count += 1;
        if s.live > s.peak {
            s.peak = s.live;
            s.peak_t = t;
        }
        if s.tags.len() < 32 {
            s.tags.insert(tag);
        }
        if tracked {
            self.tracked += bytes;
        } else {
            self.small += bytes;
        }
        let attributed = self.tracked + self.small;
        if attributed > self.attributed_peak.0 {
            self.attributed_peak = (attributed, self.records, t);
        }
    }

    fn shrink(&mut self, tag: u32, stack: u32, bytes: u64, tracked: bool) {
        let a = self.acc(tag);
        if tracked {
            a.tracked = a.tracked.saturating_sub(bytes);
            self.tracked = self.tracked.saturating_sub(bytes);
        } else {
            a.small = a.small.saturating_sub(bytes);
            self.small = self.small.saturating_sub(bytes);
        }
        let s = self.site(stack);
        s.live = s.live.saturating_sub(bytes);
    }

    fn keep_interval(&self, b: &Block) -> bool {
        self.want_intervals
            && (b.fp.is_some() || b.size >= self.header.settings.fingerprint_min.max(self.header.settings.threshold))
    }

    fn end_block(&mut self, b: Block, t: u64) {
        self.shrink(b.tag, b.stack, b.size, true);
        if self.keep_interval(&b) {
            self.intervals.push(Interval {
                tag: b.tag,
                stack: b.stack,
                size: b.size,
                start: b.start,
                end: Some(t),
                fp: b.fp,
            });
        }
    }

    fn apply(&mut self, rec: Record) {
        if rec.is_event() {
            self.events += 1;
        }
        match rec {
            Record::TagDef {
                id,
                job,
                stage,
                partition,
            } => {
                self.tags.insert(id, TagKey { job, stage, partition });
            }
            Record::StackDef { id, frames } => {
                self.stacks.insert(id, frames);
            }
            Record::Symbol {
                addr,
                function,
                file,
                line,
            } => {
                self.symbols.insert(addr, Sym { function, file, line });
            }
            Record::Alloc {
                time_ns,
                tag,
                stack,
                addr,
                size,
                ..
            } => {
                let t = self.time(time_ns);
                let a = self.acc(tag);
                a.tracked_alloc += size;
                a.tracked_count += 1;
                self.grow(tag, stack, size, true, t);
                let b = Block {
                    tag,
                    stack,
                    size,
                    start: t,
                    fp: None,
                };
                if let Some(old) = self.live.insert(addr, b) {
                    // An allocation at a live address: its free was dropped.
                    self.end_block(old, t);
                }
            }
            Record::Free { time_ns, addr, .. } => {
                let t = self.time(time_ns);
                match self.live.remove(&addr) {
                    Some(b) => self.end_block(b, t),
                    None => self.unmatched_frees += 1,
                }
            }
            Record::ReallocBegin { thread, addr, time_ns } => {
                self.time(time_ns);
                if let Some(b) = self.live.remove(&addr) {
                    self.moving.insert((thread, addr), b);
                }
            }
            Record::Realloc {
                time_ns,
                thread,
                tag,
                old_addr,
                addr,
                size,
                ..
            } => {
                let t = self.time(time_ns);
                let old = self
                    .moving
                    .remove(&(thread, old_addr))
                    .or_else(|| self.live.remove(&old_addr));
                let (stack, start, fp) = match old {
                    Some(b) => {
                        self.shrink(b.tag, b.stack, b.size, true);
                        (b.stack, b.start, b.fp)
                    }
                    None => (0, t, None),
                };
                self.grow(tag, stack, size, true, t);
                let a = self.acc(tag);
                a.tracked_alloc += size.saturating_sub(old.map_or(0, |b| b.size));
                // A resize changes the content; an old fingerprint no longer holds.
                let fp = if old.is_some_and(|b| b.size == size) { fp } else { None };
                self.live.insert(
                    addr,
                    Block {
                        tag,
                        stack,
                        size,
                        start,
                        fp,
                    },
                );
            }
            Record::SampleAlloc {
                time_ns,
                tag,
                stack,
                addr,
                size,
                weight,
                ..
            } => {
                let t = self.time(time_ns);
                let s = Sample {
                    tag,
                    stack,
                    size,
                    weight,
                };
                self.grow(tag, stack, weight, false, t);
                self.acc(tag).small_var += s.var();
                self.small_var += s.var();
                if let Some(old) = self.samples.insert(addr, s) {
                    self.drop_sample(old);
                }
            }
            Record::SampleFree { time_ns, addr, .. } => {
                self.time(time_ns);
                if let Some(s) = self.samples.remove(&addr) {
                    self.drop_sample(s);
                }
            }
            Record::Fingerprint {
                time_ns,
                addr,
                hash,
                meta,
                ..
            } => {
                self.time(time_ns);
                if let Some(b) = self.live.get_mut(&addr) {
                    b.fp = Some(Fp {
                        hash,
                        fill: meta.fill,
                        full: meta.full,
                    });
                }
            }
            Record::Mark { time_ns, label } => {
                let t = self.time(time_ns);
                self.marks.push((t, label));
            }
            Record::Counters { time_ns, tags } => {
                self.time(time_ns);
                for c in tags {
                    let a = self.acc(c.tag);
                    a.alloc_bytes = Some(c.alloc_bytes);
                    a.alloc_count = Some(c.alloc_count);
                }
            }
            Record::Totals {
                time_ns,
                live,
                tracked,
                overhead,
            } => {
                self.time(time_ns);
                self.last_totals = Some((live, tracked, overhead));
                self.max_overhead = self.max_overhead.max(overhead);
                // The last record of a sample: complete a peak taken at its Rss.
                if std::mem::take(&mut self.peak_pending) {
                    if let Some(p) = self.rss_peak.as_mut() {
                        p.totals = self.last_totals;
                    }
                }
            }
            Record::Jemalloc {
                time_ns,
                allocated,
                resident,
                ..
            } => {
                self.time(time_ns);
                self.last_je = Some((allocated, resident));
                if self.peak_pending {
                    if let Some(p) = self.rss_peak.as_mut() {
                        p.jemalloc = self.last_je;
                    }
                }
            }
            Record::Rss { time_ns, vm_rss, .. } => {
                let t = self.time(time_ns);
                self.last_rss = Some(vm_rss);
                // Samples come as Rss, Jemalloc, Counters, Totals: the
                // composition is taken here and completed by the jemalloc and
                // totals records of the same sample.
                if self.rss_peak.as_ref().is_none_or(|p| vm_rss > p.rss.unwrap_or(0)) {
                    let mut c = self.compose();
                    c.time_ns = t;
                    self.rss_peak = Some(c);
                    self.peak_pending = true;
                }
                let per_tag: Vec<(u32, u64)> = self
                    .tag_acc
                    .iter()
                    .enumerate()
                    .filter(|(_, a)| a.tracked + a.small > 0)
                    .map(|(id, a)| (id as u32, a.tracked + a.small))
                    .collect();
                self.timeline.push((t, per_tag));
                self.rss_series.push(vm_rss);
            }
            Record::External {
                time_ns, tag, bytes, ..
            } => {
                self.time(time_ns);
                self.acc(tag).external += bytes;
                self.external += bytes;
            }
            Record::Dropped { events, time_ns } => {
                self.time(time_ns);
                self.dropped = self.dropped.max(events);
            }
            Record::End { time_ns, dropped } => {
                self.time(time_ns);
                self.dropped = self.dropped.max(dropped);
            }
            Record::Pad { .. } => {}
            Record::ProcStart {
                time_ns,
                pid,
                ppid,
                cmdline,
            } => {
                self.time(time_ns);
                if !self.procs.iter().any(|p| p.pid == pid) {
                    self.procs.push(ProcAcc {
                        pid,
                        ppid,
                        cmdline,
                        ..ProcAcc::default()
                    });
                }
            }
            Record::ProcRss {
                time_ns,
                pid,
                vm_rss,
                pss,
                ..
            } => {
                let t = self.time(time_ns);
                if let Some(p) = self.procs.iter_mut().find(|p| p.pid == pid) {
                    p.samples.push((t, vm_rss));
                    if vm_rss > p.peak.0 {
                        p.peak = (vm_rss, t);
                    }
                    p.pss_peak = p.pss_peak.max(pss);
                }
            }
            Record::ProcExit { time_ns, pid, code } => {
                self.time(time_ns);
                if let Some(p) = self.procs.iter_mut().find(|p| p.pid == pid) {
                    p.exit = Some(code);
                }
            }
        }
    }

    fn drop_sample(&mut self, s: Sample) {
        self.shrink(s.tag, s.stack, s.weight, false);
        let v = s.var();
        let a = self.acc(s.tag);
        a.small_var = (a.small_var - v).max(0.0);
        self.small_var = (self.small_var - v).max(0.0);
    }

    /// What holds memory now.
    fn compose(&self) -> Composition {
        let mut per_tag: Vec<(u32, u64, u64, i64)> = self
            .tag_acc
            .iter()
            .enumerate()
            .filter(|(_, a)| a.tracked + a.small > 0 || a.external != 0)
            .map(|(id, a)| (id as u32, a.tracked, a.small, a.external))
            .collect();
        per_tag.sort_by_key(|&(id, t, s, _)| (std::cmp::Reverse(t + s), id));
        let mut per_site: Vec<(u32, u64)> = self
            .site_acc
            .iter()
            .enumerate()
            .filter(|(_, s)| s.live > 0)
            .map(|(id, s)| (id as u32, s.live))
            .collect();
        per_site.sort_by_key(|&(id, b)| (std::cmp::Reverse(b), id));
        Composition {
            time_ns: self.end_ns,
            rss: self.last_rss,
            jemalloc: self.last_je,
            totals: self.last_totals,
            tracked: self.tracked,
            small: (self.small, self.small_var.sqrt()),
            external: self.external.max(0) as u64,
            per_tag,
            per_site,
        }
    }

    /// End of log: blocks still alive become open intervals.
    fn close(&mut self) {
        let live: Vec<Block> = self.live.values().copied().collect();
        for b in live {
            if self.keep_interval(&b) {
                self.intervals.push(Interval {
                    tag: b.tag,
                    stack: b.stack,
                    size: b.size,
                    start: b.start,
                    end: None,
                    fp: b.fp,
                });
            }
        }
    }

    /// Highest RSS and when: the process's own samples, or for a `run` /
    /// `watch` log the highest sampled process.
    pub fn peak_rss(&self) -> Option<(u64, u64)> {
        self.rss_peak
            .as_ref()
            .and_then(|c| c.rss.map(|r| (r, c.time_ns)))
            .or_else(|| self.procs.iter().map(|p| p.peak).max())
    }

    /// Whether the log holds any fingerprints.
    pub fn has_fingerprints(&self) -> bool {
        self.intervals.iter().any(|i| i.fp.is_some())
    }
}
