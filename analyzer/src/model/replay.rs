//! Replay: applying records one at a time to a [`Model`]: live blocks,
//! per-tag and per-site figures, peaks, compositions, lifetimes.

use heaptag_format::Record;

use super::{Block, Composition, Fp, Interval, Model, Obs, ProcAcc, Sample, Sym, TagAcc, TagKey};
use crate::text::printable;

/// When to leave out block lifetimes next (`Model::prune_intervals`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct PruneState {
    /// Prune when this many lifetimes are held.
    next: usize,
}

/// `*x += v`, saturating; raises `of` when it had to.
#[inline]
fn add(x: &mut u64, v: u64, of: &mut bool) {
    match x.checked_add(v) {
        Some(s) => *x = s,
        None => {
            *x = u64::MAX;
            *of = true;
        }
    }
}

/// `*x += v` for signed figures, saturating; raises `of` when it had to.
#[inline]
fn add_signed(x: &mut i64, v: i64, of: &mut bool) {
    match x.checked_add(v) {
        Some(s) => *x = s,
        None => {
            *x = if v > 0 { i64::MAX } else { i64::MIN };
            *of = true;
        }
    }
}

impl Model {
    fn acc(&mut self, tag: u32) -> &mut TagAcc {
        self.tag_acc.entry(tag)
    }

    /// Marks `tag` changed for the timeline and the RSS peak.
    #[inline]
    fn touch(a: &mut TagAcc, tag: u32, tl: &mut Vec<u32>, pk: &mut Vec<u32>) {
        if a.dirty != 3 {
            if a.dirty & 1 == 0 {
                tl.push(tag);
            }
            if a.dirty & 2 == 0 {
                pk.push(tag);
            }
            a.dirty = 3;
        }
    }

    fn time(&mut self, t: u64) -> u64 {
        self.end_ns = self.end_ns.max(t);
        t
    }

    /// Adds `bytes` (tracked when `tracked`) to tag and site; raises peaks.
    fn grow(&mut self, tag: u32, stack: u32, bytes: u64, tracked: bool, t: u64) {
        let mut of = false;
        let a = self.tag_acc.entry(tag);
        if tracked {
            add(&mut a.tracked, bytes, &mut of);
            if a.tracked > a.tracked_peak {
                // The exact peak, and the small-block estimate beside it
                // (not the maximum of a noisy estimate, which is biased up).
                a.tracked_peak = a.tracked;
                a.tracked_peak_t = t;
                a.small_at_tracked_peak = (a.small, a.small_var);
            }
        } else {
            add(&mut a.small, bytes, &mut of);
        }
        let live = a.tracked.saturating_add(a.small);
        if live > a.peak {
            a.peak = live;
            a.peak_t = t;
        }
        a.last_rec = self.records;
        Model::touch(a, tag, &mut self.tl_dirty, &mut self.pk_tags_dirty);
        let s = self.site_acc.entry(stack);
        add(&mut s.live, bytes, &mut of);
        add(&mut s.alloc_bytes, bytes, &mut of);
        s.alloc_count += 1;
        if s.live > s.peak {
            s.peak = s.live;
            s.peak_t = t;
        }
        if s.tags.len() < 32 {
            s.tags.insert(tag);
        }
        if !s.dirty {
            s.dirty = true;
            self.pk_sites_dirty.push(stack);
        }
        if tracked {
            add(&mut self.tracked, bytes, &mut of);
        } else {
            add(&mut self.small, bytes, &mut of);
        }
        self.overflowed |= of;
        let attributed = self.tracked.saturating_add(self.small);
        if attributed > self.attributed_peak.0 {
            self.attributed_peak = (attributed, self.records, t);
        }
    }

    fn shrink(&mut self, tag: u32, stack: u32, bytes: u64, tracked: bool) {
        let a = self.tag_acc.entry(tag);
        if tracked {
            a.tracked = a.tracked.saturating_sub(bytes);
            self.tracked = self.tracked.saturating_sub(bytes);
        } else {
            a.small = a.small.saturating_sub(bytes);
            self.small = self.small.saturating_sub(bytes);
        }
        a.last_rec = self.records;
        Model::touch(a, tag, &mut self.tl_dirty, &mut self.pk_tags_dirty);
        let s = self.site_acc.entry(stack);
        s.live = s.live.saturating_sub(bytes);
        if !s.dirty {
            s.dirty = true;
            self.pk_sites_dirty.push(stack);
        }
    }

    fn keep_interval(&self, b: &Block) -> bool {
        self.want_intervals
            && (b.observed() || b.size >= self.header.settings.fingerprint_min.max(self.header.settings.threshold))
    }

    /// Keeps the lifetime of `b` with its observations, ended at `end`
    /// (`None`: alive at the end of the log), when duplicate detection
    /// wants it.
    fn keep_lifetime(&mut self, mut b: Block, end: Option<u64>) {
        if !self.keep_interval(&b) {
            return;
        }
        // Freed before it could have been filled: it held no content (the
        // allocator takes no fingerprint of it, see `freed_unfilled`).
        if !b.observed() && end.is_some_and(|e| heaptag_format::freed_unfilled(b.size, e.saturating_sub(b.start))) {
            self.unfilled_frees += 1;
            return;
        }
        let Ok(first_obs) = u32::try_from(self.observations.len()) else {
            return;
        };
        let before = self.observations.len();
        self.observations.extend(b.take_observations());
        self.intervals.push(Interval {
            tag: b.tag,
            stack: b.stack,
            size: b.size,
            start: b.start,
            end,
            first_obs,
            n_obs: (self.observations.len() - before) as u32,
        });
        if end.is_some() && self.intervals.len() >= self.prune.next.max(self.intervals_kept) {
            self.prune_intervals();
        }
    }

    /// Leaves out the ended lifetimes that can no longer take part in a
    /// duplicate: no kept lifetime with one of its contents (or, without a
    /// fingerprint, its site and size) overlapped it, and no block alive
    /// now began before it ended (a block alive now may still be
    /// fingerprinted with its content). What `dups` counts of them (a
    /// content of its stage, a filled block) is kept per tag number.
    pub(super) fn prune_intervals(&mut self) {
        // Per size, the earliest start of a block of that size alive now
        // (only a block of the same size can hold the same content).
        let mut live_start: heaptag_format::hash::MixMap<u64, u64> = Default::default();
        for b in self.live.values().chain(self.moving.values()) {
            let e = live_start.entry(b.size).or_insert(u64::MAX);
            *e = (*e).min(b.start);
        }
        // (kind, size, hash or stack, start, end, interval) per content key.
        let mut keyed: Vec<(u8, u64, u64, u64, u64, u32)> = Vec::new();
        for (k, i) in self.intervals.iter().enumerate() {
            let obs = self.observations_of(i);
            let end = i.end.unwrap_or(u64::MAX);
            if obs.iter().any(|o| o.when.is_some()) {
                for o in obs {
                    if let Some(fp) = o.fp().filter(|f| f.fill == heaptag_format::Fill::Mixed) {
                        keyed.push((0, i.size, fp.hash, i.start, end, k as u32));
                    }
                }
            } else {
                keyed.push((1, i.size, u64::from(i.stack), i.start, end, k as u32));
            }
        }
        keyed.sort_unstable();
        keyed.dedup_by_key(|e| (e.0, e.1, e.2, e.5));
        let mut keep = vec![false; self.intervals.len()];
        for run in keyed.chunk_by(|a, b| (a.0, a.1, a.2) == (b.0, b.1, b.2)) {
            // Clusters of lifetimes that overlap one after another: every
            // member of a cluster of two or more is kept.
            let mut from = 0;
            let mut reach = run[0].4;
            for j in 1..=run.len() {
                if j < run.len() && run[j].3 <= reach {
                    reach = reach.max(run[j].4);
                    continue;
                }
                let distinct = run[from..j]
                    .iter()
                    .map(|e| e.5)
                    .collect::<std::collections::BTreeSet<_>>();
                if distinct.len() > 1 {
                    for e in &run[from..j] {
                        keep[e.5 as usize] = true;
                    }
                }
                if j < run.len() {
                    from = j;
                    reach = run[j].4;
                }
            }
        }
        let old = std::mem::take(&mut self.intervals);
        let old_obs = std::mem::take(&mut self.observations);
        for (k, i) in old.into_iter().enumerate() {
            let end = i.end.unwrap_or(u64::MAX);
            let first = i.first_obs as usize;
            let obs = old_obs.get(first..first + i.n_obs as usize).unwrap_or_default();
            if keep[k] || end >= live_start.get(&i.size).copied().unwrap_or(u64::MAX) {
                let first_obs = self.observations.len() as u32;
                self.observations.extend_from_slice(obs);
                self.intervals.push(Interval { first_obs, ..i });
                continue;
            }
            self.intervals_pruned += 1;
            let p = self.pruned.entry(i.tag).or_default();
            if obs.iter().any(|o| o.when.is_some()) {
                p.fingerprinted = true;
                if obs
                    .iter()
                    .filter_map(Obs::fp)
                    .all(|f| f.fill != heaptag_format::Fill::Mixed)
                {
                    p.filled += 1;
                } else {
                    p.contents += 1;
                }
            } else if end > i.start {
                p.contents += 1;
            }
        }
        // Next time when twice as many are held: amortized, however many
        // must be kept.
        self.prune.next = self.intervals.len().saturating_mul(2).max(self.intervals_kept);
    }

    #[inline]
    pub(super) fn end_block(&mut self, b: Block, t: u64) {
        if b.native {
            self.native_shrink(b.tag, b.size, true);
        }
        self.shrink(b.tag, b.stack, b.size, true);
        // (checked here too: without lifetimes kept, a free neither calls
        // out nor moves the block)
        if self.want_intervals {
            self.keep_lifetime(b, Some(t));
        }
    }

    /// A tracked block allocated (its peaks stamped `t`).
    pub(super) fn add_block(&mut self, t: u64, tag: u32, stack: u32, addr: u64, size: u64) {
        let mut of = false;
        let a = self.acc(tag);
        add(&mut a.tracked_alloc, size, &mut of);
        a.tracked_count += 1;
        self.overflowed |= of;
        self.grow(tag, stack, size, true, t);
        if let Some(old) = self.live.insert(addr, Block::new(tag, stack, size, t)) {
            // An allocation at a live address: its free was dropped.
            self.end_block(old, t);
        }
    }

    /// A small block sampled.
    pub(super) fn add_sample(&mut self, t: u64, tag: u32, stack: u32, addr: u64, s: Sample) {
        self.grow(tag, stack, s.weight, false, t);
        let a = self.acc(tag);
        a.small_var += s.var();
        a.small_samples += 1;
        self.small_var += s.var();
        if let Some(old) = self.samples.insert(addr, s) {
            self.drop_sample(old);
        }
    }

    /// A `native` record: the block just allocated at `addr` is C/C++'s.
    /// Marks it once (a carried block's mark may come again in a later
    /// segment of a set read whole).
    fn mark_native(&mut self, addr: u64) {
        let mut of = false;
        if let Some(b) = self.live.get_mut(&addr) {
            if b.native {
                return;
            }
            b.native = true;
            let (tag, size) = (b.tag, b.size);
            let a = self.tag_acc.entry(tag);
            add(&mut a.native_tracked, size, &mut of);
            add(&mut a.native_alloc, size, &mut of);
            a.native_peak = a.native_peak.max(a.native_tracked);
            add(&mut self.native, size, &mut of);
        } else if let Some(s) = self.samples.get_mut(&addr) {
            if s.native {
                return;
            }
            s.native = true;
            let (tag, weight) = (s.tag, s.weight);
            add(&mut self.tag_acc.entry(tag).native_small, weight, &mut of);
            add(&mut self.native, weight, &mut of);
        }
        self.overflowed |= of;
    }

    /// A native block's bytes leave its tag's native figures.
    fn native_shrink(&mut self, tag: u32, bytes: u64, tracked: bool) {
        let a = self.tag_acc.entry(tag);
        if tracked {
            a.native_tracked = a.native_tracked.saturating_sub(bytes);
        } else {
            a.native_small = a.native_small.saturating_sub(bytes);
        }
        self.native = self.native.saturating_sub(bytes);
    }

    /// External bytes added (or released, negative) by tag number `tag`.
    pub(super) fn external_delta(&mut self, tag: u32, bytes: i64) {
        let mut of = false;
        let a = self.tag_acc.entry(tag);
        add_signed(&mut a.external, bytes, &mut of);
        a.last_rec = self.records;
        Model::touch(a, tag, &mut self.tl_dirty, &mut self.pk_tags_dirty);
        add_signed(&mut self.external, bytes, &mut of);
        self.overflowed |= of;
    }

    /// Applies one record. By reference: the reader's loop decodes the
    /// record in place and this reads its fields there (moving a decoded
    /// record into the call cost a store-forwarding stall per record, the
    /// replay's largest single cost); the few records that own strings or
    /// lists give them up with `mem::take`.
    pub(super) fn apply(&mut self, rec: &mut Record) {
        if rec.is_event() {
            self.events += 1;
        }
        if (self.seg.mode != super::segments::Mode::Off || matches!(rec, Record::Segment { .. }))
            && self.segment_record(rec)
        {
            return;
        }
        match *rec {
            Record::TagDef {
                id,
                job,
                ref mut stage,
                partition,
            } => {
                let key = TagKey {
                    job,
                    stage: stage.take().map(printable),
                    partition,
                    ..TagKey::default()
                };
                let tag = self.number_of(key);
                self.ids.defined();
                let slot = self.ids.entry(id);
                // The same id for the same value again (a segment repeats
                // the definitions it uses): the same lifetime goes on.
                if slot.tag != Some(tag) {
                    let old = slot.tag;
                    *slot = super::IdSlot {
                        tag: Some(tag),
                        bytes: 0,
                        count: 0,
                    };
                    self.rebind(old, Some(tag));
                }
            }
            Record::TagRetire { time_ns, id } => {
                self.time(time_ns);
                // The id is free: its next definition is another lifetime.
                let old = std::mem::take(self.ids.entry(id)).tag;
                self.rebind(old, None);
            }
            Record::TagOverflow {
                time_ns,
                job,
                partition,
                ref mut stage,
            } => {
                self.time(time_ns);
                let key = TagKey {
                    job,
                    stage: stage.take().map(printable),
                    partition,
                    ..TagKey::default()
                };
                if !self.overflow_seen.contains(&key) {
                    self.tags_without_id_count += 1;
                    if self.overflow_seen.len() < super::TAG_OVERFLOW_KEPT * 64 {
                        self.overflow_seen.insert(key.clone());
                    }
                    if self.tags_without_id.len() < super::TAG_OVERFLOW_KEPT {
                        self.tags_without_id.push(key);
                    }
                }
            }
            Record::StackDef { id, ref mut frames } => {
                self.stacks.insert(id, std::mem::take(frames));
                self.site_acc.defined();
            }
            Record::Symbol {
                addr,
                ref mut function,
                ref mut file,
                line,
            } => {
                let (function, file) = (printable(std::mem::take(function)), printable(std::mem::take(file)));
                let sym = Sym { function, file, line };
                // Repeated: the functions the address was inlined into, in order.
                match self.symbols.entry(addr) {
                    std::collections::hash_map::Entry::Occupied(_) => {
                        crate::sites::add_inlined(&mut self.inlined, addr, sym)
                    }
                    std::collections::hash_map::Entry::Vacant(v) => {
                        v.insert(sym);
                    }
                }
            }
            Record::Alloc {
                time_ns,
                tag,
                stack,
                addr,
                size,
                ..
            } => {
                let t = self.time(time_ns);
                let tag = self.tag_of(tag);
                self.add_block(t, tag, stack, addr, size);
            }
            Record::Free { time_ns, addr, .. } => {
                let t = self.time(time_ns);
                match self.live.remove(&addr) {
                    Some(b) => self.end_block(b, t),
                    None => self.unmatched_frees += 1,
                }
            }
            Record::ReallocBegin { thread, addr, time_ns } => {
                self.time(time_ns);
                if let Some(b) = self.live.remove(&addr) {
                    self.moving.insert((thread, addr), b);
                }
            }
            Record::Realloc {
                time_ns,
                thread,
                tag,
                old_addr,
                addr,
                size,
                ..
            } => {
                let t = self.time(time_ns);
                let tag = self.tag_of(tag);
                let old = self
                    .moving
                    .remove(&(thread, old_addr))
                    .or_else(|| self.live.remove(&old_addr));
                let old_size = old.as_ref().map_or(0, |b| b.size);
                let moved_tag = old.as_ref().is_some_and(|b| b.tag != tag);
                let mut b = match old {
                    Some(mut b) => {
                        if b.native {
                            // Resized by Rust's realloc (the native shim
                            // writes a free and an alloc): Rust's from here.
                            self.native_shrink(b.tag, b.size, true);
                            b.native = false;
                        }
                        self.shrink(b.tag, b.stack, b.size, true);
                        b
                    }
                    None => Block::new(tag, 0, size, t),
                };
                // The realloc rule (docs/REPORTS.md): the new size is charged
                // to the record's tag, the resizing thread's. Under the same
                // tag a resize allocates only its growth; under another tag
                // the whole block is a new allocation of that tag.
                let allocated = if moved_tag { size } else { size.saturating_sub(old_size) };
                self.grow(tag, b.stack, size, true, t);
                let mut of = false;
                let a = self.acc(tag);
                add(&mut a.tracked_alloc, allocated, &mut of);
                if moved_tag {
                    a.tracked_count += 1;
                }
                self.overflowed |= of;
                // A resize changes the content: what was observed before
                // holds up to here, and nothing is known after it.
                if old_size != size && b.observed() {
                    b.observe(Obs::boundary(t));
                }
                b.tag = tag;
                b.size = size;
                self.live.insert(addr, b);
            }
            Record::SampleAlloc {
                time_ns,
                tag,
                stack,
                addr,
                size,
                weight,
                ..
            } => {
                let t = self.time(time_ns);
                let tag = self.tag_of(tag);
                let s = Sample {
                    tag,
                    stack,
                    size,
                    weight,
                    native: false,
                };
                self.add_sample(t, tag, stack, addr, s);
            }
            Record::SampleFree { time_ns, addr, .. } => {
                self.time(time_ns);
                if let Some(s) = self.samples.remove(&addr) {
                    self.drop_sample(s);
                }
            }
            Record::Native { addr } => self.mark_native(addr),
            Record::Fingerprint {
                time_ns,
                addr,
                hash,
                meta,
                ..
            } => {
                let t = self.time(time_ns);
                if let Some(b) = self.live.get_mut(&addr) {
                    // Observations reach a report only through the kept
                    // lifetimes (`dups`, `check`): without them, the
                    // fingerprint is only counted.
                    if self.want_intervals {
                        let fp = Fp {
                            hash,
                            fill: meta.fill,
                            full: meta.full,
                        };
                        b.observe(Obs::fingerprint(t, fp, meta.when));
                    }
                    self.fingerprints += 1;
                }
            }
            Record::Mark { time_ns, ref mut label } => {
                let t = self.time(time_ns);
                self.marks.push((t, printable(std::mem::take(label))));
            }
            Record::Counters { time_ns, ref tags } => {
                self.time(time_ns);
                for c in tags {
                    // Cumulative per id lifetime: a tag's figure is the sum
                    // of its lifetimes' latest counters.
                    let tag = self.tag_of(c.tag);
                    let slot = self.ids.entry(c.tag);
                    let (was_bytes, was_count) = (slot.bytes, slot.count);
                    slot.bytes = c.alloc_bytes;
                    slot.count = c.alloc_count;
                    let a = self.acc(tag);
                    a.alloc_bytes = Some(
                        a.alloc_bytes
                            .unwrap_or(0)
                            .saturating_sub(was_bytes)
                            .saturating_add(c.alloc_bytes),
                    );
                    a.alloc_count = Some(
                        a.alloc_count
                            .unwrap_or(0)
                            .saturating_sub(was_count)
                            .saturating_add(c.alloc_count),
                    );
                }
            }
            Record::Totals {
                time_ns,
                live,
                tracked,
                overhead,
            } => {
                self.time(time_ns);
                self.last_totals = Some((live, tracked, overhead));
                self.max_overhead = self.max_overhead.max(overhead);
                // The last record of a sample: complete a peak taken at its Rss.
                if std::mem::take(&mut self.peak_pending) {
                    if let Some(p) = self.rss_peak.as_mut() {
                        p.totals = self.last_totals;
                    }
                }
            }
            Record::Jemalloc {
                time_ns,
                allocated,
                resident,
                ..
            } => {
                self.time(time_ns);
                self.last_je = Some((allocated, resident));
                if self.peak_pending {
                    if let Some(p) = self.rss_peak.as_mut() {
                        p.jemalloc = self.last_je;
                    }
                }
            }
            Record::Rss {
                time_ns,
                vm_rss,
                vm_hwm,
                ..
            } => {
                let t = self.time(time_ns);
                self.last_rss = Some(vm_rss);
                // VmHWM only grows: the peak happened between the sample
                // before and the first one that shows it.
                if vm_hwm > self.hwm.map_or(0, |h| h.0) {
                    self.hwm = Some((vm_hwm, t, self.last_rss_t));
                }
                self.last_rss_t = Some(t);
                // Samples come as Rss, Jemalloc, Counters, Totals: the
                // composition is taken here and completed by the jemalloc and
                // totals records of the same sample.
                if self.rss_peak.as_ref().is_none_or(|p| vm_rss > p.rss.unwrap_or(0)) {
                    // What held memory: the snapshot is brought up to date
                    // with what changed since the last peak (not rebuilt:
                    // a rising RSS would make that samples x tags).
                    self.update_peak_snapshot();
                    let mut c = self.totals_now();
                    c.time_ns = t;
                    self.rss_peak = Some(c);
                    self.peak_pending = true;
                }
                self.timeline_sample(t, vm_rss);
            }
            Record::External {
                time_ns, tag, bytes, ..
            } => {
                self.time(time_ns);
                let tag = self.tag_of(tag);
                self.external_delta(tag, bytes);
            }
            Record::Dropped { events, time_ns } => {
                self.time(time_ns);
                self.dropped = self.dropped.max(events);
            }
            Record::End { time_ns, dropped } => {
                self.time(time_ns);
                self.dropped = self.dropped.max(dropped);
            }
            Record::Pad { .. } => {}
            Record::ProcStart {
                time_ns,
                pid,
                ppid,
                ref mut cmdline,
            } => {
                self.time(time_ns);
                if let std::collections::hash_map::Entry::Vacant(e) = self.proc_index.entry(pid) {
                    e.insert(self.procs.len());
                    self.procs.push(ProcAcc {
                        pid,
                        ppid,
                        cmdline: printable(std::mem::take(cmdline)),
                        ..ProcAcc::default()
                    });
                }
            }
            Record::ProcRss {
                time_ns,
                pid,
                vm_rss,
                pss,
                ..
            } => {
                let t = self.time(time_ns);
                if let Some(p) = self.proc_index.get(&pid).and_then(|&i| self.procs.get_mut(i)) {
                    p.samples.push((t, vm_rss));
                    if vm_rss > p.peak.0 {
                        p.peak = (vm_rss, t);
                    }
                    p.pss_peak = p.pss_peak.max(pss);
                }
            }
            Record::ProcExit { time_ns, pid, code } => {
                self.time(time_ns);
                if let Some(p) = self.proc_index.get(&pid).and_then(|&i| self.procs.get_mut(i)) {
                    p.exit = Some(code);
                }
            }
            // Log segments: the loader (segments.rs) takes these records
            // before replay; one seen here is out of place (not right after
            // a segment's start) and is applied as the live state it says.
            Record::Segment { time_ns, .. } => {
                self.time(time_ns);
            }
            Record::Carried { .. } | Record::CarriedSample { .. } | Record::CarriedExternal { .. } => self.carried(rec),
        }
    }

    /// The tag number of log id `id` now: its definition's value, untagged
    /// for 0, else an undefined tag of that id (one number per id).
    #[inline]
    pub(super) fn tag_of(&mut self, id: u32) -> u32 {
        if let Some(tag) = self.ids.get(id).and_then(|s| s.tag) {
            return tag;
        }
        self.tag_of_slow(id)
    }

    #[cold]
    fn tag_of_slow(&mut self, id: u32) -> u32 {
        let key = TagKey {
            undefined: (id != 0).then_some(id),
            ..TagKey::default()
        };
        let tag = self.number_of(key);
        let slot = self.ids.entry(id);
        let old = slot.tag.replace(tag);
        self.rebind(old, Some(tag));
        tag
    }

    /// The tag number of a value, given out when new.
    pub(super) fn number_of(&mut self, key: TagKey) -> u32 {
        if let Some(&n) = self.tag_number.get(&key) {
            return n;
        }
        let n = self.fresh_number();
        self.tags.insert(n, key.clone());
        self.tag_number.insert(key, n);
        self.tag_acc.defined();
        self.tl_prev.defined();
        self.series_of.defined();
        self.tag_acc.entry(n).born_rec = self.records;
        n
    }

    /// One RSS sample into the timeline and the group sums: the tags
    /// changed since the previous sample, and their series.
    fn timeline_sample(&mut self, t: u64, vm_rss: u64) {
        let dirty = std::mem::take(&mut self.tl_dirty);
        let mut changes: Vec<(u32, u64, u64)> = Vec::with_capacity(dirty.len());
        let named = self.hooks.timeline_key.is_some();
        // Index in `changes` by series (named series gather several tags).
        let mut at: heaptag_format::hash::MixMap<u32, usize> = Default::default();
        for &tag in &dirty {
            let a = self.tag_acc.entry(tag);
            a.dirty &= !1;
            let now = a.tracked.saturating_add(a.small);
            let prev = std::mem::replace(self.tl_prev.entry(tag), now);
            if now == prev {
                continue;
            }
            if !self.hooks.groups.is_empty() {
                for g in self.groups_of(tag) {
                    let sum = &mut self.group_sums[g as usize];
                    *sum = *sum - u128::from(prev) + u128::from(now);
                }
            }
            if named {
                if let Some(series) = self.series_for(tag) {
                    let sum = &mut self.series_sums[series as usize];
                    let before = *sum;
                    *sum = *sum - u128::from(prev) + u128::from(now);
                    let clamp = |v: u128| u64::try_from(v).unwrap_or(u64::MAX);
                    match at.get(&series) {
                        Some(&i) => changes[i].2 = clamp(*sum),
                        None => {
                            at.insert(series, changes.len());
                            changes.push((series, clamp(before), clamp(*sum)));
                        }
                    }
                }
            } else {
                changes.push((tag, prev, now));
            }
        }
        self.tl_dirty = dirty;
        self.tl_dirty.clear();
        for (g, sum) in self.group_sums.iter().enumerate() {
            let sum = u64::try_from(*sum).unwrap_or(u64::MAX);
            if let Some(p) = self.group_peaks.get_mut(g) {
                if sum > p.0 {
                    *p = (sum, t);
                }
            }
        }
        self.timeline.push(t, vm_rss, &changes);
    }

    /// The groups tag number `tag` belongs to.
    fn groups_of(&mut self, tag: u32) -> Vec<u32> {
        let i = tag as usize;
        if self.group_of.len() <= i {
            self.group_of.resize(i + 1, None);
        }
        if self.group_of[i].is_none() {
            let k = self.tag(tag);
            let gs = (0..self.hooks.groups.len() as u32)
                .filter(|&g| (self.hooks.groups[g as usize])(&k))
                .collect();
            self.group_of[i] = Some(gs);
        }
        self.group_of[i].clone().unwrap_or_default()
    }

    /// The named timeline series of tag number `tag` (`None`: left out).
    fn series_for(&mut self, tag: u32) -> Option<u32> {
        let cached = *self.series_of.entry(tag);
        if cached >= 2 {
            return Some(cached - 2);
        }
        if cached == 1 {
            return None;
        }
        let k = self.tag(tag);
        let name = self.hooks.timeline_key.as_ref().and_then(|f| f(&k));
        let v = match name {
            None => 1,
            Some(name) => {
                let next = self.series_index.len() as u32;
                let s = *self.series_index.entry(name.clone()).or_insert(next);
                if s == next {
                    self.series_sums.push(0);
                    if let Some(names) = self.timeline.names.as_mut() {
                        names.push(name);
                    }
                }
                s + 2
            }
        };
        *self.series_of.entry(tag) = v;
        v.checked_sub(2)
    }

    pub(super) fn drop_sample(&mut self, s: Sample) {
        if s.native {
            self.native_shrink(s.tag, s.weight, false);
        }
        self.shrink(s.tag, s.stack, s.weight, false);
        let v = s.var();
        let a = self.acc(s.tag);
        a.small_var = (a.small_var - v).max(0.0);
        a.small_samples = a.small_samples.saturating_sub(1);
        self.small_var = (self.small_var - v).max(0.0);
    }

    /// Brings the RSS-peak snapshot of tags and sites up to date with what
    /// changed since the last peak.
    fn update_peak_snapshot(&mut self) {
        for tag in std::mem::take(&mut self.pk_tags_dirty) {
            let a = self.tag_acc.entry(tag);
            a.dirty &= !2;
            if a.tracked.saturating_add(a.small) > 0 || a.external != 0 {
                self.pk_tags.insert(tag, (a.tracked, a.small, a.external));
            } else {
                self.pk_tags.remove(&tag);
            }
        }
        for stack in std::mem::take(&mut self.pk_sites_dirty) {
            let s = self.site_acc.entry(stack);
            s.dirty = false;
            if s.live > 0 {
                self.pk_sites.insert(stack, s.live);
            } else {
                self.pk_sites.remove(&stack);
            }
        }
    }

    /// What holds memory now.
    pub(super) fn compose(&self) -> Composition {
        let per_tag: Vec<(u32, u64, u64, i64)> = self
            .tag_acc
            .iter()
            .filter(|(_, a)| a.tracked.saturating_add(a.small) > 0 || a.external != 0)
            .map(|(id, a)| (id, a.tracked, a.small, a.external))
            .collect();
        let per_site: Vec<(u32, u64)> = self
            .site_acc
            .iter()
            .filter(|(_, s)| s.live > 0)
            .map(|(id, s)| (id, s.live))
            .collect();
        let (per_tag, per_site) = sorted(per_tag, per_site);
        Composition {
            per_tag,
            per_site,
            ..self.totals_now()
        }
    }

    /// The process-wide figures now (no per-tag or per-site lists).
    fn totals_now(&self) -> Composition {
        Composition {
            time_ns: self.end_ns,
            rss: self.last_rss,
            jemalloc: self.last_je,
            totals: self.last_totals,
            tracked: self.tracked,
            small: (self.small, self.small_var.sqrt()),
            external: self.external.max(0) as u64,
            native: self.native,
            per_tag: Vec::new(),
            per_site: Vec::new(),
        }
    }

    /// End of log: blocks still alive become open intervals; the RSS peak
    /// gets its lists; damage in the values is noted.
    pub(super) fn close(&mut self) {
        let live: Vec<Block> = std::mem::take(&mut self.live).into_values().collect();
        for b in live {
            self.keep_lifetime(b, None);
        }
        let per_tag = self.pk_tags.iter().map(|(&id, &(t, s, e))| (id, t, s, e)).collect();
        let per_site = self.pk_sites.iter().map(|(&id, &b)| (id, b)).collect();
        let (per_tag, per_site) = sorted(per_tag, per_site);
        if let Some(p) = self.rss_peak.as_mut() {
            p.per_tag = per_tag;
            p.per_site = per_site;
        }
        if let Some(at) = self.overflow_at {
            self.damage.push(format!(
                "values overflowed from the record at byte {at} (sizes or counts too large to be real): \
                 figures saturated"
            ));
        }
        let undefined: Vec<u32> = self
            .tags_used()
            .filter_map(|(n, _)| self.tags.get(&n).and_then(|k| k.undefined))
            .collect();
        if let Some(first) = undefined.first() {
            self.damage.push(format!(
                "{} tag ids are used but never defined (the first: {first}): shown as \"tag ID (undefined)\"",
                undefined.len()
            ));
        }
    }
}

/// Sorts per-tag and per-site lists largest first, then by id.
#[allow(clippy::type_complexity)]
fn sorted(
    mut per_tag: Vec<(u32, u64, u64, i64)>,
    mut per_site: Vec<(u32, u64)>,
) -> (Vec<(u32, u64, u64, i64)>, Vec<(u32, u64)>) {
    per_tag.sort_by_key(|&(id, t, s, _)| (std::cmp::Reverse(t.saturating_add(s)), id));
    per_site.sort_by_key(|&(id, b)| (std::cmp::Reverse(b), id));
    (per_tag, per_site)
}
