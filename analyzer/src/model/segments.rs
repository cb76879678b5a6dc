//! Sets of log segments read as one run.
//!
//! A rotated log (`HEAPTAG_LOG_MAX`) is numbered files, each readable
//! alone: each starts with a `segment` record (run, index), then the
//! `carried*` records of what was alive when it began. [`expand_inputs`]
//! turns the command line's paths (files, directories, glob patterns) into
//! files; [`plan_runs`] orders each run's segments by their `segment`
//! record (never by file name) and finds gaps; the loader replays a run's
//! segments in order into one model. When a segment's predecessor was read,
//! its `carried*` records are skipped (the model already knows that
//! state); when it is read alone or after a gap, they are applied as the
//! live state: blocks the model holds that are not carried were freed in
//! the gap, carried ones it lacks are added (with their allocation times).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use heaptag_format::{LogReader, Record};

use super::{Model, Sample};
use crate::Error;

/// What a log's first records say about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentInfo {
    /// The file.
    pub path: PathBuf,
    /// Its `segment` record's (run, index), `None` for a log that is not
    /// segmented.
    pub segment: Option<(u64, u32)>,
}

/// The files of one run, in order, and what is missing between them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunPlan {
    /// Its segments in index order (one file for a log not segmented).
    pub files: Vec<SegmentInfo>,
    /// One line per gap: the indexes missing and the files around them.
    pub gaps: Vec<String>,
}

impl RunPlan {
    /// The run's id, for a segmented log.
    pub fn run(&self) -> Option<u64> {
        self.files.first().and_then(|f| f.segment).map(|s| s.0)
    }
}

/// How many of a log's first records are looked at for its `segment`
/// record (it is the first record of a segment; padding may precede it).
const PEEK_RECORDS: usize = 16;

/// Reads a log's first records: its `segment` record, if any. Only a
/// regular file is looked into: a FIFO or a device could not be read again
/// for the replay, so it is a log of its own.
pub fn peek(path: &Path) -> Result<SegmentInfo, Error> {
    if std::fs::metadata(path).is_ok_and(|m| !m.is_file()) {
        return Ok(SegmentInfo {
            path: path.to_path_buf(),
            segment: None,
        });
    }
    let mut r = LogReader::open(path).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let mut segment = None;
    for _ in 0..PEEK_RECORDS {
        match r.next() {
            Some(Record::Segment { run, index, .. }) => {
                segment = Some((run, index));
                break;
            }
            Some(Record::Pad { .. }) => continue,
            _ => break,
        }
    }
    Ok(SegmentInfo {
        path: path.to_path_buf(),
        segment,
    })
}

fn has_glob_chars(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

/// The files the command line names: a file as it is, a directory as its
/// `*.htlog` files, a glob pattern (quoted, so the shell left it) as the
/// files it matches. The same file named twice is read once. A path that
/// does not exist and is no pattern is kept, for the reader to say so.
pub fn expand_inputs(args: &[PathBuf]) -> Result<Vec<PathBuf>, Error> {
    let mut out: Vec<PathBuf> = Vec::new();
    let push = |p: PathBuf, out: &mut Vec<PathBuf>| {
        if !out.contains(&p) {
            out.push(p);
        }
    };
    for a in args {
        if a.is_dir() {
            let rd = std::fs::read_dir(a).map_err(|e| Error::Inputs(format!("{}: cannot list: {e}", a.display())))?;
            let mut files: Vec<PathBuf> = rd
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "htlog"))
                .collect();
            if files.is_empty() {
                return Err(Error::Inputs(format!(
                    "{}: a directory without *.htlog files",
                    a.display()
                )));
            }
            files.sort();
            files.into_iter().for_each(|p| push(p, &mut out));
        } else if !a.exists() && a.to_str().is_some_and(has_glob_chars) {
            let pattern = a.to_str().unwrap_or_default();
            let paths = glob::glob(pattern).map_err(|e| Error::Inputs(format!("{pattern}: bad pattern: {e}")))?;
            let mut files: Vec<PathBuf> = paths.filter_map(Result::ok).filter(|p| p.is_file()).collect();
            if files.is_empty() {
                return Err(Error::Inputs(format!("{pattern}: no file matches")));
            }
            files.sort();
            files.into_iter().for_each(|p| push(p, &mut out));
        } else {
            push(a.clone(), &mut out);
        }
    }
    Ok(out)
}

/// Groups the files into runs: a log that is not segmented is a run of its
/// own; segments are grouped by their run id (runs in the order their
/// first file was named) and ordered by index. Two files with one run and
/// index are an error; so are several runs when `several` is false (a
/// command that reads one run), naming the files of each.
pub fn plan_runs(paths: &[PathBuf], several: bool) -> Result<Vec<RunPlan>, Error> {
    // One file is one run: it is not opened twice (the replay notes its
    // `segment` record, and a gap before it).
    if let [one] = paths {
        return Ok(vec![RunPlan {
            files: vec![SegmentInfo {
                path: one.clone(),
                segment: None,
            }],
            gaps: Vec::new(),
        }]);
    }
    let mut plans: Vec<RunPlan> = Vec::new();
    let mut by_run: BTreeMap<u64, usize> = BTreeMap::new();
    for p in paths {
        let info = peek(p)?;
        match info.segment {
            None => plans.push(RunPlan {
                files: vec![info],
                gaps: Vec::new(),
            }),
            Some((run, _)) => match by_run.get(&run) {
                Some(&i) => plans[i].files.push(info),
                None => {
                    by_run.insert(run, plans.len());
                    plans.push(RunPlan {
                        files: vec![info],
                        gaps: Vec::new(),
                    });
                }
            },
        }
    }
    for plan in &mut plans {
        plan.files.sort_by_key(|f| f.segment.map(|s| s.1));
        for w in plan.files.windows(2) {
            let (a, b) = (&w[0], &w[1]);
            let (Some((run, i)), Some((_, j))) = (a.segment, b.segment) else {
                continue;
            };
            if i == j {
                return Err(Error::Inputs(format!(
                    "{} and {} are both segment {i} of run {run:016x}: give each segment once",
                    a.path.display(),
                    b.path.display()
                )));
            }
            if j > i + 1 {
                plan.gaps.push(gap_line(run, i + 1, j - 1, Some(&a.path), &b.path));
            }
        }
        if let Some((run, i)) = plan.files.first().and_then(|f| f.segment) {
            if i > 0 {
                let first = &plan.files[0].path;
                plan.gaps.insert(0, gap_line(run, 0, i - 1, None, first));
            }
        }
    }
    if !several && plans.len() > 1 {
        let runs: Vec<String> = plans
            .iter()
            .map(|p| {
                let files: Vec<String> = p.files.iter().map(|f| f.path.display().to_string()).collect();
                match p.run() {
                    Some(r) => format!("run {r:016x}: {}", files.join(", ")),
                    None => format!("a log of its own: {}", files.join(", ")),
                }
            })
            .collect();
        return Err(Error::Inputs(format!(
            "these files are {} different runs; this command reads one: {}",
            plans.len(),
            runs.join("; ")
        )));
    }
    Ok(plans)
}

pub(super) fn gap_line(run: u64, from: u32, to: u32, before: Option<&Path>, after: &Path) -> String {
    let which = if from == to {
        format!("segment {from}")
    } else {
        format!("segments {from}-{to}")
    };
    let around = match before {
        Some(b) => format!("between {} and {}", b.display(), after.display()),
        None => format!("before {}", after.display()),
    };
    format!(
        "{which} of run {run:016x} missing ({around}): what happened in it is lost; \
         figures go on from the state {} carried",
        after.display()
    )
}

/// Where the loader is in a segment's start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Not at a segment's start: a `carried*` record here is out of place
    /// and applied as it says.
    #[default]
    Off,
    /// The predecessor was read: `carried*` records are already known.
    Skip,
    /// Read alone or after a gap: `carried*` records are the live state,
    /// gathered until the segment's first other record.
    Resync,
}

/// The loader's state at segment starts.
#[derive(Debug, Default)]
pub(crate) struct SegState {
    /// Set by the loader before each file: whether the file before it in
    /// the run was read (its predecessor, no gap).
    pub(crate) predecessor_read: bool,
    pub(crate) mode: Mode,
    /// The first `segment` record of the file being read.
    pub(crate) first_seen: Option<(u64, u32)>,
    /// The segment's start time.
    t: u64,
    /// Carried records gathered in `Resync`.
    pending: Vec<Record>,
    /// Carried records skipped (predecessor read) / applied.
    pub(crate) skipped: u64,
    pub(crate) applied: u64,
}

impl Model {
    /// A record at a segment's start (the `segment` record and what the
    /// loader must see before replay); returns true when it was taken here.
    pub(super) fn segment_record(&mut self, rec: &Record) -> bool {
        match rec {
            Record::Segment { time_ns, run, index } => {
                if self.seg.first_seen.is_none() {
                    self.seg.first_seen = Some((*run, *index));
                }
                self.flush_carried();
                self.seg.t = *time_ns;
                self.seg.mode = if self.seg.predecessor_read {
                    Mode::Skip
                } else {
                    Mode::Resync
                };
                self.end_ns = self.end_ns.max(*time_ns);
                true
            }
            Record::Carried { .. } | Record::CarriedSample { .. } | Record::CarriedExternal { .. } => {
                match self.seg.mode {
                    Mode::Off => false,
                    Mode::Skip => {
                        self.seg.skipped += 1;
                        true
                    }
                    Mode::Resync => {
                        self.seg.pending.push(rec.clone());
                        true
                    }
                }
            }
            // Definitions may come among the carried records.
            Record::TagDef { .. } | Record::StackDef { .. } | Record::Symbol { .. } | Record::Pad { .. } => false,
            _ => {
                self.flush_carried();
                false
            }
        }
    }

    /// The end of a segment's carried records: in `Resync`, makes them the
    /// live state.
    pub(super) fn flush_carried(&mut self) {
        let mode = std::mem::take(&mut self.seg.mode);
        if mode != Mode::Resync {
            return;
        }
        let t = self.seg.t;
        let pending = std::mem::take(&mut self.seg.pending);
        self.seg.applied += pending.len() as u64;
        let mut blocks: heaptag_format::hash::MixMap<u64, (u64, u32, u32, u64)> = Default::default();
        let mut samples: heaptag_format::hash::MixMap<u64, (u32, u32, u64, u64)> = Default::default();
        let mut external: heaptag_format::hash::MixMap<u32, i64> = Default::default();
        for r in pending {
            match r {
                Record::Carried {
                    time_ns,
                    tag,
                    stack,
                    addr,
                    size,
                    ..
                } => {
                    let tag = self.tag_of(tag);
                    blocks.insert(addr, (time_ns, tag, stack, size));
                }
                Record::CarriedSample {
                    tag,
                    stack,
                    addr,
                    size,
                    weight,
                    ..
                } => {
                    let tag = self.tag_of(tag);
                    samples.insert(addr, (tag, stack, size, weight));
                }
                Record::CarriedExternal { tag, bytes, .. } => {
                    let tag = self.tag_of(tag);
                    *external.entry(tag).or_default() += bytes;
                }
                _ => {}
            }
        }
        // Blocks known that are not carried were freed in the gap.
        let gone: Vec<u64> = self
            .live
            .iter()
            .filter(|(addr, b)| {
                blocks.get(addr).is_none_or(|&(start, tag, stack, size)| {
                    (start, tag, stack, size) != (b.start, b.tag, b.stack, b.size)
                })
            })
            .map(|(a, _)| *a)
            .collect();
        for addr in gone {
            if let Some(b) = self.live.remove(&addr) {
                self.end_block(b, t);
            }
        }
        let moving: Vec<(u32, u64)> = self.moving.keys().copied().collect();
        for k in moving {
            if let Some(b) = self.moving.remove(&k) {
                self.end_block(b, t);
            }
        }
        for (addr, (start, tag, stack, size)) in blocks {
            if self.live.contains_key(&addr) {
                continue;
            }
            self.add_block(t, tag, stack, addr, size);
            if let Some(b) = self.live.get_mut(&addr) {
                b.start = start;
            }
        }
        let gone: Vec<u64> = self
            .samples
            .iter()
            .filter(|(addr, s)| {
                samples.get(addr).is_none_or(|&(tag, stack, size, weight)| {
                    (tag, stack, size, weight) != (s.tag, s.stack, s.size, s.weight)
                })
            })
            .map(|(a, _)| *a)
            .collect();
        for addr in gone {
            if let Some(s) = self.samples.remove(&addr) {
                self.drop_sample(s);
            }
        }
        for (addr, (tag, stack, size, weight)) in samples {
            if !self.samples.contains_key(&addr) {
                self.add_sample(
                    t,
                    tag,
                    stack,
                    addr,
                    Sample {
                        tag,
                        stack,
                        size,
                        weight,
                        native: false,
                    },
                );
            }
        }
        // External bytes: each tag holds what was carried, 0 if not.
        let held: Vec<(u32, i64)> = self
            .tag_acc
            .iter()
            .filter(|(_, a)| a.external != 0)
            .map(|(n, a)| (n, a.external))
            .collect();
        for (tag, now) in held {
            let want = external.remove(&tag).unwrap_or(0);
            self.external_delta(tag, want.saturating_sub(now));
        }
        for (tag, want) in external {
            self.external_delta(tag, want);
        }
    }

    /// A carried record outside a segment's start: applied as it says
    /// (added to what is known).
    pub(super) fn carried(&mut self, r: &Record) {
        let t = self.end_ns;
        match *r {
            Record::Carried {
                time_ns,
                tag,
                stack,
                addr,
                size,
                ..
            } => {
                let tag = self.tag_of(tag);
                if !self.live.contains_key(&addr) {
                    self.add_block(t, tag, stack, addr, size);
                    if let Some(b) = self.live.get_mut(&addr) {
                        b.start = time_ns;
                    }
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
                let tag = self.tag_of(tag);
                if !self.samples.contains_key(&addr) {
                    self.add_sample(
                        t,
                        tag,
                        stack,
                        addr,
                        Sample {
                            tag,
                            stack,
                            size,
                            weight,
                            native: false,
                        },
                    );
                }
            }
            Record::CarriedExternal { tag, bytes, .. } => {
                let tag = self.tag_of(tag);
                let now = self.tag_acc.get(tag).map_or(0, |a| a.external);
                self.external_delta(tag, bytes.saturating_sub(now));
            }
            _ => {}
        }
    }
}
