//! The sweep over every duplicated content's spans, in time order: per
//! content the most holders at once and when; per stage, per call site and
//! in total the worst moment's waste. Its cost is O(events log events):
//! per-tag and per-stage maxima are kept as range maxima over runs of
//! moments, never by visiting every holder at every moment (quadratic on a
//! content held by many tags).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use heaptag_format::hash::MixMap;

use super::{Live, StageIds, StageRun, Worst};
use crate::model::Model;
use crate::units::secs;

/// The waste charged to one call site.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct SiteRun {
    waste: u64,
    extras: u64,
    /// The worst moment: (bytes, extra copies, time).
    pub(super) worst: (u64, u64, u64),
}

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

/// For each key (a tag, a stage): how many of a content's holders it holds,
/// the moment its current run of holding began, and the largest number of
/// holders alive at a moment while it held one.
struct HeldMax<K> {
    held: HashMap<K, (i64, Option<usize>)>,
    changed: Vec<K>,
    result: BTreeMap<K, u64>,
}

impl<K> Default for HeldMax<K> {
    fn default() -> Self {
        HeldMax {
            held: HashMap::new(),
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

    /// A moment ends. The tables of a content share `moments`: the one
    /// called with `push` last records the moment's value.
    fn moment(&mut self, moments: &mut MaxStack, value: u64, push: bool) {
        let now = moments.moments;
        let changed = std::mem::take(&mut self.changed);
        // Runs that ended before this moment: close their range.
        for &k in &changed {
            if let Some((c, open)) = self.held.get_mut(&k) {
                if *c <= 0 {
                    if let Some(a) = open.take() {
                        let e = self.result.entry(k).or_default();
                        *e = (*e).max(moments.max_since(a));
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
            moments.push(value);
        }
    }

    /// Closes the runs still open at the last moment.
    fn finish(&mut self, moments: &MaxStack) {
        for (k, (_, open)) in self.held.iter_mut() {
            if let Some(a) = open.take() {
                let e = self.result.entry(*k).or_default();
                *e = (*e).max(moments.max_since(a));
            }
        }
    }
}

/// Per content while sweeping: its moments and who held what.
#[derive(Default)]
struct Held {
    moments: MaxStack,
    tags: HeldMax<u32>,
    /// Stages of the extra copies (not the kept holder).
    extra_stages: HeldMax<usize>,
}

/// Sweeps `live` in time order; returns the run's worst moment, the stage
/// figures, and the waste charged per call site (stack id).
pub(super) fn sweep(
    m: &Model,
    live: &mut [Live],
    stages: &mut StageIds,
    mut runs: Vec<StageRun>,
) -> (Worst, Vec<StageRun>, MixMap<u32, SiteRun>) {
    // (time, 0 = end / 1 = start, content, span): ends first at one instant.
    let mut ev: Vec<(u64, u8, u32, u32)> = Vec::new();
    for (g, c) in live.iter().enumerate() {
        for (k, sp) in c.spans.iter().enumerate() {
            ev.push((sp.start, 1, g as u32, k as u32));
            if sp.end != u64::MAX {
                ev.push((sp.end, 0, g as u32, k as u32));
            }
        }
    }
    ev.sort_unstable();
    let iv = |c: &Live, k: usize| &m.intervals[c.spans[k].block as usize];
    let stage_of: Vec<Vec<usize>> = live
        .iter()
        .map(|c| (0..c.spans.len()).map(|k| stages.id(m, iv(c, k).tag)).collect())
        .collect();
    let suspected: Vec<bool> = live.iter().map(|c| c.hash.is_none()).collect();
    let mut held: Vec<Held> = live.iter().map(|_| Held::default()).collect();
    let mut sites: MixMap<u32, SiteRun> = MixMap::default();
    let mut total = Worst::default();
    let (mut waste, mut extras) = (0u64, 0u64);
    let mut dirty: BTreeSet<u32> = BTreeSet::new();
    let mut dirty_stages: BTreeSet<usize> = BTreeSet::new();
    let mut dirty_sites: BTreeSet<u32> = BTreeSet::new();
    let mut n = 0;
    while n < ev.len() {
        let t = ev[n].0;
        while n < ev.len() && ev[n].0 == t {
            let (_, start, g, k) = ev[n];
            n += 1;
            let (g, k) = (g as usize, k as usize);
            let c = &mut live[g];
            let h = &mut held[g];
            let key = (c.spans[k].start, k);
            let kept_before = c.alive.first().copied();
            if start == 1 {
                c.alive.insert(key);
            } else {
                c.alive.remove(&key);
            }
            h.tags.add(iv(c, k).tag, if start == 1 { 1 } else { -1 });
            let kept_after = c.alive.first().copied();
            // Every alive holder but the kept one is an extra copy, charged
            // to its own stage and call site.
            let size = c.size;
            let mut charge = |k: usize, d: i64| {
                let s = stage_of[g][k];
                h.extra_stages.add(s, d);
                let stack = m.intervals[c.spans[k].block as usize].stack;
                let r = &mut runs[s];
                let site = sites.entry(stack).or_default();
                if d > 0 {
                    r.waste += size;
                    r.extras += 1;
                    site.waste += size;
                    site.extras += 1;
                    waste += size;
                    extras += 1;
                } else {
                    r.waste = r.waste.saturating_sub(size);
                    r.extras = r.extras.saturating_sub(1);
                    site.waste = site.waste.saturating_sub(size);
                    site.extras = site.extras.saturating_sub(1);
                    waste = waste.saturating_sub(size);
                    extras = extras.saturating_sub(1);
                }
                r.suspected |= suspected[g];
                dirty_stages.insert(s);
                dirty_sites.insert(stack);
            };
            if start == 1 {
                if kept_before.is_some() && kept_after == kept_before {
                    charge(k, 1);
                } else if let Some(old) = kept_before {
                    // The newcomer is kept (an earlier start): the old kept one is extra now.
                    charge(old.1, 1);
                }
            } else if Some(key) == kept_before {
                // The kept one ended: its successor is kept now, no longer extra.
                if let Some(new) = kept_after {
                    charge(new.1, -1);
                }
            } else {
                charge(k, -1);
            }
            dirty.insert(g as u32);
        }
        // Judge the moment once every event at `t` is applied.
        for &g in &dirty {
            let (c, h) = (&mut live[g as usize], &mut held[g as usize]);
            let alive = c.alive.len();
            if alive > c.worst {
                c.worst = alive;
                c.worst_t = t;
                c.until = None;
            } else if alive < c.worst && c.until.is_none() && c.worst_t <= t {
                c.until = Some(t);
            }
            h.tags.moment(&mut h.moments, alive as u64, false);
            h.extra_stages.moment(&mut h.moments, alive as u64, true);
        }
        dirty.clear();
        for &s in &dirty_stages {
            let r = &mut runs[s];
            if r.waste > r.worst.0 {
                r.worst = (r.waste, r.extras, t);
            }
        }
        dirty_stages.clear();
        for &st in &dirty_sites {
            if let Some(r) = sites.get_mut(&st) {
                if r.waste > r.worst.0 {
                    r.worst = (r.waste, r.extras, t);
                }
            }
        }
        dirty_sites.clear();
        if waste > total.wasted_bytes {
            total = Worst {
                wasted_bytes: waste,
                at_s: Some(secs(t)),
                extra_copies: extras,
            };
        }
    }
    for (c, mut h) in live.iter_mut().zip(held) {
        h.tags.finish(&h.moments);
        h.extra_stages.finish(&h.moments);
        c.by_tag = h.tags.result;
        for (s, v) in h.extra_stages.result {
            runs[s].copies = runs[s].copies.max(v);
        }
    }
    (total, runs, sites)
}
