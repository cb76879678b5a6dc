//! Shared once or duplicated: grouping tracked blocks by content.
//!
//! Blocks whose fingerprints (size, hash) match hold the same bytes. For each
//! group, a sweep over the blocks' lifetimes finds the most copies alive at
//! one moment, when, and who held them. Zero- and constant-filled blocks are
//! never duplicates (a fresh `vec![0; n]` is not a copy of anything). Without
//! fingerprints, blocks are grouped by call site and size instead and the
//! finding is labelled "suspected": one site legitimately allocates distinct
//! per-partition data of the same size.

use std::collections::{BTreeMap, BTreeSet};

use heaptag_format::Fill;
use serde::Serialize;

use crate::units::secs;

use crate::model::{Interval, Model, TagKey};
use crate::sites::site_name;

/// Blocks with the same content (or, suspected, the same site and size).
#[derive(Clone, Debug, Serialize)]
pub struct Group {
    /// Size of each copy.
    pub size_bytes: u64,
    /// Content hash (`None` for a suspected group).
    pub hash: Option<String>,
    /// Grouped by site and size only: no fingerprints to confirm.
    pub suspected: bool,
    /// Blocks in the group over the whole run.
    pub blocks: u64,
    /// Most copies alive at one moment.
    pub copies: u64,
    /// When that many first were alive, seconds since the start.
    pub from_s: f64,
    /// When the count first dropped below `copies` (`None`: still at the end).
    pub until_s: Option<f64>,
    /// The maximum was not held to the end of the run.
    pub transient: bool,
    /// `(copies - 1) x size`.
    pub wasted_bytes: u64,
    /// Tags holding a copy at that moment, with how many copies each.
    pub holders: Vec<Holder>,
    /// Stages of every block in the group.
    pub stages: Vec<String>,
    /// Stages holding a copy at the moment of most copies.
    pub stages_at_max: Vec<String>,
    /// Per stage: the most copies alive at a moment when that stage held one.
    pub copies_by_stage: BTreeMap<String, u64>,
    /// Per tag id: the most copies alive at a moment when that tag held one.
    #[serde(skip)]
    pub copies_by_tag: BTreeMap<u32, u64>,
    /// Call site of the first block.
    pub site: String,
}

/// A tag holding copies.
#[derive(Clone, Debug, Serialize)]
pub struct Holder {
    /// The tag.
    pub tag: String,
    /// Copies it held.
    pub copies: u64,
}

/// The verdict for one stage.
#[derive(Clone, Debug, Serialize)]
pub struct Verdict {
    /// Stage name (`untagged` for blocks without a stage).
    pub stage: String,
    /// `SHARED ONCE` or `DUPLICATED`.
    pub verdict: String,
    /// Most copies of one content alive at once (1 when shared once).
    pub copies: u64,
    /// Sum over the stage's duplicated contents of `(copies - 1) x size`,
    /// counting the copies alive while the stage held one.
    pub wasted_bytes: u64,
    /// Distinct contents (groups) the stage allocated.
    pub contents: u64,
    /// The verdict rests on site and size only.
    pub suspected: bool,
}

/// The whole finding for one log.
#[derive(Clone, Debug, Serialize)]
pub struct Dups {
    /// Per stage, sorted by wasted bytes then name.
    pub verdicts: Vec<Verdict>,
    /// Groups with more than one copy alive at once, most wasted first.
    pub duplicated: Vec<Group>,
    /// Blocks left out because they are zero- or constant-filled.
    pub filled_blocks: u64,
    /// Whether the log holds fingerprints at all.
    pub fingerprints: bool,
    /// Smallest fingerprinted block size (from the log's settings).
    pub fingerprint_min_bytes: u64,
}

/// Stage name of each tag id, computed once (`untagged` without a stage).
struct Stages(heaptag_format::hash::MixMap<u32, String>);

impl Stages {
    fn of(&self, tag: u32) -> String {
        self.0.get(&tag).cloned().unwrap_or_else(|| "untagged".into())
    }
}

fn stage_name(k: &TagKey) -> String {
    k.stage.clone().unwrap_or_else(|| "untagged".into())
}

/// Most copies alive at once: (copies, first time reached, when it ended,
/// the intervals alive then, and per stage the most copies alive while that
/// stage held one).
/// The values of the moments so far, for "largest since moment `a`" in
/// O(log n): a stack of (moment, value) with decreasing values.
#[derive(Default)]
struct MaxStack {
    stack: Vec<(usize, u64)>,
    moments: usize,
}

impl MaxStack {
    fn push(&mut self, v: u64) {
        while self.stack.last().is_some_and(|&(_, w)| w <= v) {
            self.stack.pop();
        }
        self.stack.push((self.moments, v));
        self.moments += 1;
    }

    /// Largest value of the moments from `a` on.
    fn max_since(&self, a: usize) -> u64 {
        let i = self.stack.partition_point(|&(m, _)| m < a);
        self.stack.get(i).map_or(0, |&(_, v)| v)
    }
}

/// For each key (stage or tag): how many of a group's blocks it holds, the
/// moment its current run of holding began, and the largest number of
/// copies alive at a moment while it held one.
struct HeldMax<K> {
    held: std::collections::HashMap<K, (i64, Option<usize>)>,
    changed: Vec<K>,
    result: BTreeMap<K, u64>,
}

impl<K> Default for HeldMax<K> {
    fn default() -> Self {
        HeldMax {
            held: Default::default(),
            changed: Vec::new(),
            result: BTreeMap::new(),
        }
    }
}

impl<K: Copy + Ord + std::hash::Hash> HeldMax<K> {
    fn add(&mut self, k: K, d: i64) {
        self.held.entry(k).or_insert((0, None)).0 += d;
        self.changed.push(k);
    }

    /// A moment ends with `cur` copies alive. The tables share `moments`:
    /// the one called with `push` last records the moment.
    fn moment(&mut self, moments: &mut MaxStack, cur: u64, push: bool) {
        let now = moments.moments;
        let changed = std::mem::take(&mut self.changed);
        // Runs that ended before this moment: close their range.
        for &k in &changed {
            if let Some((c, open)) = self.held.get_mut(&k) {
                if *c <= 0 {
                    if let Some(a) = open.take() {
                        let v = moments.max_since(a);
                        let e = self.result.entry(k).or_default();
                        *e = (*e).max(v);
                    }
                }
            }
        }
        for &k in &changed {
            if let Some((c, open)) = self.held.get_mut(&k) {
                if *c > 0 && open.is_none() {
                    *open = Some(now);
                }
            }
        }
        if push {
            moments.push(cur);
        }
    }

    /// Closes the runs still open at the last moment.
    fn finish(&mut self, moments: &MaxStack) {
        for (k, (_, open)) in self.held.iter_mut() {
            if let Some(a) = open.take() {
                let v = moments.max_since(a);
                let e = self.result.entry(*k).or_default();
                *e = (*e).max(v);
            }
        }
    }
}

#[allow(clippy::type_complexity)]
fn sweep<'a>(
    items: &[&'a Interval],
    stages: &[String],
    end_of_log: u64,
) -> (
    u64,
    u64,
    Option<u64>,
    Vec<&'a Interval>,
    BTreeMap<String, u64>,
    BTreeMap<u32, u64>,
) {
    // (time, +1 / -1, item); frees sort before allocations at the same instant.
    let mut ev: Vec<(u64, i8, usize)> = Vec::with_capacity(items.len() * 2);
    for (k, i) in items.iter().enumerate() {
        ev.push((i.start, 1, k));
        ev.push((i.end.unwrap_or(u64::MAX), -1, k));
    }
    ev.sort();
    // Per stage and per tag, the most copies alive at a moment while it held
    // one: kept per run of moments it held any (a range maximum), not by
    // visiting every holder at every moment (quadratic with many tags).
    let mut held: HeldMax<&str> = HeldMax::default();
    let mut held_tag: HeldMax<u32> = HeldMax::default();
    let mut moments = MaxStack::default();
    let (mut cur, mut best, mut best_t, mut until) = (0i64, 0i64, 0u64, None);
    for (n, &(t, d, k)) in ev.iter().enumerate() {
        cur += i64::from(d);
        held.add(stages[k].as_str(), i64::from(d));
        held_tag.add(items[k].tag, i64::from(d));
        // Judge a moment once all events at the same instant are applied.
        if ev.get(n + 1).is_none_or(|next| next.0 != t) {
            held.moment(&mut moments, cur.max(0) as u64, false);
            held_tag.moment(&mut moments, cur.max(0) as u64, true);
        }
        if cur > best {
            best = cur;
            best_t = t;
            until = None;
        } else if d < 0 && cur == best - 1 && until.is_none() && t >= best_t {
            until = Some(t);
        }
    }
    held.finish(&moments);
    held_tag.finish(&moments);
    let by_stage: BTreeMap<String, u64> = held.result.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    let by_tag = held_tag.result;
    // Open lifetimes end at u64::MAX: a "drop" there is the end of the log.
    let until = until.filter(|&t| t != u64::MAX && t <= end_of_log);
    let alive = items
        .iter()
        .copied()
        .filter(|i| i.start <= best_t && i.end.is_none_or(|e| e > best_t))
        .collect();
    (best.max(0) as u64, best_t, until, alive, by_stage, by_tag)
}

/// Groups the model's blocks and decides per stage.
pub fn analyze(m: &Model) -> Dups {
    let st = Stages(m.tags.iter().map(|(id, k)| (*id, stage_name(k))).collect());
    // Group by sorting keys, not by a map of vectors: one 24-byte entry per
    // block instead of a vector per content.
    let mut by_content: Vec<(u64, u64, u32)> = Vec::new();
    let mut by_site: Vec<(u64, u64, u32)> = Vec::new();
    let mut filled = 0u64;
    let mut fingerprinted_stages: BTreeSet<String> = BTreeSet::new();
    for (k, i) in m.intervals.iter().enumerate() {
        match i.fp {
            Some(fp) if fp.fill == Fill::Mixed => {
                by_content.push((i.size, fp.hash, k as u32));
                fingerprinted_stages.insert(st.of(i.tag));
            }
            Some(_) => {
                filled += 1;
                fingerprinted_stages.insert(st.of(i.tag));
            }
            None => by_site.push((i.size, u64::from(i.stack), k as u32)),
        }
    }
    by_content.sort_unstable();
    by_site.sort_unstable();
    let runs = |keys: &[(u64, u64, u32)]| -> Vec<(u64, Vec<&Interval>)> {
        keys.chunk_by(|a, b| (a.0, a.1) == (b.0, b.1))
            .map(|run| {
                (
                    run[0].1,
                    run.iter().map(|&(_, _, k)| &m.intervals[k as usize]).collect(),
                )
            })
            .collect()
    };
    let mut groups: Vec<Group> = Vec::new();
    // A content held by one block has one copy: no sweep, it only counts as
    // a content of its stage (most large blocks of a run are like this).
    let mut singles: BTreeMap<String, u64> = BTreeMap::new();
    let mut content_runs = Vec::new();
    for run in by_content.chunk_by(|a, b| (a.0, a.1) == (b.0, b.1)) {
        if run.len() == 1 {
            *singles.entry(st.of(m.intervals[run[0].2 as usize].tag)).or_default() += 1;
        } else {
            content_runs.push(run);
        }
    }
    let mut make = |items: Vec<&Interval>, hash: Option<u64>| {
        let item_stages: Vec<String> = items.iter().map(|i| st.of(i.tag)).collect();
        let (copies, from, until, alive, copies_by_stage, copies_by_tag) = sweep(&items, &item_stages, m.end_ns);
        let mut holders: BTreeMap<String, u64> = BTreeMap::new();
        for i in &alive {
            *holders.entry(m.tag(i.tag).to_string()).or_default() += 1;
        }
        let stages: BTreeSet<String> = items.iter().map(|i| st.of(i.tag)).collect();
        let stages_at_max: BTreeSet<String> = alive.iter().map(|i| st.of(i.tag)).collect();
        let size = items[0].size;
        groups.push(Group {
            size_bytes: size,
            hash: hash.map(|h| format!("{h:016x}")),
            suspected: hash.is_none(),
            blocks: items.len() as u64,
            copies,
            from_s: secs(from),
            until_s: until.map(secs),
            transient: until.is_some(),
            wasted_bytes: copies.saturating_sub(1) * size,
            holders: holders
                .into_iter()
                .map(|(tag, copies)| Holder { tag, copies })
                .collect(),
            stages: stages.into_iter().collect(),
            stages_at_max: stages_at_max.into_iter().collect(),
            copies_by_stage,
            copies_by_tag,
            site: site_name(m, items[0].stack),
        });
    };
    for run in content_runs {
        let items: Vec<&Interval> = run.iter().map(|&(_, _, k)| &m.intervals[k as usize]).collect();
        make(items, Some(run[0].1));
    }
    for (_, items) in runs(&by_site) {
        // Site-and-size grouping only where no fingerprint speaks for the stage.
        if items.iter().all(|i| !fingerprinted_stages.contains(&st.of(i.tag))) {
            make(items, None);
        }
    }
    let mut verdicts: BTreeMap<String, Verdict> = BTreeMap::new();
    for (stage, n) in singles {
        verdicts.insert(
            stage.clone(),
            Verdict {
                stage,
                verdict: String::new(),
                copies: 1,
                wasted_bytes: 0,
                contents: n,
                suspected: false,
            },
        );
    }
    for g in &groups {
        for s in &g.stages {
            let v = verdicts.entry(s.clone()).or_insert_with(|| Verdict {
                stage: s.clone(),
                verdict: String::new(),
                copies: 1,
                wasted_bytes: 0,
                contents: 0,
                suspected: false,
            });
            v.contents += 1;
            // A stage shares in a duplicate only at moments when it held a
            // copy itself (a later, lone copy is not a duplicate).
            let copies = g.copies_by_stage.get(s).copied().unwrap_or(1);
            if copies > 1 {
                v.copies = v.copies.max(copies);
                v.wasted_bytes += (copies - 1) * g.size_bytes;
                v.suspected |= g.suspected;
            }
        }
    }
    let mut verdicts: Vec<Verdict> = verdicts
        .into_values()
        .map(|mut v| {
            v.verdict = if v.copies <= 1 {
                "SHARED ONCE".into()
            } else if v.suspected {
                "SUSPECTED DUPLICATE".into()
            } else {
                "DUPLICATED".into()
            };
            v
        })
        .collect();
    verdicts.sort_by(|a, b| b.wasted_bytes.cmp(&a.wasted_bytes).then_with(|| a.stage.cmp(&b.stage)));
    let mut duplicated: Vec<Group> = groups.into_iter().filter(|g| g.copies > 1).collect();
    duplicated.sort_by(|a, b| {
        b.wasted_bytes
            .cmp(&a.wasted_bytes)
            .then_with(|| a.from_s.total_cmp(&b.from_s))
            .then_with(|| a.hash.cmp(&b.hash))
    });
    Dups {
        verdicts,
        duplicated,
        filled_blocks: filled,
        fingerprints: m.has_fingerprints(),
        fingerprint_min_bytes: m.header.settings.fingerprint_min,
    }
}
