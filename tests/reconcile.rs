//! heaptag's process-wide live total against jemalloc's own `stats.allocated`.
//!
//! heaptag counts requested bytes; jemalloc counts usable sizes (size classes,
//! at most 25% above the request for blocks over 16 bytes; up to 8 bytes per
//! tiny block). So on a workload of known shape:
//! `heaptag_live <= allocated <= 1.25 * heaptag_live + slack`, where the slack
//! covers blocks allocated before heaptag initialised and jemalloc's rounding
//! of tiny blocks.

use std::hint::black_box;

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

const SLACK: u64 = 1 << 20;

fn check(label: &str) -> (u64, u64) {
    heaptag::flush_thread_cache().expect("tcache flush");
    let je = heaptag::jemalloc_stats().expect("jemalloc stats");
    let ours = heaptag::snapshot().totals.live_bytes;
    assert!(
        ours <= je.allocated + SLACK,
        "{label}: heaptag {ours} > jemalloc {}",
        je.allocated
    );
    assert!(
        je.allocated <= ours + ours / 4 + SLACK,
        "{label}: jemalloc {} far above heaptag {ours}",
        je.allocated
    );
    (ours, je.allocated)
}

#[test]
fn live_total_reconciles_with_jemalloc_allocated() {
    let (base_ours, base_je) = check("start");
    // Mixed sizes from 24 B to 3 MiB, on several threads.
    let held: Vec<Vec<Vec<u8>>> = (0..4)
        .map(|t| {
            std::thread::spawn(move || {
                (0..20_000usize)
                    .map(|i| vec![t as u8; 24 + (i * 7919) % (if i % 100 == 0 { 3 << 20 } else { 4096 })])
                    .collect::<Vec<_>>()
            })
        })
        .map(|h| h.join().unwrap())
        .collect();
    let (ours, je) = check("loaded");
    let added_ours = ours - base_ours;
    let added_je = je - base_je;
    // The growth agrees within size-class rounding.
    assert!(
        added_je >= added_ours,
        "jemalloc grew {added_je} < heaptag {added_ours}"
    );
    assert!(
        added_je <= added_ours + added_ours / 4,
        "jemalloc grew {added_je}, heaptag {added_ours}"
    );
    drop(black_box(held));
    let (after, _) = check("freed");
    assert!(
        after <= base_ours + SLACK,
        "heaptag live back near the start: {after} vs {base_ours}"
    );
}
