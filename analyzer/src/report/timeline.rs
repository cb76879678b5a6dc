//! `heaptag timeline`: live bytes per stage, partition, job or tag at each
//! memory sample.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{Source, SCHEMA_VERSION};
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

fn key_of(k: &TagKey, by: By) -> String {
    match by {
        By::Stage => k.stage.clone().unwrap_or_else(|| "(no stage)".into()),
        By::Partition => k
            .partition
            .map_or_else(|| "(no partition)".into(), |p| format!("partition {p}")),
        By::Job => k.job.map_or_else(|| "(no job)".into(), |j| format!("job {j}")),
        By::Tag => k.to_string(),
    }
}

/// Builds `heaptag timeline`.
pub fn timeline(models: &[Model], by: By) -> Timeline {
    Timeline {
        schema_version: SCHEMA_VERSION,
        sources: models
            .iter()
            .map(|m| {
                let n = m.timeline.len();
                let mut series: BTreeMap<String, Vec<u64>> = BTreeMap::new();
                for (i, (_, per_tag)) in m.timeline.iter().enumerate() {
                    for &(tag, bytes) in per_tag {
                        let k = m.tag(tag);
                        if k.is_heaptag_own() {
                            continue;
                        }
                        series.entry(key_of(&k, by)).or_insert_with(|| vec![0; n])[i] += bytes;
                    }
                }
                let mut series: Vec<Series> = series
                    .into_iter()
                    .map(|(key, bytes)| Series {
                        peak_bytes: bytes.iter().copied().max().unwrap_or(0),
                        key,
                        bytes,
                    })
                    .filter(|s| s.peak_bytes > 0)
                    .collect();
                series.sort_by(|a, b| b.peak_bytes.cmp(&a.peak_bytes).then_with(|| a.key.cmp(&b.key)));
                TimelineSection {
                    source: Source::of(m),
                    by,
                    times_s: m.timeline.iter().map(|(t, _)| secs(*t)).collect(),
                    series,
                    rss_bytes: m.rss_series.clone(),
                }
            })
            .collect(),
    }
}
