//! `heaptag sites`: the top call sites by peak live bytes and by bytes
//! allocated, stacks with the same call site merged.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{At, Source, SCHEMA_VERSION};
use crate::model::Model;
use crate::sites::{frames, site_name_with, SitePolicy};
use crate::units::secs;

/// One call site.
#[derive(Clone, Debug, Serialize)]
pub struct SiteRow {
    /// The call site.
    pub site: String,
    /// The highest peak of one of its stacks, and when: the site's own peak
    /// when it has one stack, a lower bound of it when several stacks are
    /// merged (their peaks may fall at different moments).
    pub peak_live: At,
    /// Bytes it held at the RSS peak (all its stacks together; 0 without
    /// an RSS sample).
    pub at_rss_peak: u64,
    /// Stacks merged into it.
    pub stacks: u64,
    /// With `--stacks`: the frames of its largest stack (by `peak_live`),
    /// innermost first, inlined frames expanded.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub frames: Vec<String>,
    /// Bytes allocated from it: tracked blocks exact, small blocks from
    /// their tags' exact counters split over the sampled stacks.
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

/// How `heaptag sites` names and shows call sites.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SitesOptions {
    /// Which frames name a site (`--skip`, `--keep`).
    pub policy: SitePolicy,
    /// Show each site's whole stack (`--stacks`).
    pub stacks: bool,
}

/// Builds `heaptag sites` with the default naming: see [`sites_with`].
pub fn sites(models: &[Model], top: usize) -> Sites {
    sites_with(models, top, &SitesOptions::default())
}

/// Builds `heaptag sites`: stacks with the same call site are merged.
pub fn sites_with(models: &[Model], top: usize, opts: &SitesOptions) -> Sites {
    Sites {
        schema_version: SCHEMA_VERSION,
        sources: models
            .iter()
            .map(|m| {
                let mut merged: BTreeMap<String, (SiteRow, u32)> = BTreeMap::new();
                // Allocated per stack: tracked blocks exactly, small blocks
                // from their tag's exact counters split over its sampled
                // stacks (as `export folded --weight allocated` and pprof
                // count them). Summing the samples' weights instead would be
                // unbiased but wild: a small block's coin is its address,
                // and an address jemalloc reuses in a hot loop is sampled
                // every time or never. Without the log's file (a model not
                // read from disk), the samples' weights.
                let exact: Option<BTreeMap<u32, (u64, u64)>> =
                    crate::folded::stack_figures(m, crate::folded::LiveAt::End)
                        .ok()
                        .map(|f| {
                            let mut by_stack: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
                            for e in f.entries {
                                if let Some(stack) = e.stack {
                                    let x = by_stack.entry(stack).or_default();
                                    x.0 = x.0.saturating_add(e.alloc_bytes);
                                    x.1 = x.1.saturating_add(e.alloc_objects);
                                }
                            }
                            by_stack
                        });
                let at_peak: BTreeMap<u32, u64> = m
                    .rss_peak
                    .as_ref()
                    .map(|c| c.per_site.iter().copied().collect())
                    .unwrap_or_default();
                for (stack, s) in m.sites_used() {
                    let name = site_name_with(m, stack, &opts.policy);
                    let (row, largest) = merged.entry(name.clone()).or_insert_with(|| {
                        (
                            SiteRow {
                                site: name,
                                peak_live: At { bytes: 0, time_s: 0.0 },
                                at_rss_peak: 0,
                                stacks: 0,
                                frames: Vec::new(),
                                allocated_bytes: 0,
                                allocations: 0,
                                tags: Vec::new(),
                            },
                            stack,
                        )
                    });
                    // Peaks of merged stacks may fall at different moments;
                    // the largest one is a lower bound of the site's peak.
                    if s.peak > row.peak_live.bytes {
                        row.peak_live = At {
                            bytes: s.peak,
                            time_s: secs(s.peak_t),
                        };
                        *largest = stack;
                    }
                    row.stacks += 1;
                    row.at_rss_peak = row
                        .at_rss_peak
                        .saturating_add(at_peak.get(&stack).copied().unwrap_or(0));
                    let (alloc_bytes, alloc_count) = match &exact {
                        Some(by_stack) => by_stack.get(&stack).copied().unwrap_or_default(),
                        None => (s.alloc_bytes, s.alloc_count),
                    };
                    row.allocated_bytes = row.allocated_bytes.saturating_add(alloc_bytes);
                    row.allocations = row.allocations.saturating_add(alloc_count);
                    for t in &s.tags {
                        let name = m.tag(*t).to_string();
                        if !row.tags.contains(&name) {
                            row.tags.push(name);
                        }
                    }
                }
                let mut rows: Vec<SiteRow> = merged
                    .into_values()
                    .map(|(mut r, largest)| {
                        r.tags.sort();
                        if opts.stacks {
                            r.frames = frames(m, largest)
                                .iter()
                                .map(|f| {
                                    let t = f.text(m);
                                    if f.inlined {
                                        format!("{t} [inlined]")
                                    } else {
                                        t
                                    }
                                })
                                .collect();
                        }
                        r
                    })
                    .collect();
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
