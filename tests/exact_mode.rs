//! Threshold 0: every block is tracked, every per-tag figure is exact.

use std::hint::black_box;

use heaptag::Tag;

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new().threshold(0);

#[test]
fn threshold_zero_makes_small_blocks_exact() {
    let tag = Tag::new(Some(3), Some("exact"), Some(0));
    let blocks: Vec<Box<[u8]>> = tag.scope(|| {
        let mut v = Vec::with_capacity(1000);
        for i in 0..1000 {
            v.push(vec![0u8; 1 + i % 100].into_boxed_slice());
        }
        v
    });
    let expect: u64 = blocks.iter().map(|b| b.len() as u64).sum::<u64>() + 1000 * 16;
    let s = heaptag::snapshot();
    assert_eq!(s.threshold, 0);
    let t = s.tag(&tag).unwrap();
    assert!(t.small.exact);
    assert_eq!(t.small.alloc_count, 0);
    assert_eq!(t.live_bytes, expect);
    assert_eq!(t.tracked.live_bytes, expect);
    assert_eq!(t.tracked.live_count, 1001);
    assert_eq!(t.alloc_count, 1001);

    // Free half on another thread: exact again.
    let (keep, give): (Vec<_>, Vec<_>) = blocks.into_iter().enumerate().partition(|(i, _)| i % 2 == 0);
    let given: u64 = give.iter().map(|(_, b)| b.len() as u64).sum();
    std::thread::spawn(move || drop(black_box(give))).join().unwrap();
    let s = heaptag::snapshot();
    let t = s.tag(&tag).unwrap();
    // The Vec `give` was allocated by partition(), untagged; `keep` is new and untagged too.
    assert_eq!(t.live_bytes, expect - given - 1000 * 16);
    assert_eq!(t.free_bytes, given + 1000 * 16);
    drop(black_box(keep));
    let t = heaptag::snapshot().tag(&tag).cloned().unwrap();
    assert_eq!(t.live_bytes, 0);
    assert_eq!(t.free_count, t.alloc_count);
}
