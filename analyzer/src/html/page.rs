//! The page itself: tables rendered here (figures through [`crate::units`],
//! as in every text report), the chart and flame graphs drawn by the
//! embedded script from the embedded data.
//!
//! Every text from a log (stage names, call sites, the executable, marks)
//! is HTML-escaped here, and the JSON is embedded with `<` written
//! `\u003c`, so no log can end the data block or inject markup. The page's
//! Content-Security-Policy forbids every fetch: opened from disk, it makes
//! no network request.

use std::fmt::Write as _;
use std::io::{self, Write};

use super::HtmlData;
use crate::report::{Decomposition, Holding, Moment, ReportSection, SiteRow, Source};
use crate::units::{bytes, sbytes, seconds};

const UPLOT_JS: &str = include_str!("assets/uPlot.iife.min.js");
const UPLOT_CSS: &str = include_str!("assets/uPlot.min.css");
const UPLOT_LICENSE: &str = include_str!("assets/uPlot.LICENSE");
const REPORT_JS: &str = include_str!("assets/report.js");
const REPORT_CSS: &str = include_str!("assets/report.css");

/// No fetch of any kind; inline scripts and styles, data: images only.
const CSP: &str = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                   img-src data:; font-src 'none'; connect-src 'none'; frame-src 'self'; \
                   form-action 'none'; base-uri 'none'";

/// Text for HTML content and attribute values.
pub(crate) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// JSON that is safe inside `<script type="application/json">`: no `<`
/// (so no `</script>` or `<!--`), and no line or paragraph separators.
pub(crate) fn embed_json(s: &str) -> String {
    s.replace('<', "\\u003c")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
}

/// A byte figure with its exact value for scripts and tests.
fn b(v: u64) -> String {
    format!("<span class=\"b\" data-bytes=\"{v}\">{}</span>", bytes(v))
}

fn sb(v: i64) -> String {
    format!("<span class=\"b\" data-bytes=\"{v}\">{}</span>", sbytes(v))
}

/// Writes the page.
pub fn write(d: &HtmlData, out: &mut dyn Write) -> io::Result<()> {
    let json = serde_json::to_string(d).map_err(io::Error::other)?;
    let mut h = String::with_capacity(json.len() + (1 << 16));
    let exe = d
        .report
        .sources
        .first()
        .map(|s| s.source.exe.rsplit('/').next().unwrap_or("").to_string())
        .unwrap_or_default();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta name=\"generator\" content=\"heaptag {}\">\
         <title>heaptag: {}</title>\n<style>{UPLOT_CSS}</style>\n<style>{REPORT_CSS}</style>\n</head>\n<body>\n",
        esc(&d.analyzer_version),
        esc(&exe)
    );
    header(d, &mut h);
    h.push_str(
        "<nav><a href=\"#timeline\">Memory over time</a><a href=\"#peaks\">The peaks</a>\
         <a href=\"#dups\">Duplicates</a><a href=\"#sites\">Call sites</a><a href=\"#tags\">Per tag</a></nav>\n",
    );
    timeline(d, &mut h);
    peaks(d, &mut h);
    dups(d, &mut h);
    sites(d, &mut h);
    tags(d, &mut h);
    let _ = write!(
        h,
        "<footer>Written by heaptag {} (<code>heaptag html</code>). Every figure is that of \
         <code>heaptag report</code>, <code>peak</code>, <code>dups</code>, <code>sites</code> and \
         <code>timeline</code> with <code>--format json</code>, embedded in this page. Chart: uPlot; \
         flame graphs: inferno.<details><summary>uPlot's licence</summary><pre>{}</pre></details></footer>",
        esc(&d.analyzer_version),
        esc(UPLOT_LICENSE)
    );
    h.push('\n');
    let _ = write!(
        h,
        "<script type=\"application/json\" id=\"heaptag-data\">{}</script>\n<script>{UPLOT_JS}</script>\n<script>{REPORT_JS}</script>\n</body></html>\n",
        embed_json(&json)
    );
    out.write_all(h.as_bytes())
}

fn source_title(s: &Source) -> String {
    format!("{} (pid {})", esc(&s.exe), s.pid)
}

/// The run's identity and, in plain sight, what is wrong with its logs.
fn header(d: &HtmlData, h: &mut String) {
    h.push_str("<header><h1>heaptag: who held the memory</h1>\n");
    for (i, s) in d.report.sources.iter().enumerate() {
        let src = &s.source;
        let view = &d.logs[i];
        let _ = write!(
            h,
            "<div class=\"run\" id=\"run-{i}\"><h2>{}</h2><dl>\
             <dt>executable</dt><dd class=\"exe\">{}</dd>\
             <dt>command line</dt><dd><code>{}</code></dd>\
             <dt>pid</dt><dd class=\"pid\">{}</dd>\
             <dt>duration</dt><dd class=\"duration\" data-seconds=\"{}\">{}</dd>\
             <dt>log</dt><dd><code>{}</code>{}</dd>\
             <dt>written by</dt><dd>heaptag {} (page by heaptag {})</dd>\
             <dt>dropped events</dt><dd class=\"dropped{}\" data-count=\"{}\">{}</dd>",
            source_title(src),
            esc(&src.exe),
            esc(&view.cmdline.join(" ")),
            src.pid,
            src.duration_s,
            seconds(src.duration_s),
            esc(&src.log),
            if src.complete {
                ""
            } else {
                " <strong>(incomplete)</strong>"
            },
            esc(&view.writer_version),
            esc(&d.analyzer_version),
            if src.dropped_events > 0 { " bad" } else { "" },
            src.dropped_events,
            src.dropped_events
        );
        if let Some(p) = &s.peak_rss {
            let _ = write!(
                h,
                "<dt>peak RSS</dt><dd class=\"peak-rss\">{} at {}{}</dd>",
                b(p.bytes),
                seconds(p.time_s),
                s.peak_rss_how
                    .as_ref()
                    .map_or(String::new(), |w| format!(" ({})", esc(w)))
            );
        }
        let _ = write!(
            h,
            "<dt>peak attributed</dt><dd class=\"peak-attributed\">{} at {}</dd></dl>",
            b(s.peak_attributed.bytes),
            seconds(s.peak_attributed.time_s)
        );
        let mut warnings: Vec<String> = Vec::new();
        if src.dropped_events > 0 {
            warnings.push(format!(
                "{} events were dropped by the writer: figures built on events are low",
                src.dropped_events
            ));
        }
        warnings.extend(src.problems.iter().cloned());
        if let Some(why) = d.dups.sources.get(i).and_then(|x| x.dups.unverified.as_ref()) {
            warnings.push(format!("duplicate verdicts unverified: {why}"));
        }
        if !warnings.is_empty() {
            h.push_str("<div class=\"warnings\" role=\"alert\"><strong>Warnings</strong><ul>");
            for w in &warnings {
                let _ = write!(h, "<li>{}</li>", esc(w));
            }
            h.push_str("</ul></div>");
        }
        if i == 0 && !d.left_out.is_empty() {
            h.push_str("<div class=\"note left-out\"><strong>Left out of this page</strong><ul>");
            for w in &d.left_out {
                let _ = write!(h, "<li>{}</li>", esc(w));
            }
            h.push_str("</ul></div>");
        }
        if let Some(l) = crate::report::tags_folded_line(src.tags_folded) {
            let l = l.strip_prefix("note: ").unwrap_or(&l);
            let _ = write!(h, "<p class=\"note folded\">{}</p>", esc(l));
        }
        if src.unmatched_frees > 0 {
            let _ = write!(
                h,
                "<p class=\"note\">{} frees of blocks allocated before the log began</p>",
                src.unmatched_frees
            );
        }
        h.push_str("</div>\n");
    }
    h.push_str("</header>\n");
}

fn timeline(d: &HtmlData, h: &mut String) {
    h.push_str(
        "<section id=\"timeline\"><h2>Memory over time</h2>\
         <div class=\"controls\" role=\"group\" aria-label=\"group live bytes by\">Live bytes by ",
    );
    for (k, &by) in d.groupings.iter().enumerate() {
        let name = super::by_name(by);
        let on = if k == 0 { " class=\"on\"" } else { "" };
        let _ = write!(h, "<button data-by=\"{name}\"{on}>{name}</button>");
    }
    h.push_str("<button class=\"reset\">whole run</button></div>\n");
    for (i, s) in d.report.sources.iter().enumerate() {
        let c = &d.logs[i].chart;
        let _ = write!(
            h,
            "<div class=\"chartbox\" id=\"chartbox-{i}\"><h3>{}</h3>",
            source_title(&s.source)
        );
        if c.times_s.is_empty() {
            h.push_str("<p class=\"note\">No memory samples in this log.</p></div>\n");
            continue;
        }
        let _ = write!(
            h,
            "<div class=\"chart\" id=\"chart-{i}\" data-log=\"{i}\"></div>\
             <div class=\"hover\" id=\"hover-{i}\" aria-live=\"polite\">Hover the chart for the figures at a moment; \
             drag to zoom, double-click for the whole run; click a shaded window for its duplicate.</div>\
             <div class=\"legend\" id=\"legend-{i}\"></div>\
             <p class=\"note\">{} memory samples, drawn as {} points: each point is one {}-wide slice of the run; \
             the stack is the sample of the slice with the most live bytes, the lines their highest value in the \
             slice (no sample's peak is lost; the chart shows memory at the samples, every interval, so a peak \
             between two samples, like the attributed peak, is in The peaks below). Live bytes: tracked blocks exact, \
             small blocks estimated.</p></div>",
            c.samples,
            c.times_s.len(),
            if c.bucket_s >= 0.1 {
                seconds(c.bucket_s)
            } else {
                format!("{:.3} ms", c.bucket_s * 1000.0)
            }
        );
        h.push('\n');
    }
    h.push_str("</section>\n");
}

fn holding_total(x: &Holding) -> u64 {
    x.tracked_bytes.saturating_add(x.small_bytes)
}

fn moment(i: usize, m: &Moment, h: &mut String) {
    let title = match m.kind.as_str() {
        "rss" => format!(
            "At the RSS peak: {} at {} ({} attributed)",
            m.rss_bytes.map_or("?".into(), b),
            seconds(m.time_s),
            b(m.attributed_bytes)
        ),
        _ => format!(
            "At the attributed peak: {} at {}",
            b(m.attributed_bytes),
            seconds(m.time_s)
        ),
    };
    let _ = write!(
        h,
        "<div class=\"moment\" data-kind=\"{}\" data-log=\"{i}\"><h4>{title}</h4><div class=\"two\">\
         <table class=\"by-tag\"><thead><tr><th>tag</th><th>held</th><th>share</th><th>tracked</th>\
         <th>small (est.)</th><th>external</th></tr></thead><tbody>",
        esc(&m.kind)
    );
    let total = m.attributed_bytes.max(1);
    for x in &m.by_tag {
        let held = holding_total(x);
        let share = held as f64 * 100.0 / total as f64;
        let _ = write!(
            h,
            "<tr><td class=\"tag\">{}</td><td class=\"num\">{}</td><td class=\"num share\">\
             <span class=\"bar\" style=\"width:{:.1}%\"></span>{share:.1}%</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            esc(&x.tag),
            b(held),
            share.min(100.0),
            b(x.tracked_bytes),
            b(x.small_bytes),
            if x.external_bytes == 0 {
                String::new()
            } else {
                sb(x.external_bytes)
            }
        );
    }
    h.push_str(
        "</tbody></table><table class=\"by-site\"><thead><tr><th>call site</th><th>held</th></tr></thead><tbody>",
    );
    for s in &m.by_site {
        let _ = write!(
            h,
            "<tr><td class=\"site\">{}</td><td class=\"num\">{}</td></tr>",
            esc(&s.site),
            b(s.bytes)
        );
    }
    h.push_str("</tbody></table></div></div>");
}

/// The RSS at its peak as one bar: each part's width its share of the
/// larger of RSS and the sum of the parts (jemalloc's resident may exceed
/// RSS: pages never touched), with RSS marked.
fn decomposition(d: &Decomposition, h: &mut String) {
    let mut parts: Vec<(&str, &str, Option<i64>, &str)> = vec![
        (
            "tracked",
            "tracked blocks (>= threshold)",
            Some(d.tracked_bytes as i64),
            "exact",
        ),
        (
            "small",
            "small blocks",
            Some(d.small_bytes as i64),
            if d.small_stderr_bytes == 0 {
                "exact total (per-tag split estimated)"
            } else {
                "estimated"
            },
        ),
        (
            "rounding",
            "jemalloc rounding and caches",
            d.jemalloc_rounding_bytes,
            "allocated - requested",
        ),
        (
            "overhead",
            "allocator overhead",
            d.allocator_overhead_bytes,
            "jemalloc resident - allocated",
        ),
    ];
    let outside = d.outside_jemalloc_bytes.filter(|_| d.outside_jemalloc_known);
    parts.push(("outside", "outside jemalloc", outside, "RSS - jemalloc resident"));
    let sum: i64 = parts.iter().filter_map(|p| p.2).filter(|&v| v > 0).sum();
    let whole = (d.rss_bytes as i64).max(sum).max(1) as f64;
    let title = match d.peak_rss_bytes {
        None => format!("RSS at its peak ({}), taken apart", seconds(d.time_s)),
        Some(p) => format!(
            "RSS at its highest sample ({} at {}; the peak, {} by VmHWM, fell between samples), taken apart",
            b(d.rss_bytes),
            seconds(d.time_s),
            b(p)
        ),
    };
    let _ = write!(
        h,
        "<div class=\"decomp\"><h4>{title}</h4><div class=\"bar1\" data-rss=\"{}\">",
        d.rss_bytes
    );
    for (class, name, v, _) in &parts {
        if let Some(v) = v.filter(|&v| v > 0) {
            let _ = write!(
                h,
                "<div class=\"part {class}\" data-bytes=\"{v}\" style=\"width:{:.3}%\" title=\"{}: {}\"></div>",
                v as f64 * 100.0 / whole,
                esc(name),
                sbytes(v)
            );
        }
    }
    let _ = write!(
        h,
        "<div class=\"rssline\" style=\"left:{:.3}%\" title=\"RSS {}\"></div></div><table class=\"parts\"><tbody>\
         <tr><td>RSS (VmRSS)</td><td class=\"num\">{}</td><td>read from /proc/self/status at the sample</td></tr>",
        d.rss_bytes as f64 * 100.0 / whole,
        bytes(d.rss_bytes),
        b(d.rss_bytes)
    );
    for (class, name, v, how) in &parts {
        let (fig, how) = match (v, *class) {
            (Some(v), _) => (sb(*v), how.to_string()),
            (None, "outside") if d.outside_jemalloc_bytes.is_some() => (
                "unknown".to_string(),
                format!(
                    "RSS - jemalloc resident = {}: resident counts pages never touched",
                    sbytes(d.outside_jemalloc_bytes.unwrap_or(0))
                ),
            ),
            (None, _) => ("n/a".to_string(), "not in this log".to_string()),
        };
        let _ = write!(
            h,
            "<tr class=\"{class}\"><td><span class=\"swatch {class}\"></span>{}</td><td class=\"num\">{fig}</td><td>{}</td></tr>",
            esc(name),
            esc(&how)
        );
    }
    let _ = write!(
        h,
        "<tr><td>&nbsp;&nbsp;of which annotated external</td><td class=\"num\">{}</td><td>external_alloc, counted</td></tr>",
        b(d.external_bytes)
    );
    if let Some(own) = d.heaptag_overhead_bytes {
        let _ = write!(
            h,
            "<tr><td>&nbsp;&nbsp;of which heaptag's own</td><td class=\"num\">{}</td><td>counted</td></tr>",
            b(own)
        );
    }
    h.push_str("</tbody></table></div>");
}

fn peaks(d: &HtmlData, h: &mut String) {
    h.push_str("<section id=\"peaks\"><h2>The peaks</h2>\n");
    for (i, s) in d.peak.sources.iter().enumerate() {
        let _ = write!(
            h,
            "<div class=\"peaks\" id=\"peaks-{i}\"><h3>{}</h3>",
            source_title(&s.source)
        );
        if let Some(dec) = d
            .report
            .sources
            .get(i)
            .and_then(|r: &ReportSection| r.decomposition.as_ref())
        {
            decomposition(dec, h);
        }
        if s.moments.is_empty() {
            h.push_str("<p class=\"note\">Nothing was allocated or sampled.</p>");
        }
        for m in &s.moments {
            moment(i, m, h);
        }
        h.push_str("</div>\n");
    }
    h.push_str("</section>\n");
}

fn dups(d: &HtmlData, h: &mut String) {
    h.push_str("<section id=\"dups\"><h2>Duplicates: shared once or duplicated?</h2>\n");
    for (i, s) in d.dups.sources.iter().enumerate() {
        let x = &s.dups;
        let _ = write!(
            h,
            "<div class=\"dups\" id=\"dups-{i}\"><h3>{}</h3>",
            source_title(&s.source)
        );
        if x.by_site_and_size_only() {
            h.push_str(
                "<p class=\"note\">No content fingerprints in this log: blocks are grouped by call site and size, \
                 and findings are only suspected.</p>",
            );
        }
        if let Some(why) = &x.unverified {
            let _ = write!(
                h,
                "<p class=\"warnings\">UNVERIFIED: {}; these verdicts cannot be relied on.</p>",
                esc(why)
            );
        }
        h.push_str(
            "<table class=\"verdicts\"><thead><tr><th>stage</th><th>verdict</th><th>wasted at the worst moment</th>\
             <th>extra copies</th><th>contents</th></tr></thead><tbody>",
        );
        let mark = if x.unverified.is_some() { " (unverified)" } else { "" };
        for v in &x.verdicts {
            let verdict = if v.copies > 1 {
                format!("{} x{}{mark}", v.verdict, v.copies)
            } else {
                format!("{}{mark}", v.verdict)
            };
            let class = if v.wasted_bytes > 0 || v.copies > 1 {
                "dup"
            } else {
                "ok"
            };
            let _ = write!(
                h,
                "<tr class=\"{class}\"><td>{}</td><td class=\"verdict\">{}</td><td class=\"num\">{}</td>\
                 <td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
                esc(&v.stage),
                esc(&verdict),
                match v.wasted_at_s {
                    Some(at) => format!("{} at {}", b(v.wasted_bytes), seconds(at)),
                    None => b(0),
                },
                v.copies_made,
                v.contents
            );
        }
        h.push_str("</tbody></table>");
        if let Some(at) = x.worst.at_s {
            let _ = write!(
                h,
                "<p>Worst moment: {} wasted in {} extra cop{} at {}.</p>",
                b(x.worst.wasted_bytes),
                x.worst.extra_copies,
                if x.worst.extra_copies == 1 { "y" } else { "ies" },
                seconds(at)
            );
        }
        if !x.duplicated.is_empty() {
            h.push_str(
                "<table class=\"groups\"><thead><tr><th>content</th><th>size</th><th>copies</th><th>wasted</th>\
                 <th>window</th><th>original</th><th>copies made by</th><th></th></tr></thead><tbody>",
            );
            for (j, g) in x.duplicated.iter().enumerate() {
                let until = g.until_s.map_or("the end".to_string(), seconds);
                let _ = write!(
                    h,
                    "<tr class=\"group\" id=\"dup-{i}-{j}\" data-log=\"{i}\" data-group=\"{j}\">\
                     <td><code>{}</code>{}</td><td class=\"num\">{}</td><td class=\"num\">x{}</td><td class=\"num\">{}</td>\
                     <td>{} to {}</td><td>{}<br><small>{}</small></td><td>{}<br><small>{}</small></td>\
                     <td><a href=\"#chartbox-{i}\" class=\"show\" data-log=\"{i}\" data-group=\"{j}\">on the timeline</a></td></tr>",
                    esc(g.hash.as_deref().unwrap_or("same site and size")),
                    if g.suspected { " (suspected)" } else { "" },
                    b(g.size_bytes),
                    g.copies,
                    b(g.wasted_bytes),
                    seconds(g.from_s),
                    esc(&until),
                    esc(&g.original.tag),
                    esc(&g.original.site),
                    esc(&g.copies_by),
                    esc(&g.extra_copies.first().map_or(String::new(), |c| c.site.clone())),
                );
            }
            h.push_str("</tbody></table>");
        }
        h.push_str("</div>\n");
    }
    h.push_str("</section>\n");
}

fn site_table(class: &str, title: &str, rows: &[SiteRow], h: &mut String) {
    let _ = write!(
        h,
        "<table class=\"{class}\"><caption>{title}</caption><thead><tr><th>call site</th><th>peak live</th>\
         <th>at RSS peak</th><th>allocated</th><th>allocations</th><th>tags</th></tr></thead><tbody>"
    );
    for r in rows {
        let _ = write!(
            h,
            "<tr><td class=\"site\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td><small>{}</small></td></tr>",
            esc(&r.site),
            b(r.peak_live.bytes),
            b(r.at_rss_peak),
            b(r.allocated_bytes),
            r.allocations,
            esc(&r.tags.join(", "))
        );
    }
    h.push_str("</tbody></table>");
}

fn sites(d: &HtmlData, h: &mut String) {
    h.push_str(
        "<section id=\"sites\"><h2>Call sites</h2><div class=\"controls\"><label>Search frames \
         <input type=\"search\" id=\"flame-search\" placeholder=\"function, file or tag\"></label> \
         <span id=\"flame-matched\"></span></div>\
         <p class=\"note\">Icicles: the tag at the top, then each call stack from <code>main</code> down to the \
         function that allocated; width is bytes. Click a frame to zoom, hover for its bytes.</p>\n",
    );
    for (i, s) in d.sites.sources.iter().enumerate() {
        let _ = write!(
            h,
            "<div class=\"sites\" id=\"sites-{i}\"><h3>{}</h3>",
            source_title(&s.source)
        );
        for (k, f) in d.logs[i].flames.iter().enumerate() {
            let _ = write!(
                h,
                "<div class=\"flamebox\"><h4>{} <small>({}, {} stacks)</small></h4>",
                esc(&f.title),
                b(f.total_bytes),
                f.stacks
            );
            if f.svg.is_some() {
                let _ = write!(
                    h,
                    "<iframe class=\"flame\" id=\"flame-{i}-{k}\" data-log=\"{i}\" data-flame=\"{k}\" \
                     title=\"{}\"></iframe>",
                    esc(&f.title)
                );
            } else {
                h.push_str("<p class=\"note\">No bytes to draw.</p>");
            }
            h.push_str("</div>");
        }
        site_table("by-peak", "Top call sites by peak live bytes", &s.by_peak, h);
        site_table("by-allocated", "Top call sites by bytes allocated", &s.by_allocated, h);
        h.push_str("</div>\n");
    }
    h.push_str("</section>\n");
}

fn tags(d: &HtmlData, h: &mut String) {
    h.push_str("<section id=\"tags\"><h2>Per tag</h2>\n");
    for (i, s) in d.report.sources.iter().enumerate() {
        let _ = write!(
            h,
            "<div class=\"tags\" id=\"tags-{i}\"><h3>{}</h3><table class=\"tagrows\"><thead><tr><th>tag</th>\
             <th>peak live</th><th>at</th><th>live at end</th><th>allocated</th><th>allocations</th><th>external</th>\
             </tr></thead><tbody>",
            source_title(&s.source)
        );
        for r in &s.tags {
            let end = match r.live_end_small_upper_bytes {
                Some(u) => format!("{} + &lt;= {} small (none sampled)", b(r.live_end_bytes), b(u)),
                None => b(r.live_end_bytes),
            };
            let _ = write!(
                h,
                "<tr><td class=\"tag\">{}</td><td class=\"num peak\">{}{}</td><td class=\"num\">{}</td>\
                 <td class=\"num\">{end}</td><td class=\"num alloc\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
                esc(&r.tag),
                b(r.peak_live.bytes),
                if r.peak_is_estimate_max { " (est. max)" } else { "" },
                if r.peak_live.bytes == 0 {
                    "-".into()
                } else {
                    seconds(r.peak_live.time_s)
                },
                b(r.allocated_bytes),
                r.allocations,
                if r.external_bytes == 0 {
                    String::new()
                } else {
                    sb(r.external_bytes)
                }
            );
        }
        h.push_str("</tbody></table></div>\n");
    }
    h.push_str("</section>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_text_stays_text() {
        assert_eq!(esc("<script>\"&'"), "&lt;script&gt;&quot;&amp;&#39;");
        let j = embed_json(r#"{"stage":"</script><!--"}"#);
        assert!(!j.contains('<'));
        let v: serde_json::Value = serde_json::from_str(&j).unwrap();
        assert_eq!(v["stage"], "</script><!--");
    }
}
