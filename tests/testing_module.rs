//! `heaptag::testing` inside `cargo test`: each test asserts on its own
//! closure's tags while the harness runs the others in parallel threads.

use std::hint::black_box;

use heaptag::testing;

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

fn data(seed: u64) -> Vec<u64> {
    (0..(1u64 << 17))
        .map(|i| (i ^ seed).wrapping_mul(0x9e37_79b9_7f4a_7c15))
        .collect()
}

#[test]
fn shared_data_is_one_copy() {
    let (_, m) = testing::measure(|probe| {
        let pce = probe.tag("pce", None).scope(|| data(1));
        let readers: Vec<u64> = (0..3u32)
            .map(|p| probe.tag("synthesize", Some(p)).scope(|| pce[p as usize]))
            .collect();
        probe.checkpoint();
        black_box((pce, readers));
    });
    m.assert_max_copies("pce", 1);
    assert_eq!(m.max_copies("pce"), 1);
    m.assert_nothing_alive("pce");
}

#[test]
fn per_partition_copies_are_caught() {
    let (_, m) = testing::measure(|probe| {
        let copies: Vec<Vec<u64>> = (0..3u32).map(|p| probe.tag("pce", Some(p)).scope(|| data(2))).collect();
        probe.checkpoint();
        black_box(copies);
    });
    assert_eq!(m.max_copies("pce"), 3);
    let r = std::panic::catch_unwind(|| m.assert_max_copies("pce", 1));
    let msg = *r.unwrap_err().downcast::<String>().unwrap();
    assert!(msg.contains("held more than 1 identical copies: 3 copies of"), "{msg}");
}

#[test]
fn copies_on_other_threads_count_when_they_carry_the_tag() {
    let (_, m) = testing::measure(|probe| {
        let tag = probe.tag("pce", None);
        let handles: Vec<_> = (0..2)
            .map(|_| std::thread::spawn(move || tag.scope(|| data(3))))
            .collect();
        let mine = tag.scope(|| data(3));
        let theirs: Vec<Vec<u64>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        probe.checkpoint();
        black_box((mine, theirs));
    });
    assert_eq!(m.max_copies("pce"), 3);
}

#[test]
fn distinct_and_zero_filled_buffers_are_not_copies() {
    let (_, m) = testing::measure(|probe| {
        let distinct: Vec<Vec<u64>> = (0..3u32)
            .map(|p| probe.tag("witness", Some(p)).scope(|| data(10 + u64::from(p))))
            .collect();
        let zeros: Vec<Vec<u8>> = (0..3u32)
            .map(|p| probe.tag("zeros", Some(p)).scope(|| vec![0u8; 1 << 20]))
            .collect();
        probe.checkpoint();
        black_box((distinct, zeros));
    });
    assert_eq!(m.max_copies("witness"), 1);
    assert_eq!(m.max_copies("zeros"), 1);
}

#[test]
fn peaks_and_leftovers() {
    let (kept, m) = testing::measure(|probe| {
        let t = probe.tag("synthesize", Some(3));
        t.scope(|| {
            let a = black_box(vec![1u8; 3 << 20]);
            drop(a);
            black_box(vec![2u8; 2 << 20]) // returned: still alive after the closure
        })
    });
    assert!(m.peak("synthesize", Some(3)) >= 3 << 20);
    m.assert_peak_at_most("synthesize", Some(3), (3 << 20) + (64 << 10));
    assert_eq!(m.tracked_live("synthesize"), 2 << 20);
    let r = std::panic::catch_unwind(|| m.assert_nothing_alive("synthesize"));
    assert!(r.is_err(), "the returned buffer is still alive");
    let r = std::panic::catch_unwind(|| m.assert_peak_at_most("synthesize", Some(3), 1 << 20));
    assert!(r.is_err());
    drop(kept);
}
