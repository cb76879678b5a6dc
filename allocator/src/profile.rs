//! What a heap profile of the running process is made of: every recorded
//! (tracked or sampled) block alive now with its tag, call stack and
//! estimator weight; the frames of those stacks; the executable mappings.
//!
//! Each function copies what it reads out of heaptag's tables and releases
//! their locks before it allocates its result through the global allocator
//! (`table::for_each`, `stacks::each`): a caller may allocate freely, and no
//! lock of heaptag is held while it does (see `start.rs` for the lock order).

use crate::log::{procfs, stacks};
use crate::tag::{self, Tag};
use crate::{sampling, table};

pub use heaptag_format::Module;

/// A block alive now that heaptag recorded: tracked (at least the threshold,
/// exact) or sampled (small, standing for `weight_bytes`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LiveBlock {
    /// Address of the block.
    pub addr: usize,
    /// Requested size in bytes.
    pub size: u64,
    /// The tag it is charged to.
    pub tag: Tag,
    /// Call-stack id (0: no stack was captured: stacks are captured while
    /// the log runs, `HEAPTAG_STACK_DEPTH` > 0); see [`stack_frames`].
    pub stack: u32,
    /// Tracked exactly (`false`: a sampled small block).
    pub tracked: bool,
    /// Bytes it stands for: its size when tracked, else its
    /// Horvitz-Thompson weight `size / p` (the per-tag estimate sums these).
    pub weight_bytes: u64,
    /// Blocks it stands for: 1 when tracked, else `1 / p`.
    pub weight_blocks: f64,
}

/// Every tracked and sampled block alive now, walked shard by shard (blocks
/// allocated or freed meanwhile may or may not appear).
pub fn live_blocks() -> Vec<LiveBlock> {
    let mut out = Vec::new();
    table::for_each(|addr, e| {
        let (weight_bytes, weight_blocks) = if e.tracked {
            (e.size, 1.0)
        } else {
            let w = sampling::weight(e.size as usize);
            (w.bytes, w.count_fx as f64 / 1024.0)
        };
        out.push(LiveBlock {
            addr,
            size: e.size,
            tag: tag::tag_of(e.tag),
            stack: e.stack,
            tracked: e.tracked,
            weight_bytes,
            weight_blocks,
        });
    });
    out
}

/// The frames (return addresses, innermost first) of each stack id in
/// `ids` that heaptag stored, in id order.
pub fn stack_frames(ids: &[u32]) -> Vec<(u32, Vec<u64>)> {
    let mut want: Vec<u32> = ids.iter().copied().filter(|&i| i != 0).collect();
    want.sort_unstable();
    want.dedup();
    let (Some(&from), Some(&to)) = (want.first(), want.last()) else {
        return Vec::new();
    };
    let mut out = Vec::with_capacity(want.len());
    stacks::each(from, to, |id, frames| {
        if want.binary_search(&id).is_ok() {
            out.push((id, frames.to_vec()));
        }
    });
    out
}

/// The executable mappings of the process with their build ids (from
/// `/proc/self/maps` and the loader), as the log's header records them.
pub fn modules() -> Vec<Module> {
    procfs::modules()
}
