//! `heaptag html`: the whole run as one self-contained HTML page.
//!
//! Nothing here computes a figure of its own: the page shows the report
//! values `heaptag report`, `peak`, `dups`, `sites` and `timeline` build
//! ([`crate::report`]), embedded whole as JSON (so the page's numbers are
//! the JSON reports' numbers) and rendered as tables (with the same
//! [`crate::units`] formatting as the text reports); the chart downsamples
//! the timelines ([`Chart`]); the flame graphs are inferno's drawings of the
//! folded stacks of [`crate::folded`].
//!
//! The page needs no network: uPlot (MIT, vendored in `assets/` with its
//! licence) draws the chart, and every script, style and SVG is inside the
//! file.

mod chart;
mod flame;
mod page;

use std::io::Write;
use std::path::Path;

use serde::Serialize;

pub use chart::{Chart, ChartGroup, ChartLine, ChartSeries, BUCKETS, MAX_SERIES};
pub use flame::Flame;

use crate::folded::{self, FoldOptions, LiveAt, Weight};
use crate::model::Model;
use crate::report::{self, By, DupsReport, Peak, Report, Sites};
use crate::Error;

/// Call sites listed per table (as `heaptag peak --top` / `sites --top`).
pub const TOP: usize = 15;

/// Tags listed in the per-tag table, highest peak first (a daemon's log
/// has a tag per job and partition: hundreds of thousands).
pub const MAX_TAG_ROWS: usize = 500;
/// Tags listed per peak moment and per call site, largest first.
pub const MAX_TAGS_LISTED: usize = 50;
/// Keys past which a grouping of the chart (job, tag) is not offered: its
/// timeline would hold a series per key.
pub const MAX_GROUP_KEYS: usize = 2000;

/// What a log adds to the reports for the page.
#[derive(Clone, Debug, Serialize)]
pub struct LogView {
    /// The heaptag version that wrote the log.
    pub writer_version: String,
    /// The program's command line.
    pub cmdline: Vec<String>,
    /// Memory over time.
    pub chart: Chart,
    /// Flame graphs: live bytes at the attributed peak, bytes allocated.
    pub flames: Vec<Flame>,
}

/// Everything the page shows, embedded in it as JSON (`#heaptag-data`).
#[derive(Clone, Debug, Serialize)]
pub struct HtmlData {
    /// The analyzer that wrote the page.
    pub analyzer_version: String,
    /// `heaptag report --format json`.
    pub report: Report,
    /// `heaptag peak --format json` (top [`TOP`]).
    pub peak: Peak,
    /// `heaptag dups --format json`.
    pub dups: DupsReport,
    /// `heaptag sites --format json` (top [`TOP`]).
    pub sites: Sites,
    /// Per log, in the order of the reports' `sources`.
    pub logs: Vec<LogView>,
    /// The chart's groupings offered (stage always; job and tag while they
    /// have at most [`MAX_GROUP_KEYS`] keys).
    pub groupings: Vec<By>,
    /// What the page leaves out on a run with many tags, in words (the
    /// command that shows it all is named).
    pub left_out: Vec<String>,
}

/// Builds the page's data from logs loaded with the attributed peak,
/// intervals and names (as `heaptag peak`, `dups` and `sites` load them).
pub fn data(models: &[Model]) -> Result<HtmlData, Error> {
    let mut report = report::report(models);
    let keys = |by: By| -> usize {
        let mut seen = std::collections::HashSet::new();
        for m in models {
            for k in m.tags.values() {
                seen.insert(report::key_of(k, by));
                if seen.len() > MAX_GROUP_KEYS {
                    return seen.len();
                }
            }
        }
        seen.len()
    };
    let mut left_out = Vec::new();
    let groupings: Vec<By> = [By::Stage, By::Partition, By::Job, By::Tag]
        .into_iter()
        .filter(|&by| {
            let ok = by == By::Stage || keys(by) <= MAX_GROUP_KEYS;
            if !ok {
                left_out.push(format!(
                    "the chart is not grouped by {} (more than {MAX_GROUP_KEYS} of them): \
                     heaptag timeline --by {} shows it",
                    by_name(by),
                    by_name(by)
                ));
            }
            ok
        })
        .collect();
    let timelines: Vec<(By, report::Timeline)> =
        groupings.iter().map(|&by| (by, report::timeline(models, by))).collect();
    let timeline_refs: Vec<(By, &report::Timeline)> = timelines.iter().map(|(by, t)| (*by, t)).collect();
    let mut logs = Vec::with_capacity(models.len());
    for (i, m) in models.iter().enumerate() {
        let readings = chart::readings(&m.path)?;
        let duration_s = report.sources[i].source.duration_s;
        let options = FoldOptions::default();
        let live = folded::folded(m, Weight::Live(LiveAt::Peak), &options)?;
        let allocated = folded::folded(m, Weight::Allocated, &options)?;
        let at = live.time_ns.map_or(0.0, crate::units::secs);
        let flames = [
            (
                format!("Live bytes at the attributed peak ({at:.3} s), by tag and call stack"),
                live,
            ),
            (
                "Bytes allocated over the run, by tag and call stack".to_string(),
                allocated,
            ),
        ]
        .into_iter()
        .map(|(title, f)| flame::flame(&title, &f.to_lines()))
        .collect::<Result<Vec<Flame>, String>>()
        .map_err(|e| Error::Output(std::io::Error::other(e)))?;
        logs.push(LogView {
            writer_version: m.header.heaptag_version.clone(),
            cmdline: m.header.cmdline.clone(),
            chart: chart::chart(&timeline_refs, i, duration_s, &readings),
            flames,
        });
    }
    let mut peak = report::peak(models, TOP);
    let mut sites = report::sites(models, TOP);
    // Bounded tables on a run with many tags (the JSON reports keep all).
    for r in &mut report.sources {
        if r.tags.len() > MAX_TAG_ROWS {
            left_out.push(format!(
                "{}: the per-tag table lists the {MAX_TAG_ROWS} tags with the highest peaks of {} \
                 (heaptag report lists all)",
                r.source.log,
                r.tags.len()
            ));
            r.tags.sort_by_key(|t| std::cmp::Reverse(t.peak_live.bytes));
            r.tags.truncate(MAX_TAG_ROWS);
        }
    }
    let mut cut = 0usize;
    for p in &mut peak.sources {
        for m in &mut p.moments {
            cut += m.by_tag.len().saturating_sub(MAX_TAGS_LISTED);
            m.by_tag.truncate(MAX_TAGS_LISTED);
        }
    }
    for s in &mut sites.sources {
        for row in s.by_peak.iter_mut().chain(s.by_allocated.iter_mut()) {
            cut += row.tags.len().saturating_sub(MAX_TAGS_LISTED);
            row.tags.truncate(MAX_TAGS_LISTED);
        }
    }
    if cut > 0 {
        left_out.push(format!(
            "the peaks and call sites list the {MAX_TAGS_LISTED} largest tags each \
             (heaptag peak and heaptag sites list all)"
        ));
    }
    Ok(HtmlData {
        analyzer_version: env!("CARGO_PKG_VERSION").to_string(),
        peak,
        dups: report::dups(models),
        sites,
        report,
        logs,
        groupings,
        left_out,
    })
}

/// The grouping's name, as `--by` and the page's buttons spell it.
pub(crate) fn by_name(by: By) -> &'static str {
    match by {
        By::Stage => "stage",
        By::Partition => "partition",
        By::Job => "job",
        By::Tag => "tag",
    }
}

/// Writes the page of `data` into `out`.
pub fn render(data: &HtmlData, out: &mut dyn Write) -> std::io::Result<()> {
    page::write(data, out)
}

/// Builds the page of `models` and writes it to `path` (through a
/// temporary file beside it, so a failed run leaves no half page).
pub fn write_file(models: &[Model], path: &Path) -> Result<u64, Error> {
    // Never over a log it reads (`-o run.htlog` by mistake).
    if models.iter().any(|m| m.reads_file(path)) {
        return Err(Error::Inputs(format!(
            "{}: is one of the logs read; give the page another name (-o report.html)",
            path.display()
        )));
    }
    let d = data(models)?;
    let mut buf = Vec::new();
    render(&d, &mut buf)?;
    let name = path
        .file_name()
        .map_or_else(|| "report.html".into(), |n| n.to_string_lossy().to_string());
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let write = std::fs::write(&tmp, &buf).and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = write {
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::WriteHtml(path.to_path_buf(), e));
    }
    Ok(buf.len() as u64)
}
