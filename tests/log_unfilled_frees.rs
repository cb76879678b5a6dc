//! A tracked block freed sooner after its allocation than its size takes to
//! write at `heaptag_format::FILL_BYTES_PER_NS` (it cannot hold a copy of
//! anything) by the thread that allocated it, and not made by a realloc,
//! gets no fingerprint at its free; every other free of a block of at least
//! the fingerprint minimum gets one. Checked on every free of the log
//! against the log's own allocation and free times, so the test asserts the
//! rule, not how fast this machine is: no free that could have been filled
//! lacks its fingerprint; 1 GiB blocks freed at once (a window of ~1 ms
//! each) are almost always skipped; a filled 2 MiB block held 2 ms, a
//! 1 GiB block freed at once by another thread and one made by a realloc
//! are never skipped.

mod common;

use std::alloc::{alloc, dealloc, Layout};
use std::collections::HashMap;
use std::hint::black_box;
use std::time::Duration;

use heaptag_format::{freed_unfilled, FpWhen, Record};

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

#[test]
fn frees_too_young_to_have_been_filled_carry_no_fingerprint() {
    let path = common::temp_log("unfilled");
    heaptag::LogConfig::new(&path).start().expect("log starts");
    let big = Layout::from_size_align(1 << 30, 4096).unwrap();
    let mut young = Vec::new();
    for _ in 0..20 {
        // SAFETY: a non-zero layout; the block is freed with it, unread.
        unsafe {
            let p = alloc(big);
            assert!(!p.is_null(), "1 GiB of address space");
            young.push(p as u64);
            dealloc(black_box(p), big);
        }
    }
    // Freed at once, but by another thread: fingerprinted.
    // SAFETY: as above; the block moves to the other thread as an address.
    let other = unsafe { alloc(big) } as usize;
    assert_ne!(other, 0);
    std::thread::spawn(move || {
        // SAFETY: allocated above with `big`, freed once.
        unsafe { dealloc(black_box(other as *mut u8), big) }
    })
    .join()
    .unwrap();
    // Made by a realloc and freed at once: fingerprinted (a realloc may
    // hand the old bytes over in place).
    let grown = Layout::from_size_align((1 << 30) + 4096, 4096).unwrap();
    // SAFETY: allocated and reallocated with these layouts, freed once.
    let resized = unsafe {
        let p = alloc(big);
        assert!(!p.is_null());
        let q = std::alloc::realloc(p, big, grown.size());
        assert!(!q.is_null());
        dealloc(black_box(q), grown);
        q as u64
    };
    let filled: Vec<u8> = (0..2u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::thread::sleep(Duration::from_millis(2));
    let filled_addr = filled.as_ptr() as u64;
    drop(black_box(filled));
    heaptag::finish().expect("a log was running");

    let (recs, reader) = common::read_all(&path);
    assert!(reader.problems().is_empty(), "{:?}", reader.problems());
    let min = reader.header().settings.fingerprint_min;
    assert_eq!(min, 1 << 20, "the default fingerprint minimum");
    // Walk the log: each tracked block from its Alloc to its Free, with
    // whether a fingerprint was taken at that free.
    let mut born: HashMap<u64, u64> = HashMap::new();
    let mut fp_at: HashMap<u64, u64> = HashMap::new();
    let (mut skipped, mut taken) = (Vec::new(), Vec::new());
    for r in &recs {
        match *r {
            Record::Alloc { time_ns, addr, .. } | Record::Realloc { time_ns, addr, .. } => {
                born.insert(addr, time_ns);
                fp_at.remove(&addr);
            }
            Record::Fingerprint {
                addr, meta, time_ns, ..
            } if meta.when == FpWhen::Free => {
                fp_at.insert(addr, time_ns);
            }
            Record::Free {
                time_ns,
                thread,
                addr,
                size,
            } if size >= min => {
                let Some(start) = born.remove(&addr) else { continue };
                let life = time_ns - start;
                let fp = fp_at.remove(&addr);
                assert!(
                    fp.is_some() || freed_unfilled(size, life),
                    "{size} bytes at {addr:#x} freed after {life} ns, long enough to be filled, without a fingerprint"
                );
                if let Some(t) = fp {
                    assert_eq!(t, time_ns, "the Free reuses the Fingerprint's time");
                }
                if fp.is_some() { &mut taken } else { &mut skipped }.push((addr, size, thread));
            }
            _ => {}
        }
    }
    let main = taken
        .iter()
        .find(|t| (t.0, t.1) == (filled_addr, 2 << 20))
        .unwrap_or_else(|| panic!("the filled block held 2 ms has its fingerprint: {taken:?}"))
        .2;
    assert!(
        taken
            .iter()
            .any(|t| (t.0, t.1) == (other as u64, 1 << 30) && t.2 != main),
        "freed by another thread: fingerprinted: {taken:?}"
    );
    assert!(
        taken.iter().any(|t| (t.0, t.1) == (resized, (1 << 30) + 4096)),
        "made by a realloc: fingerprinted: {taken:?}"
    );
    let young_skipped = skipped
        .iter()
        .filter(|(a, s, _)| *s == 1 << 30 && young.contains(a))
        .count();
    assert!(
        young_skipped > 0,
        "of 20 GiB blocks freed at once, none was freed within ~1 ms: {skipped:?} {taken:?}"
    );
    let _ = std::fs::remove_file(&path);
}
