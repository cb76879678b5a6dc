//! The memory-over-time chart's data: the timelines `heaptag timeline`
//! builds (one per grouping), and the RSS, VmHWM and jemalloc-resident
//! lines, downsampled to a fixed number of time buckets so a day-long log
//! makes a chart of the same size as a short one, and no peak is lost.
//!
//! Per bucket (1/[`BUCKETS`] of the run):
//! - the stacked live bytes are those of one real sample: the one whose
//!   total (all keys) was highest in the bucket, so the stack's top is the
//!   bucket's true maximum and its layers add up to it;
//! - each line (RSS, VmHWM, resident) is its own highest value in the
//!   bucket.
//!
//! Each series' peak (`peak_bytes`) is the timeline's own, taken before
//! downsampling: it equals `heaptag timeline --format json`.

use std::path::Path;

use heaptag_format::{LogReader, Record};
use serde::Serialize;

use crate::report::{By, Series, Timeline};
use crate::units::secs;

/// Time buckets of a chart: about one per pixel of a wide screen.
pub const BUCKETS: usize = 1200;

/// Stacked series kept per grouping; the rest are summed into one
/// `(N others)` series.
pub const MAX_SERIES: usize = 16;

/// One stacked series of a chart.
#[derive(Clone, Debug, Serialize)]
pub struct ChartSeries {
    /// The stage, partition, job or tag (as `heaptag timeline` names it).
    pub key: String,
    /// Its highest live bytes over the whole log (before downsampling).
    pub peak_bytes: u64,
    /// Live bytes at each point of the chart.
    pub values: Vec<u64>,
}

/// One line of a chart (RSS, VmHWM, jemalloc resident).
#[derive(Clone, Debug, Serialize)]
pub struct ChartLine {
    /// What it shows.
    pub name: String,
    /// Its highest value over the whole log (before downsampling).
    pub peak_bytes: u64,
    /// Its highest value in each point's bucket (`None`: not sampled there).
    pub values: Vec<Option<u64>>,
}

/// The chart of one log.
#[derive(Clone, Debug, Serialize)]
pub struct Chart {
    /// Seconds since the log's start of each point.
    pub times_s: Vec<f64>,
    /// Width of a bucket, seconds.
    pub bucket_s: f64,
    /// Memory samples in the log (points are at most [`BUCKETS`]).
    pub samples: usize,
    /// Stacked live bytes per grouping: `stage`, `partition`, `job`, `tag`.
    pub groups: Vec<ChartGroup>,
    /// RSS, VmHWM and jemalloc resident, where the log has them.
    pub lines: Vec<ChartLine>,
}

/// The stacked series of one grouping.
#[derive(Clone, Debug, Serialize)]
pub struct ChartGroup {
    /// `stage`, `partition`, `job` or `tag`.
    pub by: By,
    /// Largest peak first.
    pub series: Vec<ChartSeries>,
}

/// The raw memory readings of a log, one per memory sample: (ns, VmRSS,
/// VmHWM, jemalloc resident written with the sample).
#[derive(Clone, Debug, Default)]
pub struct Readings {
    /// (time ns, VmRSS, VmHWM, jemalloc resident).
    pub samples: Vec<Reading>,
    /// Sampled processes of a `run` / `watch` log: (pid, [(ns, VmRSS)]).
    pub procs: Vec<(u32, Vec<(u64, u64)>)>,
}

/// One reading: (time ns, VmRSS, VmHWM, jemalloc resident).
pub type Reading = (u64, u64, u64, Option<u64>);

/// Reads the RSS, VmHWM and jemalloc-resident readings of a log (the model
/// keeps only VmRSS per sample). The log was read once already: a damaged
/// one reads the same way again, and its damage is reported from the model.
pub fn readings(path: &Path) -> Result<Readings, crate::Error> {
    let mut r = LogReader::open(path).map_err(|source| crate::Error::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let mut out = Readings::default();
    for rec in r.by_ref() {
        match rec {
            Record::Rss {
                time_ns,
                vm_rss,
                vm_hwm,
                ..
            } => out.samples.push((time_ns, vm_rss, vm_hwm, None)),
            // Samples come as Rss, Jemalloc, Counters, Totals.
            Record::Jemalloc { resident, .. } => {
                if let Some(last) = out.samples.last_mut() {
                    last.3.get_or_insert(resident);
                }
            }
            Record::ProcRss {
                time_ns, pid, vm_rss, ..
            } => {
                let i = match out.procs.iter().position(|p| p.0 == pid) {
                    Some(i) => i,
                    None => {
                        out.procs.push((pid, Vec::new()));
                        out.procs.len() - 1
                    }
                };
                out.procs[i].1.push((time_ns, vm_rss));
            }
            _ => {}
        }
    }
    Ok(out)
}

/// Which bucket a time falls in.
struct Buckets {
    end_s: f64,
    n: usize,
}

impl Buckets {
    fn of(&self, t: f64) -> usize {
        if self.end_s <= 0.0 || !t.is_finite() {
            return 0;
        }
        ((t / self.end_s * self.n as f64) as usize).min(self.n - 1)
    }
}

/// The top `MAX_SERIES - 1` series and the rest summed, at every sample.
fn capped(series: &[Series]) -> Vec<(String, u64, Vec<u64>)> {
    let keep = if series.len() > MAX_SERIES {
        MAX_SERIES - 1
    } else {
        series.len()
    };
    let mut out: Vec<(String, u64, Vec<u64>)> = series[..keep]
        .iter()
        .map(|s| (s.key.clone(), s.peak_bytes, s.bytes.clone()))
        .collect();
    if keep < series.len() {
        // A series the timeline already merged ("(N others)") counts N.
        let merged: usize = series[keep..].iter().map(|s| others_count(&s.key).unwrap_or(1)).sum();
        let n = series[keep].bytes.len();
        let mut sum = vec![0u64; n];
        for s in &series[keep..] {
            for (a, b) in sum.iter_mut().zip(&s.bytes) {
                *a = a.saturating_add(*b);
            }
        }
        let peak = sum.iter().copied().max().unwrap_or(0);
        out.push((format!("({merged} others)"), peak, sum));
    }
    out
}

/// N of a `(N others)` key.
fn others_count(key: &str) -> Option<usize> {
    key.strip_prefix('(')?.strip_suffix(" others)")?.parse().ok()
}

/// The chart of log `i`: the four timelines (one per grouping, all built
/// from the same samples) and its readings, downsampled.
pub fn chart(timelines: &[(By, &Timeline)], i: usize, duration_s: f64, readings: &Readings) -> Chart {
    let sections: Vec<(By, &crate::report::TimelineSection)> = timelines
        .iter()
        .filter_map(|(by, t)| Some((*by, t.sources.get(i)?)))
        .collect();
    let times: &[f64] = sections.first().map_or(&[], |(_, s)| s.times_s.as_slice());
    let end_s = duration_s.max(times.last().copied().unwrap_or(0.0));
    let b = Buckets { end_s, n: BUCKETS };
    // Per bucket: the sample whose total is highest (every grouping has
    // the same total: each tag is in exactly one key of each).
    let total_at = |k: usize| -> u128 {
        sections.first().map_or(0, |(_, s)| {
            s.series
                .iter()
                .map(|x| u128::from(x.bytes.get(k).copied().unwrap_or(0)))
                .sum()
        })
    };
    let mut rep: Vec<Option<(usize, u128)>> = vec![None; BUCKETS];
    for (k, &t) in times.iter().enumerate() {
        let tot = total_at(k);
        let slot = &mut rep[b.of(t)];
        if slot.is_none_or(|(_, best)| tot > best) {
            *slot = Some((k, tot));
        }
    }
    // Lines: the highest value per bucket.
    let mut lines: Vec<(String, Vec<(f64, u64)>)> = Vec::new();
    let pts = |f: &dyn Fn(&Reading) -> Option<u64>| -> Vec<(f64, u64)> {
        readings
            .samples
            .iter()
            .filter_map(|s| f(s).map(|v| (secs(s.0), v)))
            .collect()
    };
    if !readings.samples.is_empty() {
        lines.push(("RSS (VmRSS)".into(), pts(&|s| Some(s.1))));
        lines.push(("VmHWM".into(), pts(&|s| Some(s.2))));
        let res = pts(&|s| s.3);
        if !res.is_empty() {
            lines.push(("jemalloc resident".into(), res));
        }
    }
    for (pid, samples) in &readings.procs {
        lines.push((
            format!("RSS of pid {pid}"),
            samples.iter().map(|&(t, v)| (secs(t), v)).collect(),
        ));
    }
    // The points: buckets with a timeline sample (at its time) or, with
    // no timeline, with a line sample (at the bucket's first).
    let mut x: Vec<Option<f64>> = rep.iter().map(|r| r.map(|(k, _)| times[k])).collect();
    for (_, p) in &lines {
        for &(t, _) in p {
            let slot = &mut x[b.of(t)];
            if slot.is_none() {
                *slot = Some(t);
            }
        }
    }
    let points: Vec<usize> = (0..BUCKETS).filter(|&k| x[k].is_some()).collect();
    let groups = sections
        .iter()
        .map(|(by, s)| ChartGroup {
            by: *by,
            series: capped(&s.series)
                .into_iter()
                .map(|(key, peak_bytes, bytes)| ChartSeries {
                    key,
                    peak_bytes,
                    values: points
                        .iter()
                        .map(|&k| rep[k].map_or(0, |(idx, _)| bytes.get(idx).copied().unwrap_or(0)))
                        .collect(),
                })
                .collect(),
        })
        .collect();
    let lines = lines
        .into_iter()
        .map(|(name, p)| {
            let mut best: Vec<Option<u64>> = vec![None; BUCKETS];
            for &(t, v) in &p {
                let slot = &mut best[b.of(t)];
                *slot = Some(slot.map_or(v, |o| o.max(v)));
            }
            ChartLine {
                name,
                peak_bytes: p.iter().map(|&(_, v)| v).max().unwrap_or(0),
                values: points.iter().map(|&k| best[k]).collect(),
            }
        })
        .collect();
    Chart {
        times_s: points.iter().filter_map(|&k| x[k]).collect(),
        bucket_s: end_s / BUCKETS as f64,
        samples: times.len().max(readings.samples.len()),
        groups,
        lines,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Source, TimelineSection};

    fn source() -> Source {
        Source {
            log: "x".into(),
            pid: 1,
            exe: "x".into(),
            duration_s: 0.0,
            complete: true,
            problems: Vec::new(),
            dropped_events: 0,
            unmatched_frees: 0,
            segments: Vec::new(),
            tags_without_id: 0,
            tags_folded: 0,
        }
    }

    /// A one-sample spike among a million samples survives downsampling,
    /// at its true height, in the stack and in the RSS line.
    #[test]
    fn a_one_sample_peak_is_kept() {
        let n = 1_000_000usize;
        let spike = 777_777;
        let times: Vec<f64> = (0..n).map(|k| k as f64 * 0.001).collect();
        let a: Vec<u64> = (0..n)
            .map(|k| if k == spike { 9_000 } else { 100 + (k % 7) as u64 })
            .collect();
        let bb: Vec<u64> = (0..n).map(|k| 50 + (k % 3) as u64).collect();
        let t = Timeline {
            schema_version: 1,
            sources: vec![TimelineSection {
                source: source(),
                by: By::Stage,
                times_s: times.clone(),
                series: vec![
                    Series {
                        key: "a".into(),
                        peak_bytes: 9_000,
                        bytes: a,
                    },
                    Series {
                        key: "b".into(),
                        peak_bytes: 52,
                        bytes: bb.clone(),
                    },
                ],
                rss_bytes: Vec::new(),
                samples_per_point: 1,
            }],
        };
        let readings = Readings {
            samples: (0..n as u64)
                .map(|k| {
                    (
                        k * 1_000_000,
                        if k == 123_456 { 1 << 40 } else { 1 << 20 },
                        1 << 40,
                        Some(5),
                    )
                })
                .collect(),
            procs: Vec::new(),
        };
        let c = chart(&[(By::Stage, &t)], 0, (n - 1) as f64 * 0.001, &readings);
        assert!(c.times_s.len() <= BUCKETS && c.times_s.len() > BUCKETS / 2);
        let g = &c.groups[0];
        let top = (0..c.times_s.len())
            .map(|p| g.series.iter().map(|s| s.values[p]).sum::<u64>())
            .max()
            .unwrap();
        // The spike's moment: a = 9,000 and b at that same sample.
        assert_eq!(top, 9_000 + bb[spike]);
        assert_eq!(g.series[0].peak_bytes, 9_000);
        assert_eq!(c.lines[0].values.iter().flatten().max(), Some(&(1u64 << 40)));
        assert_eq!(c.lines[0].peak_bytes, 1 << 40);
        assert_eq!(c.lines.len(), 3);
    }

    #[test]
    fn beyond_the_cap_series_are_summed_as_others() {
        let series: Vec<Series> = (0..20)
            .map(|k| Series {
                key: format!("s{k}"),
                peak_bytes: 100 - k,
                bytes: vec![100 - k, 1],
            })
            .chain(std::iter::once(Series {
                key: "(5 others)".into(),
                peak_bytes: 3,
                bytes: vec![3, 3],
            }))
            .collect();
        let c = capped(&series);
        assert_eq!(c.len(), MAX_SERIES);
        let last = c.last().unwrap();
        // s15..s19 (5) plus the 5 the timeline merged already.
        assert_eq!(last.0, "(10 others)");
        assert_eq!(last.2, vec![(85 + 84 + 83 + 82 + 81) + 3, 5 + 3]);
        assert_eq!(last.1, 418);
    }
}
