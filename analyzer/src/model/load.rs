//! Loading: reading a log file through [`LogReader`] into a [`Model`], with
//! progress on a terminal (progress.rs). Nothing here reads anything but the log.

use std::path::Path;

use heaptag_format::LogReader;

use super::Model;
use crate::progress::{Progress, RECORDS_PER_TICK};
use crate::text::printable_header;
use crate::Error;

impl Model {
    /// Reads the log at `path` in one pass; with `peak`, a second pass stops
    /// at the attributed peak to record what held it (`heaptag peak`); with
    /// `intervals`, keeps the lifetime of every large block (`heaptag dups`).
    pub fn load(path: &Path, peak: bool, intervals: bool) -> Result<Model, Error> {
        let mut m = Model::pass(path, None, intervals)?;
        let (_, at, _) = m.attributed_peak;
        if peak && at > 0 {
            let again = Model::pass(path, Some(at), false)?;
            m.attributed_composition = again.attributed_composition;
        }
        Ok(m)
    }

    fn pass(path: &Path, stop_at: Option<u64>, want_intervals: bool) -> Result<Model, Error> {
        let mut r = LogReader::open(path).map_err(|source| Error::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let mut m = Model {
            path: path.to_path_buf(),
            header: printable_header(r.header().clone()),
            want_intervals,
            ..Model::default()
        };
        let mut progress = Progress::new(path, if stop_at.is_some() { "peak" } else { "replay" });
        while let Some(rec) = r.next() {
            m.records += 1;
            m.apply(rec);
            if m.overflowed && m.overflow_at.is_none() {
                m.overflow_at = Some(r.record_offset());
            }
            if stop_at == Some(m.records) {
                m.attributed_composition = Some(m.compose());
                break;
            }
            if m.records % RECORDS_PER_TICK == 0 {
                progress.tick(r.offset());
            }
        }
        progress.done();
        m.problems = r.problems().to_vec();
        m.ended = r.ended();
        if r.unknown_records() > 0 {
            m.damage.push(format!(
                "{} records of kinds this heaptag does not know were skipped (written by a newer heaptag, \
                 version {}): figures lack what they held; upgrade heaptag",
                r.unknown_records(),
                m.header.version
            ));
        }
        if stop_at.is_none() {
            m.close();
        }
        Ok(m)
    }
}
