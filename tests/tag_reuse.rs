//! Tags retire and their ids are reused: a process can make any number of
//! distinct tags over time (a daemon's job ids) without overflow, with
//! bounded memory, exact totals, and `TagId`s that stay right when their id
//! is reused. No log here (retirement happens when tags are interned); the
//! log side is in `tag_reuse_log.rs` and `daemon_soak.rs`.

use std::hint::black_box;

use heaptag::{Tag, TAGS_KEPT};

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new().threshold(4096);

/// One "proof": a fresh job id, a tracked and a small block under it.
fn job(j: u64) {
    let t = Tag::new(Some(j), Some("synthesize_partition"), Some((j % 10) as u32));
    t.scope(|| {
        drop(black_box(vec![1u8; 5000]));
        drop(black_box(vec![2u8; 100]));
    });
}

// One test function: the counts below are of the whole process.
#[test]
fn more_distinct_tags_than_ids_over_time() {
    let n = heaptag::MAX_TAGS as u64 + 5000;
    let before = heaptag::snapshot();
    let mut overhead_at_10k = 0;
    for j in 0..n {
        job(1_000_000 + j);
        if j == 10_000 {
            overhead_at_10k = heaptag::snapshot().overhead_bytes;
        }
    }
    let after = heaptag::snapshot();
    let h = after.health;
    assert_eq!(h.tag_overflow, 0, "no tag went untagged");
    assert!(after.overflowed_tags.is_empty());
    assert!(h.tags <= TAGS_KEPT as u64 + 8, "tags in use stay bounded: {}", h.tags);
    assert!(
        h.tags_retired >= n - TAGS_KEPT as u64 - 8,
        "idle tags retired: {} of {n}",
        h.tags_retired
    );
    // Memory: ids are reused, counter pages of free ranges go back; the
    // table does not grow from 10,000 tags to 70,000.
    assert!(
        after.overhead_bytes <= overhead_at_10k + (1 << 20),
        "overhead flat: {overhead_at_10k} at 10k tags, {} at {n}",
        after.overhead_bytes
    );
    // Totals stay exact across retirements: every byte allocated is counted
    // (the retired tags' figures moved into the totals), hand computed.
    let alloc = after.totals.alloc_bytes - before.totals.alloc_bytes;
    assert!(alloc >= n * 5100, "{alloc} < {}", n * 5100);
    let count = after.totals.alloc_count - before.totals.alloc_count;
    assert!(count >= 2 * n, "{count} < {}", 2 * n);
    assert_eq!(after.totals.tracked_live_bytes, before.totals.tracked_live_bytes);

    // The last tags are kept with exact figures.
    let last = Tag::new(
        Some(1_000_000 + n - 1),
        Some("synthesize_partition"),
        Some(((1_000_000 + n - 1) % 10) as u32),
    );
    let s = after.tag(&last).expect("the last job's tag is still listed");
    assert_eq!(s.tracked.alloc_bytes, 5000);
    assert_eq!(s.tracked.free_bytes, 5000);
    assert_eq!(s.tracked.live_bytes, 0);
    assert_eq!(s.small.alloc_bytes, 100);
    assert_eq!(s.alloc_count, 2);

    stale_tag_ids_charge_their_own_tag();
    held_tags_never_retire();
    // Last: it leaves this thread in a tag.
    guards_dropped_out_of_order_keep_the_tag_held();
}

/// Guards dropped out of order never leave the thread in a tag that can
/// retire (whose id could then charge another tag): the outer guard's tag
/// stays held for good, and the drops are counted.
fn guards_dropped_out_of_order_keep_the_tag_held() {
    let a = Tag::new(Some(11), Some("outer"), None);
    let b = Tag::new(Some(11), Some("inner"), None);
    let before = heaptag::snapshot().health.guards_out_of_order;
    let ga = a.enter();
    let gb = b.enter();
    drop(ga); // out of order: the thread stays in `b`
    assert_eq!(heaptag::current(), b);
    drop(gb); // restores `a`, whose guard is gone
    assert_eq!(heaptag::current(), a);
    assert_eq!(heaptag::snapshot().health.guards_out_of_order, before + 1);
    let other = std::thread::spawn(|| {
        for j in 0..(2 * TAGS_KEPT as u64) {
            job(70_000_000 + j);
        }
    });
    other.join().unwrap();
    let v = black_box(vec![5u8; 7000]);
    let s = heaptag::snapshot();
    assert_eq!(
        s.tag(&a).map(|t| t.tracked.live_bytes),
        Some(7000),
        "`a` never retired: the thread's allocations are still charged to it"
    );
    drop(v);
}

/// A `TagId` kept while its tag retires and its id goes to another tag
/// enters its own tag (by value), never the other one.
fn stale_tag_ids_charge_their_own_tag() {
    let mine = Tag::new(Some(7), Some("kept_id"), None);
    let id = mine.id();
    // Retire it: push enough new tags through that idle tags retire.
    for j in 0..(2 * TAGS_KEPT as u64) {
        job(50_000_000 + j);
    }
    assert!(heaptag::snapshot().tag(&mine).is_none(), "the idle tag retired");
    assert_eq!(heaptag::TagId::from_bits(id.to_bits()), None, "its bits are stale");
    let g = id.enter();
    assert_eq!(heaptag::current(), mine, "a stale id enters its tag by value");
    let v = black_box(vec![3u8; 9000]);
    let s = heaptag::snapshot();
    let st = s.tag(&mine).expect("interned again");
    assert_eq!(st.tracked.live_bytes, 9000);
    // No other tag got those bytes.
    let others: u64 = s
        .tags
        .iter()
        .filter(|t| t.tag != mine)
        .map(|t| t.tracked.live_bytes)
        .sum();
    assert_eq!(others + 9000, s.totals.tracked_live_bytes);
    drop(v);
    drop(g);
    // Bits of another tag's id paired with `mine` still enter `mine`.
    let other = Tag::new(Some(7), Some("other_id"), None);
    let _o = other.enter();
    let mixed = heaptag::TagId::from_parts(heaptag::TagId::current().to_bits(), mine);
    mine.scope(|| {}); // `mine` is interned again, under some id
    let g = mixed.enter();
    assert_eq!(heaptag::current(), mine, "the tag decides, not the bits");
    drop(g);
}

/// A tag held by a guard, or with a live block, or external bytes, never
/// retires however many tags come and go.
fn held_tags_never_retire() {
    let held = Tag::new(Some(8), Some("held"), None);
    let alive = Tag::new(Some(9), Some("alive"), None);
    let ext_tag = Tag::new(Some(10), Some("external"), None);
    let g = held.enter();
    let block = alive.scope(|| black_box(vec![4u8; 20_000]));
    let ext = ext_tag.scope(|| heaptag::external_alloc(1 << 20, "mmap"));
    let id_alive = alive.id();
    for j in 0..(2 * TAGS_KEPT as u64) {
        // On this thread, under `held`: job() enters its own full tag.
        job(60_000_000 + j);
    }
    let s = heaptag::snapshot();
    assert!(s.tag(&held).is_some(), "held by a guard");
    assert_eq!(
        s.tag(&alive).map(|t| t.tracked.live_bytes),
        Some(20_000),
        "a live block"
    );
    assert_eq!(
        s.tag(&ext_tag).map(|t| t.external_bytes),
        Some(1 << 20),
        "external bytes"
    );
    assert_eq!(
        heaptag::TagId::from_bits(id_alive.to_bits()),
        Some(id_alive),
        "same generation"
    );
    drop(block);
    drop(ext);
    drop(g);
}
