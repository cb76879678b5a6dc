//! Rendering `heaptag report`: per source, the peaks, processes, per-tag
//! table and the RSS taken apart; the combined table and phases.

use std::io::{self, Write};

use super::table::{columns, Table, BARS};
use super::{at, heading, json, source, Format};
use crate::report::Report;
use crate::units::{bytes, sbytes, seconds};

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
