//! Peer: tobz/tracking-allocator around jemalloc, with a tracker that keeps
//! per-group live and allocated counters (what heaptag's counters do), all
//! work in one group.

use std::sync::atomic::{AtomicU64, Ordering};

use tracking_allocator::{AllocationGroupId, AllocationRegistry, AllocationTracker, Allocator};

#[allow(dead_code, missing_docs)]
mod common;

#[global_allocator]
static GLOBAL: Allocator<tikv_jemallocator::Jemalloc> = Allocator::from_allocator(tikv_jemallocator::Jemalloc);

const GROUPS: usize = 64;

struct Counters {
    allocated: [AtomicU64; GROUPS],
    live: [AtomicU64; GROUPS],
}

static COUNTERS: Counters = Counters {
    allocated: [const { AtomicU64::new(0) }; GROUPS],
    live: [const { AtomicU64::new(0) }; GROUPS],
};

struct PerGroup;

impl AllocationTracker for PerGroup {
    fn allocated(&self, _addr: usize, size: usize, _wrapped: usize, group: AllocationGroupId) {
        let g = group.as_usize().get() % GROUPS;
        COUNTERS.allocated[g].fetch_add(size as u64, Ordering::Relaxed);
        COUNTERS.live[g].fetch_add(size as u64, Ordering::Relaxed);
    }

    fn deallocated(
        &self,
        _addr: usize,
        size: usize,
        _wrapped: usize,
        source: AllocationGroupId,
        _cur: AllocationGroupId,
    ) {
        let g = source.as_usize().get() % GROUPS;
        COUNTERS.live[g].fetch_sub(size as u64, Ordering::Relaxed);
    }
}

fn main() {
    AllocationRegistry::set_global_tracker(PerGroup).expect("tracker");
    AllocationRegistry::enable_tracking();
    let mut group = tracking_allocator::AllocationGroupToken::register().expect("group");
    let _g = group.enter();
    common::main_with("tracking", false);
    AllocationRegistry::disable_tracking();
}
