//! `heaptag-analyzer`: reads heaptag event logs and turns them into answers.
//!
//! ```text
//! log file(s) -> LogReader (heaptag-format) -> Model (model.rs: replay, bounded by the live set)
//!             -> report values (report.rs, dups.rs, sites.rs) -> render.rs (text | markdown | json)
//! ```
//!
//! The library never prints: [`run`] writes into any `io::Write`, so tests
//! render into a `Vec<u8>`.

pub mod check;
pub mod dups;
pub mod model;
pub mod policy;
pub mod render;
pub mod report;
pub mod sites;
pub mod symbolize;
pub mod watch;

use std::collections::BTreeMap;
use std::fmt;
use std::io::{self, Write};
use std::path::PathBuf;

use heaptag_format::{LogReader, ReadError, Record};

pub use model::Model;
pub use render::Format;
pub use report::By;

/// What the analyzer was asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Command {
    /// Per job / stage / partition: peaks, live at end, allocated; the RSS
    /// decomposition at its peak.
    Report {
        /// Logs to read (one section each).
        logs: Vec<PathBuf>,
        /// Output format.
        format: Format,
    },
    /// What held memory at the RSS peak and at the attributed peak.
    Peak {
        /// Logs to read.
        logs: Vec<PathBuf>,
        /// Output format.
        format: Format,
        /// Call sites to list.
        top: usize,
    },
    /// Shared-once or duplicated verdicts.
    Dups {
        /// Logs to read.
        logs: Vec<PathBuf>,
        /// Output format.
        format: Format,
    },
    /// Top call sites.
    Sites {
        /// Logs to read.
        logs: Vec<PathBuf>,
        /// Output format.
        format: Format,
        /// Sites to list.
        top: usize,
    },
    /// Live bytes over time.
    Timeline {
        /// Logs to read.
        logs: Vec<PathBuf>,
        /// Output format.
        format: Format,
        /// Group tags by.
        by: By,
        /// CSV instead of a chart.
        csv: bool,
    },
    /// Enforce a policy: exit 1 when a rule is broken.
    Check {
        /// Logs to read.
        logs: Vec<PathBuf>,
        /// The policy file.
        policy: PathBuf,
        /// Figures of an earlier run (for `max_increase`).
        baseline: Option<PathBuf>,
        /// Write this run's figures here, for later `--baseline`.
        write_baseline: Option<PathBuf>,
        /// Output format.
        format: Format,
        /// JUnit XML instead of `format`.
        junit: bool,
    },
    /// Start a command and sample its memory (and its children's) into a log.
    Run {
        /// Sampling settings and the log.
        cfg: watch::WatchConfig,
        /// The command and its arguments.
        cmd: Vec<std::ffi::OsString>,
    },
    /// Sample a running process (and its children) into a log.
    Watch {
        /// Sampling settings and the log.
        cfg: watch::WatchConfig,
        /// The process.
        pid: u32,
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
    /// The log could not be read at all.
    Read {
        /// The log.
        path: PathBuf,
        /// Why.
        source: ReadError,
    },
    /// Writing the output failed.
    Output(io::Error),
    /// The policy or baseline of `heaptag check` is wrong.
    Check(check::CheckError),
    /// The baseline could not be written.
    WriteBaseline(PathBuf, io::Error),
    /// `heaptag run` / `watch` could not sample.
    Watch(watch::WatchError),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Read { path, source } => write!(f, "{}: {source}", path.display()),
            Error::Output(e) => write!(f, "cannot write the output: {e}"),
            Error::Check(e) => write!(f, "{e}"),
            Error::WriteBaseline(p, e) => write!(f, "{}: cannot write the baseline: {e}", p.display()),
            Error::Watch(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::Output(e)
    }
}

/// What a run produced besides its output: damage found in the logs, one
/// line each (also inside the output), and whether a check failed.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Warnings about the inputs.
    pub warnings: Vec<String>,
    /// `heaptag check` found a broken rule (exit code 1).
    pub failed: bool,
    /// `heaptag run`: the command's exit code, to pass through.
    pub exit_code: Option<i32>,
}

fn load_all(logs: &[PathBuf], peak: bool, intervals: bool) -> Result<Vec<Model>, Error> {
    logs.iter().map(|p| Model::load(p, peak, intervals)).collect()
}

fn warnings(models: &[Model]) -> Vec<String> {
    let mut w = Vec::new();
    for m in models {
        for p in &m.problems {
            w.push(format!("{}: {p}", m.path.display()));
        }
        if !m.ended {
            w.push(format!(
                "{}: no end record (the process did not finish the log)",
                m.path.display()
            ));
        }
        if m.dropped > 0 {
            w.push(format!(
                "{}: {} events were dropped by the writer",
                m.path.display(),
                m.dropped
            ));
        }
    }
    w
}

/// Runs one command, writing its output to `out`.
pub fn run(cmd: &Command, out: &mut dyn Write) -> Result<Outcome, Error> {
    let models = match cmd {
        Command::Run { cfg, cmd } => {
            let code = watch::run_command(cfg, cmd).map_err(Error::Watch)?;
            writeln!(out, "heaptag: log written to {}", cfg.log.display())?;
            return Ok(Outcome {
                exit_code: Some(code),
                ..Outcome::default()
            });
        }
        Command::Watch { cfg, pid } => {
            watch::watch_pid(cfg, *pid).map_err(Error::Watch)?;
            writeln!(out, "heaptag: log written to {}", cfg.log.display())?;
            return Ok(Outcome::default());
        }
        Command::Dump { log, records } => {
            dump(log, *records, out)?;
            return Ok(Outcome::default());
        }
        Command::Check {
            logs,
            policy,
            baseline,
            write_baseline,
            format,
            junit,
        } => {
            // The policy first: a typo should not wait for a long log.
            let policy = policy::Policy::load(policy).map_err(|e| Error::Check(check::CheckError::Policy(e)))?;
            let baseline = baseline
                .as_deref()
                .map(check::read_baseline)
                .transpose()
                .map_err(Error::Check)?;
            let models = load_all(logs, false, true)?;
            let r = check::check(&policy, &models, baseline.as_ref()).map_err(Error::Check)?;
            if let Some(path) = write_baseline {
                let b = check::Baseline::of(&models);
                let text = serde_json::to_string_pretty(&b)
                    .map_err(io::Error::other)
                    .map_err(Error::Output)?;
                std::fs::write(path, text + "\n").map_err(|e| Error::WriteBaseline(path.clone(), e))?;
            }
            check::render(&r, *format, *junit, out)?;
            return Ok(Outcome {
                warnings: warnings(&models),
                failed: r.failures > 0,
                exit_code: None,
            });
        }
        Command::Peak { logs, .. } => load_all(logs, true, false)?,
        Command::Dups { logs, .. } => load_all(logs, false, true)?,
        Command::Report { logs, .. } | Command::Sites { logs, .. } | Command::Timeline { logs, .. } => {
            load_all(logs, false, false)?
        }
    };
    match cmd {
        Command::Report { format, .. } => render::report(&report::report(&models), *format, out)?,
        Command::Peak { format, top, .. } => render::peak(&report::peak(&models, *top), *format, out)?,
        Command::Dups { format, .. } => render::dups(&report::dups(&models), *format, out)?,
        Command::Sites { format, top, .. } => render::sites(&report::sites(&models, *top), *format, out)?,
        Command::Timeline { format, by, csv, .. } => {
            let t = report::timeline(&models, *by);
            if *csv {
                render::timeline_csv(&t, out)?
            } else {
                render::timeline(&t, *format, out)?
            }
        }
        Command::Dump { .. } | Command::Check { .. } | Command::Run { .. } | Command::Watch { .. } => {
            unreachable!("handled above")
        }
    }
    Ok(Outcome {
        warnings: warnings(&models),
        ..Outcome::default()
    })
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
        Record::Totals { .. } => "process totals",
        Record::ProcStart { .. } => "processes seen",
        Record::ProcRss { .. } => "process memory samples",
        Record::ProcExit { .. } => "process exits",
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
