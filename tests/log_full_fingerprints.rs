//! Full-content fingerprints (`fingerprint_full`) end to end: blocks freed
//! with the log on carry XXH3-64 of their bytes, as an independent
//! implementation (`xxhash-rust`'s one-shot function) computes it on the same
//! content, with their fill, whatever their length; the header says XXH3.

mod common;

use std::hint::black_box;

use heaptag_format::Fill;

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

#[test]
fn freed_blocks_carry_xxh3_of_their_bytes() {
    let path = common::temp_log("fullfp");
    heaptag::LogConfig::new(&path)
        .fingerprint_full(true)
        .fingerprint_min(64 << 10)
        .start()
        .expect("log starts");
    let tag = heaptag::Tag::new(Some(1), Some("fp"), None);
    // Lengths off every stripe and block boundary, mixed content (with a
    // twin), a constant fill, a zero fill, and a constant fill but for its
    // last byte.
    let mixed = |len: usize, salt: u32| -> Vec<u8> {
        (0..len as u32)
            .map(|i| (i ^ salt).wrapping_mul(2_654_435_761).rotate_left(11) as u8)
            .collect()
    };
    let mut blocks: Vec<(Vec<u8>, Fill)> = tag.scope(|| {
        let mut last = vec![3u8; (1 << 20) + 1];
        *last.last_mut().unwrap() = 4;
        vec![
            (mixed(3 << 20, 1), Fill::Mixed),
            (mixed(3 << 20, 1), Fill::Mixed),
            (mixed((64 << 10) + 17, 2), Fill::Mixed),
            (mixed((1 << 20) + 1023, 3), Fill::Mixed),
            (vec![7u8; (2 << 20) + 5], Fill::Constant(7)),
            (vec![0u8; (1 << 20) + 100], Fill::Zero),
            (last, Fill::Mixed),
        ]
    });
    let want: Vec<(u64, u64, u64, Fill)> = blocks
        .iter()
        .map(|(v, fill)| (v.as_ptr() as u64, v.len() as u64, xxhash_rust::xxh3::xxh3_64(v), *fill))
        .collect();
    assert_eq!(want[0].2, want[1].2, "twins");
    for (v, _) in blocks.drain(..) {
        drop(black_box(v));
    }
    heaptag::finish().expect("a log was running");

    let (recs, reader) = common::read_all(&path);
    assert!(reader.problems().is_empty(), "{:?}", reader.problems());
    assert!(reader.header().settings.fingerprint_full, "the header says full (XXH3)");
    for (addr, size, hash, fill) in want {
        let got = common::free_fingerprints(&recs, addr, size);
        assert_eq!(
            got.len(),
            1,
            "one fingerprint at the free of {size} bytes at {addr:#x}: {got:?}"
        );
        let (h, meta) = got[0];
        assert!(meta.full, "{size}");
        assert_eq!(h, hash, "XXH3-64 of the {size} bytes");
        assert_eq!(meta.fill, fill, "{size}");
    }
    let _ = std::fs::remove_file(&path);
}
