//! `heaptag dump`: what a log holds (header, counts of each record kind,
//! damage), read straight from the log without a model.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use heaptag_format::{Kind, LogReader, Record};

use crate::units::secs;
use crate::Error;

/// `heaptag dump`: header, counts of each record kind, problems.
pub fn dump(path: &Path, records: bool, out: &mut dyn Write) -> Result<(), Error> {
    let mut r = LogReader::open(path).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let h = crate::text::printable_header(r.header().clone());
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
            {
                let full = h.settings.fingerprint_full;
                let hash = h.settings.fingerprint_hash(full).name();
                format!(" ({}, {hash})", if full { "full" } else { "sampled" })
            },
            h.settings.stack_depth
        ),
    )?;
    w(out, format!("modules:    {}", h.modules.len()))?;
    let mut counts: BTreeMap<Kind, u64> = BTreeMap::new();
    let mut dropped = 0;
    let mut last_time = 0;
    for rec in r.by_ref() {
        *counts.entry(rec.kind()).or_default() += 1;
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
    let events: u64 = counts.iter().filter(|(k, _)| k.is_event()).map(|(_, n)| n).sum();
    w(out, format!("frames:     {frames} intact, {} bytes read", r.offset()))?;
    w(out, format!("duration:   {:.3} s", secs(last_time)))?;
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
        w(out, format!("  {n:>10}  {}", k.name()))?;
    }
    if r.unknown_records() > 0 {
        w(
            out,
            format!(
                "  {:>10}  records of kinds this heaptag does not know (a newer writer's), skipped",
                r.unknown_records()
            ),
        )?;
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
