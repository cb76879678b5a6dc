//! Folding retired tags past a budget, so the model's per-tag state is
//! bounded by the live set plus a fixed number of tags, however many tags a
//! run makes (a daemon makes a new job id, ~35 tags, per proof).
//!
//! A tag is a **candidate** once no log id stands for it (`tag_retire`, or
//! its id defined for another value). When twice [`TAG_BUDGET`] candidates
//! are held, the candidates that can be folded are sorted by peak and all
//! but the `TAG_BUDGET` largest are folded, each into the aggregate of its
//! stage and partition (job dropped: [`TagKey::folded`], as
//! `check::baseline_key` and `diff` key tags): its allocated bytes and
//! counts are added to the aggregate's, its peak is the aggregate's when
//! higher, and every reference to its tag number (lifetimes, pruned
//! counts, call sites' tags, timeline series) is renamed to the
//! aggregate's, so every total, per-stage and per-partition figure is what
//! it was. Its tag number is then given out again.
//!
//! Never folded: a tag with live bytes (tracked, sampled, external), a tag
//! whose value at the latest timeline sample was not 0, a tag that held
//! memory at the highest RSS sample so far (`pk_tags`) or may have at the
//! attributed peak so far (its life spans that record): the peak can only
//! move later, and a folded tag holds nothing from then on, so what held
//! memory at either peak stays exact. Untagged, undefined ids and
//! heaptag's own writer are never folded either.

use super::{Model, TagAcc, TagKey};

/// Retired tags kept in full (the largest by peak) before smaller ones are
/// folded. Folding starts at twice this many (so a run with fewer retired
/// tags is never folded) and brings them back to this many. 8,192 tags
/// cost about 3 MiB in the model and 10 MiB in a report's rows, and are
/// more than a per-tag table is read for; a daemon's proofs in flight (16
/// pipelines x 35 tags) are a few hundred.
pub const TAG_BUDGET: usize = 8192;

/// The environment variable that sets the budget for a run of the
/// analyzer (a positive number of tags).
pub const TAG_BUDGET_ENV: &str = "HEAPTAG_TAG_BUDGET";

/// Folding state.
#[derive(Debug, Default)]
pub(crate) struct FoldState {
    /// Retired tags kept in full; 0 until loading sets it.
    pub(crate) budget: usize,
    /// Tag numbers with no id now (some may have one again: checked when
    /// folding).
    pub(super) candidates: Vec<u32>,
    /// Tag numbers free to give out again.
    pub(super) free: Vec<u32>,
    /// Tag numbers given out so far (the next new one).
    pub(super) next: u32,
}

/// The budget from `opts`, else the environment, else [`TAG_BUDGET`].
pub(crate) fn budget(opt: Option<usize>) -> Result<usize, crate::Error> {
    if let Some(n) = opt {
        return Ok(n.max(1));
    }
    match std::env::var(TAG_BUDGET_ENV) {
        Err(std::env::VarError::NotPresent) => Ok(TAG_BUDGET),
        Err(std::env::VarError::NotUnicode(_)) => Err(crate::Error::Inputs(format!(
            "{TAG_BUDGET_ENV}: not valid text (expected a number of tags, at least 1)"
        ))),
        Ok(v) => match v.trim().parse::<usize>() {
            Ok(n) if n >= 1 => Ok(n),
            _ => Err(crate::Error::Inputs(format!(
                "{TAG_BUDGET_ENV}={v:?}: expected a number of tags, at least 1"
            ))),
        },
    }
}

impl Model {
    /// The next tag number to give out: a folded tag's, else a new one.
    pub(super) fn fresh_number(&mut self) -> u32 {
        match self.fold.free.pop() {
            Some(n) => n,
            None => {
                let n = self.fold.next;
                self.fold.next = n.saturating_add(1);
                n
            }
        }
    }

    /// A log id stopped standing for tag `old` and / or now stands for
    /// `new`; a tag no id stands for becomes a fold candidate.
    pub(super) fn rebind(&mut self, old: Option<u32>, new: Option<u32>) {
        if let Some(n) = new {
            let a = self.tag_acc.entry(n);
            a.id_refs = a.id_refs.saturating_add(1);
        }
        if let Some(o) = old {
            let a = self.tag_acc.entry(o);
            a.id_refs = a.id_refs.saturating_sub(1);
            if a.id_refs == 0 && !a.candidate {
                a.candidate = true;
                self.fold.candidates.push(o);
            }
            let budget = self.fold.budget;
            if budget > 0 && self.fold.candidates.len() >= budget.saturating_mul(2) {
                self.fold_retired();
            }
        }
    }

    /// How many tags the model holds in full (every tag but the folded
    /// aggregates: what the budget bounds), and how many aggregates.
    pub fn tags_kept(&self) -> (usize, usize) {
        let aggregates = self.tags.values().filter(|k| k.folded).count();
        (self.tags.len() - aggregates, aggregates)
    }

    /// Whether tag number `t` (no id stands for it) can be folded now:
    /// `Some(false)` not now (live or a peak's holder), `None` never.
    fn foldable(&self, t: u32, a: &TagAcc) -> Option<bool> {
        let k = self.tags.get(&t)?;
        if t == 0 || a.id_refs > 0 || k.folded || k.undefined.is_some() || k.is_heaptag_own() {
            return None;
        }
        let live = a.tracked > 0 || a.small > 0 || a.small_samples > 0 || a.external != 0;
        let pending = self.tl_prev.get(t).copied().unwrap_or(0) != 0;
        let r = self.attributed_peak.1;
        let attributed_holder = r > 0 && a.born_rec <= r && a.last_rec >= r;
        let rss_holder = self.pk_tags.contains_key(&t);
        Some(!(live || pending || attributed_holder || rss_holder))
    }

    /// Folds all but the budget's largest foldable candidates (module docs).
    pub(super) fn fold_retired(&mut self) {
        let budget = self.fold.budget;
        let mut keep: Vec<u32> = Vec::new();
        let mut ready: Vec<(u64, u32)> = Vec::new();
        for t in std::mem::take(&mut self.fold.candidates) {
            let Some(a) = self.tag_acc.get(t) else { continue };
            match self.foldable(t, a) {
                Some(true) => ready.push((a.peak.max(a.tracked_peak), t)),
                Some(false) => keep.push(t),
                None => self.tag_acc.entry(t).candidate = false,
            }
        }
        ready.sort_unstable_by_key(|&(peak, t)| (std::cmp::Reverse(peak), t));
        let fold: Vec<u32> = ready
            .split_off(ready.len().min(budget))
            .into_iter()
            .map(|e| e.1)
            .collect();
        keep.extend(ready.into_iter().map(|e| e.1));
        self.fold.candidates = keep;
        if fold.is_empty() {
            return;
        }
        let mut to: heaptag_format::hash::MixMap<u32, u32> = Default::default();
        for t in fold {
            let Some(key) = self.tags.remove(&t) else { continue };
            self.tag_number.remove(&key);
            let agg = TagKey {
                stage: key.stage,
                partition: key.partition,
                folded: true,
                ..TagKey::default()
            };
            let a = std::mem::take(self.tag_acc.entry(t));
            let n = self.number_of(agg);
            merge_into(self.tag_acc.entry(n), &a);
            *self.tl_prev.entry(t) = 0;
            *self.series_of.entry(t) = 0;
            if let Some(g) = self.group_of.get_mut(t as usize) {
                *g = None;
            }
            if let Some(p) = self.pruned.remove(&t) {
                let e = self.pruned.entry(n).or_default();
                e.contents += p.contents;
                e.filled += p.filled;
                e.fingerprinted |= p.fingerprinted;
            }
            to.insert(t, n);
            self.tags_folded += 1;
        }
        for i in &mut self.intervals {
            if let Some(&n) = to.get(&i.tag) {
                i.tag = n;
            }
        }
        for s in self.site_acc.values_mut() {
            if s.tags.iter().any(|t| to.contains_key(t)) {
                s.tags = s.tags.iter().map(|t| to.get(t).copied().unwrap_or(*t)).collect();
            }
        }
        if self.timeline.names.is_none() {
            self.timeline.remap(|s| to.get(&s).copied());
        }
        // A folded tag may still be listed as changed (it went to 0 since
        // the last sample or RSS peak, where it already was 0 or held
        // nothing): its number is given out again, so it must not be.
        self.tl_dirty.retain(|t| !to.contains_key(t));
        self.pk_tags_dirty.retain(|t| !to.contains_key(t));
        let mut freed: Vec<u32> = to.into_keys().collect();
        // Given out again lowest first (deterministic: a second pass over
        // the log folds and numbers the same way).
        freed.sort_unstable_by(|a, b| b.cmp(a));
        self.fold.free.extend(freed);
    }
}

/// Adds a folded tag's figures to its aggregate's: allocated bytes and
/// counts summed (each tag's allocated as its report row gives it), peaks
/// the higher. Its live figures are 0 (it is folded only then).
fn merge_into(g: &mut TagAcc, a: &TagAcc) {
    if g.alloc_bytes.is_some() || a.alloc_bytes.is_some() {
        let before = g.alloc_bytes.unwrap_or(g.tracked_alloc);
        g.alloc_bytes = Some(before.saturating_add(a.alloc_bytes.unwrap_or(a.tracked_alloc)));
    }
    if g.alloc_count.is_some() || a.alloc_count.is_some() {
        let before = g.alloc_count.unwrap_or(g.tracked_count);
        g.alloc_count = Some(before.saturating_add(a.alloc_count.unwrap_or(a.tracked_count)));
    }
    g.tracked_alloc = g.tracked_alloc.saturating_add(a.tracked_alloc);
    g.tracked_count = g.tracked_count.saturating_add(a.tracked_count);
    // Native (C/C++) figures: allocated summed, peak the higher, as above.
    g.native_alloc = g.native_alloc.saturating_add(a.native_alloc);
    g.native_peak = g.native_peak.max(a.native_peak);
    if a.peak > g.peak {
        g.peak = a.peak;
        g.peak_t = a.peak_t;
    }
    if a.tracked_peak > g.tracked_peak {
        g.tracked_peak = a.tracked_peak;
        g.tracked_peak_t = a.tracked_peak_t;
        g.small_at_tracked_peak = a.small_at_tracked_peak;
    }
    let row_peak = if a.tracked_peak > 0 {
        a.tracked_peak.saturating_add(a.small_at_tracked_peak.0)
    } else {
        a.peak
    };
    g.folded_peaks = g.folded_peaks.saturating_add(row_peak);
    g.folded = g.folded.saturating_add(a.folded.max(1));
}
