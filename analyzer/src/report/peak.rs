//! `heaptag peak`: what held memory at the RSS peak and at the attributed
//! peak, per tag and per call site.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{Source, SCHEMA_VERSION};
use crate::model::{Composition, Model};
use crate::sites::site_name;
use crate::units::secs;

/// A tag's share of memory at a moment.
#[derive(Clone, Debug, Serialize)]
pub struct Holding {
    /// The tag.
    pub tag: String,
    /// Tracked bytes (exact).
    pub tracked_bytes: u64,
    /// Small bytes (estimate).
    pub small_bytes: u64,
    /// External bytes.
    pub external_bytes: i64,
}

/// A call site's share of memory at a moment.
#[derive(Clone, Debug, Serialize)]
pub struct SiteHolding {
    /// The call site.
    pub site: String,
    /// Bytes alive from it (tracked exact + sampled estimate).
    pub bytes: u64,
}

/// What held memory at one moment.
#[derive(Clone, Debug, Serialize)]
pub struct Moment {
    /// Which peak: `rss` or `attributed`.
    pub kind: String,
    /// When, seconds.
    pub time_s: f64,
    /// VmRSS then, if sampled.
    pub rss_bytes: Option<u64>,
    /// Tracked + small estimate then.
    pub attributed_bytes: u64,
    /// Per tag, largest first.
    pub by_tag: Vec<Holding>,
    /// Per call site, largest first (top N).
    pub by_site: Vec<SiteHolding>,
}

/// `heaptag peak` for one log.
#[derive(Clone, Debug, Serialize)]
pub struct PeakSection {
    /// The log.
    pub source: Source,
    /// At the RSS peak and at the attributed peak.
    pub moments: Vec<Moment>,
}

/// `heaptag peak`.
#[derive(Clone, Debug, Serialize)]
pub struct Peak {
    /// JSON schema version.
    pub schema_version: u32,
    /// One section per log.
    pub sources: Vec<PeakSection>,
}

fn moment(m: &Model, kind: &str, c: &Composition, top: usize) -> Moment {
    let mut by_site: BTreeMap<String, u64> = BTreeMap::new();
    for &(stack, bytes) in &c.per_site {
        *by_site.entry(site_name(m, stack)).or_default() += bytes;
    }
    let mut by_site: Vec<SiteHolding> = by_site
        .into_iter()
        .map(|(site, bytes)| SiteHolding { site, bytes })
        .collect();
    by_site.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.site.cmp(&b.site)));
    by_site.truncate(top);
    Moment {
        kind: kind.into(),
        time_s: secs(c.time_ns),
        rss_bytes: c.rss,
        attributed_bytes: c.tracked + c.small.0,
        by_tag: c
            .per_tag
            .iter()
            .map(|&(id, t, s, e)| Holding {
                tag: m.tag(id).to_string(),
                tracked_bytes: t,
                small_bytes: s,
                external_bytes: e,
            })
            .collect(),
        by_site,
    }
}

/// Builds `heaptag peak`.
pub fn peak(models: &[Model], top: usize) -> Peak {
    Peak {
        schema_version: SCHEMA_VERSION,
        sources: models
            .iter()
            .map(|m| PeakSection {
                source: Source::of(m),
                moments: [
                    ("rss", m.rss_peak.as_ref()),
                    ("attributed", m.attributed_composition.as_ref()),
                ]
                .into_iter()
                .filter_map(|(k, c)| c.map(|c| moment(m, k, c, top)))
                .collect(),
            })
            .collect(),
    }
}
