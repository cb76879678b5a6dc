//! `heaptag export perfetto`: a log as a trace for ui.perfetto.dev.
//!
//! The format is the Chrome JSON trace event format ("Trace Event Format",
//! the JSON that `chrome://tracing` reads), which Perfetto's UI and trace
//! processor import as they are. Chosen over Perfetto's protobuf
//! `TracePacket` stream because it is a small, stable, documented subset
//! (counter, instant, complete and metadata events) that `serde_json`
//! writes without a generated protobuf schema, and that people can read
//! and post-process with `jq`; the protobuf form would add a generated
//! crate to keep in step with Perfetto's protos and buys nothing at these
//! sizes (a counter per stage per memory sample).
//!
//! What the trace holds, all in one process (the log's pid):
//!
//! - a counter (`"ph": "C"`) per stage (or partition, job, tag:
//!   [`By`]) named `live <key>` (keys as `heaptag timeline` names them),
//!   with one argument `bytes`: live bytes (tracked exact + small
//!   estimate) as every allocation and free changes them, coalesced per
//!   millisecond ([`window_ns`]: wider for runs longer than 20 s, so a run
//!   is at most 20,000 windows; each window's highest value at its time,
//!   then its last), so every peak is there however short;
//! - counters `VmRSS` and `VmHWM` (argument `bytes`) at every sample, and
//!   for a `heaptag run` / `watch` log `VmRSS pid N` and `VmHWM pid N` per
//!   sampled process;
//! - each mark as an instant event (`"ph": "i"`, process scope);
//! - each duplicated content's worst window (from `heaptag dups`: the
//!   moment most copies were alive, to when one went) as a complete event
//!   (`"ph": "X"`) on a `duplicates` track, with its copies, size, waste,
//!   holders and call site as arguments; overlapping windows go on
//!   separate tracks (`duplicates 1`, `duplicates 2`, ...).
//!
//! Timestamps are microseconds since the log's start (`ts`, fractional),
//! as the format defines them.

use std::collections::BTreeMap;
use std::io::{self, Write};

use heaptag_format::Record;
use serde::Serialize;
use serde_json::{json, Value};

use heaptag_format::hash::MixMap;

use crate::dups;
use crate::folded::{record_time, replay_files, run_files, Flow, Gen, Replay};
use crate::model::Model;
use crate::report::{key_of, By};
use crate::units::bytes;
use crate::Error;

/// Thread id of the counters and marks.
pub const MEMORY_TID: u32 = 0;
/// Thread id of the first `duplicates` track (one more per overlapping
/// window).
pub const DUPLICATES_TID: u32 = 1;

/// One trace event. Fields as the Trace Event Format names them.
#[derive(Clone, Debug, Serialize)]
pub struct Event {
    /// Event name (the counter track's name for `"C"`).
    pub name: String,
    /// Category.
    pub cat: &'static str,
    /// Phase: `C` counter, `i` instant, `X` complete, `M` metadata.
    pub ph: &'static str,
    /// Timestamp, microseconds since the log's start.
    pub ts: f64,
    /// Duration, microseconds (complete events only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dur: Option<f64>,
    /// Scope of an instant event (`p`: the process).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub s: Option<&'static str>,
    /// Process id (the log's).
    pub pid: u32,
    /// Thread id (the track).
    pub tid: u32,
    /// Arguments: a counter's values, a slice's details.
    pub args: Value,
}

/// A trace: what `heaptag export perfetto` writes.
#[derive(Clone, Debug, Serialize)]
pub struct Trace {
    /// The events, metadata first, then by time.
    #[serde(rename = "traceEvents")]
    pub trace_events: Vec<Event>,
    /// How the UI shows times.
    #[serde(rename = "displayTimeUnit")]
    pub display_time_unit: &'static str,
    /// Where the trace comes from (free-form, kept by the viewers).
    #[serde(rename = "otherData")]
    pub other_data: Value,
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

fn meta(name: &str, pid: u32, tid: u32, value: Value) -> Event {
    Event {
        name: name.into(),
        cat: "__metadata",
        ph: "M",
        ts: 0.0,
        dur: None,
        s: None,
        pid,
        tid,
        args: value,
    }
}

fn counter(name: String, pid: u32, t_ns: u64, v: u64) -> Event {
    Event {
        name,
        cat: "memory",
        ph: "C",
        ts: us(t_ns),
        dur: None,
        s: None,
        pid,
        tid: MEMORY_TID,
        args: json!({ "bytes": v }),
    }
}

/// Narrowest window live-bytes counters are coalesced in: 1 ms.
pub const WINDOW_NS: u64 = 1_000_000;

/// Most windows a run is cut into: a longer run gets wider windows, so a
/// counter has at most twice this many events however long the run.
pub const MAX_WINDOWS: u64 = 20_000;

/// The window for a run of `duration_ns`: [`WINDOW_NS`], or wider so the
/// run is at most [`MAX_WINDOWS`] windows. Within each window a key's
/// highest value (at its time) and its last are kept, so no peak is lost
/// and the trace grows with the run's length, not with its allocations.
pub fn window_ns(duration_ns: u64) -> u64 {
    WINDOW_NS.max(duration_ns.div_ceil(MAX_WINDOWS))
}

/// A counter's value at a time: (ns, bytes).
type Point = (u64, u64);

/// One counter's points, coalesced per window: the highest and the last
/// value of each window where it changed.
struct Coalesced {
    window: u64,
    points: Vec<(u64, u64)>,
    /// The open window: its index, (time, value) of its highest, its last.
    open: Option<(u64, Point, Point)>,
}

impl Coalesced {
    fn new(window: u64) -> Coalesced {
        Coalesced {
            window,
            points: Vec::new(),
            open: None,
        }
    }

    fn push(&mut self, t: u64, v: u64) {
        let w = t / self.window;
        match &mut self.open {
            Some((ow, max, last)) if *ow == w => {
                if v > max.1 {
                    *max = (t, v);
                }
                *last = (t, v);
            }
            _ => {
                self.flush();
                self.open = Some((w, (t, v), (t, v)));
            }
        }
    }

    fn flush(&mut self) {
        if let Some((_, max, last)) = self.open.take() {
            self.points.push(max);
            if last != max {
                self.points.push(last);
            }
        }
    }
}

/// What one pass over the log gives: live bytes per key (exact, coalesced
/// per window) and the RSS samples, own and per sampled process.
struct Series {
    keys: BTreeMap<String, Coalesced>,
    rss: Vec<(u64, u64, u64)>,
    procs: BTreeMap<u32, Vec<(u64, u64, u64)>>,
}

fn series(m: &Model, by: By) -> Result<Series, Error> {
    let mut rss: Vec<(u64, u64, u64)> = Vec::new();
    let mut procs: BTreeMap<u32, Vec<(u64, u64, u64)>> = BTreeMap::new();
    let mut replay = Replay::default();
    replay.track_tags = true;
    // Per tag generation: its key's index (None: heaptag's own) and the
    // bytes it adds to the key now; per key: its sum now and its series.
    let mut tags: MixMap<Gen, (Option<usize>, u64)> = MixMap::default();
    let mut index: BTreeMap<String, usize> = BTreeMap::new();
    let mut keys: Vec<(u64, Coalesced)> = Vec::new();
    let window = window_ns(m.end_ns);
    replay_files(
        &run_files(m),
        "trace",
        &mut replay,
        |rec, replay| {
            let now = record_time(rec).map_or(replay.now, |t| t.max(replay.now));
            match rec {
                Record::Rss { vm_rss, vm_hwm, .. } => rss.push((now, *vm_rss, *vm_hwm)),
                Record::ProcRss {
                    pid, vm_rss, vm_hwm, ..
                } => procs.entry(*pid).or_default().push((now, *vm_rss, *vm_hwm)),
                _ => {}
            }
            Flow::Go
        },
        |replay| {
            // A retired generation holds nothing and changes no more.
            for g in std::mem::take(&mut replay.settled_gens) {
                tags.remove(&g);
            }
            for g in std::mem::take(&mut replay.changed) {
                let live = replay.tag_live.get(&g).copied().unwrap_or(0);
                let (key, held) = tags.entry(g).or_insert_with(|| {
                    let k = replay.key(g);
                    let key = (!k.is_heaptag_own()).then(|| {
                        let next = index.len();
                        *index.entry(key_of(&k, by)).or_insert(next)
                    });
                    if let Some(i) = key {
                        if i >= keys.len() {
                            keys.resize_with(i + 1, || (0, Coalesced::new(window)));
                        }
                    }
                    (key, 0)
                });
                let Some(i) = *key else { continue };
                let (sum, series) = &mut keys[i];
                *sum = sum.saturating_sub(*held).saturating_add(live);
                *held = live;
                series.push(replay.now, *sum);
            }
        },
    )?;
    let mut out = Series {
        keys: BTreeMap::new(),
        rss,
        procs,
    };
    let mut slots: Vec<Option<Coalesced>> = keys.into_iter().map(|k| Some(k.1)).collect();
    out.keys = index
        .into_iter()
        .filter_map(|(k, i)| slots[i].take().map(|c| (k, c)))
        .collect();
    for c in out.keys.values_mut() {
        c.flush();
    }
    Ok(out)
}

/// Pushes a counter's events: the first value, every change, and the last
/// point (so the track runs to its end).
fn push_series(events: &mut Vec<Event>, name: &str, pid: u32, points: &[(u64, u64)]) {
    let mut prev: Option<u64> = None;
    for (i, &(t, v)) in points.iter().enumerate() {
        if prev != Some(v) || i + 1 == points.len() {
            events.push(counter(name.to_string(), pid, t, v));
        }
        prev = Some(v);
    }
}

/// Builds the trace of a loaded log (with block lifetimes, for the
/// duplicate windows: `Model::load(path, false, true)`, symbolized for the
/// call sites' names).
pub fn trace(m: &Model, by: By) -> Result<Trace, Error> {
    let pid = m.header.pid;
    let exe = m.header.exe.rsplit('/').next().unwrap_or(&m.header.exe).to_string();
    let mut events = vec![
        meta(
            "process_name",
            pid,
            MEMORY_TID,
            json!({ "name": format!("heaptag: {exe} (pid {pid})") }),
        ),
        meta("thread_name", pid, MEMORY_TID, json!({ "name": "memory" })),
    ];
    let series = series(m, by)?;
    for (key, c) in &series.keys {
        // A key that never held anything gets no track.
        if c.points.iter().any(|p| p.1 > 0) {
            push_series(&mut events, &format!("live {key}"), pid, &c.points);
        }
    }
    let pairs = |v: &[(u64, u64, u64)], hwm: bool| -> Vec<(u64, u64)> {
        v.iter().map(|s| (s.0, if hwm { s.2 } else { s.1 })).collect()
    };
    push_series(&mut events, "VmRSS", pid, &pairs(&series.rss, false));
    push_series(&mut events, "VmHWM", pid, &pairs(&series.rss, true));
    for (p, samples) in &series.procs {
        push_series(&mut events, &format!("VmRSS pid {p}"), pid, &pairs(samples, false));
        push_series(&mut events, &format!("VmHWM pid {p}"), pid, &pairs(samples, true));
    }

    for (t, label) in &m.marks {
        events.push(Event {
            name: label.clone(),
            cat: "mark",
            ph: "i",
            ts: us(*t),
            dur: None,
            s: Some("p"),
            pid,
            tid: MEMORY_TID,
            args: json!({}),
        });
    }

    // Duplicate windows, greedily packed on tracks that never overlap.
    let d = dups::analyze(m);
    let mut groups: Vec<&dups::Group> = d.duplicated.iter().collect();
    groups.sort_by(|a, b| a.from_s.total_cmp(&b.from_s));
    let mut lanes: Vec<u64> = Vec::new();
    let end_ns = m.end_ns;
    for g in groups {
        let from = (g.from_s * 1e9).round() as u64;
        let until = g.until_s.map_or(end_ns, |u| (u * 1e9).round() as u64).max(from);
        let lane = match lanes.iter().position(|&e| e <= from) {
            Some(i) => i,
            None => {
                lanes.push(0);
                lanes.len() - 1
            }
        };
        lanes[lane] = until;
        let tid = DUPLICATES_TID + lane as u32;
        events.push(Event {
            name: format!(
                "{} x{} {}",
                if g.suspected {
                    "suspected duplicate"
                } else {
                    "duplicate"
                },
                g.copies,
                bytes(g.size_bytes)
            ),
            cat: "duplicates",
            ph: "X",
            ts: us(from),
            dur: Some(us(until - from)),
            s: None,
            pid,
            tid,
            args: json!({
                "copies": g.copies,
                "size_bytes": g.size_bytes,
                "wasted_bytes": g.wasted_bytes,
                "hash": g.hash,
                "suspected": g.suspected,
                "original": g.original.tag,
                "held_by": g.held_by,
                "copies_by": g.copies_by,
                "site": g.site,
                "until_end": g.until_s.is_none(),
            }),
        });
    }
    for lane in 0..lanes.len() {
        let tid = DUPLICATES_TID + lane as u32;
        let name = if lanes.len() == 1 {
            "duplicates".to_string()
        } else {
            format!("duplicates {}", lane + 1)
        };
        events.insert(2 + lane, meta("thread_name", pid, tid, json!({ "name": name })));
    }
    // Metadata first, then by time (stable: a counter's events keep their order).
    let n_meta = events.iter().take_while(|e| e.ph == "M").count();
    events[n_meta..].sort_by(|a, b| a.ts.total_cmp(&b.ts));
    Ok(Trace {
        trace_events: events,
        display_time_unit: "ms",
        other_data: json!({
            "producer": format!("heaptag {}", env!("CARGO_PKG_VERSION")),
            "log": m.path.display().to_string(),
            "exe": m.header.exe,
            "pid": pid,
            "start_wall_ns": m.header.start_wall_ns,
            "by": format!("{by:?}").to_lowercase(),
        }),
    })
}

/// Writes the trace as JSON.
pub fn write(t: &Trace, out: &mut dyn Write) -> io::Result<()> {
    // An I/O error keeps its kind (a closed pipe is no error to the caller).
    serde_json::to_writer(&mut *out, t).map_err(|e| match e.io_error_kind() {
        Some(kind) => io::Error::from(kind),
        None => io::Error::other(e),
    })?;
    writeln!(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_keep_each_peak_and_last_value() {
        assert_eq!(window_ns(0), WINDOW_NS);
        assert_eq!(window_ns(3_600_000_000_000), 180_000_000);
        let mut c = Coalesced::new(10);
        for (t, v) in [(1, 5), (2, 9), (3, 4), (15, 4), (27, 1), (28, 3)] {
            c.push(t, v);
        }
        c.flush();
        assert_eq!(c.points, vec![(2, 9), (3, 4), (15, 4), (28, 3)]);
    }
}
