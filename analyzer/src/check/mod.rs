//! `heaptag check`: evaluates a policy's rules on loaded logs (rendering of
//! the outcomes, JUnit included, in render.rs).

mod render;

pub use render::render;

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::dups;
use crate::model::Model;
use crate::policy::{Limit, Per, Policy, PolicyError, Rule};
use crate::report::SCHEMA_VERSION;
use crate::sites::site_name;
use crate::units::{bytes, secs};

/// The outcome of one limit of one rule on one log.
#[derive(Clone, Debug, Serialize)]
pub struct Outcome {
    /// The rule's name.
    pub rule: String,
    /// Line of the rule in the policy file.
    pub line: usize,
    /// The limit's key (`max_copies`, ...).
    pub limit: String,
    /// The log.
    pub log: String,
    /// The limit held.
    pub passed: bool,
    /// The limit, readable (`30.0 GiB`, `1 copy`).
    pub allowed: String,
    /// The worst value found, readable.
    pub found: String,
    /// What broke it: tags, call sites, contents, with numbers (empty when passed).
    pub offenders: Vec<String>,
}

/// All outcomes.
#[derive(Clone, Debug, Serialize)]
pub struct CheckReport {
    /// JSON schema version.
    pub schema_version: u32,
    /// The policy file.
    pub policy: String,
    /// One entry per (rule, limit, log).
    pub outcomes: Vec<Outcome>,
    /// Number of broken limits.
    pub failures: usize,
}

/// Peak figures of a run, to compare later runs against (`--write-baseline`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Baseline {
    /// JSON schema version (2: keyed by stage and partition).
    pub schema_version: u32,
    /// Per stage and partition (`stage=x partition=2`, never a job id: job
    /// ids differ between runs): the highest peak live bytes of any tag
    /// with that stage and partition, over every job and log.
    pub peak_live_bytes: BTreeMap<String, u64>,
    /// Highest RSS over the logs.
    pub peak_rss_bytes: u64,
}

/// Baseline schema: 2 since baselines are keyed by stage and partition.
pub const BASELINE_SCHEMA_VERSION: u32 = 2;

/// What a tag is called in a baseline (and in `heaptag diff`): its stage and
/// partition, without the job.
pub fn baseline_key(k: &crate::model::TagKey) -> String {
    crate::model::TagKey {
        job: None,
        folded: false,
        ..k.clone()
    }
    .to_string()
}

impl Baseline {
    /// The baseline of these logs.
    pub fn of(models: &[Model]) -> Baseline {
        let mut b = Baseline {
            schema_version: BASELINE_SCHEMA_VERSION,
            ..Baseline::default()
        };
        for m in models {
            for (id, a) in m.tags_used() {
                let k = m.tag(id);
                if k.is_heaptag_own() {
                    continue;
                }
                let e = b.peak_live_bytes.entry(baseline_key(&k)).or_default();
                *e = (*e).max(a.peak);
            }
            b.peak_rss_bytes = b.peak_rss_bytes.max(m.peak_rss().map_or(0, |p| p.0));
        }
        b
    }

    /// A schema 1 baseline (keyed by full tags, job ids included) in
    /// today's keys: the highest peak per stage and partition.
    fn upgrade(mut self) -> Baseline {
        if self.schema_version < 2 {
            let mut keyed: BTreeMap<String, u64> = BTreeMap::new();
            for (tag, peak) in std::mem::take(&mut self.peak_live_bytes) {
                let key = tag
                    .split(' ')
                    .filter(|p| !p.starts_with("job="))
                    .collect::<Vec<_>>()
                    .join(" ");
                let key = if key.is_empty() { "untagged".into() } else { key };
                let e = keyed.entry(key).or_default();
                *e = (*e).max(peak);
            }
            self.peak_live_bytes = keyed;
            self.schema_version = BASELINE_SCHEMA_VERSION;
        }
        self
    }
}

/// Why a check could not run (exit code 2).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckError {
    /// The policy is wrong (its file, line and key say where).
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// The baseline file cannot be read.
    #[error("{}: cannot read the baseline", path.display())]
    BaselineUnreadable {
        /// The baseline file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The baseline file is not a baseline.
    #[error("{}:{line}: not a heaptag baseline: {source} (write one with --write-baseline)", path.display())]
    BaselineInvalid {
        /// The baseline file.
        path: PathBuf,
        /// Line of the fault.
        line: usize,
        /// What the JSON reader found.
        #[source]
        source: serde_json::Error,
    },
    /// The baseline was written by a newer heaptag.
    #[error("{}: baseline schema {found} is newer than this heaptag ({BASELINE_SCHEMA_VERSION}): upgrade heaptag", path.display())]
    BaselineNewer {
        /// The baseline file.
        path: PathBuf,
        /// Its schema version.
        found: u32,
    },
    /// A `max_increase` rule without `--baseline`.
    #[error("rule {rule:?} (line {line}) sets max_increase: give the earlier run's figures with --baseline FILE")]
    NoBaseline {
        /// The rule's name.
        rule: String,
        /// Its line in the policy.
        line: usize,
    },
}

/// Reads a baseline written by `--write-baseline`.
pub fn read_baseline(path: &Path) -> Result<Baseline, CheckError> {
    let text = std::fs::read_to_string(path).map_err(|source| CheckError::BaselineUnreadable {
        path: path.to_path_buf(),
        source,
    })?;
    let b: Baseline = serde_json::from_str(&text).map_err(|source| CheckError::BaselineInvalid {
        path: path.to_path_buf(),
        line: source.line(),
        source,
    })?;
    if b.schema_version > BASELINE_SCHEMA_VERSION {
        return Err(CheckError::BaselineNewer {
            path: path.to_path_buf(),
            found: b.schema_version,
        });
    }
    Ok(b.upgrade())
}

fn pct(now: u64, base: u64) -> f64 {
    if base == 0 {
        if now == 0 {
            0.0
        } else {
            f64::INFINITY
        }
    } else {
        (now as f64 - base as f64) * 100.0 / base as f64
    }
}

/// Evaluates every rule of `policy` on every log.
///
/// `writing_baseline`: this run writes the baseline (`--write-baseline`),
/// so a `max_increase` rule without one passes, saying so, instead of
/// failing the run.
pub fn check(
    policy: &Policy,
    models: &[Model],
    baseline: Option<&Baseline>,
    writing_baseline: bool,
) -> Result<CheckReport, CheckError> {
    let mut outcomes = Vec::new();
    let cx = Ctx {
        policy,
        baseline,
        writing_baseline,
    };
    let allowed = |stage: &str, site: &str| policy.allows_identical(stage, site);
    let dups: Vec<dups::Dups> = models.iter().map(|m| dups::analyze_allowing(m, &allowed)).collect();
    for rule in &policy.rules {
        let mut selected_anything = rule.selector.is_all();
        for (m, d) in models.iter().zip(&dups) {
            let selected_tags: Vec<u32> = m
                .tags_used()
                .map(|(id, _)| id)
                .filter(|id| rule.selector.matches_tag(&m.tag(*id)))
                .collect();
            let site_ok = rule.selector.site.is_none()
                || m.sites_used()
                    .any(|(stack, _)| rule.selector.matches_site(&site_name(m, stack)));
            // A job rule on a log whose retired tags were folded may have
            // had its tags folded: not "nothing", but unverifiable (below).
            let folded_job = rule.selector.job.is_some() && m.tags_folded > 0;
            selected_anything |= (!selected_tags.is_empty() && site_ok) || folded_job;
            for limit in &rule.limits {
                outcomes.push(evaluate(&cx, rule, limit, m, d, &selected_tags)?);
            }
        }
        if policy.strict && !selected_anything {
            return Err(CheckError::Policy(PolicyError {
                file: policy.file.clone(),
                line: rule.line,
                key: None,
                message: format!("rule {:?} selects nothing in these logs (strict = true)", rule.name),
            }));
        }
    }
    let failures = outcomes.iter().filter(|o| !o.passed).count();
    Ok(CheckReport {
        schema_version: SCHEMA_VERSION,
        policy: policy.file.display().to_string(),
        outcomes,
        failures,
    })
}

/// The groups of tags whose summed peak the policy's `per = "group"`
/// limits need, one per such rule in order: pass them to loading
/// ([`crate::model::LoadOptions::groups`]) so the sums are exact.
pub fn groups(policy: &Policy) -> Vec<crate::model::GroupFn> {
    policy
        .rules
        .iter()
        .filter(|r| r.limits.iter().any(|l| matches!(l, Limit::MaxPeak(_, Per::Group))))
        .map(|r| {
            let sel = r.selector.clone();
            std::sync::Arc::new(move |k: &crate::model::TagKey| sel.matches_tag(k)) as crate::model::GroupFn
        })
        .collect()
}

/// The index of `rule`'s group in [`groups`].
fn group_index(policy: &Policy, rule: &Rule) -> Option<usize> {
    let has = |r: &Rule| r.limits.iter().any(|l| matches!(l, Limit::MaxPeak(_, Per::Group)));
    let at = policy.rules.iter().position(|r| std::ptr::eq(r, rule))?;
    has(rule).then(|| policy.rules[..at].iter().filter(|r| has(r)).count())
}

/// The selected tags' summed peak from the timeline's buckets.
fn group_peak_from_timeline(m: &Model, tags: &[u32]) -> (u64, u64) {
    let selected: std::collections::HashSet<u32> = tags.iter().copied().collect();
    let mut worst = (0u64, 0u64);
    if m.timeline.names.is_some() {
        return worst;
    }
    let mut sums = crate::model::KeyedSums::default();
    for b in &m.timeline.buckets {
        sums.bucket(b, &mut |t| selected.contains(&t).then_some(0));
        let sum = sums.value(0);
        if sum > worst.0 {
            worst = (sum, b.t);
        }
    }
    worst
}

/// What every rule's evaluation shares: the policy and the baseline.
struct Ctx<'a> {
    policy: &'a Policy,
    baseline: Option<&'a Baseline>,
    writing_baseline: bool,
}

fn evaluate(
    cx: &Ctx<'_>,
    rule: &Rule,
    limit: &Limit,
    m: &Model,
    d: &dups::Dups,
    tags: &[u32],
) -> Result<Outcome, CheckError> {
    let (policy, baseline, writing_baseline) = (cx.policy, cx.baseline, cx.writing_baseline);
    let mut offenders = Vec::new();
    let (allowed, found, passed) = match *limit {
        Limit::MaxCopies(max) => {
            let mut worst = 1u64;
            for g in &d.duplicated {
                if !rule.selector.matches_site(&g.site)
                    && !g.extra_copies.iter().any(|c| rule.selector.matches_site(&c.site))
                {
                    continue;
                }
                let copies = tags
                    .iter()
                    .filter_map(|t| g.copies_by_tag.get(t))
                    .copied()
                    .max()
                    .unwrap_or(0);
                worst = worst.max(copies);
                if copies > max {
                    let sites: std::collections::BTreeSet<&str> =
                        g.extra_copies.iter().map(|c| c.site.as_str()).collect();
                    offenders.push(format!(
                        "{} copies of {} ({}) from {:.3} s{}: original {} (allocated at {}); copies made by {} at {}",
                        copies,
                        g.hash.as_deref().unwrap_or("same site and size (suspected)"),
                        bytes(g.size_bytes),
                        g.from_s,
                        g.until_s.map_or(" to the end".into(), |u| format!(" to {u:.3} s")),
                        g.original.tag,
                        g.original.site,
                        g.copies_by,
                        sites.into_iter().collect::<Vec<_>>().join(", ")
                    ));
                }
            }
            match &d.unverified {
                Some(why) if !policy.allow_dropped_events => {
                    offenders.insert(
                        0,
                        format!(
                            "unverifiable: {why}; set allow_dropped_events = true in the policy to judge such logs anyway"
                        ),
                    );
                    (
                        format!("{max} cop{}", if max == 1 { "y" } else { "ies" }),
                        "unverifiable".into(),
                        false,
                    )
                }
                _ => (
                    format!("{max} cop{}", if max == 1 { "y" } else { "ies" }),
                    format!("{worst}"),
                    worst <= max,
                ),
            }
        }
        Limit::MaxPeak(max, Per::Tag) => {
            // The exact tracked peak: it does not move with the sampling,
            // so the gate does not flap. With `include_small`, the small
            // estimate at that moment counts, less 2 standard errors.
            let mut worst = 0u64;
            for &t in tags {
                let Some(a) = m.tag_acc.get(t) else { continue };
                let (peak, at, note) = if rule.include_small {
                    let (small, var) = a.small_at_tracked_peak;
                    let sd = var.sqrt();
                    let judged = (a.tracked_peak as f64 + small as f64 - 2.0 * sd).max(0.0) as u64;
                    (
                        judged,
                        a.tracked_peak_t,
                        format!(
                            " ({} tracked + {} +- {} small, less 2 standard errors)",
                            bytes(a.tracked_peak),
                            bytes(small),
                            bytes(sd as u64)
                        ),
                    )
                } else {
                    (a.tracked_peak, a.tracked_peak_t, String::new())
                };
                worst = worst.max(peak);
                if peak > max {
                    offenders.push(format!("{}: peak {} at {:.3} s{note}", m.tag(t), bytes(peak), secs(at)));
                }
            }
            if rule.selector.site.is_some() {
                for (stack, s) in m.sites_used() {
                    let name = site_name(m, stack);
                    if rule.selector.matches_site(&name) && s.peak > max {
                        worst = worst.max(s.peak);
                        offenders.push(format!("{name}: peak {} at {:.3} s", bytes(s.peak), secs(s.peak_t)));
                    }
                }
            }
            (bytes(max), bytes(worst), offenders.is_empty())
        }
        Limit::MaxPeak(max, Per::Group) => {
            // Sum of the selected tags at each memory sample: summed during
            // the replay (`groups`, exact on any run length); for a model
            // loaded without them, from the timeline (exact while it is
            // not downsampled, an upper bound after).
            let worst = match group_index(policy, rule).and_then(|g| m.group_peaks.get(g)) {
                Some(&p) => p,
                None => group_peak_from_timeline(m, tags),
            };
            if worst.0 > max {
                offenders.push(format!(
                    "{} selected tags together held {} at {:.3} s (at the memory samples)",
                    tags.len(),
                    bytes(worst.0),
                    secs(worst.1)
                ));
            }
            (bytes(max), bytes(worst.0), worst.0 <= max)
        }
        Limit::MaxRss(max) => {
            let peak = m.peak_rss();
            let v = peak.map_or(0, |p| p.0);
            if let Some((r, t)) = peak.filter(|p| p.0 > max) {
                offenders.push(format!(
                    "RSS {} at {:.3} s; run `heaptag peak` for what held it",
                    bytes(r),
                    secs(t)
                ));
            }
            (bytes(max), peak.map_or("not sampled".into(), |p| bytes(p.0)), v <= max)
        }
        Limit::MaxOutsideJemalloc(max) => {
            // RSS - jemalloc resident, never below 0 (resident may count
            // pages not yet touched); u64 throughout, so a limit of 2^63 or
            // more compares as the number it is.
            let v = m
                .rss_peak
                .as_ref()
                .and_then(|c| Some(c.rss?.saturating_sub(c.jemalloc?.1)));
            if let Some(v) = v.filter(|&v| v > max) {
                offenders.push(format!(
                    "{} of the RSS peak was outside jemalloc (C/C++ malloc, mmaps, pinned buffers, stacks)",
                    bytes(v)
                ));
            }
            let found = v.map_or_else(|| "n/a (no jemalloc statistics in this log)".into(), bytes);
            (bytes(max), found, v.is_none_or(|v| v <= max))
        }
        Limit::MaxUnattributed(max) => {
            let untagged: std::collections::HashSet<u32> = m
                .tags
                .iter()
                .filter(|(_, k)| **k == Default::default())
                .map(|(id, _)| *id)
                .collect();
            let v: u64 = m.rss_peak.as_ref().map_or(0, |c| {
                c.per_tag
                    .iter()
                    .filter(|(id, ..)| untagged.contains(id))
                    .fold(0u64, |a, &(_, t, s, _)| a.saturating_add(t).saturating_add(s))
            });
            if v > max {
                offenders.push(format!("untagged blocks held {} at the RSS peak", bytes(v)));
            }
            (bytes(max), bytes(v), v <= max)
        }
        Limit::MaxTagsWithoutId(max) => {
            let n = m.tags_without_id_count;
            if n > max {
                let shown: Vec<String> = m.tags_without_id.iter().take(5).map(|k| k.to_string()).collect();
                offenders.push(format!(
                    "{n} tags got no tag id (every id was in use) and were charged as untagged: {}{}",
                    shown.join(", "),
                    if n > shown.len() as u64 { ", ..." } else { "" }
                ));
            }
            (max.to_string(), n.to_string(), n <= max)
        }
        Limit::MaxDroppedEvents(max) => {
            if m.dropped > max {
                offenders.push(format!("{} events dropped by the writer", m.dropped));
            }
            (max.to_string(), m.dropped.to_string(), m.dropped <= max)
        }
        Limit::MaxIncrease(max_pct) => {
            let Some(b) = baseline else {
                if writing_baseline {
                    // The main branch's run writes the baseline the next
                    // runs compare with: nothing to compare with yet.
                    return Ok(Outcome {
                        rule: rule.name.clone(),
                        line: rule.line,
                        limit: limit.key().into(),
                        log: m.path.display().to_string(),
                        allowed: format!("+{max_pct}%"),
                        found: "no baseline (this run writes one)".into(),
                        passed: true,
                        offenders,
                    });
                }
                return Err(CheckError::NoBaseline {
                    rule: rule.name.clone(),
                    line: rule.line,
                });
            };
            let mut worst = 0f64;
            // Per stage and partition: the highest peak of any job's tag.
            let mut now_by_key: BTreeMap<String, u64> = BTreeMap::new();
            for &t in tags {
                let k = m.tag(t);
                // heaptag's own writer is in no baseline (as in `diff`).
                if k.is_heaptag_own() {
                    continue;
                }
                let e = now_by_key.entry(baseline_key(&k)).or_default();
                *e = (*e).max(m.tag_acc.get(t).map_or(0, |a| a.peak));
            }
            let mut missing = Vec::new();
            for (name, now) in now_by_key {
                let Some(&base) = b.peak_live_bytes.get(&name) else {
                    missing.push(name);
                    continue;
                };
                let p = pct(now, base);
                worst = worst.max(p);
                if p > max_pct {
                    offenders.push(format!(
                        "{name}: peak {} vs {} in the baseline (+{p:.1}%)",
                        bytes(now),
                        bytes(base)
                    ));
                }
            }
            // Named in the outcome, never passed over in silence.
            let missing_note = if missing.is_empty() {
                String::new()
            } else {
                let shown: Vec<&str> = missing.iter().take(5).map(String::as_str).collect();
                let more = missing.len().saturating_sub(shown.len());
                format!(
                    " (no baseline for {}{})",
                    shown.join(", "),
                    if more > 0 {
                        format!(" and {more} more")
                    } else {
                        String::new()
                    }
                )
            };
            if rule.selector.is_all() && b.peak_rss_bytes > 0 {
                if let Some(r) = m.rss_peak.as_ref().and_then(|c| c.rss) {
                    let p = pct(r, b.peak_rss_bytes);
                    worst = worst.max(p);
                    if p > max_pct {
                        offenders.push(format!(
                            "peak RSS {} vs {} (+{p:.1}%)",
                            bytes(r),
                            bytes(b.peak_rss_bytes)
                        ));
                    }
                }
            }
            (
                format!("+{max_pct}%"),
                format!("+{worst:.1}%{missing_note}"),
                offenders.is_empty(),
            )
        }
    };
    // A rule that selects a job cannot see that job's folded tags (retired
    // tags past the tag budget lose their job id; docs/REPORTS.md, "Long
    // runs: folded tags"): on such a log its figure is not a verdict.
    let (passed, found) = if rule.selector.job.is_some() && m.tags_folded > 0 {
        offenders.insert(
            0,
            format!(
                "unverifiable: {} retired tags of this log were folded past the tag budget without their job ids, \
                 so a rule that selects a job cannot see them; raise HEAPTAG_TAG_BUDGET above the log's tag count \
                 or select by stage and partition",
                m.tags_folded
            ),
        );
        (false, "unverifiable".to_string())
    } else {
        (passed, found)
    };
    Ok(Outcome {
        rule: rule.name.clone(),
        line: rule.line,
        limit: limit.key().into(),
        log: m.path.display().to_string(),
        passed,
        allowed,
        found,
        offenders,
    })
}
