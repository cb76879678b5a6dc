//! Rendering report values as aligned text, Markdown or JSON, into any
//! `io::Write` (the library never prints by itself).

use std::io::{self, Write};

use serde::Serialize;

use crate::report::{DupsReport, Peak, Report, Sites, Source, Timeline};
pub use crate::units::bytes;
use crate::units::{sbytes, seconds};

/// Output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned tables for a terminal.
    Text,
    /// Markdown (for a CI step summary).
    Markdown,
    /// JSON with a `schema_version` (docs/REPORTS.md).
    Json,
}

/// A table: header and rows. Numbers are right-aligned; the first column
/// and columns whose header starts with `<` (text) are left-aligned.
struct Table {
    head: Vec<String>,
    left: Vec<bool>,
    rows: Vec<Vec<String>>,
}

impl Table {
    fn new(head: &[&str]) -> Table {
        Table {
            head: head.iter().map(|s| s.trim_start_matches('<').to_string()).collect(),
            left: head
                .iter()
                .enumerate()
                .map(|(i, s)| i == 0 || s.starts_with('<'))
                .collect(),
            rows: Vec::new(),
        }
    }

    fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    fn write(&self, f: Format, out: &mut dyn Write) -> io::Result<()> {
        if self.rows.is_empty() {
            return writeln!(out, "(none)");
        }
        match f {
            Format::Markdown => {
                writeln!(out, "| {} |", self.head.join(" | "))?;
                let align: Vec<&str> = (0..self.head.len())
                    .map(|i| if i == 0 { "---" } else { "---:" })
                    .collect();
                writeln!(out, "| {} |", align.join(" | "))?;
                for r in &self.rows {
                    let cells: Vec<String> = r.iter().map(|c| c.replace('|', "\\|")).collect();
                    writeln!(out, "| {} |", cells.join(" | "))?;
                }
                Ok(())
            }
            _ => {
                let mut w: Vec<usize> = self.head.iter().map(|h| h.chars().count()).collect();
                for r in &self.rows {
                    for (i, c) in r.iter().enumerate() {
                        w[i] = w[i].max(c.chars().count());
                    }
                }
                let line = |cells: &[String], out: &mut dyn Write| -> io::Result<()> {
                    let mut s = String::new();
                    for (i, c) in cells.iter().enumerate() {
                        let pad = w[i] - c.chars().count();
                        if i > 0 {
                            s.push_str("  ");
                        }
                        if self.left[i] {
                            s.push_str(c);
                            s.push_str(&" ".repeat(pad));
                        } else {
                            s.push_str(&" ".repeat(pad));
                            s.push_str(c);
                        }
                    }
                    writeln!(out, "{}", s.trim_end())
                };
                line(&self.head, out)?;
                for r in &self.rows {
                    line(r, out)?;
                }
                Ok(())
            }
        }
    }
}

fn heading(f: Format, out: &mut dyn Write, level: usize, text: &str) -> io::Result<()> {
    match f {
        Format::Markdown => writeln!(out, "\n{} {text}\n", "#".repeat(level)),
        _ => {
            writeln!(out)?;
            writeln!(out, "{text}")?;
            if level <= 2 {
                writeln!(
                    out,
                    "{}",
                    if level == 1 { "=" } else { "-" }.repeat(text.chars().count())
                )?;
            }
            Ok(())
        }
    }
}

fn source(f: Format, out: &mut dyn Write, s: &Source) -> io::Result<()> {
    heading(f, out, 2, &format!("{} (pid {})", s.log, s.pid))?;
    let line = |out: &mut dyn Write, text: String| match f {
        Format::Markdown => writeln!(out, "- {text}"),
        _ => writeln!(out, "{text}"),
    };
    line(out, format!("executable: {}", s.exe))?;
    line(out, format!("duration: {:.3} s", s.duration_s))?;
    if s.dropped_events > 0 {
        line(
            out,
            format!(
                "WARNING: {} events were dropped by the writer: figures built on events are low",
                s.dropped_events
            ),
        )?;
    }
    if s.unmatched_frees > 0 {
        line(
            out,
            format!(
                "note: {} frees of blocks allocated before the log began",
                s.unmatched_frees
            ),
        )?;
    }
    for p in &s.problems {
        line(out, format!("WARNING: {p}"))?;
    }
    Ok(())
}

fn at(a: &crate::report::At) -> String {
    format!("{} at {}", bytes(a.bytes), seconds(a.time_s))
}

/// Writes a value as pretty JSON.
pub fn json<T: Serialize>(v: &T, out: &mut dyn Write) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, v).map_err(io::Error::other)?;
    writeln!(out)
}

/// Renders `heaptag report`.
pub fn report(r: &Report, f: Format, out: &mut dyn Write) -> io::Result<()> {
    if f == Format::Json {
        return json(r, out);
    }
    heading(f, out, 1, "heaptag report")?;
    for s in &r.sources {
        source(f, out, &s.source)?;
        let bullet = if f == Format::Markdown { "- " } else { "" };
        writeln!(out)?;
        match &s.peak_rss {
            Some(p) => writeln!(out, "{bullet}peak RSS:        {}", at(p))?,
            None => writeln!(out, "{bullet}peak RSS:        not sampled")?,
        }
        writeln!(out, "{bullet}peak attributed: {}", at(&s.peak_attributed))?;
        writeln!(out, "{bullet}heaptag's own:   {}", bytes(s.heaptag_overhead_bytes))?;
        for (t, l) in &s.marks {
            writeln!(out, "{bullet}mark:            {t:.3} s  {l}")?;
        }
        if !s.processes.is_empty() {
            heading(f, out, 3, "Processes (sampled from /proc)")?;
            let mut t = Table::new(&[
                "pid",
                "<command",
                "peak RSS",
                "at",
                "peak Pss",
                "samples",
                "exit",
                "<RSS over time",
            ]);
            for p in &s.processes {
                let series: Vec<u64> = p.rss.iter().map(|&(_, b)| b).collect();
                let top = series.iter().copied().max().unwrap_or(1).max(1);
                let chart: String = columns(&series, 40)
                    .iter()
                    .map(|&b| BARS[((b * 7) / top) as usize])
                    .collect();
                let mut cmd = p.command.clone();
                if cmd.chars().count() > 40 {
                    cmd = cmd.chars().take(39).collect::<String>() + "…";
                }
                t.row(vec![
                    p.pid.to_string(),
                    cmd,
                    bytes(p.peak_rss.bytes),
                    seconds(p.peak_rss.time_s),
                    if p.peak_pss_bytes == 0 {
                        "-".into()
                    } else {
                        bytes(p.peak_pss_bytes)
                    },
                    p.samples.to_string(),
                    p.exit_code.map_or("running".into(), |c| c.to_string()),
                    chart,
                ]);
            }
            t.write(f, out)?;
        }
        if !s.tags.is_empty() {
            heading(f, out, 3, "Per tag")?;
            tag_table(&s.tags, f, out)?;
        }
        if let Some(d) = &s.decomposition {
            heading(f, out, 3, &format!("RSS at its peak ({:.3} s), taken apart", d.time_s))?;
            let mut t = Table::new(&["part", "bytes", "<how known"]);
            t.row(vec!["RSS (VmRSS)".into(), bytes(d.rss_bytes), "sampled".into()]);
            t.row(vec![
                "tracked blocks (>= threshold)".into(),
                bytes(d.tracked_bytes),
                "exact".into(),
            ]);
            t.row(vec![
                "small blocks".into(),
                bytes(d.small_bytes),
                if d.small_stderr_bytes == 0 {
                    "exact total (per-tag split estimated)".into()
                } else {
                    format!("estimated, +- {}", bytes(d.small_stderr_bytes))
                },
            ]);
            let opt = |v: Option<i64>| v.map_or_else(|| "n/a".to_string(), sbytes);
            t.row(vec![
                "jemalloc rounding and caches".into(),
                opt(d.jemalloc_rounding_bytes),
                "allocated - requested".into(),
            ]);
            t.row(vec![
                "allocator overhead".into(),
                opt(d.allocator_overhead_bytes),
                "jemalloc resident - allocated".into(),
            ]);
            t.row(vec![
                "outside jemalloc".into(),
                opt(d.outside_jemalloc_bytes),
                "RSS - jemalloc resident".into(),
            ]);
            t.row(vec![
                "  of which annotated external".into(),
                bytes(d.external_bytes),
                "external_alloc".into(),
            ]);
            t.row(vec![
                "  of which heaptag's own".into(),
                d.heaptag_overhead_bytes.map_or("n/a".into(), bytes),
                "counted".into(),
            ]);
            t.write(f, out)?;
            if d.outside_jemalloc_bytes.is_some_and(|b| b < 0) {
                writeln!(
                    out,
                    "note: negative: jemalloc's `resident` is an upper bound (it counts pages it mapped but the \
                     program never touched)"
                )?;
            }
            if d.unprefixed_jemalloc {
                writeln!(
                    out,
                    "note: unprefixed jemalloc build: C/C++ allocations are inside jemalloc's figures but in no tag"
                )?;
            }
        }
    }
    if let Some(c) = &r.combined {
        heading(f, out, 2, "All logs combined (peaks summed: an upper bound)")?;
        let mut head: Vec<String> = vec!["tag".into(), "peak live (sum)".into()];
        head.extend(r.sources.iter().map(|s| format!("peak in pid {}", s.source.pid)));
        head.extend(["live at end".into(), "allocated".into(), "allocations".into()]);
        let head_refs: Vec<&str> = head.iter().map(String::as_str).collect();
        let mut t = Table::new(&head_refs);
        for row in c {
            let mut cells = vec![row.total.tag.clone(), bytes(row.total.peak_live.bytes)];
            cells.extend(row.peak_by_source.iter().map(|&b| bytes(b)));
            cells.extend([
                bytes(row.total.live_end_bytes),
                bytes(row.total.allocated_bytes),
                row.total.allocations.to_string(),
            ]);
            t.row(cells);
        }
        t.write(f, out)?;
    }
    if !r.phases.is_empty() {
        heading(f, out, 2, "RSS peak per phase (marks and samples on one time line)")?;
        let mut t = Table::new(&["<phase", "from", "to", "pid", "peak RSS", "at"]);
        for p in &r.phases {
            t.row(vec![
                p.phase.clone(),
                seconds(p.from_s),
                p.to_s.map_or("end".into(), seconds),
                p.pid.to_string(),
                bytes(p.peak_rss.bytes),
                seconds(p.peak_rss.time_s),
            ]);
        }
        t.write(f, out)?;
    }
    Ok(())
}

fn tag_table(rows: &[crate::report::TagRow], f: Format, out: &mut dyn Write) -> io::Result<()> {
    let mut t = Table::new(&[
        "tag",
        "peak live",
        "at",
        "live at end",
        "allocated",
        "allocations",
        "external",
    ]);
    for r in rows {
        let end = if r.live_end_stderr_bytes > 0 {
            format!("{} +- {}", bytes(r.live_end_bytes), bytes(r.live_end_stderr_bytes))
        } else {
            bytes(r.live_end_bytes)
        };
        t.row(vec![
            r.tag.clone(),
            bytes(r.peak_live.bytes),
            if r.peak_live.bytes == 0 {
                "-".into()
            } else {
                seconds(r.peak_live.time_s)
            },
            end,
            bytes(r.allocated_bytes),
            r.allocations.to_string(),
            if r.external_bytes == 0 {
                String::new()
            } else {
                sbytes(r.external_bytes)
            },
        ]);
    }
    t.write(f, out)
}

/// Renders `heaptag peak`.
pub fn peak(p: &Peak, f: Format, out: &mut dyn Write) -> io::Result<()> {
    if f == Format::Json {
        return json(p, out);
    }
    heading(f, out, 1, "heaptag peak: what held the memory")?;
    for s in &p.sources {
        source(f, out, &s.source)?;
        for m in &s.moments {
            let title = match m.kind.as_str() {
                "rss" => format!(
                    "At the RSS peak: {} at {:.3} s ({} attributed)",
                    m.rss_bytes.map_or("?".into(), bytes),
                    m.time_s,
                    bytes(m.attributed_bytes)
                ),
                _ => format!(
                    "At the attributed peak: {} at {:.3} s",
                    bytes(m.attributed_bytes),
                    m.time_s
                ),
            };
            heading(f, out, 3, &title)?;
            let mut t = Table::new(&["tag", "held", "share", "tracked", "small (est.)", "external"]);
            let total = m.attributed_bytes.max(1);
            for h in &m.by_tag {
                let held = h.tracked_bytes + h.small_bytes;
                t.row(vec![
                    h.tag.clone(),
                    bytes(held),
                    format!("{:.1}%", held as f64 * 100.0 / total as f64),
                    bytes(h.tracked_bytes),
                    bytes(h.small_bytes),
                    if h.external_bytes == 0 {
                        String::new()
                    } else {
                        sbytes(h.external_bytes)
                    },
                ]);
            }
            t.write(f, out)?;
            writeln!(out)?;
            let mut t = Table::new(&["call site", "held"]);
            for s in &m.by_site {
                t.row(vec![s.site.clone(), bytes(s.bytes)]);
            }
            t.write(f, out)?;
        }
    }
    Ok(())
}

/// Renders `heaptag dups`.
pub fn dups(d: &DupsReport, f: Format, out: &mut dyn Write) -> io::Result<()> {
    if f == Format::Json {
        return json(d, out);
    }
    heading(f, out, 1, "heaptag dups: shared once or duplicated?")?;
    for s in &d.sources {
        source(f, out, &s.source)?;
        let x = &s.dups;
        if !x.fingerprints {
            writeln!(
                out,
                "no content fingerprints in this log: blocks are grouped by call site and size, and findings are only suspected"
            )?;
        }
        heading(f, out, 3, "Verdict per stage")?;
        let mut t = Table::new(&["stage", "<verdict", "wasted", "contents"]);
        for v in &x.verdicts {
            let verdict = if v.copies > 1 {
                format!("{} x{}", v.verdict, v.copies)
            } else {
                v.verdict.clone()
            };
            t.row(vec![
                v.stage.clone(),
                verdict,
                bytes(v.wasted_bytes),
                v.contents.to_string(),
            ]);
        }
        t.write(f, out)?;
        if x.filled_blocks > 0 {
            writeln!(
                out,
                "({} zero- or constant-filled blocks are never counted as duplicates)",
                x.filled_blocks
            )?;
        }
        if !x.duplicated.is_empty() {
            heading(f, out, 3, "Duplicated contents")?;
            let mut t = Table::new(&["content", "size", "copies", "wasted", "<when", "<held by", "<site"]);
            for g in &x.duplicated {
                let when = match g.until_s {
                    Some(u) => format!("{:.3}-{:.3} s (transient)", g.from_s, u),
                    None => format!("from {:.3} s to the end", g.from_s),
                };
                let holders: Vec<String> = g
                    .holders
                    .iter()
                    .map(|h| {
                        if h.copies > 1 {
                            format!("{} (x{})", h.tag, h.copies)
                        } else {
                            h.tag.clone()
                        }
                    })
                    .collect();
                t.row(vec![
                    g.hash.clone().unwrap_or_else(|| "suspected (site+size)".into()),
                    bytes(g.size_bytes),
                    g.copies.to_string(),
                    bytes(g.wasted_bytes),
                    when,
                    holders.join(", "),
                    g.site.clone(),
                ]);
            }
            t.write(f, out)?;
        }
    }
    Ok(())
}

/// Renders `heaptag sites`.
pub fn sites(s: &Sites, f: Format, out: &mut dyn Write) -> io::Result<()> {
    if f == Format::Json {
        return json(s, out);
    }
    heading(f, out, 1, "heaptag sites: where memory is allocated")?;
    for sec in &s.sources {
        source(f, out, &sec.source)?;
        for (title, rows) in [
            ("By peak live bytes", &sec.by_peak),
            ("By bytes allocated", &sec.by_allocated),
        ] {
            heading(f, out, 3, title)?;
            let mut t = Table::new(&["call site", "peak live", "allocated", "allocations", "<tags"]);
            for r in rows {
                let mut tags = r.tags.iter().take(3).cloned().collect::<Vec<_>>().join(", ");
                if r.tags.len() > 3 {
                    tags.push_str(&format!(" (+{})", r.tags.len() - 3));
                }
                t.row(vec![
                    r.site.clone(),
                    bytes(r.peak_live.bytes),
                    bytes(r.allocated_bytes),
                    r.allocations.to_string(),
                    tags,
                ]);
            }
            t.write(f, out)?;
        }
    }
    Ok(())
}

const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// Resamples `v` to `width` columns: each column is the maximum of the
/// samples it covers, or (fewer samples than columns) the sample under it.
fn columns(v: &[u64], width: usize) -> Vec<u64> {
    if v.is_empty() {
        return Vec::new();
    }
    if v.len() <= width {
        return (0..width).map(|c| v[c * v.len() / width]).collect();
    }
    (0..width)
        .map(|c| {
            let (a, b) = (
                c * v.len() / width,
                ((c + 1) * v.len() / width).max(c * v.len() / width + 1),
            );
            v[a..b.min(v.len())].iter().copied().max().unwrap_or(0)
        })
        .collect()
}

/// Renders `heaptag timeline` as a chart (text, markdown) or JSON.
pub fn timeline(t: &Timeline, f: Format, out: &mut dyn Write) -> io::Result<()> {
    if f == Format::Json {
        return json(t, out);
    }
    heading(f, out, 1, "heaptag timeline: live bytes over time")?;
    for s in &t.sources {
        source(f, out, &s.source)?;
        let width = 60;
        let top = s.series.iter().map(|x| x.peak_bytes).max().unwrap_or(0).max(1);
        if f == Format::Markdown {
            writeln!(out, "```")?;
        }
        let end = s.times_s.last().copied().unwrap_or(0.0);
        writeln!(out, "0 s {:>w$}", seconds(end), w = width + 28)?;
        let label_w = s
            .series
            .iter()
            .map(|x| x.key.chars().count())
            .max()
            .unwrap_or(4)
            .clamp(4, 28);
        for x in &s.series {
            let bars: String = columns(&x.bytes, width)
                .iter()
                .map(|&b| if b == 0 { ' ' } else { BARS[((b * 7) / top) as usize] })
                .collect();
            let key: String = x.key.chars().take(label_w).collect();
            writeln!(out, "{key:<label_w$} {bars} {}", bytes(x.peak_bytes))?;
        }
        if !s.rss_bytes.is_empty() {
            let rtop = s.rss_bytes.iter().copied().max().unwrap_or(1).max(1);
            let bars: String = columns(&s.rss_bytes, width)
                .iter()
                .map(|&b| BARS[((b * 7) / rtop) as usize])
                .collect();
            writeln!(out, "{:<label_w$} {bars} {}", "RSS", bytes(rtop))?;
        }
        if f == Format::Markdown {
            writeln!(out, "```")?;
        }
        writeln!(
            out,
            "(each column is the maximum over its time span; bars scale to the largest series, RSS to itself)"
        )?;
    }
    Ok(())
}

/// Writes `heaptag timeline --csv`: a time column, then one per key (bytes).
pub fn timeline_csv(t: &Timeline, out: &mut dyn Write) -> io::Result<()> {
    let quote = |s: &str| {
        if s.contains([',', '"', '\n']) {
            format!("\"{}\"", s.replace('"', "\"\""))
        } else {
            s.to_string()
        }
    };
    for s in &t.sources {
        let mut head = vec!["source".to_string(), "time_s".to_string(), "rss_bytes".to_string()];
        head.extend(s.series.iter().map(|x| quote(&x.key)));
        writeln!(out, "{}", head.join(","))?;
        for (i, time) in s.times_s.iter().enumerate() {
            let mut row = vec![
                quote(&s.source.log),
                format!("{time:.3}"),
                s.rss_bytes.get(i).copied().unwrap_or(0).to_string(),
            ];
            row.extend(s.series.iter().map(|x| x.bytes[i].to_string()));
            writeln!(out, "{}", row.join(","))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_keep_maxima() {
        assert_eq!(columns(&[1, 5, 2, 2, 9, 0], 3), vec![5, 2, 9]);
        assert_eq!(columns(&[1, 2], 4), vec![1, 1, 2, 2]);
    }
}
