//! `heaptag export`: a log in the formats other tools read.
//!
//! - `folded`: collapsed stacks weighted by bytes ([`crate::folded`]), for
//!   inferno, `flamegraph.pl` and speedscope;
//! - `perfetto`: a Chrome JSON trace ([`perfetto`]) for ui.perfetto.dev and
//!   `chrome://tracing`;
//! - `pprof`: a gzipped `profile.proto` heap profile with tag labels
//!   ([`pprof`]) for `go tool pprof`, Pyroscope and Parca.
//!
//! Each writes to `-o FILE`, or to the output when no file is given.

pub mod perfetto;
pub mod pprof;

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::folded::{self, FoldOptions, LiveAt, Weight};
use crate::model::{LoadOptions, Model};
use crate::report::By;
use crate::{symbolize, Error};

/// What `heaptag export --weight` weighs folded stacks by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum WeightArg {
    /// Bytes alive at a moment (`--at`).
    #[default]
    Live,
    /// Bytes allocated over the run.
    Allocated,
}

/// The formats of `heaptag export`.
#[derive(Clone, Debug, PartialEq, Eq, clap::Subcommand)]
#[non_exhaustive]
pub enum ExportCmd {
    /// Collapsed stacks weighted by bytes (`tag;outermost;...;innermost
    /// bytes` per line), for inferno-flamegraph, flamegraph.pl and
    /// speedscope. The tag is the root frame.
    ///
    /// Example: heaptag export folded run.htlog | inferno-flamegraph > live.svg
    ///          heaptag export folded --weight allocated -o alloc.folded run.htlog
    #[command(verbatim_doc_comment)]
    Folded {
        /// heaptag log (or the segments of one run: a directory, a glob).
        log: PathBuf,
        /// Weigh by bytes alive at a moment, or allocated over the run.
        #[arg(long, value_enum, default_value = "live")]
        weight: WeightArg,
        /// With --weight live: the attributed peak (`peak`), the end
        /// (`end`), or a time since the log's start (`0.128`, `1.5s`,
        /// `250ms`). Default: peak.
        #[arg(long, value_name = "peak|end|TIME", value_parser = parse_at)]
        at: Option<LiveAt>,
        /// Write here instead of the output.
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: Option<PathBuf>,
        /// Name frames by function alone (no `(file:line)`).
        #[arg(long)]
        no_lines: bool,
        /// Keep heaptag's, the unwinder's and the allocator shims' frames
        /// at the top of every stack.
        #[arg(long)]
        allocator_frames: bool,
    },
    /// A trace for ui.perfetto.dev (Chrome JSON trace format): a counter
    /// track of live bytes per stage (or partition, job, tag), VmRSS and
    /// VmHWM tracks, marks as instant events, duplicate-copy windows as
    /// slices.
    ///
    /// Example: heaptag export perfetto -o run.json run.htlog   (open run.json in ui.perfetto.dev)
    #[command(verbatim_doc_comment)]
    Perfetto {
        /// heaptag log (or the segments of one run: a directory, a glob).
        log: PathBuf,
        /// One counter track per stage, partition, job or tag.
        #[arg(long, value_enum, default_value = "stage")]
        by: By,
        /// Write here instead of the output.
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// A pprof heap profile (gzipped profile.proto): allocated and in-use
    /// objects and bytes per call stack, one sample per (stack, tag), the
    /// tag as labels job, stage, partition; for go tool pprof, Pyroscope,
    /// Parca.
    ///
    /// Example: heaptag export pprof -o heap.pb.gz run-1234.htlog
    ///          go tool pprof -top -sample_index=inuse_space -tagfocus stage=synthesize_partition heap.pb.gz
    #[command(verbatim_doc_comment)]
    Pprof {
        /// heaptag log (or the segments of one run: a directory, a glob).
        log: PathBuf,
        /// Write the profile here (default: standard output, when it is not
        /// a terminal).
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: Option<PathBuf>,
        /// In use when: peak (the attributed peak), end, or a time since the
        /// log's start (0.128, 1.5s, 250ms).
        #[arg(long, value_name = "peak|end|TIME", default_value = "peak", value_parser = parse_at)]
        at: LiveAt,
    },
}

fn parse_at(s: &str) -> Result<LiveAt, String> {
    s.parse()
}

/// Why an export could not be made (exit code 2).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExportError {
    /// The options contradict each other.
    #[error("{0}")]
    Usage(String),
    /// The input names no run or several (this command reads one).
    #[error("{}: names {runs} runs (logs of different processes); give one log, or the segments of one run", path.display())]
    NotOneRun {
        /// The input.
        path: PathBuf,
        /// How many runs it names.
        runs: usize,
    },
    /// The output file could not be written.
    #[error("{}: cannot write the export", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
}

/// Loads the one run `input` names (a log, or a rotated log's segments: a
/// directory or a glob pattern, as every command reads them), symbolized;
/// with `intervals`, with the block lifetimes duplicate detection needs.
pub fn load_one(input: &Path, intervals: bool) -> Result<Model, Error> {
    let opts = LoadOptions {
        intervals,
        ..LoadOptions::default()
    };
    let mut models = Model::load_set(&[input.to_path_buf()], &opts)?;
    if models.len() != 1 {
        return Err(ExportError::NotOneRun {
            path: input.to_path_buf(),
            runs: models.len(),
        }
        .into());
    }
    let mut m = models.remove(0);
    symbolize::symbolize(&mut m);
    Ok(m)
}

/// Writes `body` to `output`, or to `out` when no file is given; with a
/// file, a line saying what was written goes to `out`.
fn emit(
    m: &Model,
    output: &Option<PathBuf>,
    out: &mut dyn Write,
    what: &str,
    body: &dyn Fn(&mut dyn Write) -> io::Result<()>,
) -> Result<(), Error> {
    match output {
        None => body(out).map_err(Error::Output),
        Some(path) => {
            refuse_input(m, path)?;
            let write = || -> io::Result<()> {
                let mut f = io::BufWriter::new(std::fs::File::create(path)?);
                body(&mut f)?;
                f.flush()
            };
            write().map_err(|source| ExportError::Write {
                path: path.clone(),
                source,
            })?;
            writeln!(out, "heaptag: {what} written to {}", path.display())?;
            Ok(())
        }
    }
}

/// An error when `path`, an output, is one of the logs `m` was read from.
pub(crate) fn refuse_input(m: &Model, path: &Path) -> Result<(), Error> {
    if m.reads_file(path) {
        return Err(ExportError::Usage(format!(
            "{}: is the log being read; write the export to another file",
            path.display()
        ))
        .into());
    }
    Ok(())
}

/// Runs one export; returns the model it loaded (for its warnings).
pub fn run(cmd: &ExportCmd, out: &mut dyn Write) -> Result<Model, Error> {
    match cmd {
        ExportCmd::Folded {
            log,
            weight,
            at,
            output,
            no_lines,
            allocator_frames,
        } => {
            let weight = match (weight, at) {
                (WeightArg::Live, at) => Weight::Live(at.unwrap_or(LiveAt::Peak)),
                (WeightArg::Allocated, None) => Weight::Allocated,
                (WeightArg::Allocated, Some(_)) => {
                    return Err(ExportError::Usage(
                        "--at picks a moment for --weight live; --weight allocated covers the whole run".into(),
                    )
                    .into())
                }
            };
            let m = load_one(log, false)?;
            let options = FoldOptions {
                lines: !no_lines,
                allocator_frames: *allocator_frames,
            };
            let f = folded::folded(&m, weight, &options)?;
            let what = format!("{} folded stacks ({} bytes in all)", f.lines.len(), f.total);
            emit(&m, output, out, &what, &|w| f.write(w))?;
            Ok(m)
        }
        ExportCmd::Pprof { log, at, output } => {
            let (s, m) = pprof::export(log, *at, output.as_ref(), out)?;
            if let Some(path) = output {
                writeln!(
                    out,
                    "heaptag: wrote {} ({} samples; in use {} at {}; allocated {})",
                    path.display(),
                    s.samples,
                    crate::units::bytes(s.inuse_bytes),
                    crate::units::seconds(crate::units::secs(s.time_ns)),
                    crate::units::bytes(s.alloc_bytes)
                )?;
            }
            Ok(m)
        }
        ExportCmd::Perfetto { log, by, output } => {
            let m = load_one(log, true)?;
            let trace = perfetto::trace(&m, *by)?;
            let what = format!("a Perfetto trace of {} events", trace.trace_events.len());
            emit(&m, output, out, &what, &|w| perfetto::write(&trace, w))?;
            Ok(m)
        }
    }
}
