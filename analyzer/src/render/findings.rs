//! Rendering `heaptag peak`, `dups`, `sites` and `timeline` (chart and CSV).

use std::io::{self, Write};

use super::table::{columns, Table, BARS};
use super::{heading, json, source, Format};
use crate::report::{DupsReport, Peak, Sites, Timeline};
use crate::units::{bytes, sbytes, seconds};

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
        if x.by_site_and_size_only() {
            writeln!(
                out,
                "no content fingerprints in this log: blocks are grouped by call site and size, and findings are only suspected"
            )?;
        }
        if let Some(why) = &x.unverified {
            writeln!(
                out,
                "UNVERIFIED: {why}; these verdicts cannot be relied on (`heaptag check` treats max_copies as unverifiable)"
            )?;
        }
        let mark = if x.unverified.is_some() { " (unverified)" } else { "" };
        heading(f, out, 3, "Verdict per stage")?;
        let mut t = Table::new(&[
            "stage",
            "<verdict",
            "<wasted at the worst moment",
            "extra copies",
            "contents",
        ]);
        for v in &x.verdicts {
            let verdict = if v.copies > 1 {
                format!("{} x{}{mark}", v.verdict, v.copies)
            } else {
                format!("{}{mark}", v.verdict)
            };
            t.row(vec![
                v.stage.clone(),
                verdict,
                match v.wasted_at_s {
                    Some(at) => format!("{} at {at:.3} s", bytes(v.wasted_bytes)),
                    None => "0 B".into(),
                },
                v.copies_made.to_string(),
                v.contents.to_string(),
            ]);
        }
        t.write(f, out)?;
        if f == Format::Markdown {
            writeln!(out)?;
        }
        for v in &x.verdicts {
            if v.wasted_bytes > 0 {
                let from: Vec<&str> = v.copied_from.iter().map(String::as_str).collect();
                let whose = match (from.is_empty(), v.originals > 0) {
                    (true, _) => "its own contents".to_string(),
                    (false, true) => format!("contents first made by {} and by itself", from.join(", ")),
                    (false, false) => format!("contents first made by {}", from.join(", ")),
                };
                writeln!(
                    out,
                    "- {}: copies of {whose}, up to x{} of one content; {} wasted at {:.3} s",
                    v.stage,
                    v.copies,
                    bytes(v.wasted_bytes),
                    v.wasted_at_s.unwrap_or(0.0)
                )?;
            } else if v.originals > 0 {
                writeln!(
                    out,
                    "- {}: holds the original of {} content{} that other stages copied, each once",
                    v.stage,
                    v.originals,
                    if v.originals == 1 { "" } else { "s" }
                )?;
            }
        }
        if let Some(at) = x.worst.at_s {
            writeln!(
                out,
                "worst moment: {} wasted in {} extra cop{} at {at:.3} s",
                bytes(x.worst.wasted_bytes),
                x.worst.extra_copies,
                if x.worst.extra_copies == 1 { "y" } else { "ies" }
            )?;
        }
        if x.filled_blocks > 0 {
            writeln!(
                out,
                "({} zero- or constant-filled blocks are never counted as duplicates)",
                x.filled_blocks
            )?;
        }
        if x.unfilled_blocks > 0 {
            writeln!(
                out,
                "({} block{} freed before {} could have been filled held no content: never duplicates, not fingerprinted)",
                x.unfilled_blocks,
                if x.unfilled_blocks == 1 { "" } else { "s" },
                if x.unfilled_blocks == 1 { "it" } else { "they" }
            )?;
        }
        if !x.duplicated.is_empty() {
            heading(f, out, 3, "Duplicated contents")?;
            let mut t = Table::new(&[
                "content",
                "size",
                "copies",
                "wasted",
                "<when",
                "<original",
                "<copies made by",
            ]);
            for g in &x.duplicated {
                let when = match g.until_s {
                    Some(u) => format!("{:.3}-{u:.3} s ({})", g.from_s, seconds(g.duration_s)),
                    None => format!("{:.3} s to the end", g.from_s),
                };
                let o = &g.original;
                t.row(vec![
                    g.hash.clone().unwrap_or_else(|| "suspected (site+size)".into()),
                    bytes(g.size_bytes),
                    format!("x{}", g.copies),
                    bytes(g.wasted_bytes),
                    when,
                    format!("{} at {:.3} s", o.tag, o.from_s),
                    g.copies_by.clone(),
                ]);
            }
            t.write(f, out)?;
            heading(f, out, 3, "Where the copies were made")?;
            let mut t = Table::new(&["<copy made at", "<wasted at its worst moment", "extra copies then"]);
            for w in &x.by_site {
                t.row(vec![
                    w.site.clone(),
                    format!("{} at {:.3} s", bytes(w.wasted_bytes), w.at_s),
                    w.extra_copies.to_string(),
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
            let mut t = Table::new(&[
                "call site",
                "peak live (>=)",
                "at RSS peak",
                "stacks",
                "allocated",
                "allocations",
                "<tags",
            ]);
            for r in rows {
                let mut tags = r.tags.iter().take(3).cloned().collect::<Vec<_>>().join(", ");
                if r.tags.len() > 3 {
                    tags.push_str(&format!(" (+{})", r.tags.len() - 3));
                }
                t.row(vec![
                    r.site.clone(),
                    bytes(r.peak_live.bytes),
                    bytes(r.at_rss_peak),
                    r.stacks.to_string(),
                    bytes(r.allocated_bytes),
                    r.allocations.to_string(),
                    tags,
                ]);
            }
            t.write(f, out)?;
            if rows.iter().any(|r| !r.frames.is_empty()) {
                for r in rows {
                    writeln!(out)?;
                    writeln!(out, "{}:", r.site)?;
                    for fr in &r.frames {
                        writeln!(out, "    {fr}")?;
                    }
                }
            }
        }
        writeln!(
            out,
            "(peak live: the highest peak of one of the site's stacks, a lower bound of the site's peak when it merges several; at RSS peak: what all its stacks held at the RSS peak, as `heaptag peak` shows)"
        )?;
    }
    Ok(())
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
