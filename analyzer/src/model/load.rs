//! Loading: reading a log file through [`LogReader`] into a [`Model`], with
//! progress on a terminal (progress.rs). Nothing here reads anything but the log.

use std::path::Path;

use heaptag_format::LogReader;

use std::path::PathBuf;

use super::segments::{expand_inputs, plan_runs, RunPlan, SegmentInfo};
use super::{LoadOptions, Model};
use crate::progress::{Progress, RECORDS_PER_TICK};
use crate::text::printable_header;
use crate::Error;

impl Model {
    /// Reads the log at `path` in one pass; with `peak`, a second pass stops
    /// at the attributed peak to record what held it (`heaptag peak`); with
    /// `intervals`, keeps the lifetimes of large blocks that may take part
    /// in a duplicate (`heaptag dups`).
    pub fn load(path: &Path, peak: bool, intervals: bool) -> Result<Model, Error> {
        let opts = LoadOptions {
            peak,
            intervals,
            ..LoadOptions::default()
        };
        Model::load_with(&[path.to_path_buf()], &[], &opts)
    }

    /// Reads one run: the files of `plan` (one log, or a rotated log's
    /// segments in order) into one model, as [`load`](Model::load) does;
    /// the plan's gaps become warnings (`damage`).
    pub fn load_run(plan: &RunPlan, opts: &LoadOptions) -> Result<Model, Error> {
        let paths: Vec<PathBuf> = plan.files.iter().map(|f| f.path.clone()).collect();
        let mut m = Model::load_with(&paths, &plan.files, opts)?;
        m.damage.splice(0..0, plan.gaps.iter().cloned());
        Ok(m)
    }

    /// Reads every file the command line names (files, directories, glob
    /// patterns; see `segments.rs`), one model per run: a log that is not
    /// segmented is a run; the segments of one rotated log are one run.
    pub fn load_set(inputs: &[PathBuf], opts: &LoadOptions) -> Result<Vec<Model>, Error> {
        let files = expand_inputs(inputs)?;
        plan_runs(&files, true)?
            .iter()
            .map(|plan| Model::load_run(plan, opts))
            .collect()
    }

    fn load_with(paths: &[PathBuf], infos: &[SegmentInfo], opts: &LoadOptions) -> Result<Model, Error> {
        let opts = &LoadOptions {
            tag_budget: Some(super::fold::budget(opts.tag_budget)?),
            ..opts.clone()
        };
        let mut m = Model::pass(paths, infos, None, opts)?;
        let (_, at, _) = m.attributed_peak;
        if opts.peak && at > 0 {
            let again_opts = LoadOptions {
                intervals: false,
                groups: Vec::new(),
                ..opts.clone()
            };
            let again = Model::pass(paths, infos, Some(at), &again_opts)?;
            // The second pass numbers tags as it meets them (and gives a
            // folded tag's number out again): its holders are named by
            // value. They held memory at the peak, so neither pass folded
            // them.
            m.attributed_composition = again.attributed_composition.clone().map(|mut c| {
                for e in &mut c.per_tag {
                    let k = again.tag(e.0);
                    e.0 = m.tag_number(&k).unwrap_or(e.0);
                }
                c
            });
        }
        Ok(m)
    }

    fn new_for(path: &Path, header: heaptag_format::Header, opts: &LoadOptions) -> Model {
        let mut m = Model {
            path: path.to_path_buf(),
            header: printable_header(header),
            want_intervals: opts.intervals,
            intervals_kept: opts.intervals_kept.unwrap_or(super::INTERVALS_KEPT),
            fold: super::fold::FoldState {
                budget: opts.tag_budget.unwrap_or(super::TAG_BUDGET),
                ..Default::default()
            },
            hooks: super::Hooks {
                groups: opts.groups.clone(),
                timeline_key: opts.timeline_key.clone(),
            },
            ..Model::default()
        };
        m.group_sums = vec![0; opts.groups.len()];
        m.group_peaks = vec![(0, 0); opts.groups.len()];
        if opts.timeline_key.is_some() {
            m.timeline.names = Some(Vec::new());
        }
        // Tag number 0 is untagged.
        m.number_of(super::TagKey::default());
        m
    }

    fn pass(
        paths: &[PathBuf],
        infos: &[SegmentInfo],
        stop_at: Option<u64>,
        opts: &LoadOptions,
    ) -> Result<Model, Error> {
        let mut m: Option<Model> = None;
        let mut unknown = 0u64;
        let mut prev_index: Option<u32> = None;
        let mut prev_clean = false;
        for (n, path) in paths.iter().enumerate() {
            let mut r = LogReader::open(path).map_err(|source| Error::Read {
                path: path.to_path_buf(),
                source,
            })?;
            let m = m.get_or_insert_with(|| Model::new_for(path, r.header().clone(), opts));
            let index = infos.get(n).and_then(|i| i.segment).map(|s| s.1);
            // The state carried into this segment is known only when the
            // one before it was read whole (no damage skipped in it).
            m.seg.predecessor_read = prev_clean && matches!((prev_index, index), (Some(p), Some(i)) if i == p + 1);
            prev_index = index;
            if index.is_some() {
                m.segments.push(path.clone());
            }
            m.seg.first_seen = None;
            let mut progress = Progress::new(path, if stop_at.is_some() { "peak" } else { "replay" });
            // The record stays where the reader decoded it: `apply` reads
            // it in place, the records of a frame in one loop
            // (`LogReader::for_each_with`).
            let stopped = !r.for_each_with(|rec, at| {
                m.records += 1;
                m.apply(rec);
                if m.overflowed && m.overflow_at.is_none() {
                    m.overflow_at = Some(at);
                }
                if m.records.is_multiple_of(RECORDS_PER_TICK) {
                    progress.tick(at);
                }
                stop_at != Some(m.records)
            });
            if stopped {
                m.attributed_composition = Some(m.compose());
            }
            progress.done();
            m.flush_carried();
            // A file planned alone: its segment record, seen in the replay.
            if let (None, Some((run, i))) = (index, m.seg.first_seen.take()) {
                m.segments.push(path.clone());
                if n == 0 && i > 0 {
                    m.damage.push(super::segments::gap_line(run, 0, i - 1, None, path));
                }
            }
            for p in r.problems() {
                m.problems.push(p.clone());
                m.problem_sources.push(path.clone());
            }
            m.ended = r.ended();
            prev_clean = r.problems().is_empty();
            unknown += r.unknown_records();
            if stopped {
                return Ok(std::mem::take(m));
            }
        }
        let Some(mut m) = m else {
            return Err(Error::Inputs("no log given".into()));
        };
        if unknown > 0 {
            m.damage.push(format!(
                "{unknown} records of kinds this heaptag does not know were skipped (written by a newer heaptag, \
                 version {}): figures lack what they held; upgrade heaptag",
                m.header.version
            ));
        }
        if stop_at.is_none() {
            m.close();
        }
        Ok(m)
    }
}
