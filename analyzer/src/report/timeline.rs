//! `heaptag timeline`: live bytes per stage, partition, job or tag at each
//! memory sample.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{Source, SCHEMA_VERSION};
use heaptag_format::hash::MixMap;

use crate::model::{KeyedSums, Model, TagKey};
use crate::units::secs;

/// What a timeline groups tags by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum By {
    /// Stage names.
    Stage,
    /// Partitions.
    Partition,
    /// Jobs.
    Job,
    /// Full tags.
    Tag,
}

/// One line of a timeline.
#[derive(Clone, Debug, Serialize)]
pub struct Series {
    /// The stage, partition, job or tag.
    pub key: String,
    /// Live bytes at each time.
    pub bytes: Vec<u64>,
    /// Highest value.
    pub peak_bytes: u64,
}

/// `heaptag timeline` for one log.
#[derive(Clone, Debug, Serialize)]
pub struct TimelineSection {
    /// The log.
    pub source: Source,
    /// What tags are grouped by.
    pub by: By,
    /// Sample times, seconds (of each point's first sample).
    pub times_s: Vec<f64>,
    /// One series per key, largest peak first.
    pub series: Vec<Series>,
    /// VmRSS at each time (the highest of the point's samples).
    pub rss_bytes: Vec<u64>,
    /// Samples each point stands for: 1 while a log's samples fit the
    /// budget (4,096 points), then 2, 4, ...; each point holds the highest
    /// value of its samples, so no peak is lost.
    #[serde(skip_serializing_if = "is_one")]
    pub samples_per_point: u32,
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

/// `heaptag timeline`.
#[derive(Clone, Debug, Serialize)]
pub struct Timeline {
    /// JSON schema version.
    pub schema_version: u32,
    /// One section per log.
    pub sources: Vec<TimelineSection>,
}

/// A tag's key. Memory of tags without a partition (or job) is its own key,
/// `shared (no partition)` (`shared (no job)`): process-wide caches entered
/// with `heaptag::shared`, and untagged memory; never merged into a
/// partition or job.
pub fn key_of(k: &TagKey, by: By) -> String {
    match by {
        By::Stage => k.stage.clone().unwrap_or_else(|| "(no stage)".into()),
        By::Partition => k
            .partition
            .map_or_else(|| "shared (no partition)".into(), |p| format!("partition {p}")),
        By::Job => k.job.map_or_else(|| "shared (no job)".into(), |j| format!("job {j}")),
        By::Tag => k.to_string(),
    }
}

/// Most series a section keeps: 256, and fewer when samples x series would
/// pass 16 M values (at least 8); the rest are summed in one "(N others)"
/// series, so a log of many tags and many samples cannot make the output
/// (and the memory) grow as their product.
fn series_cap(samples: usize) -> usize {
    ((1usize << 24) / samples.max(1)).clamp(8, 256)
}

/// The key index of each series while buckets are summed per key.
struct Keys<'a> {
    m: &'a Model,
    by: By,
    key_index: BTreeMap<String, usize>,
    of_series: MixMap<u32, Option<usize>>,
}

impl Keys<'_> {
    /// The key of a series: its name when the timeline is grouped, else
    /// its tag's key (heaptag's own tag: none).
    fn of(&mut self, series: u32) -> Option<usize> {
        if let Some(&k) = self.of_series.get(&series) {
            return k;
        }
        let name = match &self.m.timeline.names {
            Some(names) => names.get(series as usize).cloned(),
            None => {
                let k = self.m.tag(series);
                (!k.is_heaptag_own()).then(|| key_of(&k, self.by))
            }
        };
        let k = name.map(|name| {
            let next = self.key_index.len();
            *self.key_index.entry(name).or_insert(next)
        });
        self.of_series.insert(series, k);
        k
    }
}

/// The series of one log, per key, from the model's downsampled timeline:
/// each point is the key's highest sum in the bucket (exact when the
/// timeline was grouped by this key at loading, or not downsampled).
fn section_series(m: &Model, by: By) -> Vec<Series> {
    let n = m.timeline.len();
    let mut keys = Keys {
        m,
        by,
        key_index: BTreeMap::new(),
        of_series: MixMap::default(),
    };
    // First pass: each key's peak (a key's value changes only in the
    // buckets that list it).
    let mut peaks: Vec<u64> = Vec::new();
    let mut sums = KeyedSums::default();
    for b in &m.timeline.buckets {
        let touched = sums.bucket(b, &mut |s| keys.of(s)).to_vec();
        for k in touched {
            if peaks.len() <= k {
                peaks.resize(k + 1, 0);
            }
            peaks[k] = peaks[k].max(sums.value(k));
        }
    }
    let mut order: Vec<(String, usize)> = keys
        .key_index
        .iter()
        .filter(|(_, &k)| peaks.get(k).is_some_and(|&p| p > 0))
        .map(|(key, &k)| (key.clone(), k))
        .collect();
    order.sort_by(|a, b| peaks[b.1].cmp(&peaks[a.1]).then_with(|| a.0.cmp(&b.0)));
    let cap = series_cap(n);
    let (kept, others) = if order.len() > cap {
        let others = order.len() - (cap - 1);
        order.truncate(cap - 1);
        (order, others)
    } else {
        (order, 0)
    };
    // Second pass: the kept keys' values at each bucket (the rest summed).
    let mut values: Vec<Vec<u64>> = vec![Vec::with_capacity(n); kept.len() + usize::from(others > 0)];
    let mut sums = KeyedSums::default();
    for b in &m.timeline.buckets {
        sums.bucket(b, &mut |s| keys.of(s));
        let mut rest = sums.total();
        for (i, (_, k)) in kept.iter().enumerate() {
            let v = sums.value(*k);
            rest = rest.saturating_sub(u128::from(v));
            values[i].push(v);
        }
        if others > 0 {
            values[kept.len()].push(u64::try_from(rest).unwrap_or(u64::MAX));
        }
    }
    let rest = (others > 0).then(|| values.pop().unwrap_or_default());
    let mut series: Vec<Series> = kept
        .into_iter()
        .zip(values)
        .map(|((key, _), bytes)| Series {
            peak_bytes: bytes.iter().copied().max().unwrap_or(0),
            key,
            bytes,
        })
        .collect();
    if let Some(bytes) = rest {
        series.push(Series {
            key: format!("({others} others)"),
            peak_bytes: bytes.iter().copied().max().unwrap_or(0),
            bytes,
        });
    }
    series
}

/// Builds `heaptag timeline`.
pub fn timeline(models: &[Model], by: By) -> Timeline {
    Timeline {
        schema_version: SCHEMA_VERSION,
        sources: models
            .iter()
            .map(|m| TimelineSection {
                source: Source::of(m),
                by,
                times_s: m.timeline.buckets.iter().map(|b| secs(b.t)).collect(),
                series: section_series(m, by),
                rss_bytes: m.timeline.buckets.iter().map(|b| b.rss).collect(),
                samples_per_point: m.timeline.width.max(1),
            })
            .collect(),
    }
}
