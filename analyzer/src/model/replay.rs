//! Replay: applying records one at a time to a [`Model`]: live blocks,
//! per-tag and per-site figures, peaks, compositions, lifetimes.

use heaptag_format::Record;

use super::{Block, Composition, Fp, Interval, Model, Obs, ProcAcc, Sample, SiteAcc, Sym, TagAcc, TagKey};
use crate::text::printable;

/// Ids beyond this share one overflow slot (a damaged but checksummed log
/// must not make the analyzer allocate gigabytes).
const MAX_DENSE_ID: usize = 1 << 22;

/// The entry for `id` in a dense per-id vector, growing it as needed.
fn slot<T: Default>(v: &mut Vec<T>, id: u32) -> &mut T {
    let i = (id as usize).min(MAX_DENSE_ID);
    if i >= v.len() {
        v.resize_with(i + 1, T::default);
    }
    &mut v[i]
}

impl Model {
    fn acc(&mut self, tag: u32) -> &mut TagAcc {
        slot(&mut self.tag_acc, tag)
    }

    fn site(&mut self, stack: u32) -> &mut SiteAcc {
        slot(&mut self.site_acc, stack)
    }

    fn time(&mut self, t: u64) -> u64 {
        self.end_ns = self.end_ns.max(t);
        t
    }

    /// Adds `bytes` (tracked when `tracked`) to tag and site; raises peaks.
    fn grow(&mut self, tag: u32, stack: u32, bytes: u64, tracked: bool, t: u64) {
        let a = self.acc(tag);
        if tracked {
            a.tracked += bytes;
            a.tracked_peak = a.tracked_peak.max(a.tracked);
        } else {
            a.small += bytes;
        }
        if a.tracked + a.small > a.peak {
            a.peak = a.tracked + a.small;
            a.peak_t = t;
        }
        let s = self.site(stack);
        s.live += bytes;
        s.alloc_bytes += bytes;
        s.alloc_count += 1;
        if s.live > s.peak {
            s.peak = s.live;
            s.peak_t = t;
        }
        if s.tags.len() < 32 {
            s.tags.insert(tag);
        }
        if tracked {
            self.tracked += bytes;
        } else {
            self.small += bytes;
        }
        let attributed = self.tracked + self.small;
        if attributed > self.attributed_peak.0 {
            self.attributed_peak = (attributed, self.records, t);
        }
    }

    fn shrink(&mut self, tag: u32, stack: u32, bytes: u64, tracked: bool) {
        let a = self.acc(tag);
        if tracked {
            a.tracked = a.tracked.saturating_sub(bytes);
            self.tracked = self.tracked.saturating_sub(bytes);
        } else {
            a.small = a.small.saturating_sub(bytes);
            self.small = self.small.saturating_sub(bytes);
        }
        let s = self.site(stack);
        s.live = s.live.saturating_sub(bytes);
    }

    fn keep_interval(&self, b: &Block) -> bool {
        self.want_intervals
            && (b.last.is_some() || b.size >= self.header.settings.fingerprint_min.max(self.header.settings.threshold))
    }

    /// Keeps the lifetime of `b` with its observations, ended at `end`
    /// (`None`: alive at the end of the log), when duplicate detection
    /// wants it.
    fn keep_lifetime(&mut self, b: Block, end: Option<u64>) {
        if !self.keep_interval(&b) {
            return;
        }
        let Ok(first_obs) = u32::try_from(self.observations.len()) else {
            return;
        };
        let before = self.observations.len();
        self.observations.extend(b.earlier);
        self.observations.extend(b.last);
        self.intervals.push(Interval {
            tag: b.tag,
            stack: b.stack,
            size: b.size,
            start: b.start,
            end,
            first_obs,
            n_obs: (self.observations.len() - before) as u32,
        });
    }

    fn end_block(&mut self, b: Block, t: u64) {
        self.shrink(b.tag, b.stack, b.size, true);
        self.keep_lifetime(b, Some(t));
    }

    pub(super) fn apply(&mut self, rec: Record) {
        if rec.is_event() {
            self.events += 1;
        }
        match rec {
            Record::TagDef {
                id,
                job,
                stage,
                partition,
            } => {
                let stage = stage.map(printable);
                self.tags.insert(id, TagKey { job, stage, partition });
            }
            Record::StackDef { id, frames } => {
                self.stacks.insert(id, frames);
            }
            Record::Symbol {
                addr,
                function,
                file,
                line,
            } => {
                let (function, file) = (printable(function), printable(file));
                self.symbols.insert(addr, Sym { function, file, line });
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
                let a = self.acc(tag);
                a.tracked_alloc += size;
                a.tracked_count += 1;
                self.grow(tag, stack, size, true, t);
                if let Some(old) = self.live.insert(addr, Block::new(tag, stack, size, t)) {
                    // An allocation at a live address: its free was dropped.
                    self.end_block(old, t);
                }
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
                let old = self
                    .moving
                    .remove(&(thread, old_addr))
                    .or_else(|| self.live.remove(&old_addr));
                let old_size = old.as_ref().map_or(0, |b| b.size);
                let mut b = match old {
                    Some(b) => {
                        self.shrink(b.tag, b.stack, b.size, true);
                        b
                    }
                    None => Block::new(tag, 0, size, t),
                };
                self.grow(tag, b.stack, size, true, t);
                let a = self.acc(tag);
                a.tracked_alloc += size.saturating_sub(old_size);
                // A resize changes the content: what was observed before
                // holds up to here, and nothing is known after it.
                if old_size != size && b.last.is_some() {
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
                let s = Sample {
                    tag,
                    stack,
                    size,
                    weight,
                };
                self.grow(tag, stack, weight, false, t);
                self.acc(tag).small_var += s.var();
                self.small_var += s.var();
                if let Some(old) = self.samples.insert(addr, s) {
                    self.drop_sample(old);
                }
            }
            Record::SampleFree { time_ns, addr, .. } => {
                self.time(time_ns);
                if let Some(s) = self.samples.remove(&addr) {
                    self.drop_sample(s);
                }
            }
            Record::Fingerprint {
                time_ns,
                addr,
                hash,
                meta,
                ..
            } => {
                let t = self.time(time_ns);
                if let Some(b) = self.live.get_mut(&addr) {
                    let fp = Fp {
                        hash,
                        fill: meta.fill,
                        full: meta.full,
                    };
                    b.observe(Obs::fingerprint(t, fp, meta.when));
                    self.fingerprints += 1;
                }
            }
            Record::Mark { time_ns, label } => {
                let t = self.time(time_ns);
                self.marks.push((t, printable(label)));
            }
            Record::Counters { time_ns, tags } => {
                self.time(time_ns);
                for c in tags {
                    let a = self.acc(c.tag);
                    a.alloc_bytes = Some(c.alloc_bytes);
                    a.alloc_count = Some(c.alloc_count);
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
            Record::Rss { time_ns, vm_rss, .. } => {
                let t = self.time(time_ns);
                self.last_rss = Some(vm_rss);
                // Samples come as Rss, Jemalloc, Counters, Totals: the
                // composition is taken here and completed by the jemalloc and
                // totals records of the same sample.
                if self.rss_peak.as_ref().is_none_or(|p| vm_rss > p.rss.unwrap_or(0)) {
                    let mut c = self.compose();
                    c.time_ns = t;
                    self.rss_peak = Some(c);
                    self.peak_pending = true;
                }
                let per_tag: Vec<(u32, u64)> = self
                    .tag_acc
                    .iter()
                    .enumerate()
                    .filter(|(_, a)| a.tracked + a.small > 0)
                    .map(|(id, a)| (id as u32, a.tracked + a.small))
                    .collect();
                self.timeline.push((t, per_tag));
                self.rss_series.push(vm_rss);
            }
            Record::External {
                time_ns, tag, bytes, ..
            } => {
                self.time(time_ns);
                self.acc(tag).external += bytes;
                self.external += bytes;
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
                cmdline,
            } => {
                self.time(time_ns);
                if !self.procs.iter().any(|p| p.pid == pid) {
                    self.procs.push(ProcAcc {
                        pid,
                        ppid,
                        cmdline: printable(cmdline),
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
                if let Some(p) = self.procs.iter_mut().find(|p| p.pid == pid) {
                    p.samples.push((t, vm_rss));
                    if vm_rss > p.peak.0 {
                        p.peak = (vm_rss, t);
                    }
                    p.pss_peak = p.pss_peak.max(pss);
                }
            }
            Record::ProcExit { time_ns, pid, code } => {
                self.time(time_ns);
                if let Some(p) = self.procs.iter_mut().find(|p| p.pid == pid) {
                    p.exit = Some(code);
                }
            }
        }
    }

    fn drop_sample(&mut self, s: Sample) {
        self.shrink(s.tag, s.stack, s.weight, false);
        let v = s.var();
        let a = self.acc(s.tag);
        a.small_var = (a.small_var - v).max(0.0);
        self.small_var = (self.small_var - v).max(0.0);
    }

    /// What holds memory now.
    pub(super) fn compose(&self) -> Composition {
        let mut per_tag: Vec<(u32, u64, u64, i64)> = self
            .tag_acc
            .iter()
            .enumerate()
            .filter(|(_, a)| a.tracked + a.small > 0 || a.external != 0)
            .map(|(id, a)| (id as u32, a.tracked, a.small, a.external))
            .collect();
        per_tag.sort_by_key(|&(id, t, s, _)| (std::cmp::Reverse(t + s), id));
        let mut per_site: Vec<(u32, u64)> = self
            .site_acc
            .iter()
            .enumerate()
            .filter(|(_, s)| s.live > 0)
            .map(|(id, s)| (id as u32, s.live))
            .collect();
        per_site.sort_by_key(|&(id, b)| (std::cmp::Reverse(b), id));
        Composition {
            time_ns: self.end_ns,
            rss: self.last_rss,
            jemalloc: self.last_je,
            totals: self.last_totals,
            tracked: self.tracked,
            small: (self.small, self.small_var.sqrt()),
            external: self.external.max(0) as u64,
            per_tag,
            per_site,
        }
    }

    /// End of log: blocks still alive become open intervals.
    pub(super) fn close(&mut self) {
        let live: Vec<Block> = std::mem::take(&mut self.live).into_values().collect();
        for b in live {
            self.keep_lifetime(b, None);
        }
    }
}
