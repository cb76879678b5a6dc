//! The report values: what each command says, independent of its rendering.
//! Serialized as the `--format json` output (see docs/REPORTS.md).
//!
//! This file holds `heaptag report` and what every report shares (sources,
//! moments); one file each for `peak`, `dups`, `sites` and `timeline`.

mod dups;
mod peak;
mod sites;
mod timeline;
pub mod view;

pub use dups::{dups, DupsReport, DupsSection};
pub use peak::{peak, Holding, Moment, Peak, PeakSection, SiteHolding};
pub use sites::{sites, sites_with, SiteRow, Sites, SitesOptions, SitesSection};
pub use timeline::{key_of, timeline, By, Series, Timeline, TimelineSection};

use std::collections::BTreeMap;

use serde::Serialize;

use crate::model::{Composition, Model, TagKey};
use crate::units::secs;

/// Version of the JSON output; bumped on any incompatible change.
pub const SCHEMA_VERSION: u32 = 1;

/// A value and the moment it was reached.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct At {
    /// Bytes.
    pub bytes: u64,
    /// Seconds since the log's start.
    pub time_s: f64,
}

/// The log a section is about.
#[derive(Clone, Debug, Serialize)]
pub struct Source {
    /// Path of the log.
    pub log: String,
    /// Process id.
    pub pid: u32,
    /// Executable.
    pub exe: String,
    /// Seconds from the start to the last record.
    pub duration_s: f64,
    /// The writer finished the log (it has its end record).
    pub complete: bool,
    /// Damage met while reading (skipped ranges, truncation), one line each.
    pub problems: Vec<String>,
    /// Events the process could not log (buffer full, disk full).
    pub dropped_events: u64,
    /// Frees of blocks allocated before the log began (or whose allocation was dropped).
    pub unmatched_frees: u64,
    /// The segments read as this run, in order (a rotated log); absent for
    /// a log that is not segmented.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub segments: Vec<String>,
    /// Tags the process could give no tag id (every id in use): their
    /// memory is in `untagged`. Absent (0) on a healthy run.
    #[serde(skip_serializing_if = "is_zero")]
    pub tags_without_id: u64,
    /// Retired tags folded past the tag budget into one "others" row per
    /// stage and partition (docs/REPORTS.md, "Long runs: folded tags").
    /// Absent (0) on a run with fewer retired tags than twice the budget.
    #[serde(skip_serializing_if = "is_zero")]
    pub tags_folded: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The note for tags folded past the tag budget, if any were.
pub fn tags_folded_line(tags_folded: u64) -> Option<String> {
    (tags_folded > 0).then(|| {
        format!(
            "note: {tags_folded} retired tags past the tag budget were folded into \"others\" rows, one per stage \
             and partition (their figures summed; per-tag rows kept for the largest peaks and every tag alive \
             or holding memory at a peak)"
        )
    })
}

/// The warning for tags that got no tag id, if any did.
pub fn tags_without_id_line(m: &Model) -> Option<String> {
    let n = m.tags_without_id_count;
    (n > 0).then(|| {
        let shown: Vec<String> = m.tags_without_id.iter().take(3).map(|k| k.to_string()).collect();
        format!(
            "{n} tag{} got no tag id (every id was in use) and {} charged as untagged (first: {}{})",
            if n == 1 { "" } else { "s" },
            if n == 1 { "was" } else { "were" },
            shown.join(", "),
            if n > shown.len() as u64 { ", ..." } else { "" }
        )
    })
}

impl Source {
    pub(crate) fn of(m: &Model) -> Source {
        let mut problems: Vec<String> = m
            .problems
            .iter()
            .enumerate()
            .map(
                |(i, p)| match m.problem_sources.get(i).filter(|_| !m.segments.is_empty()) {
                    Some(f) => format!("{}: {p}", f.display()),
                    None => p.to_string(),
                },
            )
            .collect();
        problems.extend(m.damage.iter().cloned());
        if !m.ended {
            problems.push(
                "the log has no end record: the process was killed or crashed (or is still running); \
                 figures stop at its last written frame"
                    .into(),
            );
        }
        problems.extend(tags_without_id_line(m));
        Source {
            log: m.path.display().to_string(),
            pid: m.header.pid,
            exe: m.header.exe.clone(),
            duration_s: secs(m.end_ns),
            complete: m.ended,
            problems,
            dropped_events: m.dropped,
            unmatched_frees: m.unmatched_frees,
            segments: m.segments.iter().map(|p| p.display().to_string()).collect(),
            tags_without_id: m.tags_without_id_count,
            tags_folded: m.tags_folded,
        }
    }
}

/// One tag's figures.
#[derive(Clone, Debug, Serialize)]
pub struct TagRow {
    /// The tag, as `job=7 stage=gpu_prove partition=3`.
    pub tag: String,
    /// Job.
    pub job: Option<u64>,
    /// Stage.
    pub stage: Option<String>,
    /// Partition.
    pub partition: Option<u32>,
    /// The id, when the log used it without defining it (damage).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub undefined: Option<u32>,
    /// For an "others" row (tag `others stage=S partition=P`): how many
    /// retired tags of that stage and partition were folded into it past
    /// the tag budget (docs/REPORTS.md); its figures are theirs summed
    /// (allocated) or the highest of theirs (peaks). Absent for a tag.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub folded_tags: Option<u64>,
    /// For an "others" row: the folded tags' peaks summed (what `--by`'s
    /// `sum_of_tag_peaks_bytes` adds up).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub folded_peaks_bytes: Option<u64>,
    /// Peak live bytes: the exact tracked peak plus the small-block
    /// estimate at that moment (`peak_small_bytes` +- `peak_small_stderr_bytes`),
    /// and when. A tag with no tracked block has only an estimate: then the
    /// highest value of the estimate (`peak_is_estimate_max`), which is
    /// biased upward.
    pub peak_live: At,
    /// Highest tracked live bytes (exact): what `check`'s `max_peak` gates on.
    pub peak_tracked_bytes: u64,
    /// The small-block estimate in `peak_live`.
    pub peak_small_bytes: u64,
    /// Its standard error.
    pub peak_small_stderr_bytes: u64,
    /// `peak_live` is the maximum of an estimate (no tracked block): biased upward.
    pub peak_is_estimate_max: bool,
    /// Live bytes at the end of the log.
    pub live_end_bytes: u64,
    /// Of which in tracked blocks (exact).
    pub live_end_tracked_bytes: u64,
    /// Standard error of the small-block part of `live_end_bytes`.
    pub live_end_stderr_bytes: u64,
    /// No sampled small block of the tag is alive, yet it allocated small
    /// blocks: the estimate (0) says nothing, so this is a 95% upper bound
    /// of its small live bytes (sampling rate x ln 20, at most what it
    /// allocated in small blocks).
    pub live_end_small_upper_bytes: Option<u64>,
    /// Bytes allocated over the run (all sizes, exact, from the process's
    /// counters; tracked bytes only if the log has no counter sample).
    pub allocated_bytes: u64,
    /// Allocations over the run.
    pub allocations: u64,
    /// External (annotated) bytes held at the end.
    pub external_bytes: i64,
    /// Of `live_end_bytes`, native (C/C++, the `native` feature): tracked
    /// exact plus the small estimate; the rest is Rust's.
    #[serde(skip_serializing_if = "is_zero")]
    pub native_live_end_bytes: u64,
    /// Highest native tracked bytes alive (exact).
    #[serde(skip_serializing_if = "is_zero")]
    pub native_peak_bytes: u64,
    /// Native bytes allocated in tracked blocks (exact).
    #[serde(skip_serializing_if = "is_zero")]
    pub native_allocated_bytes: u64,
}

/// The RSS decomposition at the highest RSS sample: every part from that
/// one sample (the process's own totals and jemalloc's statistics written
/// with it), none larger than its whole.
#[derive(Clone, Debug, Serialize)]
pub struct Decomposition {
    /// When, seconds.
    pub time_s: f64,
    /// VmRSS at that sample.
    pub rss_bytes: u64,
    /// The true peak (VmHWM), when it is higher than this sample: the
    /// decomposition is of the nearest sample, not of the peak itself.
    pub peak_rss_bytes: Option<u64>,
    /// Tracked blocks alive (exact).
    pub tracked_bytes: u64,
    /// Small blocks alive: exact total when the log has process totals,
    /// otherwise the sum of the per-tag estimates.
    pub small_bytes: u64,
    /// Standard error of the per-tag split of `small_bytes` (0 when exact).
    pub small_stderr_bytes: u64,
    /// Annotated external memory (mmaps, pinned buffers): part of the RSS
    /// outside jemalloc when resident.
    pub external_bytes: u64,
    /// jemalloc allocated - requested live: size-class rounding and thread caches.
    pub jemalloc_rounding_bytes: Option<i64>,
    /// jemalloc resident - allocated: dirty pages, metadata, fragmentation.
    pub allocator_overhead_bytes: Option<i64>,
    /// RSS - jemalloc resident: everything jemalloc does not hold (C/C++
    /// malloc, stacks, mmaps, binaries, heaptag's own tables). Negative when
    /// jemalloc counts as resident pages never touched: then unknown.
    pub outside_jemalloc_bytes: Option<i64>,
    /// `outside_jemalloc_bytes` is a real figure (not negative, not missing).
    pub outside_jemalloc_known: bool,
    /// heaptag's own memory (part of `outside_jemalloc_bytes` in the default build).
    pub heaptag_overhead_bytes: Option<u64>,
    /// C and C++ code allocates from jemalloc too (unprefixed build): their
    /// memory is in jemalloc's figures but in no tag.
    pub unprefixed_jemalloc: bool,
    /// Of `tracked_bytes + small_bytes`, native (C/C++) bytes (the `native`
    /// feature; the replay's figure at the sample): without the feature
    /// they would be in `outside_jemalloc_bytes`, untagged.
    #[serde(skip_serializing_if = "is_zero")]
    pub native_bytes: u64,
}

fn decomposition(m: &Model, c: &Composition) -> Option<Decomposition> {
    let rss = c.rss?;
    // One instant: with the process's totals of this sample, tracked and
    // small both come from them (not tracked from the replay and small
    // from the totals: they were read at slightly different moments).
    let (tracked, small, stderr) = match c.totals {
        Some((live, tracked, _)) => (tracked, live.saturating_sub(tracked), 0.0),
        None => (c.tracked, c.small.0, c.small.1),
    };
    let live = tracked.saturating_add(small);
    let outside = c.jemalloc.map(|(_, r)| rss as i64 - r as i64);
    Some(Decomposition {
        time_s: secs(c.time_ns),
        rss_bytes: rss,
        peak_rss_bytes: m.peak_rss().map(|p| p.0).filter(|&p| p > rss),
        outside_jemalloc_known: outside.is_some_and(|o| o >= 0),
        tracked_bytes: tracked,
        small_bytes: small,
        small_stderr_bytes: stderr.round() as u64,
        external_bytes: c.external,
        jemalloc_rounding_bytes: c.jemalloc.map(|(a, _)| a as i64 - live as i64),
        allocator_overhead_bytes: c.jemalloc.map(|(a, r)| r as i64 - a as i64),
        outside_jemalloc_bytes: outside,
        heaptag_overhead_bytes: c.totals.map(|t| t.2),
        unprefixed_jemalloc: m.header.settings.unprefixed_jemalloc,
        native_bytes: c.native,
    })
}

/// `heaptag report` for one log.
#[derive(Clone, Debug, Serialize)]
pub struct ReportSection {
    /// The log.
    pub source: Source,
    /// Peak RSS: the process's VmHWM (its true peak, with the time of the
    /// first sample that showed it), else the highest VmRSS sampled.
    pub peak_rss: Option<At>,
    /// How `peak_rss` is known, in words (`VmHWM, reached between 0.400 s
    /// and 0.441 s`, `highest VmRSS sample`).
    pub peak_rss_how: Option<String>,
    /// Highest attributed bytes (tracked exact + small estimate).
    pub peak_attributed: At,
    /// Highest heaptag overhead seen.
    pub heaptag_overhead_bytes: u64,
    /// Per tag, by job, stage, partition.
    pub tags: Vec<TagRow>,
    /// The RSS at its peak, taken apart.
    pub decomposition: Option<Decomposition>,
    /// Named points in the run: (seconds, label).
    pub marks: Vec<(f64, String)>,
    /// Processes sampled from outside (`heaptag run` / `heaptag watch`).
    pub processes: Vec<ProcRow>,
    /// With `--by stage|partition|job`: the (filtered) tags summed per key
    /// (report/view.rs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub groups: Option<Vec<view::GroupRow>>,
    /// With `--by`, `--filter`, `--sort` or `--top`: what was selected and
    /// what was left out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub selection: Option<view::Selection>,
}

/// A tag over several logs.
#[derive(Clone, Debug, Serialize)]
pub struct CombinedRow {
    /// The figures summed over the logs.
    #[serde(flatten)]
    pub total: TagRow,
    /// The tag's peak live bytes in each log, in the order of `sources`.
    pub peak_by_source: Vec<u64>,
}

/// A process sampled by `heaptag run` / `heaptag watch`.
#[derive(Clone, Debug, Serialize)]
pub struct ProcRow {
    /// Its pid.
    pub pid: u32,
    /// Its parent's pid.
    pub ppid: u32,
    /// Its command line.
    pub command: String,
    /// Highest VmRSS sampled, and when.
    pub peak_rss: At,
    /// Highest Pss sampled (0 when unreadable).
    pub peak_pss_bytes: u64,
    /// Samples taken.
    pub samples: usize,
    /// Exit code (128 + signal when killed; -1 unknown; null: still running).
    pub exit_code: Option<i32>,
    /// VmRSS at each sample: (seconds, bytes).
    pub rss: Vec<(f64, u64)>,
}

/// The RSS peak of a sampled process within one phase (between two marks of
/// a program's log, on the wall clock shared by the logs).
#[derive(Clone, Debug, Serialize)]
pub struct PhaseRow {
    /// The mark that starts the phase (`(start)` before the first).
    pub phase: String,
    /// Phase start, seconds after the earliest log's start.
    pub from_s: f64,
    /// Phase end (`None`: the end of the sampling).
    pub to_s: Option<f64>,
    /// The process.
    pub pid: u32,
    /// Highest VmRSS sampled in the phase, and when (seconds after the earliest log's start).
    pub peak_rss: At,
}

/// `heaptag report`.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// JSON schema version.
    pub schema_version: u32,
    /// One section per log.
    pub sources: Vec<ReportSection>,
    /// With several logs: per tag, summed over the logs (peaks summed too,
    /// which bounds the combined peak from above), with each log's peak.
    pub combined: Option<Vec<CombinedRow>>,
    /// With a `heaptag run`/`watch` log and a log with marks: each sampled
    /// process's RSS peak per phase, on one time line.
    pub phases: Vec<PhaseRow>,
}

fn procs(m: &Model) -> Vec<ProcRow> {
    m.procs
        .iter()
        .map(|p| ProcRow {
            pid: p.pid,
            ppid: p.ppid,
            command: p.cmdline.clone(),
            peak_rss: At {
                bytes: p.peak.0,
                time_s: secs(p.peak.1),
            },
            peak_pss_bytes: p.pss_peak,
            samples: p.samples.len(),
            exit_code: p.exit,
            rss: p.samples.iter().map(|&(t, b)| (secs(t), b)).collect(),
        })
        .collect()
}

/// Per-phase RSS peaks: marks from any log split the time line; samples from
/// any `run`/`watch` log are placed on it by each log's wall-clock start.
fn phases(models: &[Model]) -> Vec<PhaseRow> {
    let origin = models.iter().map(|m| m.header.start_wall_ns).min().unwrap_or(0);
    let shift = |m: &Model, t: u64| m.header.start_wall_ns.saturating_sub(origin) + t;
    let mut marks: Vec<(u64, String)> = models
        .iter()
        .flat_map(|m| m.marks.iter().map(move |(t, l)| (shift(m, *t), l.clone())))
        .collect();
    if marks.is_empty() || models.iter().all(|m| m.procs.is_empty()) {
        return Vec::new();
    }
    marks.sort();
    let mut bounds: Vec<(String, u64, Option<u64>)> = Vec::new();
    bounds.push(("(start)".into(), 0, Some(marks[0].0)));
    for (i, (t, l)) in marks.iter().enumerate() {
        bounds.push((l.clone(), *t, marks.get(i + 1).map(|m| m.0)));
    }
    let mut out = Vec::new();
    for m in models {
        for p in &m.procs {
            // Each sample goes to its phase by binary search (not phases x
            // samples): the phase is the last bound starting at or before it.
            let mut best: Vec<Option<(u64, u64)>> = vec![None; bounds.len()];
            for &(t, b) in &p.samples {
                let t = shift(m, t);
                let i = bounds.partition_point(|(_, from, _)| *from <= t).saturating_sub(1);
                let (_, from, to) = &bounds[i];
                if t < *from || to.is_some_and(|e| t >= e) {
                    continue;
                }
                let better = best[i].is_none_or(|(bt, bb)| (b, std::cmp::Reverse(t)) > (bb, std::cmp::Reverse(bt)));
                if better {
                    best[i] = Some((t, b));
                }
            }
            for ((label, from, to), best) in bounds.iter().zip(best) {
                if let Some((t, b)) = best {
                    out.push(PhaseRow {
                        phase: label.clone(),
                        from_s: secs(*from),
                        to_s: to.map(secs),
                        pid: p.pid,
                        peak_rss: At {
                            bytes: b,
                            time_s: secs(t),
                        },
                    });
                }
            }
        }
    }
    out
}

/// With no sampled block of a tag alive, the chance of that while it holds
/// `L` small bytes is `exp(-L / rate)` (sampling is Poisson by bytes): below
/// 5% once `L > rate x ln 20`. That, capped at the small bytes it allocated,
/// is an honest 95% upper bound where the estimate would read `0 +- 0`.
fn small_upper_bound(m: &Model, a: &crate::model::TagAcc) -> Option<u64> {
    let rate = m.header.settings.sample_rate;
    let small_allocated = a.alloc_bytes?.saturating_sub(a.tracked_alloc);
    (a.small_samples == 0 && rate > 0 && small_allocated > 0)
        .then(|| ((rate as f64 * 20f64.ln()) as u64).min(small_allocated))
}

fn tag_rows(m: &Model) -> Vec<TagRow> {
    let mut rows: Vec<(TagKey, TagRow)> = m
        .tags_used()
        .map(|(id, a)| {
            let k = m.tag(id);
            let (peak_live, peak_small, peak_var, estimate_max) = if a.tracked_peak > 0 {
                let (small, var) = a.small_at_tracked_peak;
                (
                    At {
                        bytes: a.tracked_peak.saturating_add(small),
                        time_s: secs(a.tracked_peak_t),
                    },
                    small,
                    var,
                    false,
                )
            } else {
                let at = At {
                    bytes: a.peak,
                    time_s: secs(a.peak_t),
                };
                (at, a.peak, 0.0, a.peak > 0)
            };
            let row = TagRow {
                tag: k.to_string(),
                job: k.job,
                stage: k.stage.clone(),
                partition: k.partition,
                undefined: k.undefined,
                folded_tags: k.folded.then_some(a.folded),
                folded_peaks_bytes: k.folded.then_some(a.folded_peaks),
                peak_live,
                peak_tracked_bytes: a.tracked_peak,
                peak_small_bytes: peak_small,
                peak_small_stderr_bytes: peak_var.sqrt().round() as u64,
                peak_is_estimate_max: estimate_max,
                live_end_bytes: a.tracked.saturating_add(a.small),
                live_end_tracked_bytes: a.tracked,
                live_end_stderr_bytes: a.small_var.sqrt().round() as u64,
                live_end_small_upper_bytes: small_upper_bound(m, a).filter(|_| !k.folded),
                allocated_bytes: a.alloc_bytes.unwrap_or(a.tracked_alloc),
                allocations: a.alloc_count.unwrap_or(a.tracked_count),
                external_bytes: a.external,
                native_live_end_bytes: a.native_tracked.saturating_add(a.native_small),
                native_peak_bytes: a.native_peak,
                native_allocated_bytes: a.native_alloc,
            };
            (k, row)
        })
        .filter(|(k, _)| !k.is_heaptag_own())
        .collect();
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    rows.into_iter().map(|(_, r)| r).collect()
}

/// How the peak RSS is known.
fn peak_rss_how(m: &Model) -> Option<String> {
    let (peak, _) = m.peak_rss()?;
    Some(match m.hwm {
        Some((h, t, prev)) if h == peak => match prev {
            Some(p) => format!("VmHWM, reached between {:.3} s and {:.3} s", secs(p), secs(t)),
            None => format!("VmHWM, reached by {:.3} s (the first sample)", secs(t)),
        },
        _ if m.rss_peak.is_some() => "highest VmRSS sample".into(),
        _ => "highest sample of the watched processes".into(),
    })
}

/// Builds `heaptag report` from loaded logs.
pub fn report(models: &[Model]) -> Report {
    let sources: Vec<ReportSection> = models
        .iter()
        .map(|m| ReportSection {
            source: Source::of(m),
            peak_rss: m.peak_rss().map(|(b, t)| At {
                bytes: b,
                time_s: secs(t),
            }),
            peak_rss_how: peak_rss_how(m),
            peak_attributed: At {
                bytes: m.attributed_peak.0,
                time_s: secs(m.attributed_peak.2),
            },
            heaptag_overhead_bytes: m.max_overhead,
            tags: tag_rows(m),
            decomposition: m.rss_peak.as_ref().and_then(|c| decomposition(m, c)),
            marks: m.marks.iter().map(|(t, l)| (secs(*t), l.clone())).collect(),
            processes: procs(m),
            groups: None,
            selection: None,
        })
        .collect();
    let combined = (sources.len() > 1).then(|| {
        let mut by: BTreeMap<TagKey, CombinedRow> = BTreeMap::new();
        for (i, s) in sources.iter().enumerate() {
            for r in &s.tags {
                let key = TagKey {
                    job: r.job,
                    stage: r.stage.clone(),
                    partition: r.partition,
                    undefined: r.undefined,
                    folded: r.folded_tags.is_some(),
                };
                let c = by.entry(key).or_insert_with(|| CombinedRow {
                    total: TagRow {
                        peak_live: At { bytes: 0, time_s: 0.0 },
                        peak_tracked_bytes: 0,
                        peak_small_bytes: 0,
                        peak_small_stderr_bytes: 0,
                        peak_is_estimate_max: false,
                        live_end_small_upper_bytes: None,
                        live_end_bytes: 0,
                        live_end_tracked_bytes: 0,
                        live_end_stderr_bytes: 0,
                        allocated_bytes: 0,
                        allocations: 0,
                        external_bytes: 0,
                        folded_tags: r.folded_tags.map(|_| 0),
                        folded_peaks_bytes: r.folded_peaks_bytes.map(|_| 0),
                        native_live_end_bytes: 0,
                        native_peak_bytes: 0,
                        native_allocated_bytes: 0,
                        ..r.clone()
                    },
                    peak_by_source: vec![0; sources.len()],
                });
                c.peak_by_source[i] = r.peak_live.bytes;
                let e = &mut c.total;
                e.peak_live.bytes = e.peak_live.bytes.saturating_add(r.peak_live.bytes);
                e.peak_tracked_bytes = e.peak_tracked_bytes.saturating_add(r.peak_tracked_bytes);
                // The peak's small part, summed like its whole (so tracked +
                // small = live holds for a combined row too), its standard
                // errors in quadrature; an estimate's maximum in any source
                // makes the sum one.
                e.peak_small_bytes = e.peak_small_bytes.saturating_add(r.peak_small_bytes);
                e.peak_small_stderr_bytes = ((e.peak_small_stderr_bytes as f64).powi(2)
                    + (r.peak_small_stderr_bytes as f64).powi(2))
                .sqrt() as u64;
                e.peak_is_estimate_max |= r.peak_is_estimate_max;
                e.live_end_bytes = e.live_end_bytes.saturating_add(r.live_end_bytes);
                e.live_end_tracked_bytes = e.live_end_tracked_bytes.saturating_add(r.live_end_tracked_bytes);
                e.live_end_stderr_bytes =
                    ((e.live_end_stderr_bytes as f64).powi(2) + (r.live_end_stderr_bytes as f64).powi(2)).sqrt() as u64;
                e.allocated_bytes = e.allocated_bytes.saturating_add(r.allocated_bytes);
                e.allocations = e.allocations.saturating_add(r.allocations);
                e.external_bytes = e.external_bytes.saturating_add(r.external_bytes);
                let sum = |a: Option<u64>, b: Option<u64>| a.map(|a| a.saturating_add(b.unwrap_or(0)));
                e.folded_tags = sum(e.folded_tags, r.folded_tags);
                e.folded_peaks_bytes = sum(e.folded_peaks_bytes, r.folded_peaks_bytes);
                e.native_live_end_bytes = e.native_live_end_bytes.saturating_add(r.native_live_end_bytes);
                e.native_peak_bytes = e.native_peak_bytes.saturating_add(r.native_peak_bytes);
                e.native_allocated_bytes = e.native_allocated_bytes.saturating_add(r.native_allocated_bytes);
            }
        }
        by.into_values().collect()
    });
    Report {
        schema_version: SCHEMA_VERSION,
        sources,
        combined,
        phases: phases(models),
    }
}
