//! Sampled fingerprints (the default) end to end: blocks freed with the log
//! on carry XXH3-64, seeded with the block's length, of their 64 pieces of
//! 64 bytes (the whole block up to 4 KiB), as an independent implementation
//! (`xxhash-rust`'s one-shot function) computes it on pieces cut out here by
//! the formula of docs/FORMAT.md, with their fill; the header says so.

mod common;

use std::hint::black_box;

use heaptag_format::{Fill, FpHash};

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

/// The bytes a sampled fingerprint hashes (docs/FORMAT.md, "Fingerprints").
fn pieces_of(v: &[u8]) -> Vec<u8> {
    if v.len() <= 4096 {
        return v.to_vec();
    }
    let step = (v.len() - 64) / 63;
    (0..64)
        .flat_map(|i| {
            let at = if i == 63 { v.len() - 64 } else { i * step };
            v[at..at + 64].iter().copied()
        })
        .collect()
}

#[test]
fn freed_blocks_carry_seeded_xxh3_of_their_pieces() {
    let path = common::temp_log("sampledfp");
    heaptag::LogConfig::new(&path)
        .fingerprint_min(64 << 10)
        .start()
        .expect("log starts");
    let tag = heaptag::Tag::new(Some(1), Some("fp"), None);
    let mixed = |len: usize, salt: u32| -> Vec<u8> {
        (0..len as u32)
            .map(|i| (i ^ salt).wrapping_mul(2_654_435_761).rotate_left(11) as u8)
            .collect()
    };
    // Odd and even lengths, mixed content (with a twin, and a block that
    // differs from it only between two pieces: the same sampled
    // fingerprint), constant and zero fills, and a constant fill but for a
    // byte in its last piece.
    let mut blocks: Vec<(Vec<u8>, Fill)> = tag.scope(|| {
        let mut last = vec![3u8; (1 << 20) + 1];
        *last.last_mut().unwrap() = 4;
        let twin = mixed(1 << 20, 1);
        let mut between = twin.clone();
        between[100] ^= 0xff;
        vec![
            (twin.clone(), Fill::Mixed),
            (twin, Fill::Mixed),
            (between, Fill::Mixed),
            (mixed((64 << 10) + 17, 2), Fill::Mixed),
            (mixed((3 << 20) + 1023, 3), Fill::Mixed),
            (vec![7u8; (2 << 20) + 5], Fill::Constant(7)),
            (vec![0u8; (1 << 20) + 100], Fill::Zero),
            (last, Fill::Mixed),
        ]
    });
    let want: Vec<(u64, u64, u64, Fill)> = blocks
        .iter()
        .map(|(v, fill)| {
            let hash = xxhash_rust::xxh3::xxh3_64_with_seed(&pieces_of(v), v.len() as u64);
            (v.as_ptr() as u64, v.len() as u64, hash, *fill)
        })
        .collect();
    assert_eq!(want[0].2, want[1].2, "twins");
    assert_eq!(want[0].2, want[2].2, "a byte between two pieces is not sampled");
    for (v, _) in blocks.drain(..) {
        drop(black_box(v));
    }
    heaptag::finish().expect("a log was running");

    let (recs, reader) = common::read_all(&path);
    assert!(reader.problems().is_empty(), "{:?}", reader.problems());
    let settings = &reader.header().settings;
    assert!(!settings.fingerprint_full, "sampled");
    assert_eq!(settings.sampled_hash, FpHash::Xxh3, "the header says XXH3");
    for (addr, size, hash, fill) in want {
        let got = common::free_fingerprints(&recs, addr, size);
        assert_eq!(
            got.len(),
            1,
            "one fingerprint at the free of {size} bytes at {addr:#x}: {got:?}"
        );
        let (h, meta) = got[0];
        assert!(!meta.full, "{size}");
        assert_eq!(h, hash, "XXH3-64, seed {size}, of the pieces");
        assert_eq!(meta.fill, fill, "{size}");
    }
    let _ = std::fs::remove_file(&path);
}
