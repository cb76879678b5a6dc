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
}

/// Builds the page's data from logs loaded with the attributed peak,
/// intervals and names (as `heaptag peak`, `dups` and `sites` load them).
pub fn data(models: &[Model]) -> Result<HtmlData, Error> {
    let report = report::report(models);
    let groupings = [By::Stage, By::Partition, By::Job, By::Tag];
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
    Ok(HtmlData {
        analyzer_version: env!("CARGO_PKG_VERSION").to_string(),
        peak: report::peak(models, TOP),
        dups: report::dups(models),
        sites: report::sites(models, TOP),
        report,
        logs,
    })
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
