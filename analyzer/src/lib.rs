//! `heaptag-analyzer`: reads heaptag event logs and turns them into answers.
//!
//! ```text
//! log file(s), segment sets (model/segments.rs) -> load (model/load.rs: LogReader) -> replay (model/replay.rs, bounded by the live set)
//!             -> [symbolize.rs: names for call sites, only when the output shows them]
//!             -> report values (report.rs, dups.rs, sites.rs, check.rs)
//!             -> render.rs (text | markdown | json) into any io::Write
//! ```
//!
//! The library never prints: [`run`] writes into any `io::Write`, so tests
//! render into a `Vec<u8>`.

pub mod check;
pub mod diff;
mod dump;
pub mod dups;
mod error;
pub mod export;
pub mod folded;
pub mod html;
pub mod model;
pub mod policy;
pub mod progress;
pub mod render;
pub mod report;
pub mod sites;
pub mod symbolize;
pub mod text;
pub mod units;
pub mod watch;

use std::io::{self, Write};
use std::path::PathBuf;

pub use error::{one_line, Error};
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
    /// `Report` for big runs: tags filtered, grouped, sorted and cut
    /// (`--filter`, `--by`, `--sort`, `--top`).
    ReportView {
        /// Logs to read (one section each).
        logs: Vec<PathBuf>,
        /// Output format.
        format: Format,
        /// The selection.
        view: report::view::ReportView,
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
        /// Naming (`--skip`, `--keep`) and whole stacks (`--stacks`).
        options: report::SitesOptions,
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
    /// Two runs compared per stage/partition, call site and duplicated
    /// content; exit 1 when a gated figure grew more than allowed.
    Diff {
        /// The earlier run's log.
        old: PathBuf,
        /// The later run's log.
        new: PathBuf,
        /// Output format.
        format: Format,
        /// The gate (`--fail-above`, `--fail-min-bytes`).
        options: diff::DiffOptions,
    },
    /// A log in another tool's format (`heaptag export folded|perfetto`).
    Export(export::ExportCmd),
    /// The whole run as one self-contained HTML page (`heaptag html`).
    Html {
        /// Logs to read (one section each).
        logs: Vec<PathBuf>,
        /// The page to write.
        out: PathBuf,
    },
    /// What a log holds: header, record counts, damage (each segment of a
    /// rotated log in order).
    Dump {
        /// Log to read (or the segments of one run: files, a directory, a
        /// glob pattern).
        logs: Vec<PathBuf>,
        /// Print every record too.
        records: bool,
    },
}

/// What a run produced besides its output: damage found in the logs, one
/// line each (also inside the output), and whether a check failed.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Warnings about the inputs.
    pub warnings: Vec<String>,
    /// `heaptag check` found a broken rule, or `heaptag diff` a figure
    /// grown past `--fail-above` (exit code 1).
    pub failed: bool,
    /// `heaptag run`: the command's exit code, to pass through.
    pub exit_code: Option<i32>,
}

/// What a command needs from its logs besides the replay itself.
#[derive(Clone, Default)]
struct Needs {
    /// How to load (second pass, lifetimes, group sums, timeline key).
    load: model::LoadOptions,
    /// Names for call sites: symbolize frames the log left unnamed, from
    /// the binaries on this machine (only for outputs that name sites).
    names: bool,
}

/// Loads every run the inputs name (files, directories of segments, glob
/// patterns), then (only when names are needed) symbolizes them.
fn load_all(logs: &[PathBuf], needs: Needs) -> Result<Vec<Model>, Error> {
    let mut models = Model::load_set(logs, &needs.load)?;
    if needs.names {
        models.iter_mut().for_each(symbolize::symbolize);
    }
    Ok(models)
}

fn warnings(models: &[Model]) -> Vec<String> {
    let mut w = Vec::new();
    for m in models {
        for (i, p) in m.problems.iter().enumerate() {
            let path = m.problem_sources.get(i).unwrap_or(&m.path);
            w.push(format!("{}: {p}", path.display()));
        }
        for d in &m.damage {
            w.push(format!("{}: {d}", m.path.display()));
        }
        if !m.ended {
            w.push(format!(
                "{}: no end record (the process did not finish the log)",
                m.segments.last().unwrap_or(&m.path).display()
            ));
        }
        if m.dropped > 0 {
            w.push(format!(
                "{}: {} events were dropped by the writer",
                m.path.display(),
                m.dropped
            ));
        }
        if let Some(line) = report::tags_without_id_line(m) {
            w.push(format!("{}: {line}", m.path.display()));
        }
        // Said on stderr too, so every command says it (check, diff and
        // the exports print no source lines).
        if let Some(line) = report::tags_folded_line(m.tags_folded) {
            w.push(format!("{}: {}", m.path.display(), line.trim_start_matches("note: ")));
        }
    }
    w
}

/// Runs one command, writing its output to `out`. Each command loads its
/// logs, builds its report value and renders it; only commands whose output
/// names call sites symbolize (`report` and `timeline` never read a binary).
pub fn run(cmd: &Command, out: &mut dyn Write) -> Result<Outcome, Error> {
    let names = Needs {
        names: true,
        ..Needs::default()
    };
    let with = |peak: bool, intervals: bool, names: bool| Needs {
        load: model::LoadOptions {
            peak,
            intervals,
            ..model::LoadOptions::default()
        },
        names,
    };
    let models = match cmd {
        Command::Run { cfg, cmd } => {
            let code = watch::run_command(cfg, cmd)?;
            writeln!(out, "heaptag: log written to {}", cfg.log.display())?;
            return Ok(Outcome {
                exit_code: Some(code),
                ..Outcome::default()
            });
        }
        Command::Watch { cfg, pid } => {
            watch::watch_pid(cfg, *pid)?;
            writeln!(out, "heaptag: log written to {}", cfg.log.display())?;
            return Ok(Outcome::default());
        }
        Command::Dump { logs, records } => {
            let files = model::expand_inputs(logs)?;
            for plan in model::plan_runs(&files, false)? {
                for g in &plan.gaps {
                    writeln!(out, "warning: {g}")?;
                }
                for f in &plan.files {
                    dump::dump(&f.path, *records, out)?;
                }
            }
            return Ok(Outcome::default());
        }
        Command::Export(e) => vec![export::run(e, out)?],
        Command::Diff {
            old,
            new,
            format,
            options,
        } => {
            let (d, models) = diff::diff_logs(old, new, options)?;
            diff::render(&d, *format, out)?;
            return Ok(Outcome {
                warnings: warnings(&models),
                failed: !d.failures.is_empty(),
                exit_code: None,
            });
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
            let policy = policy::Policy::load(policy).map_err(check::CheckError::Policy)?;
            let baseline = baseline.as_deref().map(check::read_baseline).transpose()?;
            // Block lifetimes only for `max_copies` (duplicates).
            let copies = policy
                .rules
                .iter()
                .any(|r| r.limits.iter().any(|l| matches!(l, policy::Limit::MaxCopies(_))));
            let mut needs = with(false, copies, policy.names_sites());
            needs.load.groups = check::groups(&policy);
            let models = load_all(logs, needs)?;
            let r = check::check(&policy, &models, baseline.as_ref(), write_baseline.is_some())?;
            if let Some(path) = write_baseline {
                let b = check::Baseline::of(&models);
                let text = serde_json::to_string_pretty(&b).map_err(io::Error::other)?;
                std::fs::write(path, text + "\n").map_err(|e| Error::WriteBaseline(path.clone(), e))?;
            }
            check::render(&r, *format, *junit, out)?;
            return Ok(Outcome {
                warnings: warnings(&models),
                failed: r.failures > 0,
                exit_code: None,
            });
        }
        Command::Html { logs, out: path } => {
            let models = load_all(logs, with(true, true, true))?;
            let size = html::write_file(&models, path)?;
            writeln!(
                out,
                "heaptag: report written to {} ({})",
                path.display(),
                units::bytes(size)
            )?;
            models
        }
        Command::Report { logs, format } => {
            let models = load_all(logs, Needs::default())?;
            render::report(&report::report(&models), *format, out)?;
            models
        }
        Command::ReportView { logs, format, view } => {
            let models = load_all(logs, Needs::default())?;
            let mut r = report::report(&models);
            report::view::apply(&mut r, &models, view)?;
            render::report(&r, *format, out)?;
            models
        }
        Command::Peak { logs, format, top } => {
            let models = load_all(logs, with(true, false, true))?;
            render::peak(&report::peak(&models, *top), *format, out)?;
            models
        }
        Command::Dups { logs, format } => {
            let models = load_all(logs, with(false, true, true))?;
            render::dups(&report::dups(&models), *format, out)?;
            models
        }
        Command::Sites {
            logs,
            format,
            top,
            options,
        } => {
            let models = load_all(logs, names)?;
            render::sites(&report::sites_with(&models, *top, options), *format, out)?;
            models
        }
        Command::Timeline { logs, format, by, csv } => {
            // Grouped by the key while loading: each point holds the
            // highest value of each key's sum, exact on any run length.
            let mut needs = Needs::default();
            let by = *by;
            needs.load.timeline_key = Some(std::sync::Arc::new(move |k: &model::TagKey| {
                (!k.is_heaptag_own()).then(|| report::key_of(k, by))
            }));
            let models = load_all(logs, needs)?;
            let t = report::timeline(&models, by);
            if *csv {
                render::timeline_csv(&t, out)?
            } else {
                render::timeline(&t, *format, out)?
            }
            models
        }
    };
    Ok(Outcome {
        warnings: warnings(&models),
        ..Outcome::default()
    })
}
