//! `heaptag timeline`: live bytes per stage, partition, job or tag at each
//! memory sample.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{Source, SCHEMA_VERSION};
use heaptag_format::hash::MixMap;

use crate::model::{Model, TagKey};
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
    /// Sample times, seconds.
    pub times_s: Vec<f64>,
    /// One series per key, largest peak first.
    pub series: Vec<Series>,
    /// VmRSS at each time.
    pub rss_bytes: Vec<u64>,
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

/// Live bytes per key while the model's timeline (tag changes) is replayed.
#[derive(Default)]
struct Sums {
    key_index: BTreeMap<String, usize>,
    /// Per tag: its key (None: heaptag's own) and its bytes now.
    tags: MixMap<u32, (Option<usize>, u64)>,
    sums: Vec<u128>,
    total: u128,
}

impl Sums {
    /// Applies one sample's changes; the keys changed go to `touched`.
    fn apply(&mut self, m: &Model, by: By, per_tag: &[(u32, u64)], touched: &mut Vec<usize>) {
        for &(tag, bytes) in per_tag {
            let key_index = &mut self.key_index;
            let e = self.tags.entry(tag).or_insert_with(|| {
                let k = m.tag(tag);
                let key = (!k.is_heaptag_own()).then(|| {
                    let next = key_index.len();
                    *key_index.entry(key_of(&k, by)).or_insert(next)
                });
                (key, 0)
            });
            if let Some(k) = e.0 {
                if k >= self.sums.len() {
                    self.sums.resize(k + 1, 0);
                }
                self.sums[k] = self.sums[k] - u128::from(e.1) + u128::from(bytes);
                self.total = self.total - u128::from(e.1) + u128::from(bytes);
                touched.push(k);
            }
            e.1 = bytes;
        }
    }
}

/// The series of one log: tag changes (the model's timeline) applied
/// sample by sample, per key, without a vector per tag.
fn section_series(m: &Model, by: By) -> Vec<Series> {
    let n = m.timeline.len();
    // First pass: each key's peak.
    let mut st = Sums::default();
    let mut peaks: Vec<u128> = Vec::new();
    let mut touched = Vec::new();
    for (_, per_tag) in &m.timeline {
        touched.clear();
        st.apply(m, by, per_tag, &mut touched);
        peaks.resize(st.sums.len(), 0);
        for &k in &touched {
            peaks[k] = peaks[k].max(st.sums[k]);
        }
    }
    let mut order: Vec<(String, usize)> = st
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
    // Second pass: the kept keys' values at each sample (the rest summed).
    let mut values: Vec<Vec<u64>> = vec![Vec::with_capacity(n); kept.len() + usize::from(others > 0)];
    let clamp = |v: u128| u64::try_from(v).unwrap_or(u64::MAX);
    let mut st = Sums::default();
    for (_, per_tag) in &m.timeline {
        touched.clear();
        st.apply(m, by, per_tag, &mut touched);
        let mut rest = st.total;
        for (i, (_, k)) in kept.iter().enumerate() {
            let v = st.sums.get(*k).copied().unwrap_or(0);
            rest -= v;
            values[i].push(clamp(v));
        }
        if others > 0 {
            values[kept.len()].push(clamp(rest));
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
                times_s: m.timeline.iter().map(|(t, _)| secs(*t)).collect(),
                series: section_series(m, by),
                rss_bytes: m.rss_series.clone(),
            })
            .collect(),
    }
}
