//! `heaptag report` for big runs: `--by`, `--filter`, `--sort`, `--top`.
//!
//! - `--filter DIM=GLOB` keeps the tags whose dimension matches the glob
//!   (`stage=synth*`, `partition=1?`, `job=42`, `tag=*gpu*`); several
//!   filters must all match. A tag without the dimension (no partition, no
//!   job, no stage) has the empty string there, which only `*` matches.
//! - `--by stage|partition|job` sums the kept tags per stage, partition or
//!   job (keys as `heaptag timeline` names them); `--by tag` (the default)
//!   keeps one row per tag. A group's *peak live* is exact: the highest
//!   sum of its tags' live bytes (tracked exact + small estimate) at any
//!   moment, from a replay of the log, not the sum of its tags' peaks
//!   (which fall at different moments).
//! - `--sort peak|live|allocated|name`: largest peak live, live at end or
//!   allocated first; `name` (the default) in tag order.
//! - `--top N`: the first N rows after sorting; the section says how many
//!   were left out.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::str::FromStr;

use heaptag_format::hash::MixMap;
use serde::Serialize;

use super::{key_of, At, By, Report, TagRow};
use crate::folded::{replay_files, run_files, Flow, Gen, Replay};
use crate::model::{Model, TagKey};
use crate::render::table::Table;
use crate::render::Format;
use crate::units::{bytes, seconds, secs};
use crate::Error;

/// A dimension a filter looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dim {
    /// The stage name.
    Stage,
    /// The partition number.
    Partition,
    /// The job id.
    Job,
    /// The whole tag as reports print it (`job=1 stage=x partition=2`).
    Tag,
}

/// `--filter DIM=GLOB`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Filter {
    /// The dimension.
    pub dim: Dim,
    /// The glob, as given.
    pub glob: String,
    pattern: glob::Pattern,
}

impl FromStr for Filter {
    type Err = String;

    fn from_str(s: &str) -> Result<Filter, String> {
        let Some((dim, glob)) = s.split_once('=') else {
            return Err(format!(
                "{s:?}: expected DIMENSION=GLOB, e.g. stage=synth* (dimensions: stage, partition, job, tag)"
            ));
        };
        let dim = match dim.trim() {
            "stage" => Dim::Stage,
            "partition" => Dim::Partition,
            "job" => Dim::Job,
            "tag" => Dim::Tag,
            other => {
                return Err(format!(
                    "{s:?}: no dimension {other:?}; expected stage, partition, job or tag"
                ))
            }
        };
        let pattern = glob::Pattern::new(glob).map_err(|e| format!("{s:?}: bad glob {glob:?}: {e}"))?;
        Ok(Filter {
            dim,
            glob: glob.to_string(),
            pattern,
        })
    }
}

impl Filter {
    /// Whether the tag's dimension matches.
    pub fn matches(&self, k: &TagKey) -> bool {
        let v = match self.dim {
            Dim::Stage => k.stage.clone().unwrap_or_default(),
            Dim::Partition => k.partition.map(|p| p.to_string()).unwrap_or_default(),
            Dim::Job => k.job.map(|j| j.to_string()).unwrap_or_default(),
            Dim::Tag => k.to_string(),
        };
        self.pattern.matches(&v)
    }

    /// As written on the command line.
    pub fn text(&self) -> String {
        let d = match self.dim {
            Dim::Stage => "stage",
            Dim::Partition => "partition",
            Dim::Job => "job",
            Dim::Tag => "tag",
        };
        format!("{d}={}", self.glob)
    }
}

/// `--sort`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum SortBy {
    /// Largest peak live first.
    Peak,
    /// Largest live at end first.
    Live,
    /// Most allocated first.
    Allocated,
    /// By name (tag order).
    #[default]
    Name,
}

/// How `heaptag report` selects and orders its rows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportView {
    /// Group tags by.
    pub by: By,
    /// Tags must match all of these.
    pub filters: Vec<Filter>,
    /// Row order.
    pub sort: SortBy,
    /// Rows kept.
    pub top: Option<usize>,
}

impl Default for ReportView {
    fn default() -> Self {
        ReportView {
            by: By::Tag,
            filters: Vec::new(),
            sort: SortBy::Name,
            top: None,
        }
    }
}

impl ReportView {
    /// Whether this view changes nothing (the plain report).
    pub fn is_plain(&self) -> bool {
        *self == ReportView::default()
    }

    fn keeps(&self, k: &TagKey) -> bool {
        self.filters.iter().all(|f| f.matches(k))
    }
}

/// Tags summed per stage, partition or job.
#[derive(Clone, Debug, Serialize)]
pub struct GroupRow {
    /// The stage, partition or job (`shared (no partition)` for tags without one).
    pub key: String,
    /// Tags in the group.
    pub tags: usize,
    /// The highest sum of its tags' live bytes at any moment, and when.
    pub peak_live: At,
    /// Its tags' peaks summed (an upper bound of `peak_live`).
    pub sum_of_tag_peaks_bytes: u64,
    /// Live bytes at the end of the log.
    pub live_end_bytes: u64,
    /// Bytes allocated over the run (exact counters).
    pub allocated_bytes: u64,
    /// Allocations over the run.
    pub allocations: u64,
    /// External bytes held at the end.
    pub external_bytes: i64,
}

/// What a view did to a section (serialized in it).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Selection {
    /// `--by`.
    pub by: Option<By>,
    /// `--filter`s, as given.
    pub filters: Vec<String>,
    /// `--sort`.
    pub sort: Option<SortBy>,
    /// `--top`.
    pub top: Option<usize>,
    /// Tags the filters left out.
    pub filtered_out: usize,
    /// Rows past `--top`.
    pub omitted: usize,
}

fn key(r: &TagRow) -> TagKey {
    TagKey {
        job: r.job,
        stage: r.stage.clone(),
        partition: r.partition,
        undefined: r.undefined,
        folded: r.folded_tags.is_some(),
    }
}

fn sort_rows<T>(rows: &mut [T], sort: SortBy, f: impl Fn(&T) -> (u64, u64, u64)) {
    match sort {
        SortBy::Name => {}
        SortBy::Peak => rows.sort_by_key(|r| std::cmp::Reverse(f(r).0)),
        SortBy::Live => rows.sort_by_key(|r| std::cmp::Reverse(f(r).1)),
        SortBy::Allocated => rows.sort_by_key(|r| std::cmp::Reverse(f(r).2)),
    }
}

/// Each group's exact peak: the log replayed, live bytes summed per group
/// of the kept tags at every change.
fn group_peaks(m: &Model, view: &ReportView) -> Result<BTreeMap<String, (u64, u64)>, Error> {
    let mut replay = Replay::default();
    replay.track_tags = true;
    // Per tag generation: its group's index (None: left out) and the bytes
    // it adds to the group now; per group: its sum now and its peak.
    let mut tags: MixMap<Gen, (Option<usize>, u64)> = MixMap::default();
    let mut index: BTreeMap<String, usize> = BTreeMap::new();
    let mut sums: Vec<(u64, u64, u64)> = Vec::new();
    replay_files(
        &run_files(m),
        "groups",
        &mut replay,
        |_, _| Flow::Go,
        |replay| {
            // A retired generation holds nothing and changes no more.
            for g in std::mem::take(&mut replay.settled_gens) {
                tags.remove(&g);
            }
            for g in std::mem::take(&mut replay.changed) {
                let live = replay.tag_live.get(&g).copied().unwrap_or(0);
                let (group, held) = tags.entry(g).or_insert_with(|| {
                    let k = replay.key(g);
                    let group = (!k.is_heaptag_own() && view.keeps(&k)).then(|| {
                        let next = index.len();
                        *index.entry(key_of(&k, view.by)).or_insert(next)
                    });
                    if let Some(i) = group {
                        if i >= sums.len() {
                            sums.resize(i + 1, (0, 0, 0));
                        }
                    }
                    (group, 0)
                });
                let Some(i) = *group else { continue };
                let (sum, peak, peak_t) = &mut sums[i];
                *sum = sum.saturating_sub(*held).saturating_add(live);
                *held = live;
                if *sum > *peak {
                    *peak = *sum;
                    *peak_t = replay.now;
                }
            }
        },
    )?;
    let peaks: BTreeMap<String, (u64, u64)> = index.into_iter().map(|(k, i)| (k, (sums[i].1, sums[i].2))).collect();
    Ok(peaks)
}

/// Applies `view` to a report of `models` (in the same order).
pub fn apply(r: &mut Report, models: &[Model], view: &ReportView) -> Result<(), Error> {
    if view.is_plain() {
        return Ok(());
    }
    for (s, m) in r.sources.iter_mut().zip(models) {
        let before = s.tags.len();
        s.tags.retain(|t| view.keeps(&key(t)));
        let mut sel = Selection {
            by: Some(view.by),
            filters: view.filters.iter().map(Filter::text).collect(),
            sort: Some(view.sort),
            top: view.top,
            filtered_out: before - s.tags.len(),
            omitted: 0,
        };
        if view.by == By::Tag {
            sort_rows(&mut s.tags, view.sort, |t| {
                (t.peak_live.bytes, t.live_end_bytes, t.allocated_bytes)
            });
            if let Some(n) = view.top {
                sel.omitted = s.tags.len().saturating_sub(n);
                s.tags.truncate(n);
            }
        } else {
            let peaks = group_peaks(m, view)?;
            let mut groups: BTreeMap<String, GroupRow> = BTreeMap::new();
            for t in &s.tags {
                let k = key_of(&key(t), view.by);
                let g = groups.entry(k.clone()).or_insert_with(|| GroupRow {
                    key: k.clone(),
                    tags: 0,
                    peak_live: At {
                        bytes: peaks.get(&k).map_or(0, |p| p.0),
                        time_s: peaks.get(&k).map_or(0.0, |p| secs(p.1)),
                    },
                    sum_of_tag_peaks_bytes: 0,
                    live_end_bytes: 0,
                    allocated_bytes: 0,
                    allocations: 0,
                    external_bytes: 0,
                });
                // An "others" row stands for the tags folded into it.
                g.tags += t.folded_tags.map_or(1, |n| n as usize);
                g.sum_of_tag_peaks_bytes = g
                    .sum_of_tag_peaks_bytes
                    .saturating_add(t.folded_peaks_bytes.unwrap_or(t.peak_live.bytes));
                g.live_end_bytes = g.live_end_bytes.saturating_add(t.live_end_bytes);
                g.allocated_bytes = g.allocated_bytes.saturating_add(t.allocated_bytes);
                g.allocations = g.allocations.saturating_add(t.allocations);
                g.external_bytes = g.external_bytes.saturating_add(t.external_bytes);
            }
            let mut rows: Vec<GroupRow> = groups.into_values().collect();
            sort_rows(&mut rows, view.sort, |g| {
                (g.peak_live.bytes, g.live_end_bytes, g.allocated_bytes)
            });
            if let Some(n) = view.top {
                sel.omitted = rows.len().saturating_sub(n);
                rows.truncate(n);
            }
            s.groups = Some(rows);
        }
        s.selection = Some(sel);
    }
    if let Some(c) = r.combined.as_mut() {
        c.retain(|row| view.keeps(&key(&row.total)));
        if view.by == By::Tag {
            sort_rows(c, view.sort, |row| {
                (
                    row.total.peak_live.bytes,
                    row.total.live_end_bytes,
                    row.total.allocated_bytes,
                )
            });
            if let Some(n) = view.top {
                c.truncate(n);
            }
        }
    }
    Ok(())
}

/// Renders the groups of a section (text or Markdown).
pub(crate) fn render_groups(by: By, rows: &[GroupRow], f: Format, out: &mut dyn Write) -> io::Result<()> {
    let what = match by {
        By::Stage => "stage",
        By::Partition => "partition",
        By::Job => "job",
        By::Tag => "tag",
    };
    let mut t = Table::new(&[
        what,
        "tags",
        "peak live",
        "at",
        "sum of tag peaks",
        "live at end",
        "allocated",
        "allocations",
    ]);
    for g in rows {
        t.row(vec![
            g.key.clone(),
            g.tags.to_string(),
            bytes(g.peak_live.bytes),
            if g.peak_live.bytes == 0 {
                "-".into()
            } else {
                seconds(g.peak_live.time_s)
            },
            bytes(g.sum_of_tag_peaks_bytes),
            bytes(g.live_end_bytes),
            bytes(g.allocated_bytes),
            g.allocations.to_string(),
        ]);
    }
    t.write(f, out)
}

/// Renders what a view left out, one line (nothing when it left nothing).
pub(crate) fn render_selection(s: &Selection, f: Format, out: &mut dyn Write) -> io::Result<()> {
    let mut parts = Vec::new();
    if !s.filters.is_empty() {
        parts.push(format!(
            "filter {} ({} tags left out)",
            s.filters.join(" and "),
            s.filtered_out
        ));
    }
    if s.omitted > 0 {
        parts.push(format!("{} more rows past --top {}", s.omitted, s.top.unwrap_or(0)));
    }
    if parts.is_empty() {
        return Ok(());
    }
    let bullet = if f == Format::Markdown { "- " } else { "" };
    writeln!(out, "{bullet}{}", parts.join("; "))
}
