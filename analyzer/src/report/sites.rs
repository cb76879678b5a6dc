//! `heaptag sites`: the top call sites by peak live bytes and by bytes
//! allocated, stacks with the same call site merged.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{At, Source, SCHEMA_VERSION};
use crate::model::Model;
use crate::sites::site_name;
use crate::units::secs;

/// One call site.
#[derive(Clone, Debug, Serialize)]
pub struct SiteRow {
    /// The call site.
    pub site: String,
    /// Highest live bytes from it, and when.
    pub peak_live: At,
    /// Bytes allocated from it (tracked exact + sampled estimate).
    pub allocated_bytes: u64,
    /// Tracked allocations and samples from it.
    pub allocations: u64,
    /// Tags that allocated here.
    pub tags: Vec<String>,
}

/// `heaptag sites` for one log.
#[derive(Clone, Debug, Serialize)]
pub struct SitesSection {
    /// The log.
    pub source: Source,
    /// Top sites by peak live bytes.
    pub by_peak: Vec<SiteRow>,
    /// Top sites by bytes allocated.
    pub by_allocated: Vec<SiteRow>,
}

/// `heaptag sites`.
#[derive(Clone, Debug, Serialize)]
pub struct Sites {
    /// JSON schema version.
    pub schema_version: u32,
    /// One section per log.
    pub sources: Vec<SitesSection>,
}

/// Builds `heaptag sites`: stacks with the same call site are merged.
pub fn sites(models: &[Model], top: usize) -> Sites {
    Sites {
        schema_version: SCHEMA_VERSION,
        sources: models
            .iter()
            .map(|m| {
                let mut merged: BTreeMap<String, SiteRow> = BTreeMap::new();
                for (stack, s) in m.sites_used() {
                    let name = site_name(m, stack);
                    let row = merged.entry(name.clone()).or_insert_with(|| SiteRow {
                        site: name,
                        peak_live: At { bytes: 0, time_s: 0.0 },
                        allocated_bytes: 0,
                        allocations: 0,
                        tags: Vec::new(),
                    });
                    // Peaks of merged stacks may fall at different moments;
                    // the largest one is a lower bound of the site's peak.
                    if s.peak > row.peak_live.bytes {
                        row.peak_live = At {
                            bytes: s.peak,
                            time_s: secs(s.peak_t),
                        };
                    }
                    row.allocated_bytes += s.alloc_bytes;
                    row.allocations += s.alloc_count;
                    for t in &s.tags {
                        let name = m.tag(*t).to_string();
                        if !row.tags.contains(&name) {
                            row.tags.push(name);
                        }
                    }
                }
                let mut rows: Vec<SiteRow> = merged.into_values().collect();
                for r in &mut rows {
                    r.tags.sort();
                }
                let mut by_peak = rows.clone();
                by_peak.sort_by(|a, b| {
                    b.peak_live
                        .bytes
                        .cmp(&a.peak_live.bytes)
                        .then_with(|| a.site.cmp(&b.site))
                });
                by_peak.truncate(top);
                rows.sort_by(|a, b| {
                    b.allocated_bytes
                        .cmp(&a.allocated_bytes)
                        .then_with(|| a.site.cmp(&b.site))
                });
                rows.truncate(top);
                SitesSection {
                    source: Source::of(m),
                    by_peak,
                    by_allocated: rows,
                }
            })
            .collect(),
    }
}
