//! Rendering report values as aligned text, Markdown or JSON, into any
//! `io::Write` (the library never prints by itself): `heaptag report` in
//! report.rs, the other commands in findings.rs, tables and charts in table.rs.

use std::io::{self, Write};

use serde::Serialize;

use crate::report::Source;
pub use crate::units::bytes;
use crate::units::seconds;

mod findings;
mod report;
pub(crate) mod table;

pub use findings::{dups, peak, sites, timeline, timeline_csv};
pub use report::report;

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

pub(crate) fn heading(f: Format, out: &mut dyn Write, level: usize, text: &str) -> io::Result<()> {
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

pub(crate) fn source(f: Format, out: &mut dyn Write, s: &Source) -> io::Result<()> {
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
    if let Some(l) = crate::report::tags_folded_line(s.tags_folded) {
        line(out, l)?;
    }
    Ok(())
}

pub(crate) fn at(a: &crate::report::At) -> String {
    format!("{} at {}", bytes(a.bytes), seconds(a.time_s))
}

/// Writes a value as pretty JSON.
pub fn json<T: Serialize>(v: &T, out: &mut dyn Write) -> io::Result<()> {
    // An I/O failure (a closed pipe) keeps its kind, so `main` can tell a
    // reader that stopped early (success) from a real error.
    serde_json::to_writer_pretty(&mut *out, v).map_err(|e| match e.io_error_kind() {
        Some(kind) => io::Error::new(kind, e),
        None => io::Error::other(e),
    })?;
    writeln!(out)
}
