//! The analyzer library's errors. Each says what went wrong and where (the
//! file, and the byte offset or line when known) and what to do; the cause
//! is its [`source`](std::error::Error::source), so the binary prints the
//! whole chain on one line (`heaptag: run.htlog: cannot read the log: No
//! such file or directory`).

use std::io;
use std::path::PathBuf;

use heaptag_format::ReadError;

use crate::check::CheckError;
use crate::watch::WatchError;

/// Errors of the analyzer library.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The log could not be read at all (missing, not a heaptag log, newer
    /// format, damaged header); the source says which, with its offset.
    #[error("{}", path.display())]
    Read {
        /// The log.
        path: PathBuf,
        /// Why.
        #[source]
        source: ReadError,
    },
    /// The files named cannot be read as the runs asked for (a directory
    /// without logs, a pattern matching nothing, one segment given twice,
    /// several runs where one is read); the text names the files.
    #[error("{0}")]
    Inputs(String),
    /// Writing the output failed (a closed pipe among others).
    #[error("cannot write the output")]
    Output(#[from] io::Error),
    /// The policy or baseline of `heaptag check` is wrong.
    #[error(transparent)]
    Check(#[from] CheckError),
    /// The baseline could not be written.
    #[error("{}: cannot write the baseline", .0.display())]
    WriteBaseline(PathBuf, #[source] io::Error),
    /// An output file (`heaptag export -o FILE`) could not be written.
    #[error("{}: cannot write the output", .0.display())]
    WriteOutput(PathBuf, #[source] io::Error),
    /// The page of `heaptag html` could not be written.
    #[error("{}: cannot write the page", .0.display())]
    WriteHtml(PathBuf, #[source] io::Error),
    /// `heaptag run` / `watch` could not sample.
    #[error(transparent)]
    Watch(#[from] WatchError),
    /// `heaptag export` could not make or write its output.
    #[error(transparent)]
    Export(#[from] crate::export::ExportError),
}

impl Error {
    /// Whether this is the output closing under us (`heaptag report | head`),
    /// which is no failure.
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, Error::Output(e) if e.kind() == io::ErrorKind::BrokenPipe)
    }

    /// The exit code the `heaptag` binary gives this error: 127 for a
    /// command `heaptag run` cannot start, 2 for everything else (bad
    /// usage, policy, baseline, an unreadable log or process).
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Watch(WatchError::CannotStart(..)) => 127,
            _ => 2,
        }
    }
}

/// The error and its causes on one line, each said once: `what: why: why`.
/// A cause whose text the message already holds is left out.
pub fn one_line(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cause = c.source();
    }
    s
}
