//! Progress of a pass over a log: a bar on stderr (indicatif) when stderr
//! is a terminal, driven by the bytes of the log read; nothing at all when
//! stderr is piped or redirected, so logs and CI output stay clean.

use std::io::IsTerminal;
use std::path::Path;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Records between two updates of the bar (an update is an atomic store;
/// indicatif redraws at most 20 times a second).
pub const RECORDS_PER_TICK: u64 = 65536;

/// A progress bar for one pass over a log (hidden off a terminal).
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// A bar for reading `path`; `pass` says which pass (`replay`, `peak`).
    pub fn new(path: &Path, pass: &str) -> Progress {
        Progress::with_terminal(path, pass, std::io::stderr().is_terminal())
    }

    /// As [`Progress::new`], saying whether stderr is a terminal.
    pub fn with_terminal(path: &Path, pass: &str, terminal: bool) -> Progress {
        let total = std::fs::metadata(path).map_or(0, |m| m.len());
        let target = if terminal && total > 0 {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = ProgressBar::with_draw_target(Some(total), target);
        // The template is a constant: it parses.
        if let Ok(style) =
            ProgressStyle::with_template("reading {msg} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta} left)")
        {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_message(format!("{} ({pass})", path.display()));
        Progress { bar }
    }

    /// Whether the bar is drawn.
    pub fn is_shown(&self) -> bool {
        !self.bar.is_hidden()
    }

    /// `at` bytes of the log have been read.
    pub fn tick(&mut self, at: u64) {
        self.bar.set_position(at);
    }

    /// The pass is over: the bar is cleared.
    pub fn done(&self) {
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_off_a_terminal() {
        let mut p = Progress::with_terminal(Path::new("Cargo.toml"), "replay", false);
        assert!(!p.is_shown());
        p.tick(10);
        p.done();
    }
}
