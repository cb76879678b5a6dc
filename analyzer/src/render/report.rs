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
        match (&s.peak_rss, &s.peak_rss_how) {
            (Some(p), Some(how)) => writeln!(out, "{bullet}peak RSS:        {} ({how})", bytes(p.bytes))?,
            (Some(p), None) => writeln!(out, "{bullet}peak RSS:        {}", at(p))?,
            (None, _) => writeln!(out, "{bullet}peak RSS:        not sampled")?,
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
        match (&s.groups, &s.selection) {
            (Some(groups), Some(sel)) => {
                let by = sel.by.unwrap_or(crate::report::By::Tag);
                heading(f, out, 3, &format!("Per {}", format!("{by:?}").to_lowercase()))?;
                crate::report::view::render_groups(by, groups, f, out)?;
            }
            _ if !s.tags.is_empty() => {
                heading(f, out, 3, "Per tag")?;
                tag_table(&s.tags, f, out)?;
            }
            _ => {}
        }
        if let Some(sel) = &s.selection {
            crate::report::view::render_selection(sel, f, out)?;
        }
        if let Some(d) = &s.decomposition {
            let title = match d.peak_rss_bytes {
                None => format!("RSS at its peak ({:.3} s), taken apart", d.time_s),
                Some(p) => format!(
                    "RSS at its highest sample ({} at {:.3} s; the peak, {} by VmHWM, fell between samples), taken apart",
                    bytes(d.rss_bytes),
                    d.time_s,
                    bytes(p)
                ),
            };
            heading(f, out, 3, &title)?;
            let mut t = Table::new(&["part", "bytes", "<how known"]);
            t.row(vec![
                "RSS (VmRSS)".into(),
                bytes(d.rss_bytes),
                "read from /proc/self/status at the sample".into(),
            ]);
            t.row(vec![
                "tracked blocks (>= threshold)".into(),
                bytes(d.tracked_bytes),
                "exact (the process's counters at the sample)".into(),
            ]);
            if d.native_bytes > 0 {
                t.row(vec![
                    "  of which native (C/C++)".into(),
                    bytes(d.native_bytes),
                    "malloc/operator new through heaptag (native feature), tagged; not outside jemalloc".into(),
                ]);
            }
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
            // A part is never shown larger than its whole: what cannot be
            // known is said to be unknown.
            let outside = d.outside_jemalloc_bytes.filter(|_| d.outside_jemalloc_known);
            t.row(vec![
                "outside jemalloc".into(),
                match (outside, d.outside_jemalloc_bytes) {
                    (Some(o), _) => sbytes(o),
                    (None, Some(_)) => "unknown".into(),
                    (None, None) => "n/a".into(),
                },
                match (outside, d.outside_jemalloc_bytes) {
                    (None, Some(o)) => format!(
                        "RSS - jemalloc resident = {}: resident counts pages never touched",
                        sbytes(o)
                    ),
                    _ => "RSS - jemalloc resident (jemalloc statistics at the sample)".into(),
                },
            ]);
            let part = |v: u64, how: &str| -> (String, String) {
                match outside {
                    Some(o) if v > o.max(0) as u64 => (
                        format!("<= {}", sbytes(o)),
                        format!(
                            "{how}: {} counted, more than the whole (not all of it resident)",
                            bytes(v)
                        ),
                    ),
                    Some(_) => (bytes(v), how.to_string()),
                    None => (format!("{} counted", bytes(v)), format!("{how}; the whole is unknown")),
                }
            };
            let (v, how) = part(d.external_bytes, "external_alloc (annotated)");
            t.row(vec!["  of which annotated external".into(), v, how]);
            match d.heaptag_overhead_bytes {
                Some(own) => {
                    let (v, how) = part(own, "heaptag's own, counted");
                    t.row(vec!["  of which heaptag's own".into(), v, how]);
                }
                None => t.row(vec![
                    "  of which heaptag's own".into(),
                    "n/a".into(),
                    "not in this log".into(),
                ]),
            }
            t.write(f, out)?;
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
    // Native (C/C++) columns only for a log that has native blocks, so
    // Rust-only reports keep their shape.
    let native = rows
        .iter()
        .any(|r| r.native_allocated_bytes > 0 || r.native_live_end_bytes > 0);
    let mut head = vec![
        "tag",
        "peak live",
        "at",
        "live at end",
        "allocated",
        "allocations",
        "external",
    ];
    if native {
        head.extend(["native peak", "native at end", "native allocated"]);
    }
    let mut t = Table::new(&head);
    for r in rows {
        let end = match r.live_end_small_upper_bytes {
            // No sampled block alive: not "0 +- 0" but an upper bound.
            Some(u) if r.live_end_tracked_bytes > 0 => {
                format!(
                    "{} + <= {} small (none sampled)",
                    bytes(r.live_end_tracked_bytes),
                    bytes(u)
                )
            }
            Some(u) => format!("<= {} (none sampled)", bytes(u)),
            None if r.live_end_stderr_bytes > 0 => {
                format!("{} +- {}", bytes(r.live_end_bytes), bytes(r.live_end_stderr_bytes))
            }
            None => bytes(r.live_end_bytes),
        };
        let peak = if r.peak_is_estimate_max {
            format!("{} (est. max)", bytes(r.peak_live.bytes))
        } else if r.peak_small_stderr_bytes > 0 {
            format!("{} +- {}", bytes(r.peak_live.bytes), bytes(r.peak_small_stderr_bytes))
        } else {
            bytes(r.peak_live.bytes)
        };
        let mut cells = vec![
            r.tag.clone(),
            peak,
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
        ];
        if native {
            cells.extend([
                bytes(r.native_peak_bytes),
                bytes(r.native_live_end_bytes),
                bytes(r.native_allocated_bytes),
            ]);
        }
        t.row(cells);
    }
    t.write(f, out)
}
