//! The `heaptag` command: parses arguments, calls the library, maps errors to
//! exit codes. A closed stdout (`heaptag report x | head`) is success.
//!
//! Exit codes: 0 success (warnings about damaged logs go to stderr); 1 a
//! `heaptag check` rule is broken, or a figure grew past `heaptag diff
//! --fail-above`; 2 bad usage, a bad policy or baseline, a log that cannot
//! be read at all (missing, not a heaptag log, newer format, damaged
//! header), or a process that does not exist or cannot be read;
//! `heaptag run` passes its command's exit code through (128 + signal when
//! the command was killed) and exits 127 when the command cannot start.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use heaptag_analyzer::{one_line, run, By, Command, Error, Format, Outcome};

/// heaptag: who holds the memory, and is any of it held twice?
///
/// Reads the logs a program writes with HEAPTAG_LOG=run-%p.htlog.
#[derive(Parser, Debug)]
#[command(name = "heaptag", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Args, Debug)]
struct Logs {
    /// heaptag log files (each is a source: one process); a rotated log's
    /// segments (several files, a directory of *.htlog, or a quoted glob
    /// such as 'logs/run-*.htlog') are read as one run.
    #[arg(required = true, value_name = "LOG")]
    logs: Vec<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Peaks, live bytes and allocations per job / stage / partition, and the
    /// RSS at its peak taken apart.
    ///
    /// Example: heaptag report run-1234.htlog
    ///          heaptag report --format markdown a.htlog b.htlog >> $GITHUB_STEP_SUMMARY
    ///          heaptag report --by partition --filter 'stage=synth*' --sort peak --top 10 run.htlog
    #[command(verbatim_doc_comment)]
    Report {
        #[command(flatten)]
        logs: Logs,
        /// One row per tag, or the tags summed per stage, partition or job.
        #[arg(long, value_enum, default_value = "tag")]
        by: By,
        /// Keep only tags whose DIM matches GLOB (DIM: stage, partition,
        /// job, tag; e.g. 'stage=synth*'); repeat to require several.
        #[arg(long, value_name = "DIM=GLOB", value_parser = parse_filter)]
        filter: Vec<heaptag_analyzer::report::view::Filter>,
        /// Row order: largest peak live, live at end or allocated first, or by name.
        #[arg(long, value_enum, default_value = "name")]
        sort: heaptag_analyzer::report::view::SortBy,
        /// Show only the first N rows (after --sort).
        #[arg(long, value_name = "N")]
        top: Option<usize>,
    },
    /// What held memory at the RSS peak and at the attributed peak, per tag
    /// and per call site: "why was the peak 375 GiB?" in one command.
    ///
    /// Example: heaptag peak run-1234.htlog
    Peak {
        #[command(flatten)]
        logs: Logs,
        /// Call sites to list per peak.
        #[arg(long, default_value_t = 10)]
        top: usize,
    },
    /// Whether large data is shared once or duplicated, per stage, by
    /// content fingerprint; each duplicated content with its copies, window,
    /// holders and wasted bytes.
    ///
    /// Example: heaptag dups run-1234.htlog
    Dups {
        #[command(flatten)]
        logs: Logs,
    },
    /// Top call sites by peak live bytes and by bytes allocated.
    ///
    /// Example: heaptag sites --top 20 run-1234.htlog
    Sites {
        #[command(flatten)]
        logs: Logs,
        /// Sites to list.
        #[arg(long, default_value_t = 15)]
        top: usize,
        /// Crates whose frames never name a site, besides std, rayon,
        /// tokio, crossbeam, hashbrown, heaptag and any registry crate
        /// (comma-separated; `rayon` covers `rayon_core`).
        #[arg(long, value_delimiter = ',', value_name = "CRATES")]
        skip: Vec<String>,
        /// Crates whose frames may name a site even though skipped by
        /// default (comma-separated), e.g. `--keep rayon`.
        #[arg(long, value_delimiter = ',', value_name = "CRATES")]
        keep: Vec<String>,
        /// Print each site's whole stack (of its largest stack), innermost
        /// first, inlined frames expanded.
        #[arg(long)]
        stacks: bool,
    },
    /// Live bytes over time per stage (or partition, job, tag), as a chart
    /// or CSV.
    ///
    /// Example: heaptag timeline --by partition run-1234.htlog
    ///          heaptag timeline --csv run-1234.htlog > live.csv
    #[command(verbatim_doc_comment)]
    Timeline {
        #[command(flatten)]
        logs: Logs,
        /// What to group tags by.
        #[arg(long, value_enum, default_value = "stage")]
        by: By,
        /// Write CSV (time, RSS, one column per key) instead of a chart
        /// (not with --format: CSV is its own format).
        #[arg(long, conflicts_with = "format")]
        csv: bool,
    },
    /// Enforce a policy (heaptag.toml): exit 1 when any rule is broken,
    /// printing each broken rule with its numbers, tags, call sites and line.
    ///
    /// Example: heaptag check --policy heaptag.toml run-*.htlog
    ///          heaptag check --policy heaptag.toml --baseline main.json --format junit run.htlog > heaptag.xml
    #[command(verbatim_doc_comment)]
    Check {
        /// heaptag log files (a rotated log's segments, a directory or a
        /// quoted glob: one run).
        #[arg(required = true, value_name = "LOG")]
        logs: Vec<PathBuf>,
        /// The policy file (see docs/CI.md).
        #[arg(long, value_name = "FILE")]
        policy: PathBuf,
        /// Figures of an earlier run, for max_increase rules.
        #[arg(long, value_name = "FILE")]
        baseline: Option<PathBuf>,
        /// Write this run's figures, for a later --baseline.
        #[arg(long, value_name = "FILE")]
        write_baseline: Option<PathBuf>,
        /// Output format.
        #[arg(long, value_enum, default_value = "text")]
        format: CheckFormat,
    },
    /// Start a command and sample its memory and its children's (VmRSS,
    /// VmHWM, RssAnon, RssFile, RssShmem, Pss) into a log; pass its exit
    /// code through and forward Ctrl-C / SIGTERM to it. A command linking
    /// heaptag gets HEAPTAG_LOG beside the log, and `heaptag report` merges
    /// both on one time line.
    ///
    /// Example: heaptag run --interval 100ms --log bench.htlog -- ./prover --bench
    Run {
        #[command(flatten)]
        watch: WatchArgs,
        /// The command and its arguments.
        #[arg(required = true, last = true, value_name = "CMD")]
        cmd: Vec<std::ffi::OsString>,
    },
    /// Sample a running process (and its children) until it exits or Ctrl-C.
    ///
    /// Example: heaptag watch 4242 --log prover.htlog
    Watch {
        /// The process id.
        pid: u32,
        #[command(flatten)]
        watch: WatchArgs,
    },
    /// Two runs side by side: per stage/partition (jobs merged, as `check
    /// --baseline` keys them), per call site and per duplicated content,
    /// peak, allocated, copies and waste before and after, largest change
    /// first; the run's peak RSS. With --fail-above, exit 1 when a gated
    /// figure grew more than that (docs/REPORTS.md says which).
    ///
    /// Example: heaptag diff main.htlog branch.htlog
    ///          heaptag diff --fail-above 10% --format markdown main.htlog branch.htlog >> $GITHUB_STEP_SUMMARY
    #[command(verbatim_doc_comment)]
    Diff {
        /// The earlier run's log.
        old: PathBuf,
        /// The later run's log.
        new: PathBuf,
        /// Output format.
        #[arg(long, value_enum, default_value = "text")]
        format: Format,
        /// Exit 1 when a gated figure grows more than this (e.g. 10%).
        #[arg(long, value_name = "PCT", value_parser = heaptag_analyzer::diff::parse_pct)]
        fail_above: Option<f64>,
        /// ...and by at least this much (bytes figures; e.g. 1MiB, 0).
        #[arg(long, value_name = "SIZE", default_value = "1MiB", value_parser = parse_size)]
        fail_min_bytes: u64,
    },
    /// A log in the formats other tools read: folded stacks (flame graphs),
    /// a Perfetto trace, a pprof heap profile.
    ///
    /// Example: heaptag export folded run.htlog > live.folded
    ///          heaptag export perfetto -o run.json run.htlog
    ///          heaptag export pprof -o heap.pb.gz run.htlog
    #[command(verbatim_doc_comment)]
    Export {
        #[command(subcommand)]
        format: heaptag_analyzer::export::ExportCmd,
    },
    /// A shell completion script, to source or install.
    ///
    /// Example: heaptag completions bash > ~/.local/share/bash-completion/completions/heaptag
    ///          heaptag completions zsh > ~/.zfunc/_heaptag
    ///          heaptag completions fish > ~/.config/fish/completions/heaptag.fish
    #[command(verbatim_doc_comment)]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// The whole run as one self-contained HTML page: memory over time,
    /// the peaks, duplicates, call-site flame graphs. Opens from disk with
    /// no network access.
    ///
    /// Example: heaptag html run-1234.htlog -o report.html
    ///          heaptag html run.htlog run.app-*.htlog -o run.html
    #[command(verbatim_doc_comment)]
    Html {
        /// heaptag log files (each is a source: one process).
        #[arg(required = true, value_name = "LOG")]
        logs: Vec<PathBuf>,
        /// The page to write.
        #[arg(short, long, value_name = "FILE", default_value = "report.html")]
        out: PathBuf,
    },
    /// What a log holds: header, counts of each record kind, damage found.
    ///
    /// Example: heaptag dump run-1234.htlog
    Dump {
        /// heaptag log file (or the segments of one run: files, a
        /// directory, a quoted glob), each dumped in segment order.
        #[arg(required = true, value_name = "LOG")]
        logs: Vec<PathBuf>,
        /// Print every record as well.
        #[arg(long)]
        records: bool,
    },
}

#[derive(Args, Debug)]
struct WatchArgs {
    /// Time between samples (e.g. 100ms, 1s).
    #[arg(long, default_value = "100ms", value_parser = parse_interval)]
    interval: std::time::Duration,
    /// The log to write (default: heaptag-run-<pid>.htlog here).
    #[arg(long, value_name = "FILE")]
    log: Option<PathBuf>,
    /// Do not follow child processes.
    #[arg(long)]
    no_children: bool,
}

fn parse_filter(s: &str) -> Result<heaptag_analyzer::report::view::Filter, String> {
    s.parse()
}

fn parse_size(s: &str) -> Result<u64, String> {
    heaptag_format::parse_size(s).ok_or_else(|| format!("{s:?}: expected a size such as 1MiB, 512KiB or 0"))
}

fn parse_interval(s: &str) -> Result<std::time::Duration, String> {
    heaptag_format::parse_duration(s).ok_or_else(|| format!("{s:?}: expected a duration such as 100ms or 1s"))
}

fn watch_config(w: WatchArgs) -> heaptag_analyzer::watch::WatchConfig {
    heaptag_analyzer::watch::WatchConfig {
        interval: w.interval,
        log: w
            .log
            .unwrap_or_else(|| PathBuf::from(format!("heaptag-run-{}.htlog", std::process::id()))),
        children: !w.no_children,
    }
}

/// `heaptag check`'s formats: the report formats plus JUnit XML.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum CheckFormat {
    Text,
    Markdown,
    Json,
    Junit,
}

/// The library's command for the parsed arguments (`None`: a completion
/// script, which the binary writes itself).
fn command(cli: Cli) -> Option<Command> {
    Some(match cli.cmd {
        Cmd::Completions { .. } => return None,
        Cmd::Report {
            logs,
            by,
            filter,
            sort,
            top,
        } => Command::ReportView {
            logs: logs.logs,
            format: logs.format,
            view: heaptag_analyzer::report::view::ReportView {
                by,
                filters: filter,
                sort,
                top,
            },
        },
        Cmd::Peak { logs, top } => Command::Peak {
            logs: logs.logs,
            format: logs.format,
            top,
        },
        Cmd::Dups { logs } => Command::Dups {
            logs: logs.logs,
            format: logs.format,
        },
        Cmd::Sites {
            logs,
            top,
            skip,
            keep,
            stacks,
        } => Command::Sites {
            logs: logs.logs,
            format: logs.format,
            top,
            options: heaptag_analyzer::report::SitesOptions {
                policy: heaptag_analyzer::sites::SitePolicy::new(&skip, &keep),
                stacks,
            },
        },
        Cmd::Timeline { logs, by, csv } => Command::Timeline {
            logs: logs.logs,
            format: logs.format,
            by,
            csv,
        },
        Cmd::Dump { logs, records } => Command::Dump { logs, records },
        Cmd::Export { format } => Command::Export(format),
        Cmd::Diff {
            old,
            new,
            format,
            fail_above,
            fail_min_bytes,
        } => Command::Diff {
            old,
            new,
            format,
            options: heaptag_analyzer::diff::DiffOptions {
                fail_above_pct: fail_above,
                fail_min_bytes,
            },
        },
        Cmd::Html { logs, out } => Command::Html { logs, out },
        Cmd::Run { watch, cmd } => Command::Run {
            cfg: watch_config(watch),
            cmd,
        },
        Cmd::Watch { pid, watch } => Command::Watch {
            cfg: watch_config(watch),
            pid,
        },
        Cmd::Check {
            logs,
            policy,
            baseline,
            write_baseline,
            format,
        } => Command::Check {
            logs,
            policy,
            baseline,
            write_baseline,
            format: match format {
                CheckFormat::Markdown => Format::Markdown,
                CheckFormat::Json => Format::Json,
                CheckFormat::Text | CheckFormat::Junit => Format::Text,
            },
            junit: matches!(format, CheckFormat::Junit),
        },
    })
}

/// Writes the completion script of `shell` for the whole command line.
fn completions(shell: clap_complete::Shell) -> ExitCode {
    use clap::CommandFactory;
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "heaptag", &mut out);
    match std::io::Write::write_all(&mut std::io::stdout().lock(), &out) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            eprintln!("heaptag: cannot write the completion script: {e}");
            ExitCode::from(2)
        }
        _ => ExitCode::SUCCESS,
    }
}

/// Runs the command on stdout; warnings go to stderr.
fn run_on_stdout(cmd: &Command) -> anyhow::Result<Outcome> {
    let stdout = std::io::stdout();
    let outcome = run(cmd, &mut stdout.lock())?;
    for w in &outcome.warnings {
        eprintln!("heaptag: warning: {w}");
    }
    Ok(outcome)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Cmd::Completions { shell } = cli.cmd {
        return completions(shell);
    }
    let Some(cmd) = command(cli) else {
        return ExitCode::SUCCESS;
    };
    if let Command::Export(heaptag_analyzer::export::ExportCmd::Pprof { output: None, .. }) = &cmd {
        use std::io::IsTerminal;
        if std::io::stdout().is_terminal() {
            eprintln!("heaptag: export pprof writes a binary profile: give -o FILE, or redirect the output");
            return ExitCode::from(2);
        }
    }
    match run_on_stdout(&cmd) {
        Ok(outcome) => match outcome.exit_code {
            Some(code) => ExitCode::from(code.clamp(0, 255) as u8),
            None if outcome.failed => ExitCode::from(1),
            None => ExitCode::SUCCESS,
        },
        Err(e) => match e.downcast_ref::<Error>() {
            Some(e) if e.is_broken_pipe() => ExitCode::SUCCESS,
            lib => {
                eprintln!("heaptag: {}", one_line(e.as_ref()));
                ExitCode::from(lib.map_or(2, Error::exit_code))
            }
        },
    }
}
