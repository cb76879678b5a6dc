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
//! The figures are [`folded::stack_figures`]': the replay of the log's
//! allocation records that `export folded` and `heaptag html` weigh stacks
//! with (the model keeps totals per tag and per stack, not per pair), so a
//! rotated log's segments are read as one run, as every command reads them:
//!
//! - **in use** ([`At`]: the attributed peak, the end of the log, or a time):
//!   tracked blocks exactly, sampled small blocks at their estimator weight
//!   (bytes / p; blocks: weight / size) — the estimate every report uses, so
//!   a tag's samples sum to its live bytes in `heaptag report`, and all
//!   samples at `--at peak` to its *peak attributed*; the same bytes per
//!   stack as `export folded --at`.
//! - **allocated**, up to that moment (Go's heap profiles count allocations
//!   since the start too): tracked blocks exactly (a resize under the same
//!   tag allocates its growth, under another tag its whole size, as `heaptag
//!   report` counts); small blocks from the process's exact per-tag counters
//!   (at the latest counter sample up to the moment, less the tracked bytes
//!   allocated by the moment; none where the log has no counter sample, as
//!   `heaptag report` counts), split over stacks in proportion to the
//!   sampled weights (bytes) and to the blocks the samples stand for
//!   (objects). A tag whose small allocations were never sampled gets one
//!   frame [`UNSAMPLED`]. At `--at end` a tag's samples sum to its
//!   *allocated* and *allocations* in `heaptag report`, and the bytes per
//!   stack are `export folded --weight allocated`'s.
//!
//! heaptag's own writer tag is left out, as in every report.

use std::io::Write;
use std::path::{Path, PathBuf};

use heaptag_pprof::{Frame, HeapProfile, Labels, Mapping, Values};

use crate::folded;
use crate::model::{Model, TagKey};
use crate::Error;

/// The frame of a tag's small allocations when none of them was sampled:
/// their bytes and count are exact, their stacks unknown.
pub const UNSAMPLED: &str = folded::UNSAMPLED_FRAME;

/// The moment the in-use values are taken at (the same moments as
/// `export folded --at`).
pub use crate::folded::LiveAt as At;

/// The pprof labels of a tag.
pub fn labels(tag: &TagKey) -> Labels {
    Labels {
        job: tag.job,
        stage: tag.stage.clone(),
        partition: tag.partition,
        other: tag.undefined.map(|_| tag.to_string()),
    }
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

/// The heap profile of the run `m` was loaded from (its log, or its
/// segments in order; loaded, and symbolized when names are wanted, by the
/// caller), at `at`. The log is read again: memory bounded by what is alive
/// and by the (tag, stack) pairs.
pub fn profile(m: &Model, at: At) -> Result<(HeapProfile, Summary), Error> {
    let figures = folded::stack_figures(m, at)?;
    let time_ns = figures.time_ns;
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
    let source = match m.segments.len() {
        0 | 1 => m.path.display().to_string(),
        n => format!("{} and its {} other segments", m.path.display(), n - 1),
    };
    p.comment(format!("heaptag export pprof {source}: {moment}"));
    p.comment(format!(
        "tracked blocks (>= {} B) exact; small blocks estimated from a sample (one per {} B on average)",
        h.settings.threshold, h.settings.sample_rate
    ));
    let mut summary = Summary {
        time_ns,
        samples: 0,
        inuse_bytes: 0,
        alloc_bytes: 0,
    };
    for e in &figures.entries {
        let v = Values {
            inuse_space: clamp(e.live_bytes),
            inuse_objects: clamp(e.live_objects),
            alloc_space: clamp(e.alloc_bytes),
            alloc_objects: clamp(e.alloc_objects),
        };
        if e.unsampled {
            p.add_named(UNSAMPLED, &labels(&e.tag), v);
        } else {
            let frames = e.stack.and_then(|s| m.stacks.get(&s)).map_or(&[][..], |f| f.as_slice());
            p.add(frames, &labels(&e.tag), v);
        }
        summary.inuse_bytes = summary.inuse_bytes.saturating_add(v.inuse_space as u64);
        summary.alloc_bytes = summary.alloc_bytes.saturating_add(v.alloc_space as u64);
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
    let (p, summary) = profile(&m, at)?;
    let bytes = p.encode();
    match file {
        Some(f) => super::refuse_input(&m, f)
            .and_then(|()| std::fs::write(f, &bytes).map_err(|e| Error::WriteOutput(f.clone(), e)))?,
        None => out.write_all(&bytes)?,
    }
    Ok((summary, m))
}
