//! A pprof heap profile of the running process (cargo feature `pprof`):
//! what a daemon serves at `/debug/pprof/heap`, the way Rust services serve
//! jemalloc's profiles, but with each sample labelled by its tag.
//!
//! ```
//! # #[global_allocator]
//! # static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();
//! let _stage = heaptag::stage("synthesize_partition");
//! let witness = vec![1u8; 1 << 20]; // tracked: in the profile exactly
//! let gz: Vec<u8> = heaptag::pprof::heap_profile();
//! assert!(gz.starts_with(&[0x1f, 0x8b])); // gzip, as /debug/pprof/heap serves it
//! // std::fs::write("heap.pb.gz", gz), then
//! // go tool pprof -top -sample_index=inuse_space -tagfocus stage=synthesize_partition heap.pb.gz
//! # drop(witness);
//! ```
//!
//! The profile is the same kind `heaptag export pprof LOG` writes (one
//! model, the `heaptag-pprof` crate): a gzipped `profile.proto` with sample
//! types `alloc_objects`, `alloc_space`, `inuse_objects`, `inuse_space`, one
//! sample per (call stack, tag), the tag as string labels `job`, `stage`,
//! `partition`.
//!
//! - **in use**: every block heaptag recorded and that is alive now: tracked
//!   blocks (at least the threshold) exactly, sampled small blocks at their
//!   estimator weight (bytes / p, and 1 / p blocks), so a tag's in-use bytes
//!   sum to its `live_bytes` in [`snapshot`](crate::snapshot) (give or take
//!   the blocks allocated or freed while the table is walked).
//! - **allocated**: the live blocks' own figures at their stacks; the rest
//!   of what each tag allocated (the exact counters of the snapshot: freed
//!   blocks, and small blocks no sample stands for) under one frame named
//!   [`NOT_LIVE`], since a running process keeps no stack of a freed block.
//!   A tag's allocated values sum to its `alloc_bytes` / `alloc_count`.
//!   Tracked and small blocks are split apart: tracked ones allocated their
//!   size; a tag's small allocations are its exact `small.alloc_bytes` /
//!   `small.alloc_count`, of which the live samples stand for their weights,
//!   unless those weights add up to more (the estimate of a tag with few
//!   small bytes: one sample stands for about the sample rate, 512 KiB by
//!   default, where the tag may have allocated a few KiB). Then the live
//!   samples share the exact figure in proportion to their weights (as
//!   `heaptag export pprof` splits it) and [`NOT_LIVE`] gets no small part:
//!   at such a stack the allocated value is below the in-use one.
//! - **stacks**: heaptag captures call stacks while its event log runs
//!   (`HEAPTAG_LOG`, `HEAPTAG_STACK_DEPTH`, 32 frames by default). Without the
//!   log, every sample has the one frame `(no stack)`: labels and values
//!   still hold.
//! - **symbols**: resolved in the process (the `backtrace` crate, each
//!   address once, cached), innermost inlined function first, with file and
//!   line; each location keeps its address and the mapping (path, build id)
//!   it falls in, so `go tool pprof` can also symbolize from the binary.
//!
//! Deadlock-free with the allocator: each read of heaptag's tables copies
//! what it needs and releases the table's lock before anything is allocated
//! (see `heaptag_alloc`'s `profile` module and `start.rs`); the profile is
//! then built with ordinary allocations, charged to the calling thread's tag
//! like any other (a handler thread is usually untagged).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use heaptag_pprof::{Frame, HeapProfile, Labels, Mapping, Values};

use crate::Tag;

/// The frame under which each tag's allocations that no live recorded block
/// accounts for are shown (allocated values only).
pub const NOT_LIVE: &str = "[allocated, not in a live recorded block: freed, or small and unsampled]";

/// Symbols resolved so far, by return address.
static SYMBOLS: Mutex<Option<HashMap<u64, Vec<Frame>>>> = Mutex::new(None);

/// The stage charged with what [`profile`] allocates.
pub const PROFILE_STAGE: &str = "heaptag:pprof";

/// The pprof labels of a tag.
pub fn labels(tag: &Tag) -> Labels {
    Labels {
        job: tag.job,
        stage: tag.stage.map(str::to_owned),
        partition: tag.partition,
        other: None,
    }
}

/// The gzipped pprof heap profile of what is live now; see the module docs.
pub fn heap_profile() -> Vec<u8> {
    profile().encode()
}

/// The profile before encoding, to inspect or extend (e.g. add comments).
///
/// What it allocates (the copies of heaptag's tables, and the symbol caches
/// of the `backtrace` crate, tens of MiB after the first call, kept for the
/// next calls) is charged to the stage [`PROFILE_STAGE`], so reports and
/// profiles show it as the profiler's, not as the program's untagged
/// memory.
pub fn profile() -> HeapProfile {
    let own = crate::Tag {
        job: None,
        stage: Some(PROFILE_STAGE),
        partition: None,
    };
    own.scope(build)
}

fn build() -> HeapProfile {
    let settings = crate::settings();
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut p = HeapProfile::new(settings.sample_rate, wall, crate::now_ns());
    for m in crate::modules() {
        p.mapping(Mapping {
            start: m.start,
            end: m.end,
            file_offset: m.file_offset,
            path: m.path,
            build_id: m.build_id,
        });
    }
    p.comment(format!(
        "heaptag::pprof::heap_profile: in use now; tracked blocks (>= {} B) exact, small blocks estimated from a \
         sample (one per {} B on average)",
        settings.threshold, settings.sample_rate
    ));
    let blocks = crate::live_blocks();
    let snap = crate::snapshot();
    let ids: Vec<u32> = blocks.iter().map(|b| b.stack).collect();
    let stacks: HashMap<u32, Vec<u64>> = crate::stack_frames(&ids).into_iter().collect();
    // Per (stack, tag), and per tag: what the live recorded blocks stand for.
    let mut live: HashMap<(u32, Tag), Live> = HashMap::new();
    let mut per_tag: HashMap<Tag, Live> = HashMap::new();
    for b in &blocks {
        live.entry((b.stack, b.tag)).or_default().add(b);
        per_tag.entry(b.tag).or_default().add(b);
    }
    // Each tag's small allocations as the live samples' shares of them, and
    // what is left for NOT_LIVE (see the module docs).
    let exact: HashMap<Tag, &crate::TagStats> = snap.tags.iter().map(|t| (t.tag, t)).collect();
    let mut shares: HashMap<Tag, (Share, Share)> = HashMap::new();
    for (&(stack, tag), l) in &live {
        let (bytes, objects) = shares.entry(tag).or_insert_with(|| {
            let all = per_tag.get(&tag).copied().unwrap_or_default();
            match exact.get(&tag) {
                Some(t) => (
                    Share::new(t.small.alloc_bytes as f64, all.sampled_bytes as f64),
                    Share::new(t.small.alloc_count as f64, all.sampled_blocks),
                ),
                // Not in the snapshot (new or retired meanwhile): no exact
                // figure to share out; the samples keep their weights.
                None => (Share::weights(), Share::weights()),
            }
        });
        let inuse_objects = (l.tracked_blocks as f64 + l.sampled_blocks).round() as i64;
        let v = Values {
            alloc_objects: clamp(l.tracked_blocks.saturating_add(objects.take(l.sampled_blocks))),
            alloc_space: clamp(l.tracked_bytes.saturating_add(bytes.take(l.sampled_bytes as f64))),
            inuse_objects,
            inuse_space: clamp(l.tracked_bytes.saturating_add(l.sampled_bytes)),
        };
        let frames = stacks.get(&stack).map_or(&[][..], Vec::as_slice);
        p.add(frames, &labels(&tag), v);
    }
    for t in &snap.tags {
        let l = per_tag.get(&t.tag).copied().unwrap_or_default();
        let (small_bytes, small_objects) = match shares.get(&t.tag) {
            Some((b, o)) => (b.left_over(), o.left_over()),
            None => (t.small.alloc_bytes, t.small.alloc_count),
        };
        let v = Values {
            alloc_objects: clamp(
                t.tracked
                    .alloc_count
                    .saturating_sub(l.tracked_blocks)
                    .saturating_add(small_objects),
            ),
            alloc_space: clamp(
                t.tracked
                    .alloc_bytes
                    .saturating_sub(l.tracked_bytes)
                    .saturating_add(small_bytes),
            ),
            ..Values::default()
        };
        p.add_named(NOT_LIVE, &labels(&t.tag), v);
    }
    symbolize(&mut p);
    p
}

/// What the live recorded blocks of one (stack, tag), or of one tag, stand
/// for: tracked ones exactly, sampled ones at their estimator weights.
#[derive(Clone, Copy, Default)]
struct Live {
    tracked_bytes: u64,
    tracked_blocks: u64,
    sampled_bytes: u64,
    sampled_blocks: f64,
}

impl Live {
    fn add(&mut self, b: &crate::LiveBlock) {
        if b.tracked {
            self.tracked_bytes = self.tracked_bytes.saturating_add(b.weight_bytes);
            self.tracked_blocks += 1;
        } else {
            self.sampled_bytes = self.sampled_bytes.saturating_add(b.weight_bytes);
            self.sampled_blocks += b.weight_blocks;
        }
    }
}

/// A tag's exact small allocations (bytes or blocks) handed out to its live
/// samples: each its weight, or, when the weights add up to more than the
/// exact figure, its proportional share of it. Shares are rounded from the
/// running sum, so they add up to exactly what was handed out, and
/// [`Share::left_over`] (what no live sample stands for) completes the
/// exact figure.
struct Share {
    /// The exact figure (`None`: no exact figure; weights as they are).
    total: Option<f64>,
    /// Factor from weights to shares: 1, or total / weights when below 1.
    scale: f64,
    /// Weights handed out so far, and their rounded shares.
    weights_so_far: f64,
    given: u64,
}

impl Share {
    fn new(total: f64, weights: f64) -> Share {
        let scale = if weights > total { total / weights } else { 1.0 };
        Share {
            total: Some(total),
            scale,
            weights_so_far: 0.0,
            given: 0,
        }
    }

    fn weights() -> Share {
        Share {
            total: None,
            scale: 1.0,
            weights_so_far: 0.0,
            given: 0,
        }
    }

    /// The share of a (stack, tag) whose samples weigh `w`.
    fn take(&mut self, w: f64) -> u64 {
        self.weights_so_far += w;
        let upto = (self.weights_so_far * self.scale).round();
        let upto = match self.total {
            Some(t) => upto.min(t),
            None => upto,
        } as u64;
        let share = upto.saturating_sub(self.given);
        self.given = self.given.max(upto);
        share
    }

    /// What is left of the exact figure once every live sample took its share.
    fn left_over(&self) -> u64 {
        self.total.map_or(0, |t| (t as u64).saturating_sub(self.given))
    }
}

/// Names every address of `p` in the process, each address resolved once.
fn symbolize(p: &mut HeapProfile) {
    let addrs = p.addresses();
    let mut cache = SYMBOLS.lock().unwrap_or_else(PoisonError::into_inner);
    let cache = cache.get_or_insert_with(HashMap::new);
    for a in addrs {
        let frames = cache.entry(a).or_insert_with(|| resolve(a));
        p.symbol(a, frames.clone());
    }
}

/// The functions inlined at return address `a`, innermost first.
fn resolve(a: u64) -> Vec<Frame> {
    let mut out = Vec::new();
    // A return address points after the call: resolve the call itself.
    backtrace::resolve(a.saturating_sub(1) as *mut std::ffi::c_void, |sym| {
        if out.len() < 64 {
            out.push(Frame {
                function: sym.name().map(|n| format!("{n:#}")).unwrap_or_else(|| "?".into()),
                file: sym.filename().map(|f| f.display().to_string()).unwrap_or_default(),
                line: sym.lineno().unwrap_or(0),
            });
        }
    });
    out
}

fn clamp(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::Share;

    #[test]
    fn weights_within_the_exact_figure_are_kept_and_the_rest_left_over() {
        let mut s = Share::new(10_000.0, 3_000.0);
        assert_eq!([s.take(1_000.0), s.take(2_000.0)], [1_000, 2_000]);
        assert_eq!(s.left_over(), 7_000);
    }

    #[test]
    fn weights_above_the_exact_figure_share_it_exactly() {
        // Three samples of 218.95 blocks each (1 / p of a 2,400-byte block)
        // for a tag that allocated 101 blocks: shares of 101 in proportion.
        let w = 218.95;
        let mut s = Share::new(101.0, 3.0 * w);
        let shares = [s.take(w), s.take(w), s.take(w)];
        assert_eq!(shares.iter().sum::<u64>(), 101, "{shares:?}");
        assert!(shares.iter().all(|&x| x == 33 || x == 34), "{shares:?}");
        assert_eq!(s.left_over(), 0);
        // A tag that allocated nothing small gets no share.
        let mut none = Share::new(0.0, 524_311.0);
        assert_eq!((none.take(524_311.0), none.left_over()), (0, 0));
    }

    #[test]
    fn without_an_exact_figure_weights_are_kept() {
        let mut s = Share::weights();
        assert_eq!([s.take(0.4), s.take(0.4), s.take(0.4)], [0, 1, 0]);
        assert_eq!(s.left_over(), 0);
    }
}
