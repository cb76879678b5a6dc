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
    // Per (stack, tag): bytes and (estimated) blocks alive.
    let mut live: HashMap<(u32, Tag), (u64, f64)> = HashMap::new();
    for b in &blocks {
        let e = live.entry((b.stack, b.tag)).or_default();
        e.0 = e.0.saturating_add(b.weight_bytes);
        e.1 += b.weight_blocks;
    }
    let mut per_tag: HashMap<Tag, (u64, f64)> = HashMap::new();
    for (&(stack, tag), &(bytes, blocks)) in &live {
        let objects = blocks.round() as i64;
        let v = Values {
            alloc_objects: objects,
            alloc_space: clamp(bytes),
            inuse_objects: objects,
            inuse_space: clamp(bytes),
        };
        let frames = stacks.get(&stack).map_or(&[][..], Vec::as_slice);
        p.add(frames, &labels(&tag), v);
        let t = per_tag.entry(tag).or_default();
        t.0 = t.0.saturating_add(bytes);
        t.1 += blocks;
    }
    for t in &snap.tags {
        let (bytes, blocks) = per_tag.get(&t.tag).copied().unwrap_or_default();
        let v = Values {
            alloc_objects: clamp(t.alloc_count.saturating_sub(blocks.round() as u64)),
            alloc_space: clamp(t.alloc_bytes.saturating_sub(bytes)),
            ..Values::default()
        };
        p.add_named(NOT_LIVE, &labels(&t.tag), v);
    }
    symbolize(&mut p);
    p
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
