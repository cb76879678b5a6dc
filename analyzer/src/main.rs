//! The `heaptag` command: parses arguments, calls the library, maps errors to
//! exit codes (0 ok, 1 a check failed, 2 bad input or usage, 3 not available).
//! A closed stdout (`heaptag dump x | head`) is success.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use heaptag_analyzer::{run, Command, Error};

/// heaptag: who holds the memory, and is any of it held twice?
#[derive(Parser, Debug)]
#[command(name = "heaptag", version, about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Live bytes and peaks per job / stage / partition.
    ///
    /// Example: heaptag report run.htlog
    Report {
        /// heaptag log files.
        #[arg(required = true)]
        logs: Vec<PathBuf>,
    },
    /// What held memory at the RSS peak and at the attributed peak.
    ///
    /// Example: heaptag peak run.htlog
    Peak {
        /// heaptag log file.
        log: PathBuf,
    },
    /// Whether large data is shared once or duplicated.
    ///
    /// Example: heaptag dups run.htlog
    Dups {
        /// heaptag log file.
        log: PathBuf,
    },
    /// What a log holds: header, counts of each record kind, damage found.
    ///
    /// Example: heaptag dump run.htlog
    Dump {
        /// heaptag log file.
        log: PathBuf,
        /// Print every record as well.
        #[arg(long)]
        records: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let cmd = match cli.cmd {
        Cmd::Report { logs } => Command::Report { logs },
        Cmd::Peak { log } => Command::Peak { log },
        Cmd::Dups { log } => Command::Dups { log },
        Cmd::Dump { log, records } => Command::Dump { log, records },
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match run(&cmd, &mut out) {
        Ok(()) => ExitCode::SUCCESS,
        // `heaptag dump x | head` is not an error.
        Err(Error::Output(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e @ Error::NotYetAvailable { .. }) => {
            eprintln!("heaptag: {e}");
            ExitCode::from(3)
        }
        Err(e) => {
            eprintln!("heaptag: {e}");
            ExitCode::from(2)
        }
    }
}
