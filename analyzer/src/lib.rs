//! `heaptag-analyzer`: reads heaptag event logs and turns them into reports.
//!
//! This release is a skeleton: the event log format lands next, and with it
//! the reader, the model and the `report`, `peak`, `dups`, `sites`,
//! `timeline` and `check` commands. The command-line surface is fixed here so
//! scripts can be written against it; each command fails with
//! [`Error::NotYetAvailable`] until its part lands.

use std::fmt;
use std::path::PathBuf;

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
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotYetAvailable { command } => write!(
                f,
                "`heaptag {command}` needs the event log, which this release does not write yet; \
                 use heaptag::snapshot() in-process for now"
            ),
        }
    }
}

impl std::error::Error for Error {}

/// Runs one command.
pub fn run(cmd: &Command) -> Result<(), Error> {
    let command = match cmd {
        Command::Report { .. } => "report",
        Command::Peak { .. } => "peak",
        Command::Dups { .. } => "dups",
    };
    Err(Error::NotYetAvailable { command })
}
