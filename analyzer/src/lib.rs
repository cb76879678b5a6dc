//! `heaptag-analyzer`: reads heaptag event logs and turns them into reports.
//!
//! `dump` reads a log with `heaptag-format`'s reader and lists what is in
//! it. The model and the `report`, `peak` and `dups` commands land next; the
//! command-line surface is fixed here so scripts can be written against it,
//! and those commands fail with [`Error::NotYetAvailable`] until then.

use std::collections::BTreeMap;
use std::fmt;
use std::io::{self, Write};
use std::path::PathBuf;

use heaptag_format::{LogReader, ReadError, Record};

/// What the analyzer was asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Command {
    /// Summary per job / stage / partition.
    Report {
        /// Logs to read.
        logs: Vec<PathBuf>,
    },
    /// What held memory at the peaks.
    Peak {
        /// Log to read.
        log: PathBuf,
    },
    /// Shared-once or duplicated verdicts.
    Dups {
        /// Log to read.
        log: PathBuf,
    },
    /// What a log holds: header, record counts, damage.
    Dump {
        /// Log to read.
        log: PathBuf,
        /// Print every record too.
        records: bool,
    },
}

/// Errors of the analyzer library.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The command exists but its implementation has not landed yet.
    NotYetAvailable {
        /// The command's name.
        command: &'static str,
    },
    /// The log could not be read at all.
    Read {
        /// The log.
        path: PathBuf,
        /// Why.
        source: ReadError,
    },
    /// Writing the output failed.
    Output(io::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotYetAvailable { command } => write!(
                f,
                "`heaptag {command}` needs the event log, which this release does not write yet; \
                 use `heaptag dump` to see what a log holds, or heaptag::snapshot() in-process"
            ),
            Error::Read { path, source } => write!(f, "{}: {source}", path.display()),
            Error::Output(e) => write!(f, "cannot write the output: {e}"),
        }
    }
}

impl std::error::Error for Error {}

/// Runs one command, writing its output to `out`.
pub fn run(cmd: &Command, out: &mut dyn Write) -> Result<(), Error> {
    let command = match cmd {
        Command::Report { .. } => "report",
        Command::Peak { .. } => "peak",
        Command::Dups { .. } => "dups",
        Command::Dump { log, records } => return dump(log, *records, out),
    };
    Err(Error::NotYetAvailable { command })
}

fn kind_name(r: &Record) -> &'static str {
    match r {
        Record::TagDef { .. } => "tag definitions",
        Record::StackDef { .. } => "stack definitions",
        Record::Alloc { .. } => "tracked allocations",
        Record::Free { .. } => "tracked frees",
        Record::ReallocBegin { .. } => "tracked realloc starts",
        Record::Realloc { .. } => "tracked reallocs",
        Record::SampleAlloc { .. } => "sampled allocations",
        Record::SampleFree { .. } => "sampled frees",
        Record::Mark { .. } => "marks",
        Record::Counters { .. } => "counter snapshots",
        Record::Rss { .. } => "RSS samples",
        Record::Jemalloc { .. } => "jemalloc samples",
        Record::External { .. } => "external memory changes",
        Record::Fingerprint { .. } => "fingerprints",
        Record::Dropped { .. } => "dropped-event counts",
        Record::Symbol { .. } => "symbols",
        Record::Pad { .. } => "padding",
        Record::End { .. } => "end of log",
    }
}

/// `heaptag dump`: header, counts of each record kind, problems.
fn dump(path: &std::path::Path, records: bool, out: &mut dyn Write) -> Result<(), Error> {
    let mut r = LogReader::open(path).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let h = r.header().clone();
    let w = |out: &mut dyn Write, s: String| writeln!(out, "{s}").map_err(Error::Output);
    w(out, format!("log:        {}", path.display()))?;
    w(
        out,
        format!(
            "format:     version {}, written by heaptag {}",
            h.version, h.heaptag_version
        ),
    )?;
    w(
        out,
        format!("process:    pid {} {} {}", h.pid, h.exe, h.cmdline.join(" ")),
    )?;
    w(
        out,
        format!(
            "settings:   threshold {} B, sample rate {} B, interval {} ms, fingerprints from {} B{}, stacks {} frames",
            h.settings.threshold,
            h.settings.sample_rate,
            h.settings.interval_ns / 1_000_000,
            h.settings.fingerprint_min,
            if h.settings.fingerprint_full { " (full)" } else { "" },
            h.settings.stack_depth
        ),
    )?;
    w(out, format!("modules:    {}", h.modules.len()))?;
    let mut counts: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut dropped = 0;
    let mut last_time = 0;
    for rec in r.by_ref() {
        *counts.entry(kind_name(&rec)).or_default() += 1;
        match &rec {
            Record::Dropped { events, .. } => dropped = dropped.max(*events),
            Record::End { time_ns, dropped: d } => {
                dropped = dropped.max(*d);
                last_time = last_time.max(*time_ns);
            }
            Record::Alloc { time_ns, .. } | Record::Free { time_ns, .. } | Record::Rss { time_ns, .. } => {
                last_time = last_time.max(*time_ns)
            }
            _ => {}
        }
        if records {
            w(out, format!("  {rec:?}"))?;
        }
    }
    let (frames, payload) = r.frames_read();
    let events: u64 = counts
        .iter()
        .filter(|(k, _)| k.starts_with("tracked") || k.starts_with("sampled"))
        .map(|(_, n)| n)
        .sum();
    w(out, format!("frames:     {frames} intact, {} bytes read", r.offset()))?;
    w(out, format!("duration:   {:.3} s", last_time as f64 / 1e9))?;
    if events > 0 {
        w(
            out,
            format!(
                "events:     {events} ({:.1} bytes per event, frames included)",
                payload as f64 / events as f64
            ),
        )?;
    }
    for (k, n) in &counts {
        w(out, format!("  {n:>10}  {k}"))?;
    }
    w(out, format!("dropped:    {dropped} events"))?;
    w(
        out,
        if r.ended() {
            "end:        the writer finished the log".to_string()
        } else {
            "end:        no end record: the process did not finish the log (killed, crashed, or still running)"
                .to_string()
        },
    )?;
    for p in r.problems() {
        w(out, format!("problem:    {p}"))?;
    }
    Ok(())
}
