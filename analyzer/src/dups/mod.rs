//! Shared once or duplicated: contents observed over time, originals and
//! copies, waste at the worst moment.
//!
//! The rules (docs/REPORTS.md, "Duplicates"):
//!
//! - A fingerprint says what a block held when it was taken (at its free,
//!   at a mark, at `finish`). Each holds back to the block's previous
//!   observation, or to its allocation for the first: a mark or `finish`
//!   observes every live block at one moment, so a mark is where what a
//!   block held before it ends. A resize ends what was known.
//! - Two blocks are copies only over the spans where both are known to hold
//!   the same content. Zero- and constant-filled contents never count.
//! - The first holder of a content is its original. At every moment the
//!   holder alive that has held the content longest is the one kept; every
//!   other holder is an extra copy, charged to the tag and call site that
//!   allocated it.
//! - Waste at a moment is the size of every extra copy alive then, each
//!   counted once. Per content, per stage and in total the worst moment is
//!   reported, with its time.
//! - Without fingerprints, blocks are grouped by call site and size over
//!   their lifetimes instead, and findings are only "suspected": one site
//!   legitimately allocates distinct per-partition data of one size.

use std::collections::{BTreeMap, BTreeSet};

use heaptag_format::hash::MixMap;
use heaptag_format::Fill;
use serde::Serialize;

use crate::model::{Interval, Model, Obs, TagKey};

mod sweep;
mod words;

use crate::sites::site_name;
use crate::units::secs;
pub use words::describe_tags;

/// One holder of a duplicated content.
#[derive(Clone, Debug, Serialize)]
pub struct Holder {
    /// Its tag.
    pub tag: String,
    /// Its stage (`untagged` without one).
    pub stage: String,
    /// Where it was allocated.
    pub site: String,
    /// When it was first known to hold the content, seconds.
    pub from_s: f64,
}

/// Blocks with the same content (or, suspected, the same site and size).
#[derive(Clone, Debug, Serialize)]
pub struct Group {
    /// Size of each copy.
    pub size_bytes: u64,
    /// Content hash (`None` for a suspected group).
    pub hash: Option<String>,
    /// Grouped by site and size only: no fingerprints to confirm.
    pub suspected: bool,
    /// Blocks known to hold it over the run.
    pub blocks: u64,
    /// Most holders alive at one moment (original included).
    pub copies: u64,
    /// When that many first were alive, seconds since the start.
    pub from_s: f64,
    /// When the count first dropped below `copies` (`None`: still at the end).
    pub until_s: Option<f64>,
    /// How long the worst moment lasted, seconds (to the end of the log
    /// when `until_s` is `None`).
    pub duration_s: f64,
    /// The worst moment did not last to the end of the log.
    pub transient: bool,
    /// `(copies - 1) x size`: the extra copies at the worst moment.
    pub wasted_bytes: u64,
    /// The first holder of the content.
    pub original: Holder,
    /// The extra copies alive at the worst moment, oldest first.
    pub extra_copies: Vec<Holder>,
    /// The holders at the worst moment, in words (`6 partitions of jobs 1-2
    /// in synthesize_partition`).
    pub held_by: String,
    /// The extra copies at the worst moment, in words.
    pub copies_by: String,
    /// Per tag id: the most holders alive at a moment when that tag held one.
    #[serde(skip)]
    pub copies_by_tag: BTreeMap<u32, u64>,
    /// Call site of the original.
    pub site: String,
}

/// The verdict for one stage.
#[derive(Clone, Debug, Serialize)]
pub struct Verdict {
    /// Stage name (`untagged` for blocks without a stage).
    pub stage: String,
    /// `SHARED ONCE`, `DUPLICATED` or `SUSPECTED DUPLICATE`.
    pub verdict: String,
    /// Extra copies this stage made that were alive at its worst moment.
    pub copies_made: u64,
    /// Most holders of one content alive at once while this stage held an
    /// extra copy of it (1 when it made none).
    pub copies: u64,
    /// Bytes of the extra copies this stage held at its worst moment.
    pub wasted_bytes: u64,
    /// When that was, seconds (`None`: no waste).
    pub wasted_at_s: Option<f64>,
    /// Stages whose originals it copied.
    pub copied_from: Vec<String>,
    /// Duplicated contents whose original this stage holds.
    pub originals: u64,
    /// Distinct contents the stage's blocks held.
    pub contents: u64,
    /// The verdict rests on site and size only.
    pub suspected: bool,
}

/// The worst moment of the whole run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Worst {
    /// Bytes of every extra copy alive then.
    pub wasted_bytes: u64,
    /// When, seconds (`None`: no waste at all).
    pub at_s: Option<f64>,
    /// Extra copies alive then.
    pub extra_copies: u64,
}

/// Extra copies made at one call site.
#[derive(Clone, Debug, Serialize)]
pub struct SiteWaste {
    /// The call site that allocated the copies.
    pub site: String,
    /// Bytes of its extra copies alive at its worst moment.
    pub wasted_bytes: u64,
    /// When, seconds.
    pub at_s: f64,
    /// Extra copies alive then.
    pub extra_copies: u64,
}

/// The whole finding for one log.
#[derive(Clone, Debug, Serialize)]
pub struct Dups {
    /// Per stage, most wasted first.
    pub verdicts: Vec<Verdict>,
    /// Contents with more than one holder alive at once, most wasted first.
    pub duplicated: Vec<Group>,
    /// The run's worst moment.
    pub worst: Worst,
    /// Per call site that made extra copies, its worst moment, most wasted
    /// first.
    pub by_site: Vec<SiteWaste>,
    /// Blocks only ever seen zero- or constant-filled.
    pub filled_blocks: u64,
    /// Whether the log holds fingerprints at all.
    pub fingerprints: bool,
    /// Smallest fingerprinted block size (from the log's settings).
    pub fingerprint_min_bytes: u64,
    /// Block lifetimes left out of the analysis to bound memory on a long
    /// run: ended ones no lifetime of the same content (or site and size)
    /// overlapped, so they can be part of no duplicate. Each still counts
    /// as one content of its stage; a group's `blocks` and `original`
    /// cover the lifetimes kept. Absent (0) unless more than 262,144
    /// lifetimes were held at once.
    #[serde(skip_serializing_if = "is_zero")]
    pub lifetimes_left_out: u64,
    /// Blocks of at least the fingerprint size freed before they could have
    /// been filled (sooner after their allocation than their size takes to
    /// write at 1,024 bytes per ns), without a fingerprint: they held no
    /// content and are never duplicates. Absent (0) when there were none.
    #[serde(skip_serializing_if = "is_zero")]
    pub unfilled_blocks: u64,
    /// Why the verdicts cannot be trusted, if they cannot: events dropped
    /// (a lost free keeps a copy alive forever, a lost fingerprint hides
    /// one), a log cut short, damage skipped.
    pub unverified: Option<String>,
}

/// A span over which one block was known to hold one content.
#[derive(Clone, Copy, Debug)]
struct Span {
    start: u64,
    /// Exclusive; `u64::MAX` for "to the end".
    end: u64,
    /// Index into `Model::intervals`.
    block: u32,
}

/// A span with its content key: (size, hash) for fingerprints, (size,
/// stack) for suspected groups. One flat vector of these, sorted by key, is
/// every content's holders: no vector per content (most contents of a
/// run have one holder).
#[derive(Clone, Copy, Debug)]
struct Keyed {
    key: (u64, u64),
    span: Span,
}

/// The spans over which interval `i` is known to hold each content, pushed
/// into `out`.
fn spans_of(m: &Model, k: u32, i: &Interval, out: &mut Vec<Keyed>) {
    let mut prev: Option<u64> = None;
    let mut last: Option<usize> = None; // index in `out` of the previous span
    for o in m.observations_of(i) {
        let Some(fp) = o.fp() else {
            prev = Some(o.t);
            last = None;
            continue;
        };
        // Every observation holds back to the one before it (or to the
        // allocation): a mark or finish observes every live block at one
        // moment, so it is where what a block held before ends.
        let start = prev.map_or(i.start, |p| p.saturating_add(1)).min(o.t);
        let end = o.t.saturating_add(1);
        prev = Some(o.t);
        if fp.fill != Fill::Mixed {
            last = None;
            continue;
        }
        let key = (i.size, fp.hash);
        match last {
            // The same content as the observation before: one span.
            Some(at) if out[at].key == key && out[at].span.end >= start => out[at].span.end = out[at].span.end.max(end),
            _ => {
                out.push(Keyed {
                    key,
                    span: Span { start, end, block: k },
                });
                last = Some(out.len() - 1);
            }
        }
    }
}

/// Dense ids for stage names.
#[derive(Default)]
struct StageIds {
    names: Vec<String>,
    of_tag: MixMap<u32, usize>,
}

impl StageIds {
    fn id(&mut self, m: &Model, tag: u32) -> usize {
        if let Some(&s) = self.of_tag.get(&tag) {
            return s;
        }
        let name = m.tag(tag).stage.unwrap_or_else(|| "untagged".into());
        let s = match self.names.iter().position(|n| *n == name) {
            Some(s) => s,
            None => {
                self.names.push(name);
                self.names.len() - 1
            }
        };
        self.of_tag.insert(tag, s);
        s
    }
}

/// One content with at least two holders, while the sweep runs.
struct Live {
    size: u64,
    hash: Option<u64>,
    spans: Vec<Span>,
    /// Alive spans, by (start, span index): the first is the one kept.
    alive: BTreeSet<(u64, usize)>,
    worst: usize,
    worst_t: u64,
    until: Option<u64>,
    /// Per tag id: the most holders alive at a moment when it held one.
    by_tag: BTreeMap<u32, u64>,
}

/// Per stage while the sweep runs.
#[derive(Default, Clone)]
struct StageRun {
    waste: u64,
    extras: u64,
    worst: (u64, u64, u64), // (bytes, extras, time)
    copies: u64,
    copied_from: BTreeSet<usize>,
    originals: u64,
    contents: u64,
    suspected: bool,
}

/// Groups the model's blocks by content and decides per stage.
pub fn analyze(m: &Model) -> Dups {
    analyze_allowing(m, &|_, _| false)
}

/// As [`analyze`], leaving out contents whose every holder `allowed(stage,
/// site)` says is meant to be identical (a policy's `[[allow_identical]]`).
pub fn analyze_allowing(m: &Model, allowed: &dyn Fn(&str, &str) -> bool) -> Dups {
    let mut contents: Vec<Keyed> = Vec::new();
    let mut suspects: Vec<Keyed> = Vec::new();
    let mut filled = 0u64;
    let mut stages = StageIds::default();
    let mut fingerprinted_stage: Vec<bool> = Vec::new();
    for (k, i) in m.intervals.iter().enumerate() {
        let s = stages.id(m, i.tag);
        if fingerprinted_stage.len() <= s {
            fingerprinted_stage.resize(s + 1, false);
        }
        let obs = m.observations_of(i);
        if obs.iter().any(|o| o.when.is_some()) {
            fingerprinted_stage[s] = true;
            spans_of(m, k as u32, i, &mut contents);
            if obs.iter().filter_map(Obs::fp).all(|f| f.fill != Fill::Mixed) {
                filled += 1;
            }
        } else {
            let end = i.end.unwrap_or(u64::MAX);
            // A block freed at the instant it was allocated held nothing
            // (one freed before it could have been filled is not kept at
            // all: `Model::unfilled_frees`).
            if end > i.start {
                suspects.push(Keyed {
                    key: (i.size, u64::from(i.stack)),
                    span: Span {
                        start: i.start,
                        end,
                        block: k as u32,
                    },
                });
            }
        }
    }
    // Lifetimes the model left out (they could be part of no duplicate):
    // what they count for their stages.
    let mut pruned: Vec<(u32, crate::model::Pruned)> = m.pruned.iter().map(|(&t, &p)| (t, p)).collect();
    pruned.sort_unstable_by_key(|e| e.0);
    for &(tag, p) in &pruned {
        let s = stages.id(m, tag);
        if fingerprinted_stage.len() <= s {
            fingerprinted_stage.resize(s + 1, false);
        }
        fingerprinted_stage[s] |= p.fingerprinted;
        filled += p.filled;
    }
    let mut runs: Vec<StageRun> = vec![StageRun::default(); stages.names.len()];
    for &(tag, p) in &pruned {
        runs[stages.id(m, tag)].contents += p.contents;
    }
    // Contents per stage, and which contents can be duplicates at all.
    let mut live: Vec<Live> = Vec::new();
    let mut collect =
        |key: (u64, u64), run: &[Keyed], suspected: bool, runs: &mut Vec<StageRun>, stages: &mut StageIds| {
            if let [one] = run {
                // Most contents have one holder: a content of its stage, no more.
                runs[stages.id(m, m.intervals[one.span.block as usize].tag)].contents += 1;
                return;
            }
            let spans: Vec<Span> = run.iter().map(|k| k.span).collect();
            let mut seen: BTreeSet<usize> = BTreeSet::new();
            let mut blocks: BTreeSet<u32> = BTreeSet::new();
            for sp in &spans {
                seen.insert(stages.id(m, m.intervals[sp.block as usize].tag));
                blocks.insert(sp.block);
            }
            for s in seen {
                runs[s].contents += 1;
            }
            if blocks.len() < 2 {
                return;
            }
            let holder_ok = |sp: &Span| {
                let iv = &m.intervals[sp.block as usize];
                let stage = m.tag(iv.tag).stage.unwrap_or_else(|| "untagged".into());
                allowed(&stage, &site_name(m, iv.stack))
            };
            if spans.iter().all(holder_ok) {
                return;
            }
            live.push(Live {
                size: key.0,
                hash: (!suspected).then_some(key.1),
                spans,
                alive: BTreeSet::new(),
                worst: 0,
                worst_t: 0,
                until: None,
                by_tag: BTreeMap::new(),
            });
        };
    contents.sort_unstable_by_key(|k| (k.key, k.span.start, k.span.block));
    for run in contents.chunk_by(|a, b| a.key == b.key) {
        collect(run[0].key, run, false, &mut runs, &mut stages);
    }
    drop(contents);
    suspects.sort_unstable_by_key(|k| (k.key, k.span.start, k.span.block));
    for run in suspects.chunk_by(|a, b| a.key == b.key) {
        // Site-and-size grouping only where no fingerprint speaks for the stage.
        let speaks = run.iter().any(|k| {
            let s = stages.id(m, m.intervals[k.span.block as usize].tag);
            fingerprinted_stage.get(s).copied().unwrap_or(false)
        });
        if !speaks {
            collect(run[0].key, run, true, &mut runs, &mut stages);
        }
    }
    let (total, mut runs, sites) = sweep::sweep(m, &mut live, &mut stages, runs);
    let mut by_site: Vec<SiteWaste> = sites
        .into_iter()
        .filter(|(_, r)| r.worst.0 > 0)
        .map(|(stack, r)| SiteWaste {
            site: site_name(m, stack),
            wasted_bytes: r.worst.0,
            at_s: secs(r.worst.2),
            extra_copies: r.worst.1,
        })
        .collect();
    by_site.sort_by(|a, b| b.wasted_bytes.cmp(&a.wasted_bytes).then_with(|| a.site.cmp(&b.site)));
    let mut groups: Vec<Group> = Vec::new();
    for g in &live {
        if g.worst < 2 {
            continue;
        }
        let iv = |sp: &Span| &m.intervals[sp.block as usize];
        let holder = |sp: &Span| {
            let i = iv(sp);
            Holder {
                tag: m.tag(i.tag).to_string(),
                stage: m.tag(i.tag).stage.unwrap_or_else(|| "untagged".into()),
                site: site_name(m, i.stack),
                from_s: secs(sp.start),
            }
        };
        let first = g
            .spans
            .iter()
            .min_by_key(|sp| (sp.start, sp.block))
            .expect("a group has spans");
        let ostage = stages.id(m, iv(first).tag);
        runs[ostage].originals += 1;
        // The holders at the worst moment: the spans alive once every event
        // at that instant was applied.
        let mut at_worst: Vec<&Span> = g
            .spans
            .iter()
            .filter(|sp| sp.start <= g.worst_t && sp.end > g.worst_t)
            .collect();
        at_worst.sort_by_key(|sp| (sp.start, sp.block));
        let extra: Vec<Holder> = at_worst.iter().skip(1).map(|sp| holder(sp)).collect();
        for sp in at_worst.iter().skip(1) {
            let s = stages.id(m, iv(sp).tag);
            if s != ostage {
                runs[s].copied_from.insert(ostage);
            }
        }
        let keys: Vec<TagKey> = at_worst.iter().map(|sp| m.tag(iv(sp).tag)).collect();
        let copy_keys: Vec<TagKey> = at_worst.iter().skip(1).map(|sp| m.tag(iv(sp).tag)).collect();
        let end = g.until.unwrap_or(m.end_ns.max(g.worst_t));
        groups.push(Group {
            size_bytes: g.size,
            hash: g.hash.map(|h| format!("{h:016x}")),
            suspected: g.hash.is_none(),
            blocks: g.spans.iter().map(|sp| sp.block).collect::<BTreeSet<_>>().len() as u64,
            copies: g.worst as u64,
            from_s: secs(g.worst_t),
            until_s: g.until.map(secs),
            duration_s: secs(end.saturating_sub(g.worst_t)),
            transient: g.until.is_some(),
            wasted_bytes: (g.worst as u64 - 1).saturating_mul(g.size),
            original: holder(first),
            extra_copies: extra,
            held_by: describe_tags(&keys),
            copies_by: describe_tags(&copy_keys),
            copies_by_tag: g.by_tag.clone(),
            site: site_name(m, iv(first).stack),
        });
    }
    groups.sort_by(|a, b| {
        b.wasted_bytes
            .cmp(&a.wasted_bytes)
            .then_with(|| a.from_s.total_cmp(&b.from_s))
            .then_with(|| a.hash.cmp(&b.hash))
    });
    let mut verdicts: Vec<Verdict> = runs
        .iter()
        .enumerate()
        .filter(|(_, r)| r.contents > 0 || r.worst.0 > 0)
        .map(|(s, r)| Verdict {
            stage: stages.names[s].clone(),
            verdict: if r.worst.0 == 0 {
                "SHARED ONCE"
            } else if r.suspected {
                "SUSPECTED DUPLICATE"
            } else {
                "DUPLICATED"
            }
            .into(),
            copies_made: r.worst.1,
            copies: r.copies.max(1),
            wasted_bytes: r.worst.0,
            wasted_at_s: (r.worst.0 > 0).then(|| secs(r.worst.2)),
            copied_from: r.copied_from.iter().map(|&o| stages.names[o].clone()).collect(),
            originals: r.originals,
            contents: r.contents,
            suspected: r.suspected,
        })
        .collect();
    verdicts.sort_by(|a, b| b.wasted_bytes.cmp(&a.wasted_bytes).then_with(|| a.stage.cmp(&b.stage)));
    Dups {
        verdicts,
        duplicated: groups,
        worst: total,
        by_site,
        filled_blocks: filled,
        fingerprints: m.has_fingerprints(),
        fingerprint_min_bytes: m.header.settings.fingerprint_min,
        lifetimes_left_out: m.intervals_pruned,
        unfilled_blocks: m.unfilled_frees,
        unverified: unverified(m),
    }
}

impl Dups {
    /// No block was judged by content: the log holds no fingerprint and no
    /// block too young to hold one, so every finding is by site and size.
    pub fn by_site_and_size_only(&self) -> bool {
        !self.fingerprints && self.unfilled_blocks == 0
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Why verdicts on this log cannot be trusted, if they cannot.
fn unverified(m: &Model) -> Option<String> {
    let mut why = Vec::new();
    if m.dropped > 0 {
        why.push(format!(
            "{} events were dropped (a lost free keeps a copy alive, a lost fingerprint hides one: copies may be too many or too few)",
            m.dropped
        ));
    }
    if !m.ended {
        why.push("the log was cut short (no end record: blocks alive at the end were never fingerprinted)".to_string());
    }
    if !m.problems.is_empty() {
        let n = m.problems.len();
        why.push(format!(
            "{n} damaged part{} of the log {} skipped",
            if n == 1 { "" } else { "s" },
            if n == 1 { "was" } else { "were" }
        ));
    }
    (!why.is_empty()).then(|| why.join("; "))
}
